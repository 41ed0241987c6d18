//! The stored responses of `POST /v1/responses` (`store`, the default): each response id with
//! its conversation and response object, for `previous_response_id` and
//! `GET /v1/responses/{id}` ([`super::responses`]). Bounded, oldest evicted first, in memory
//! only. A file of its own so that the shared [`super::server::Server`] can hold it without
//! importing the Responses face (which imports the server).

use crate::json::Value;

/// How many stored responses are kept (the oldest is evicted first).
pub const STORE_MAX: usize = 256;

/// The stored responses: each id with its conversation (input items, then output items) and
/// its response object; bounded by [`STORE_MAX`], in memory only (a restart forgets them).
#[derive(Default)]
pub struct Store {
    held: std::sync::Mutex<std::collections::VecDeque<(String, Vec<Value>, Value)>>,
}

impl Store {
    /// Keeps `id` with its conversation `items` and `response`, evicting the oldest beyond
    /// [`STORE_MAX`].
    pub(super) fn put(&self, id: &str, items: Vec<Value>, response: Value) {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if h.len() >= STORE_MAX {
            h.pop_front();
        }
        h.push_back((id.to_string(), items, response));
    }

    /// The conversation and response object stored under `id`, if still held.
    pub(super) fn get(&self, id: &str) -> Option<(Vec<Value>, Value)> {
        let h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        h.iter()
            .find(|(i, _, _)| i == id)
            .map(|(_, c, r)| (c.clone(), r.clone()))
    }
}

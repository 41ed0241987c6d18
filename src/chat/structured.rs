//! What a reply may be under structured output (issue 25 item 3, ENGINE.md §8
//! "Constraints"), from a conversation: the response channel's schema (`response_format`
//! json_schema or json_object) and each declared tool's parameters schema with the
//! `tool_choice`. One mapping for `k3 chat` and the server's three APIs; they turn the
//! [`ReplySpec`] into a constraint with the vocabulary.

use super::messages::{Request, ResponseFormat, ToolChoice};
use crate::constrain::{self, JsonStyle, ReplySpec, Schema, SchemaError};
use crate::json::{Object, Value};
use std::sync::Arc;

/// A schema refused: where it is (`response_format`, or the tool's index in `tools`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The response format's schema.
    Format(SchemaError),
    /// Tool `index`'s parameters schema.
    Tool(usize, SchemaError),
    /// The tools as a whole (the reply grammar: too many, a name).
    Tools(SchemaError),
}

/// The reply spec of `req` after its generation prompt (`thinking`: the think channel is
/// open), or `None` when it asks for no JSON and declares no tools (the reply is free).
///
/// Errors: a schema the engine cannot enforce ([`Refused`]).
pub fn reply_spec(req: &Request, thinking: bool) -> Result<Option<ReplySpec>, Refused> {
    let response = match &req.response_format {
        None | Some(ResponseFormat::Text) => None,
        Some(ResponseFormat::JsonObject) => Some(Arc::new(Schema::any_object(JsonStyle::Compact))),
        Some(ResponseFormat::JsonSchema(s)) => Some(Arc::new(
            Schema::compile(s, JsonStyle::Compact).map_err(Refused::Format)?,
        )),
    };
    let mut tools = Vec::new();
    if let Some(Value::Array(list)) = &req.tools {
        for (i, t) in list.iter().enumerate() {
            let Some(func) = t.get("function") else {
                continue;
            };
            let Some(name) = func.get("name").and_then(|n| n.as_str()) else {
                continue;
            };
            // no parameters: a call without arguments
            let params = func
                .get("parameters")
                .filter(|p| !p.is_null())
                .cloned()
                .unwrap_or_else(|| Value::Object(Object::new().with("type", "object")));
            let s =
                Schema::compile(&params, JsonStyle::Template).map_err(|e| Refused::Tool(i, e))?;
            tools.push((name.to_string(), Arc::new(s)));
        }
    }
    if response.is_none() && tools.is_empty() {
        return Ok(None);
    }
    Ok(Some(ReplySpec {
        thinking,
        response,
        tools,
        tool_choice: match &req.tool_choice {
            ToolChoice::Auto => constrain::ToolChoice::Auto,
            ToolChoice::None => constrain::ToolChoice::None,
            ToolChoice::Required => constrain::ToolChoice::Required,
            ToolChoice::Named(n) => constrain::ToolChoice::Named(n.clone()),
        },
    }))
}

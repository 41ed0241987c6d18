//! The conversation layer (TOKENIZER.md §10, §11, §13): an OpenAI-style request body →
//! validated [`messages::Request`] → segments → ids ([`template`]), and the streaming
//! reader of the model's reply ([`reply`]).
//!
//! The encoding is the released model's reference encoder (`encoding_k3.py`, reproduced by
//! the crates.io crate `dynamo-renderer`, module `kimi_k3`); `tests/fixtures/chat/` pins
//! its ids and says where k3 is stricter.

pub mod conversation;
mod field;
pub mod jsontext;
pub mod message;
pub mod messages;
pub mod reply;
pub mod structured;
pub mod template;

pub use message::{Arguments, Message, Role, ToolCall};
pub use messages::{Effort, Request, ResponseFormat, Thinking, ToolChoice};
pub use reply::{ReplyEvent, ReplyParser};
pub use template::{encode, generation_stub, render, think_closing, Segment};

/// `<|end_of_msg|>`: ends every message (TOKENIZER.md §3, §10).
pub const END_OF_MSG: u32 = 163_586;
/// `<|open|>`: opens a tag (TOKENIZER.md §10).
pub const OPEN: u32 = 163_587;
/// `<|close|>`: closes a tag (TOKENIZER.md §10).
pub const CLOSE: u32 = 163_588;
/// `<|sep|>`: ends a tag header (TOKENIZER.md §10).
pub const SEP: u32 = 163_589;
/// `[EOS]`: the released model's end of turn (TOKENIZER.md §11).
pub const EOS: u32 = 163_585;

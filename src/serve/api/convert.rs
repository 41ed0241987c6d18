//! What the Messages and Responses codecs share on their way to the one conversation type
//! ([`chat::Request`], ENGINE.md §11): member reads that name the field, the top-level field check,
//! tool declarations in the chat-completions form the template renders, the named tool
//! choice, an assistant turn's tool calls and the tool results that answer them, and the
//! render through the one chat template (TOKENIZER.md §10) to prompt ids.

use super::ApiError;
use crate::chat::{
    self, Arguments, Message, Request as ChatRequest, ResponseFormat, Role, Thinking, ToolCall,
    ToolChoice,
};
use crate::json::{Object, Value};
use crate::tokenizer::Tokenizer;

/// Every top-level field of the body `o` is one the API reads (`accepted`) or takes and
/// ignores (`ignored`); the first other one is refused by name, `listed` saying where the
/// accepted fields are listed.
pub(super) fn known_fields(
    o: &Object,
    accepted: &[&str],
    ignored: &[&str],
    listed: &str,
) -> Result<(), ApiError> {
    for (k, _) in o.iter() {
        if !accepted.contains(&k) && !ignored.contains(&k) {
            return Err(ApiError::invalid(
                k,
                format!("unknown field ({listed} lists the fields k3 accepts)"),
            ));
        }
    }
    Ok(())
}

/// `field`: expected `expected`, found the value's type.
pub(super) fn type_err(field: &str, expected: &str, v: &Value) -> ApiError {
    ApiError::invalid(
        field,
        format!("expected {expected}, found {}", v.type_name()),
    )
}

/// `o[key]` when present and not null.
pub(super) fn get<'a>(o: &'a Object, key: &str) -> Option<&'a Value> {
    o.get(key).filter(|v| !v.is_null())
}

/// A required string member `key` of the object `o` at `at`.
pub(super) fn req_str<'a>(o: &'a Object, key: &str, at: &str) -> Result<&'a str, ApiError> {
    let field = format!("{at}.{key}");
    match get(o, key) {
        Some(Value::String(s)) => Ok(s),
        Some(v) => Err(type_err(&field, "a string", v)),
        None => Err(ApiError::invalid(&field, "missing")),
    }
}

/// The `name` of the tool or call `o` at `at`: a string the template can render as a tool
/// name (the chat layer's rule).
pub(super) fn tool_name<'a>(o: &'a Object, at: &str) -> Result<&'a str, ApiError> {
    let name = req_str(o, "name", at)?;
    chat::messages::check_tool_name(name, &format!("{at}.name"))
        .map_err(|e| ApiError::from_chat(&e))?;
    Ok(name)
}

/// The declaration of the tool `o` at `at` in the form the template renders, without its
/// parameters yet: `name` (unique among `names`, which it joins) and `description`.
pub(super) fn declaration(
    o: &Object,
    at: &str,
    names: &mut Vec<String>,
) -> Result<Object, ApiError> {
    let name = tool_name(o, at)?;
    if names.iter().any(|n| n == name) {
        return Err(ApiError::invalid(
            &format!("{at}.name"),
            format!("tool {name:?} is declared more than once"),
        ));
    }
    names.push(name.to_string());
    let mut f = Object::new().with("name", name);
    match get(o, "description") {
        None => {}
        Some(Value::String(d)) => f.insert("description", d.as_str()),
        Some(v) => return Err(type_err(&format!("{at}.description"), "a string", v)),
    }
    Ok(f)
}

/// `{"type": "function", "function": f}`: a declaration as chat completions gives it, so the
/// same tools give the same ids through every API.
pub(super) fn function(f: Object) -> Value {
    Object::new()
        .with("type", "function")
        .with("function", f)
        .into()
}

/// A `tool_choice` naming one tool (`o.name`), which must be among `declared`.
pub(super) fn named_choice(o: &Object, declared: &[String]) -> Result<ToolChoice, ApiError> {
    let name = req_str(o, "name", "tool_choice")?;
    if !declared.iter().any(|d| d == name) {
        return Err(ApiError::invalid(
            "tool_choice.name",
            format!("tool {name:?} is not declared in `tools`"),
        ));
    }
    Ok(ToolChoice::Named(name.to_string()))
}

/// Adds a call to the assistant turn `m`; its `id` (the member `id_key` of the block or item
/// at `at`) must differ from the turn's earlier calls', which `call` names
/// (`tool_use`, `call`).
pub(super) fn push_call(
    m: &mut Message,
    id: &str,
    name: &str,
    arguments: Arguments,
    at: &str,
    id_key: &str,
    call: &str,
) -> Result<(), ApiError> {
    if m.tool_calls.iter().any(|c| c.id.as_deref() == Some(id)) {
        return Err(ApiError::invalid(
            &format!("{at}.{id_key}"),
            format!("{id:?} is the {id_key} of an earlier {call} of this turn"),
        ));
    }
    m.tool_calls.push(ToolCall {
        id: Some(id.to_string()),
        name: name.to_string(),
        arguments,
        index: None,
    });
    Ok(())
}

/// The call ids of the assistant turn `m`, none answered yet.
pub(super) fn open_calls(m: &Message) -> Vec<(String, bool)> {
    m.tool_calls
        .iter()
        .filter_map(|c| c.id.clone())
        .map(|id| (id, false))
        .collect()
}

/// The tool result answering the call `id` (the value of `field`) with `content`: the call
/// must be one of `open` (the assistant turn before it, `call` naming its kind) and not yet
/// answered.
pub(super) fn tool_result(
    open: &mut [(String, bool)],
    id: &str,
    field: &str,
    call: &str,
    content: Vec<String>,
) -> Result<Message, ApiError> {
    match open.iter_mut().find(|(c, _)| c == id) {
        None => {
            return Err(ApiError::invalid(
                field,
                format!("{id:?} answers no {call} of the assistant turn before it"),
            ))
        }
        Some((_, true)) => {
            return Err(ApiError::invalid(
                field,
                format!("{id:?} is answered twice"),
            ))
        }
        Some((_, done)) => *done = true,
    }
    let mut m = Message::plain(Role::Tool, Some(content));
    m.tool_call_id = Some(id.to_string());
    Ok(m)
}

/// A conversation rendered: prompt ids, the stub that opens the reply, thinking on.
pub(super) struct Rendered {
    /// The prompt ids (ending with the generation prompt, or the prefill).
    pub ids: Vec<u32>,
    /// Ids of the generation prompt's channel-opening stub (0 for a prefill).
    pub stub: usize,
    /// The reply starts in the think channel (thinking on, no prefill).
    pub thinking: bool,
    /// The reply's constraints (the response format, the tools' schemas per `tool_choice`;
    /// [`super::constraint`]).
    pub constraints: crate::generate::guide::Constraints,
}

/// Renders `messages` with `tools` (declarations) through the one chat template; a named
/// `tool_choice` turns thinking off (the template's rule, TOKENIZER.md §10 step 4); a final
/// `partial` message is a prefill with no stub. The constraints are built with the API's
/// field names (`fields`) over the server's vocabulary.
#[allow(clippy::too_many_arguments)]
pub(super) fn render(
    messages: Vec<Message>,
    tools: Vec<Value>,
    tool_choice: ToolChoice,
    response_format: Option<ResponseFormat>,
    mut thinking: Thinking,
    tok: &Tokenizer,
    lim: &super::Limits,
    fields: &super::constraint::Fields,
) -> Result<Rendered, ApiError> {
    if matches!(tool_choice, ToolChoice::Named(_)) {
        thinking = Thinking::Off;
    }
    let partial = messages.last().is_some_and(|m| m.partial);
    let req = ChatRequest {
        messages,
        tools: (!tools.is_empty()).then_some(Value::Array(tools)),
        tool_choice,
        response_format,
        thinking,
    };
    let err = |e: crate::error::Error| ApiError::from_chat(&e);
    let segs = chat::render(&req, true).map_err(err)?;
    let ids = chat::encode(tok, &segs).map_err(err)?;
    let on = thinking != Thinking::Off;
    let stub = if partial {
        0
    } else {
        chat::encode(tok, &chat::generation_stub(on))
            .map_err(err)?
            .len()
    };
    let constraints = super::constraint::reply_constraints(
        &req,
        on && !partial,
        partial,
        tok,
        &lim.vocabulary,
        fields,
    )?;
    Ok(Rendered {
        ids,
        stub,
        thinking: on && !partial,
        constraints,
    })
}

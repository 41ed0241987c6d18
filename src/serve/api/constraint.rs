//! The reply's constraint of a request (issue 25 item 3, ENGINE.md §8 "Constraints"): one
//! place for the three APIs, from the conversation they decoded (`chat::Request`). The
//! response channel holds exactly the JSON of `response_format` (chat completions),
//! `text.format` (Responses) or `output_config.format` (Messages) when one is given; declared
//! tools are constrained per `tool_choice` (required or named: the call starts at once; none:
//! the tools channel never opens; auto: every call the model opens follows the XTML call
//! syntax with a declared name and arguments of its schema). A schema the engine cannot
//! enforce is a 400 naming the field and keyword, in each API's own error shape.

use super::ApiError;
use crate::chat::structured::{self, Refused};
use crate::chat::Request as ChatRequest;
use crate::constrain::{self, SchemaError, Vocabulary};
use crate::generate::guide::Constraints;
use crate::tokenizer::Tokenizer;
use std::sync::{Arc, OnceLock};

/// The vocabulary as the matcher walks it, built on the first constrained request (a server
/// never asked for structured output never pays for it) and shared by every later one.
#[derive(Clone, Default)]
pub struct VocabCell(Arc<OnceLock<Arc<Vocabulary>>>);

impl std::fmt::Debug for VocabCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VocabCell({})",
            if self.0.get().is_some() {
                "built"
            } else {
                "empty"
            }
        )
    }
}

impl VocabCell {
    /// The vocabulary of `tok` (built once).
    pub fn get(&self, tok: &Tokenizer) -> Arc<Vocabulary> {
        self.0
            .get_or_init(|| Arc::new(Vocabulary::new(tok)))
            .clone()
    }
}

/// How an API names the fields a refusal points at.
pub struct Fields {
    /// The schema of the response format (`response_format.json_schema.schema`).
    pub format: &'static str,
    /// A tool's parameters schema, after `tools[i].` (`function.parameters`).
    pub tool: &'static str,
}

/// Chat completions' field names.
pub const CHAT: Fields = Fields {
    format: "response_format.json_schema.schema",
    tool: "function.parameters",
};
/// Responses' field names.
pub const RESPONSES: Fields = Fields {
    format: "text.format.schema",
    tool: "parameters",
};
/// Messages' field names.
pub const MESSAGES: Fields = Fields {
    format: "output_config.format.schema",
    tool: "input_schema",
};

/// A schema refusal as a 400 naming the field, the keyword's path and the keyword.
fn refused(field: &str, e: &SchemaError) -> ApiError {
    // the reply grammar's own paths already start at `tools.NAME…`: not prefixed twice
    let at = if e.path.is_empty() {
        field.to_string()
    } else if e.path == field || e.path.starts_with(&format!("{field}.")) {
        e.path.clone()
    } else {
        format!("{field}.{}", e.path)
    };
    let kw = if e.keyword.is_empty() {
        String::new()
    } else {
        format!("keyword `{}`: ", e.keyword)
    };
    ApiError::invalid(&at, format!("{kw}{}", e.message))
}

/// The constraints of the reply to `req` (none when it asks for no JSON and declares no
/// tools). `thinking`: the generation prompt opened the think channel (it stays free);
/// `partial`: the reply continues a final assistant message (a prefill), which no
/// constraint can start inside — a response format is then refused, tools stay free.
///
/// Errors (400): a schema the engine cannot enforce, naming the field and keyword; a
/// response format with a prefill; a `tool_choice` that requires a call (`required`,
/// Messages' `any`) with no tool declared, which no reply could satisfy.
pub fn reply_constraints(
    req: &ChatRequest,
    thinking: bool,
    partial: bool,
    tok: &Tokenizer,
    vocab: &VocabCell,
    f: &Fields,
) -> Result<Constraints, ApiError> {
    let declared = |t: &Option<crate::json::Value>| {
        t.as_ref()
            .and_then(|v| v.as_array())
            .is_some_and(|a| !a.is_empty())
    };
    let any_tool = declared(&req.tools) || req.messages.iter().any(|m| declared(&m.tools));
    if req.tool_choice == crate::chat::ToolChoice::Required && !any_tool {
        return Err(ApiError::invalid(
            "tool_choice",
            "requires a tool call, but the request declares no tools",
        ));
    }
    let spec = structured::reply_spec(req, thinking).map_err(|r| match r {
        Refused::Format(e) => refused(f.format, &e),
        Refused::Tool(i, e) => refused(&format!("tools[{i}].{}", f.tool), &e),
        Refused::Tools(e) => refused("tools", &e),
    })?;
    let Some(spec) = spec else {
        return Ok(Constraints::default());
    };
    if partial {
        if spec.response.is_some() {
            return Err(ApiError::invalid(
                f.format.split('.').next().unwrap_or(f.format),
                "cannot constrain a reply that continues a final assistant message (a \
                 prefill); send the conversation without it",
            ));
        }
        return Ok(Constraints::default());
    }
    let specials = constrain::Specials::from_tokenizer(tok).ok_or_else(|| {
        ApiError::other(
            500,
            "server_error",
            "the tokenizer lacks the chat template's special tokens",
        )
    })?;
    let c = constrain::reply(&spec, vocab.get(tok), &specials).map_err(|e| refused("tools", &e))?;
    Ok(Constraints::one(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(path: &str) -> SchemaError {
        SchemaError {
            path: path.to_string(),
            keyword: "type".to_string(),
            message: "not an object schema".to_string(),
        }
    }

    /// The reply grammar names a tool's schema from `tools.NAME.parameters` on: the field is
    /// not put in front of it again (it read `tools.tools.f.parameters`).
    #[test]
    fn a_path_that_starts_at_the_field_is_not_prefixed_twice() {
        assert_eq!(
            refused("tools", &err("tools.f.parameters"))
                .param
                .as_deref(),
            Some("tools.f.parameters")
        );
        assert_eq!(
            refused("tools[0].function.parameters", &err("properties.a"))
                .param
                .as_deref(),
            Some("tools[0].function.parameters.properties.a")
        );
        assert_eq!(refused("tools", &err("")).param.as_deref(), Some("tools"));
        assert_eq!(
            refused("tools", &err("toolsx")).param.as_deref(),
            Some("tools.toolsx")
        );
    }
}

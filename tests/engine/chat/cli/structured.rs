//! `k3 chat --json-schema FILE` over several turns: the template writes the response-format
//! message after each turn's messages (TOKENIZER.md §10 step 5), so a later turn's rendering
//! does not begin with the earlier one's; each turn still gets a reply of the schema, and the
//! next turn continues the ids the earlier turns generated from.

use super::{chat, ids, s};

const SCHEMA: &str = r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"], "additionalProperties": false}"#;

#[test]
fn every_turn_replies_with_the_schema() {
    let dir = std::env::temp_dir().join(format!("k3-chat-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("person.json");
    std::fs::write(&schema, SCHEMA).unwrap();
    let args = [
        "--json-schema",
        schema.to_str().unwrap(),
        "--thinking",
        "off",
        "--temperature",
        "0",
        "--max-reply",
        "60",
        "--quiet",
    ];
    let c = chat(
        "chat-json-schema-turns",
        &args,
        "Give me a person\nAnother one\nAnd a third\n",
        None,
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let replies = c.replies();
    assert_eq!(replies.len(), 3, "{}", c.stderr());
    for r in &replies {
        let v = k3::json::parse(s(r, "content").as_bytes())
            .unwrap_or_else(|e| panic!("not JSON: {:?}: {e:?}", s(r, "content")));
        let age = v
            .get("age")
            .and_then(|a| a.as_number())
            .and_then(|n| n.as_i64())
            .expect("an integer age");
        assert!((0..=120).contains(&age), "{age}");
        let name = v.get("name").and_then(|n| n.as_str()).expect("name");
        assert!(name.chars().count() <= 8, "{name:?}");
    }
    // each turn continues the ids of the one before: turn 2's input follows turn 1's reply
    let inputs = c.inputs();
    assert_eq!(inputs.len(), 3);
    assert!(!ids(replies[0], "ids").is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

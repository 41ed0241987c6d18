//! The reply parser (TOKENIZER.md §13): every case fed one id at a time and all at once,
//! with the same events; malformed markup surfaces as content plus a warning; UTF-8 is
//! never split; nothing panics on arbitrary ids.

use k3::chat::{self, ReplyEvent, ReplyParser, Segment};
use k3::tokenizer::Tokenizer;
use proptest::prelude::*;
use std::sync::OnceLock;

fn tok() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| Tokenizer::load(&crate::support::fixture("tiny-k3-text")).unwrap())
}

/// The id of each single byte (byte-level BPE has all 256).
fn byte_id(b: u8) -> u32 {
    static IDS: OnceLock<Vec<u32>> = OnceLock::new();
    IDS.get_or_init(|| {
        let mut ids = vec![u32::MAX; 256];
        for id in 0..tok().num_ranks() as u32 {
            if let Ok([b]) = tok().token_bytes(id) {
                ids[*b as usize] = id;
            }
        }
        ids
    })[b as usize]
}

#[derive(Clone)]
enum P<'a> {
    T(&'a str),
    Bytes(&'a [u8]),
    Open(&'a str, &'a [(&'a str, &'a str)]),
    Close(&'a str),
    Id(u32),
}

fn ids(parts: &[P]) -> Vec<u32> {
    let mut out = Vec::new();
    for p in parts {
        match p {
            P::T(t) => out.extend(tok().encode(t, false)),
            P::Bytes(b) => out.extend(b.iter().map(|&b| byte_id(b))),
            P::Open(tag, attrs) => {
                let mut segs = vec![Segment::Special(chat::OPEN), Segment::Text(tag.to_string())];
                for (k, v) in *attrs {
                    let v = v.replace('&', "&amp;").replace('"', "&quot;");
                    segs.extend([format!(" {k}"), "=\"".into(), v, "\"".into()].map(Segment::Text));
                }
                segs.push(Segment::Special(chat::SEP));
                out.extend(chat::encode(tok(), &segs).unwrap());
            }
            P::Close(tag) => out.extend(
                [chat::CLOSE]
                    .into_iter()
                    .chain(tok().encode(tag, false))
                    .chain([chat::SEP]),
            ),
            P::Id(id) => out.push(*id),
        }
    }
    out
}

fn merged(events: Vec<ReplyEvent>) -> Vec<ReplyEvent> {
    chat::reply::coalesce(events)
}

/// Parses one id at a time and all at once; both must agree (after merging texts).
fn parse(thinking: bool, ids: &[u32]) -> Vec<ReplyEvent> {
    let mut one = ReplyParser::new(thinking);
    let mut ev1 = Vec::new();
    for &id in ids {
        let mut step = Vec::new();
        one.push(tok(), id, &mut step);
        for e in &step {
            if let ReplyEvent::Reasoning(s) | ReplyEvent::Content(s) = e {
                assert!(!s.is_empty());
            }
        }
        ev1.extend(step);
    }
    one.finish(&mut ev1);
    let mut all = ReplyParser::new(thinking);
    let mut ev2 = Vec::new();
    all.push_all(tok(), ids, &mut ev2);
    all.finish(&mut ev2);
    let (m1, m2) = (merged(ev1), merged(ev2));
    assert_eq!(m1, m2, "one id at a time vs all at once");
    m1
}

use ReplyEvent::*;

fn warnings(ev: &[ReplyEvent]) -> usize {
    ev.iter().filter(|e| matches!(e, Warning(_))).count()
}

fn without_warnings(ev: Vec<ReplyEvent>) -> Vec<ReplyEvent> {
    merged(
        ev.into_iter()
            .filter(|e| !matches!(e, Warning(_)))
            .collect(),
    )
}

#[test]
fn thinking_then_response_then_eos() {
    let ev = parse(
        true,
        &ids(&[
            P::T("Let me think… 2+2=4."),
            P::Close("think"),
            P::Open("response", &[]),
            P::T("The answer is 4."),
            P::Close("response"),
            P::Close("message"),
            P::Id(chat::EOS),
        ]),
    );
    assert_eq!(
        ev,
        vec![
            Reasoning("Let me think… 2+2=4.".into()),
            Content("The answer is 4.".into()),
            EndOfTurn(chat::EOS)
        ]
    );
}

#[test]
fn thinking_off_ends_with_end_of_msg() {
    let ev = parse(
        false,
        &ids(&[
            P::T("Hi 你好 🚀"),
            P::Close("response"),
            P::Close("message"),
            P::Id(chat::END_OF_MSG),
        ]),
    );
    assert_eq!(
        ev,
        vec![Content("Hi 你好 🚀".into()), EndOfTurn(chat::END_OF_MSG)]
    );
}

#[test]
fn empty_think_channel_and_literal_specials_in_text_stay_text() {
    let ev = parse(
        true,
        &ids(&[
            P::Close("think"),
            P::Open("response", &[]),
            P::T("type <|open|> and [EOS] as text"),
            P::Close("response"),
            P::Close("message"),
            P::Id(chat::EOS),
        ]),
    );
    assert_eq!(
        ev,
        vec![
            Content("type <|open|> and [EOS] as text".into()),
            EndOfTurn(chat::EOS)
        ]
    );
}

fn call_parts<'a>(
    name: &'a str,
    index: &'a str,
    args: &'a [(&'a str, &'a str, &'a str)],
) -> Vec<P<'a>> {
    let mut v = Vec::new();
    // Leaked attribute lists keep the helper short; tests are short-lived.
    let call_attrs: &'a [(&'a str, &'a str)] =
        Box::leak(vec![("tool", name), ("index", index)].into_boxed_slice());
    v.push(P::Open("call", call_attrs));
    for (k, t, val) in args {
        let attrs: &'a [(&'a str, &'a str)] =
            Box::leak(vec![("key", *k), ("type", *t)].into_boxed_slice());
        v.push(P::Open("argument", attrs));
        v.push(P::T(val));
        v.push(P::Close("argument"));
    }
    v.push(P::Close("call"));
    v
}

#[test]
fn tool_calls_of_every_argument_type_and_a_json_block() {
    let mut parts = vec![
        P::T("plan"),
        P::Close("think"),
        P::Open("response", &[]),
        P::T("Calling."),
        P::Close("response"),
        P::Open("tools", &[]),
    ];
    parts.extend(call_parts(
        "get_weather",
        "1",
        &[
            ("city", "string", "Paris \"centre\" & 日本"),
            ("n", "number", "-1.5e3"),
            ("ok", "boolean", "true"),
            ("none", "null", "null"),
            ("o", "object", "{\"a\": [1, {\"b\": null}]}"),
            ("arr", "array", "[1, \"x\", false]"),
            ("we\"ird&key", "string", ""),
        ],
    ));
    parts.push(P::Open("call", &[("tool", "calc-v2"), ("index", "2")]));
    parts.push(P::Open("json", &[("type", "object")]));
    parts.push(P::T("{\"expr\": \"6*7\", \"n\": 2}"));
    parts.push(P::Close("json"));
    parts.push(P::Close("call"));
    parts.extend([P::Close("tools"), P::Close("message"), P::Id(chat::EOS)]);
    let ev = parse(true, &ids(&parts));
    let arg = |k: &str, v: &str| ToolCallArgument {
        index: 1,
        key: k.into(),
        value: v.into(),
    };
    assert_eq!(ev, vec![
        Reasoning("plan".into()),
        Content("Calling.".into()),
        ToolCallStart { index: 1, name: "get_weather".into() },
        arg("city", "\"Paris \\\"centre\\\" & 日本\""),
        arg("n", "-1.5e3"),
        arg("ok", "true"),
        arg("none", "null"),
        arg("o", "{\"a\":[1,{\"b\":null}]}"),
        arg("arr", "[1,\"x\",false]"),
        arg("we\"ird&key", "\"\""),
        ToolCallEnd { index: 1, arguments: "{\"city\":\"Paris \\\"centre\\\" & 日本\",\"n\":-1.5e3,\"ok\":true,\"none\":null,\"o\":{\"a\":[1,{\"b\":null}]},\"arr\":[1,\"x\",false],\"we\\\"ird&key\":\"\"}".into() },
        ToolCallStart { index: 2, name: "calc-v2".into() },
        ToolCallArgument { index: 2, key: "expr".into(), value: "\"6*7\"".into() },
        ToolCallArgument { index: 2, key: "n".into(), value: "2".into() },
        ToolCallEnd { index: 2, arguments: "{\"expr\":\"6*7\",\"n\":2}".into() },
        EndOfTurn(chat::EOS),
    ]);
}

#[test]
fn utf8_split_across_ids_is_never_emitted_half() {
    // "é" = C3 A9, "🚀" = F0 9F 9A 80, split byte by byte, then an invalid byte and a cut tail.
    let ev = parse(
        true,
        &ids(&[
            P::Bytes(b"a\xC3"),
            P::Bytes(b"\xA9\xF0\x9F"),
            P::Bytes(b"\x9A\x80"),
            P::Close("think"),
            P::Open("response", &[]),
            P::Bytes(b"x\xFFy\xE2\x82"),
        ]),
    );
    assert_eq!(
        ev,
        vec![
            Reasoning("aé🚀".into()),
            Content("x\u{FFFD}y\u{FFFD}".into())
        ]
    );
}

#[test]
fn unknown_tag_is_content_with_a_warning() {
    let ev = parse(
        false,
        &ids(&[
            P::T("a"),
            P::Open("image", &[("src", "x")]),
            P::T("b"),
            P::Close("response"),
            P::Close("message"),
            P::Id(chat::EOS),
        ]),
    );
    assert_eq!(warnings(&ev), 1, "{ev:?}");
    assert_eq!(
        without_warnings(ev),
        vec![
            Content("a<|open|>image src=\"x\"<|sep|>b".into()),
            EndOfTurn(chat::EOS)
        ]
    );
}

#[test]
fn argument_that_does_not_parse_is_content_and_the_next_call_still_parses() {
    let mut parts = vec![P::Close("response"), P::Open("tools", &[])];
    parts.extend(call_parts("f", "1", &[("n", "number", "twelve")]));
    parts.extend(call_parts("g", "2", &[("s", "string", "ok")]));
    parts.extend([P::Close("tools"), P::Close("message"), P::Id(chat::EOS)]);
    let reply = ids(&parts);
    let ev = parse(false, &reply);
    assert_eq!(warnings(&ev), 1, "{ev:?}");
    let ev = without_warnings(ev);
    let raw = tok()
        .decode_lossy(&ids(&call_parts("f", "1", &[("n", "number", "twelve")])))
        .unwrap();
    // the valid call keeps the number the model wrote (2), so its result answers it
    assert_eq!(
        ev,
        vec![
            Content(raw),
            ToolCallStart {
                index: 2,
                name: "g".into()
            },
            ToolCallArgument {
                index: 2,
                key: "s".into(),
                value: "\"ok\"".into()
            },
            ToolCallEnd {
                index: 2,
                arguments: "{\"s\":\"ok\"}".into()
            },
            EndOfTurn(chat::EOS),
        ]
    );
}

/// The numbers of the calls of one reply (`ReplyParser` "Call numbers").
fn call_numbers(parts: &[P]) -> Vec<usize> {
    parse(false, &ids(parts))
        .into_iter()
        .filter_map(|e| match e {
            ToolCallEnd { index, .. } => Some(index),
            _ => None,
        })
        .collect()
}

#[test]
fn calls_keep_the_numbers_the_model_wrote_else_their_position() {
    let call = |index: &'static str| {
        let attrs: &'static [(&'static str, &'static str)] = match index {
            "" => &[("tool", "f")],
            _ => Box::leak(vec![("tool", "f"), ("index", index)].into_boxed_slice()),
        };
        vec![P::Open("call", attrs), P::Close("call")]
    };
    let reply = |calls: &[&'static str]| {
        let mut parts = vec![P::Close("response"), P::Open("tools", &[])];
        for c in calls {
            parts.extend(call(c));
        }
        parts.extend([P::Close("tools"), P::Close("message"), P::Id(chat::EOS)]);
        call_numbers(&parts)
    };
    // as the template numbers them; out of order; from 3
    assert_eq!(reply(&["1", "2", "3"]), [1, 2, 3]);
    assert_eq!(reply(&["2", "1"]), [2, 1]);
    assert_eq!(reply(&["3"]), [3]);
    // missing, not a positive integer, or taken: the position, past every number given
    assert_eq!(reply(&["", ""]), [1, 2]);
    assert_eq!(reply(&["1", "x", "0", "+4"]), [1, 2, 3, 4]);
    assert_eq!(reply(&["1", "1"]), [1, 2]);
    assert_eq!(reply(&["5", ""]), [5, 6]);
    // a malformed call (no tool name) counts as a position
    let mut parts = vec![P::Close("response"), P::Open("tools", &[])];
    parts.extend([P::Open("call", &[("index", "1")]), P::Close("call")]);
    parts.extend(call(""));
    parts.extend([P::Close("tools"), P::Close("message"), P::Id(chat::EOS)]);
    assert_eq!(call_numbers(&parts), [2]);
}

#[test]
fn call_without_a_name_is_content_with_a_warning() {
    let mut parts = vec![
        P::Close("response"),
        P::Open("tools", &[]),
        P::Open("call", &[("index", "1")]),
        P::Open("argument", &[("key", "k"), ("type", "string")]),
        P::T("v"),
        P::Close("argument"),
        P::Close("call"),
        P::Close("tools"),
        P::Close("message"),
        P::Id(chat::EOS),
    ];
    let ev = parse(false, &ids(&parts));
    assert!(warnings(&ev) >= 1);
    assert!(ev.iter().all(|e| !matches!(e, ToolCallStart { .. })));
    let text: String = ev
        .iter()
        .filter_map(|e| {
            if let Content(s) = e {
                Some(s.as_str())
            } else {
                None
            }
        })
        .collect();
    parts.truncate(7);
    let want = tok().decode_lossy(&ids(&parts[2..])).unwrap();
    assert_eq!(text, want, "every byte of the bad call is content");
}

#[test]
fn json_block_that_is_not_an_object_is_content() {
    let parts = [
        P::Close("response"),
        P::Open("tools", &[]),
        P::Open("call", &[("tool", "f"), ("index", "1")]),
        P::Open("json", &[("type", "object")]),
        P::T("[1, 2]"),
        P::Close("json"),
        P::Close("call"),
        P::Close("tools"),
        P::Close("message"),
        P::Id(chat::EOS),
    ];
    let ev = parse(false, &ids(&parts));
    assert_eq!(warnings(&ev), 1);
    assert!(ev.iter().all(|e| !matches!(e, ToolCallStart { .. })));
    assert_eq!(ev.last(), Some(&EndOfTurn(chat::EOS)));
}

#[test]
fn stray_structure_tokens_are_content() {
    let ev = parse(
        false,
        &ids(&[
            P::T("a"),
            P::Id(chat::SEP),
            P::T("b"),
            P::Id(chat::OPEN),
            P::T("resp"),
            P::Id(chat::EOS),
            P::T("after"),
        ]),
    );
    assert!(warnings(&ev) >= 3, "{ev:?}");
    assert_eq!(
        without_warnings(ev),
        vec![
            Content("a<|sep|>b<|open|>resp".into()),
            EndOfTurn(chat::EOS),
            Content("after".into())
        ]
    );
}

#[test]
fn reply_cut_by_the_limit_keeps_every_byte() {
    let parts = [
        P::T("think"),
        P::Close("think"),
        P::Open("response", &[]),
        P::T("partial answer"),
        P::Close("response"),
        P::Open("tools", &[]),
        P::Open("call", &[("tool", "f"), ("index", "1")]),
        P::Open("argument", &[("key", "k"), ("type", "string")]),
        P::T("val"),
    ];
    let reply = ids(&parts);
    let ev = parse(true, &reply);
    assert_eq!(warnings(&ev), 1);
    let ev = without_warnings(ev);
    let tail = tok().decode_lossy(&ids(&parts[6..])).unwrap();
    assert_eq!(
        ev,
        [
            Reasoning("think".into()),
            Content(format!("partial answer{tail}"))
        ]
    );
}

#[test]
fn id_outside_the_vocabulary_is_a_warning() {
    let ev = parse(false, &[tok().encode("a", false)[0], 999_999]);
    assert_eq!(
        ev,
        vec![
            Content("a".into()),
            Warning("id 999999 is outside the vocabulary (skipped)".into())
        ]
    );
}

fn alphabet() -> Vec<u32> {
    let mut a = vec![
        chat::OPEN,
        chat::CLOSE,
        chat::SEP,
        chat::END_OF_MSG,
        chat::EOS,
        163_584,
        999_999,
    ];
    for w in [
        "think",
        "response",
        "tools",
        "call",
        "argument",
        "json",
        "message",
        " tool",
        " key",
        " type",
        " index",
        "=\"",
        "\"",
        "f",
        "string",
        "number",
        "1",
        "{\"a\": 1}",
        "你好",
        " ",
    ] {
        a.extend(tok().encode(w, false));
    }
    a.extend([0xC3u8, 0xA9, 0xF0, 0x9F, 0x80, 0xFF].map(byte_id));
    a
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any id sequence parses (no panic), one at a time as all at once.
    #[test]
    fn arbitrary_ids_never_panic(picks in proptest::collection::vec(0usize..64, 0..80), thinking: bool) {
        let a = alphabet();
        let reply: Vec<u32> = picks.iter().map(|&i| a[i % a.len()]).collect();
        parse(thinking, &reply);
    }

    /// Without any structural id, the content is exactly the lossy decode: no byte lost.
    #[test]
    fn plain_text_loses_no_byte(picks in proptest::collection::vec(0usize..64, 0..80)) {
        let a: Vec<u32> = alphabet().into_iter().filter(|id| *id < 163_584).collect();
        let reply: Vec<u32> = picks.iter().map(|&i| a[i % a.len()]).collect();
        let ev = parse(false, &reply);
        let text: String = ev.iter().filter_map(|e| if let Content(s) = e { Some(s.as_str()) } else { None }).collect();
        prop_assert_eq!(text, tok().decode_lossy(&reply).unwrap());
    }
}

/// A reply cut anywhere is closed by `closing()` so that it ends like a finished turn.
#[test]
fn closing_ends_a_cut_reply_like_a_finished_turn() {
    let full = [
        P::T("why"),
        P::Close("think"),
        P::Open("response", &[]),
        P::T("ans"),
        P::Close("response"),
        P::Open("tools", &[]),
        P::Open("call", &[("tool", "f"), ("index", "1")]),
        P::Open("argument", &[("key", "k"), ("type", "string")]),
        P::T("v"),
        P::Close("argument"),
        P::Close("call"),
        P::Close("tools"),
        P::Close("message"),
    ];
    let all = ids(&full);
    for cut in 0..=all.len() {
        let mut p = ReplyParser::new(true);
        let mut ev = Vec::new();
        p.push_all(tok(), &all[..cut], &mut ev);
        let mut closed = all[..cut].to_vec();
        closed.extend(chat::encode(tok(), &p.closing()).unwrap());
        let ev = parse(true, &closed);
        assert_eq!(
            ev.last(),
            Some(&EndOfTurn(chat::END_OF_MSG)),
            "cut {cut}: {ev:?}"
        );
        assert!(ReplyParser::new(true).closing().len() > 3);
    }
    // Cut inside the think channel: no warning, the turn closes cleanly.
    let cut = ids(&full[..1]);
    let mut p = ReplyParser::new(true);
    p.push_all(tok(), &cut, &mut Vec::new());
    let mut closed = cut.clone();
    closed.extend(chat::encode(tok(), &p.closing()).unwrap());
    assert_eq!(
        parse(true, &closed),
        vec![Reasoning("why".into()), EndOfTurn(chat::END_OF_MSG)]
    );
    // After the end id there is nothing to close.
    let mut p = ReplyParser::new(false);
    p.push_all(
        tok(),
        &ids(&[P::Close("response"), P::Close("message"), P::Id(chat::EOS)]),
        &mut Vec::new(),
    );
    assert!(p.closing().is_empty());
}

/// The server reads replies with the same parser but answers in the OpenAI shape, where a
/// call's `index` is its 0-based position in the reply's `tool_calls` (clients collect
/// streamed calls by it) and the client sends the calls back without any number: the
/// template then numbers the call and its result by position, consistently. So after a
/// malformed call the valid call is the server's call 0, whatever number the model wrote.
#[test]
fn the_server_numbers_calls_by_position_in_the_reply() {
    use k3::serve::reply::{Piece, ReplyBuilder};
    let mut parts = vec![P::Close("response"), P::Open("tools", &[])];
    parts.extend(call_parts("f", "1", &[("n", "number", "twelve")]));
    parts.extend(call_parts("g", "2", &[("s", "string", "ok")]));
    parts.extend([P::Close("tools"), P::Close("message"), P::Id(chat::EOS)]);
    let mut b = ReplyBuilder::new(tok(), Some(false), &[], &[chat::EOS], "call_x".into());
    let mut pieces = Vec::new();
    for id in ids(&parts) {
        b.push(id, &mut pieces);
    }
    b.finish(&mut pieces);
    let calls: Vec<(usize, String, String)> = pieces
        .into_iter()
        .filter_map(|p| match p {
            Piece::ToolCall {
                index, id, name, ..
            } => Some((index, id, name)),
            _ => None,
        })
        .collect();
    assert_eq!(calls, [(0, "call_x_0".to_string(), "g".to_string())]);
}

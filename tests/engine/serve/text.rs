//! Streamed text never splits a UTF-8 character (TOKENIZER.md §9, §13): forced replies
//! (`K3_TEST_FORCE_IDS`) whose characters are cut across single-byte tokens, streamed as chat
//! (reasoning and content) and as a completion; every delta is whole characters and the
//! deltas add up to the whole reply; completions' `text_offset` counts characters.

use super::support::*;
use serde_json::{json, Value};

/// Single-byte tokens of the Kimi vocabulary (their ids in `tiktoken.model`).
const E4: u32 = 160;
const B8: u32 = 116;
const AD: u32 = 255; // E4 B8 AD = 中
const C3: u32 = 127;
const A9: u32 = 102; // C3 A9 = é
const F0: u32 = 172;
const X9F: u32 = 253;
const X98: u32 = 246;
const X80: u32 = 222; // F0 9F 98 80 = 😀
const D0: u32 = 140;
const B6: u32 = 114; // D0 B6 = ж
/// "Hi" and " ok": whole tokens between the cut ones.
const HI: u32 = 18699;
const OK: u32 = 8961;
/// `[EOS]`.
const EOS: u32 = 163_585;

fn ids(list: &[u32]) -> String {
    list.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Every `data:` payload of a stream, checked: valid UTF-8 as sent (the raw body), JSON, and
/// no U+FFFD (what a character cut between two deltas would turn into).
fn checked_events(r: &Reply) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text());
    let raw = String::from_utf8(r.body.clone()).expect("the stream is valid UTF-8");
    assert!(!raw.contains('\u{FFFD}'), "a character was cut: {raw}");
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).expect("chunk JSON"))
        .collect()
}

#[test]
fn streamed_chat_text_never_splits_a_character() {
    // think: "Hi中é", close think, open response: "😀ж ok", close response and message, [EOS]
    let reply = [
        &[HI, E4, B8, AD, C3, A9][..],
        &[163588, 39964, 163589, 163587, 12092, 163589],
        &[F0, X9F, X98, X80, D0, B6, OK],
        &[163588, 12092, 163589, 163588, 2778, 163589, EOS],
    ]
    .concat();
    let s = start_forced(&[], &ids(&reply));
    let body = chat_body("Say it.", 64, 1);
    let whole = post(&s, "/v1/chat/completions", &body).json();
    let m = &whole["choices"][0]["message"];
    assert_eq!(m["reasoning_content"], "Hi中é");
    assert_eq!(m["content"], "😀ж ok");
    // the reasoning comes once, as `reasoning_content` (README: no `reasoning` copy)
    assert!(m.get("reasoning").is_none(), "{m}");
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let r = post(&s, "/v1/chat/completions", &sb);
    let (mut reasoning, mut content) = (String::new(), String::new());
    let mut deltas = 0;
    for v in checked_events(&r) {
        let Some(d) = v["choices"].get(0).map(|c| &c["delta"]) else {
            continue;
        };
        assert!(d.get("reasoning").is_none(), "{d}");
        for (key, acc) in [
            ("reasoning_content", &mut reasoning),
            ("content", &mut content),
        ] {
            if let Some(t) = d[key].as_str() {
                deltas += !t.is_empty() as usize;
                acc.push_str(t);
            }
        }
    }
    assert!(deltas >= 4, "the text came in several deltas: {}", r.text());
    assert_eq!((reasoning.as_str(), content.as_str()), ("Hi中é", "😀ж ok"));
}

#[test]
fn streamed_completion_text_never_splits_a_character() {
    let reply = [E4, B8, AD, HI, C3, A9, F0, X9F, X98, X80, D0, B6, EOS];
    let s = start_forced(&[], &ids(&reply));
    let body = json!({"model": MODEL, "prompt": "Say it.", "max_tokens": 32, "seed": 1});
    let whole = post(&s, "/v1/completions", &body).json();
    let text = whole["choices"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(text, "中Hié😀ж");
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let mut streamed = String::new();
    for v in checked_events(&post(&s, "/v1/completions", &sb)) {
        if let Some(t) = v["choices"].get(0).and_then(|c| c["text"].as_str()) {
            streamed.push_str(t);
        }
    }
    assert_eq!(streamed, text);
}

/// "智商" (one token of the Kimi vocabulary).
const ZHISHANG: u32 = 32628;

/// `logprobs.text_offset` counts characters of the text (Unicode code points, as the OpenAI
/// API does), not bytes (it said `[0, 6]` after "智商"); a character cut over tokens gives each
/// of its tokens that character's offset. Streamed chunks carry the same offsets.
#[test]
fn completion_text_offsets_count_characters() {
    let reply = [
        ZHISHANG, E4, B8, AD, HI, C3, A9, F0, X9F, X98, X80, D0, B6, EOS,
    ];
    let s = start_forced(&[], &ids(&reply));
    let body = json!({"model": MODEL, "prompt": "Say it.", "max_tokens": 32, "seed": 1,
                      "logprobs": 0});
    let whole = post(&s, "/v1/completions", &body).json();
    let c = &whole["choices"][0];
    assert_eq!(c["text"], "智商中Hié😀ж");
    // 智商 0, 中's three bytes 2, Hi 3, é's two 5, 😀's four 6, ж's two 7, [EOS] at the end 8
    let want = json!([0, 2, 2, 2, 3, 5, 5, 6, 6, 6, 6, 7, 7, 8]);
    assert_eq!(c["logprobs"]["text_offset"], want, "{c}");
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let mut streamed = Vec::new();
    // (not `checked_events`: the `tokens` of cut characters are U+FFFD by design)
    let r = post(&s, "/v1/completions", &sb);
    assert_eq!(r.status, 200, "{}", r.text());
    for e in r.events().iter().filter(|e| *e != "[DONE]") {
        let v: Value = serde_json::from_str(e).expect("chunk JSON");
        if let Some(o) = v["choices"]
            .get(0)
            .and_then(|c| c["logprobs"]["text_offset"].as_array())
        {
            streamed.extend(o.iter().cloned());
        }
    }
    assert_eq!(Value::from(streamed), want);
}

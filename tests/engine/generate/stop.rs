//! `--stop TEXT` on a real token stream: ids of the tiny-k3-text tokenizer (whose byte-level
//! tokens split multi-byte characters) go through the streaming UTF-8 decoder and the stop
//! holdback; what is printed must be exactly the decoded text before the stop string that
//! completes first (the stop fires as soon as the generated text contains one), whatever the
//! token boundaries, never a byte of it, and every printed piece whole UTF-8.

use crate::support::fixture;
use k3::generate::sample::splitmix64;
use k3::generate::stop::StopText;
use k3::tokenizer::stream::StreamDecoder;
use k3::tokenizer::Tokenizer;

/// Streams `ids` as a run would; returns (printed text, stopped).
fn stream(tok: &Tokenizer, ids: &[u32], stops: &[String]) -> (String, bool) {
    let mut dec = StreamDecoder::new();
    let mut hold = StopText::new(stops);
    let mut out = String::new();
    for &id in ids {
        let r = hold.push(&dec.push(tok.token_bytes(id).unwrap()));
        out += &r.text;
        if r.stopped.is_some() {
            return (out, true);
        }
    }
    let r = hold.push(&dec.finish());
    out += &r.text;
    if r.stopped.is_some() {
        return (out, true);
    }
    out += &hold.finish();
    (out, false)
}

/// The oracle, on the whole text: the stop string that completes first (smallest end, then
/// smallest start) cuts the text at its start, however the text was split into pieces.
fn first_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter_map(|s| text.find(s.as_str()).map(|a| (a + s.len(), a)))
        .min()
        .map(|(_, a)| a)
}

#[test]
fn printed_text_is_the_text_before_the_first_stop() {
    let tok = Tokenizer::load(&fixture("tiny-k3-text")).unwrap();
    let text = "Grüße, 世界! naïve café — 🦀 rust;日本語のテキスト. ça va? ünïcödé 한국어 end.";
    let ids = tok.encode(text, false);
    assert_eq!(tok.decode_lossy(&ids).unwrap(), text);
    assert!(ids.len() > 20);
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for case in 0..300u64 {
        let r = splitmix64(0x570b, case);
        // One or two stop strings cut from the text (so they occur), sometimes one that
        // does not occur at all.
        let mut stops = Vec::new();
        for k in 0..1 + r % 2 {
            let h = splitmix64(r, k);
            let a = (h % chars.len() as u64) as usize;
            let n = 1 + ((h >> 20) % 4) as usize;
            let b = (a + n).min(chars.len());
            let end = chars.get(b).map_or(text.len(), |c| c.0);
            stops.push(text[chars[a].0..end].to_string());
        }
        if r % 7 == 0 {
            stops.push("not in the text".to_string());
        }
        let first = first_stop(text, &stops);
        let (out, stopped) = stream(&tok, &ids, &stops);
        match first {
            Some(at) => {
                assert!(stopped, "case {case}: {stops:?}");
                assert_eq!(out, &text[..at], "case {case}: {stops:?}");
            }
            None => assert_eq!((out.as_str(), stopped), (text, false)),
        }
    }
    // No stop strings: the stream is the lossy decode.
    assert_eq!(stream(&tok, &ids, &[]), (text.to_string(), false));
}

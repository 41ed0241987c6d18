//! Structured output (issue 25): the JSON Schema compiler never panics on any bytes taken as
//! a schema, in either style, alone or as a tool's parameters and a response format in the
//! reply grammar; a schema that compiles yields a plain constraint whose first mask admits
//! something.
#![no_main]
use k3::constrain::{self, JsonStyle, Mask, ReplySpec, Schema, Specials, ToolChoice, Vocabulary};
use k3::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

fn real() -> &'static (Tokenizer, Arc<Vocabulary>) {
    static T: OnceLock<(Tokenizer, Arc<Vocabulary>)> = OnceLock::new();
    T.get_or_init(|| {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-k3-text");
        let t = Tokenizer::load(&dir).expect("fixture tokenizer");
        let v = Arc::new(Vocabulary::new(&t));
        (t, v)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(v) = k3::json::parse(data) else { return };
    let (tok, vocab) = real();
    let sp = Specials::from_tokenizer(tok).expect("chat specials");
    for style in [JsonStyle::Compact, JsonStyle::Template] {
        let Ok(s) = Schema::compile(&v, style) else {
            continue;
        };
        let s = Arc::new(s);
        let mut c = constrain::plain(s.clone(), vocab.clone(), &[sp.eos]);
        let mut m = Mask::new(vocab.size());
        c.mask(Some(8), &mut m);
        assert!(
            m.count() > 0,
            "a compiled schema's first mask admits nothing"
        );
        let spec = ReplySpec {
            thinking: false,
            response: Some(s.clone()),
            tools: vec![("t".into(), s)],
            tool_choice: ToolChoice::Auto,
        };
        let _ = constrain::reply(&spec, vocab.clone(), &sp);
    }
});

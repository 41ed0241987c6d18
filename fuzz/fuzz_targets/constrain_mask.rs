//! Structured output (issue 25): the mask walk on any schema and any ids never panics, never
//! admits nothing unless the output is complete, every admitted id is accepted, a refused id
//! leaves the state unchanged, and a `boxed_clone` computes the same masks.
//!
//! Input: a schema (JSON text) up to the first 0 byte, then byte pairs: high bit set → the
//! n-th admitted id (mostly valid paths), else a raw id (any value). The first byte after
//! the 0 picks the budget (`remaining`) and the reply shape (plain, or a reply with the
//! schema as a tool's parameters and/or the response format). A schema that does not compile
//! falls back to any JSON object.
#![no_main]
use k3::constrain::{
    self, Constraint, JsonStyle, Mask, ReplySpec, Schema, Specials, ToolChoice, Vocabulary,
};
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
    let (tok, vocab) = real();
    let sp = Specials::from_tokenizer(tok).expect("chat specials");
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (schema_text, rest) = data.split_at(split);
    let rest = rest.get(1..).unwrap_or(&[]);
    let (mode, ids) = rest.split_first().map_or((0u8, &[][..]), |(m, r)| (*m, r));
    let style = if mode & 4 != 0 {
        JsonStyle::Template
    } else {
        JsonStyle::Compact
    };
    let schema = k3::json::parse(schema_text)
        .ok()
        .and_then(|v| Schema::compile(&v, style).ok())
        .unwrap_or_else(|| Schema::any_object(style));
    let schema = Arc::new(schema);
    let mut c: Box<dyn Constraint> = match mode & 3 {
        0 => constrain::plain(schema, vocab.clone(), &[sp.eos, sp.end_of_msg]),
        m => {
            let spec = ReplySpec {
                thinking: mode & 8 != 0,
                response: (m & 1 != 0).then(|| schema.clone()),
                tools: vec![("f".into(), schema.clone())],
                tool_choice: match mode >> 4 & 3 {
                    0 => ToolChoice::Auto,
                    1 => ToolChoice::None,
                    2 => ToolChoice::Required,
                    _ => ToolChoice::Named("f".into()),
                },
            };
            match constrain::reply(&spec, vocab.clone(), &sp) {
                Ok(c) => c,
                Err(_) => return,
            }
        }
    };
    let budget = if mode & 64 != 0 {
        Some(ids.len() / 2 + 4)
    } else {
        None
    };
    let mut m = Mask::new(vocab.size());
    let mut m2 = Mask::new(vocab.size());
    let mut steps = 0usize;
    for pair in ids.chunks(2) {
        let remaining = budget.map(|b| b.saturating_sub(steps).max(1));
        c.mask(remaining, &mut m);
        if c.is_complete() {
            assert_eq!(m.count(), 0, "ids admitted after completion");
            break;
        }
        let n = m.count();
        assert!(n > 0, "nothing admitted on an incomplete output");
        let v = u16::from(pair[0]) << 8 | u16::from(*pair.get(1).unwrap_or(&0));
        let id = if v & 0x8000 != 0 {
            m.iter()
                .nth(usize::from(v & 0x7FFF) % n)
                .expect("n-th admitted id")
        } else {
            u32::from(v) * 5
        };
        if m.allows(id) {
            c.accept(id).expect("an admitted id is accepted");
            steps += 1;
        } else {
            let before = c.boxed_clone();
            if c.accept(id).is_err() {
                // Unchanged: the same mask as a copy taken before.
                let mut b = before;
                b.mask(remaining, &mut m2);
                c.mask(remaining, &mut m);
                assert!(m == m2, "a refused id changed the state");
            } else {
                steps += 1;
            }
        }
    }
});

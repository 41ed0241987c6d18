//! The mask computation of structured output alone (issue 25, `src/constrain/`), per step,
//! for three schemas over the real 163,840-id vocabulary: a flat object of bounded fields, a
//! recursive tree (`$ref`), and a reply with a tool call (the XTML grammar). For each, a
//! seeded walk picks admitted ids (half the time the lowest, else a random one) and times
//! `Constraint::mask` as the sampler calls it (per-state cache on), then again on a fresh
//! constraint per step (cold: the whole trie walk). Prints TSV; `--out FILE` writes it with
//! the command and machine in its header.
//!
//! cargo run --release -p k3-bench --bin constrain_mask -- [--steps N] [--out FILE]

use std::sync::Arc;
use std::time::Instant;

use k3::constrain::{
    self, Constraint, JsonStyle, Mask, ReplySpec, Schema, Specials, ToolChoice, Vocabulary,
};
use k3::tokenizer::Tokenizer;
use k3_bench::machine;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn schema(text: &str, style: JsonStyle) -> Arc<Schema> {
    Arc::new(Schema::compile(&k3::json::parse(text.as_bytes()).unwrap(), style).unwrap())
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut steps = 200usize;
    let mut out: Option<String> = None;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--steps" => {
                steps = args[i + 1].parse().expect("--steps N");
                i += 1;
            }
            "--out" => {
                out = Some(args[i + 1].clone());
                i += 1;
            }
            a => panic!("unknown argument {a}"),
        }
        i += 1;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tok =
        Tokenizer::load(&root.join("tests/fixtures/tiny-k3-text")).expect("tokenizer fixture");
    let t0 = Instant::now();
    let vocab = Arc::new(Vocabulary::new(&tok));
    let vocab_s = t0.elapsed().as_secs_f64();
    let sp = Specials::from_tokenizer(&tok).unwrap();

    let flat = schema(
        r#"{"type":"object","properties":{"name":{"type":"string","maxLength":40},"age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string"},"tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":5},"score":{"type":"number","minimum":-100,"maximum":100}},"required":["name","age","email"],"additionalProperties":false}"#,
        JsonStyle::Compact,
    );
    let tree = schema(
        r##"{"$defs":{"node":{"type":"object","properties":{"label":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["label","children"]}},"$ref":"#/$defs/node"}"##,
        JsonStyle::Compact,
    );
    let params = schema(
        r#"{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer","minimum":1,"maximum":50},"filters":{"type":"object","properties":{"lang":{"enum":["en","fr","de"]},"since":{"type":"string","pattern":"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}}}},"required":["query"]}"#,
        JsonStyle::Template,
    );
    let spec = ReplySpec {
        thinking: false,
        response: None,
        tools: vec![("search".into(), params.clone()), ("fetch".into(), params)],
        tool_choice: ToolChoice::Required,
    };
    type Make<'a> = Box<dyn Fn() -> Box<dyn Constraint> + 'a>;
    let cases: Vec<(&str, Make)> = vec![
        (
            "flat_object",
            Box::new(|| constrain::plain(flat.clone(), vocab.clone(), &[sp.eos])),
        ),
        (
            "recursive_tree",
            Box::new(|| constrain::plain(tree.clone(), vocab.clone(), &[sp.eos])),
        ),
        (
            "tool_call_reply",
            Box::new(|| constrain::reply(&spec, vocab.clone(), &sp).unwrap()),
        ),
    ];
    let mut rows = vec![format!(
        "case\tsteps\tcached_mean_ms\tcached_p50_ms\tcached_max_ms\tcold_mean_ms\tcold_p50_ms\tcold_max_ms\tadmitted_mean"
    )];
    for (name, make) in &cases {
        let mut c = make();
        let mut rng = Rng(42);
        let mut mask = Mask::new(vocab.size());
        let mut ids = Vec::new();
        let (mut warm, mut cold) = (Vec::new(), Vec::new());
        let mut admitted = 0usize;
        while ids.len() < steps && !c.is_complete() {
            let remaining = Some(steps - ids.len());
            // Cold: a fresh constraint at the same point (empty cache).
            let mut fresh = make();
            for &id in &ids {
                fresh.accept(id).unwrap();
            }
            let t = Instant::now();
            fresh.mask(remaining, &mut mask);
            cold.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            c.mask(remaining, &mut mask);
            warm.push(t.elapsed().as_secs_f64() * 1e3);
            let n = mask.count();
            admitted += n;
            let pick = if rng.next() % 2 == 0 {
                0
            } else {
                (rng.next() % n as u64) as usize
            };
            let id = mask.iter().nth(pick).unwrap();
            c.accept(id).unwrap();
            ids.push(id);
        }
        let n = warm.len();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let row = format!(
            "{name}\t{n}\t{:.3}\t{:.3}\t{:.3}\t{:.3}\t{:.3}\t{:.3}\t{}",
            mean(&warm),
            pct(&mut warm.clone(), 0.5),
            warm.iter().cloned().fold(0.0, f64::max),
            mean(&cold),
            pct(&mut cold.clone(), 0.5),
            cold.iter().cloned().fold(0.0, f64::max),
            admitted / n.max(1)
        );
        eprintln!("{row}");
        rows.push(row);
    }
    let mut text = String::new();
    text.push_str(&format!(
        "# command: cargo run --release -p k3-bench --bin constrain_mask -- {}\n",
        args[1..].join(" ")
    ));
    for (k, v) in machine::describe() {
        text.push_str(&format!("# {k}: {v}\n"));
    }
    text.push_str(&format!(
        "# loadavg: {} (the machine is shared by several builds: times are upper bounds)\n",
        machine::loadavg()
    ));
    text.push_str(&format!("# vocabulary trie built in {:.3} s; times are Constraint::mask per step in ms, one thread\n", vocab_s));
    for r in rows {
        text.push_str(&r);
        text.push('\n');
    }
    match out {
        Some(p) => std::fs::write(&p, text).expect("write --out"),
        None => print!("{text}"),
    }
}

//! Constraints in the session (ENGINE.md §8 "Constraints", issue 25): a hand-written
//! constraint on tests/fixtures/tiny-k3 (random weights, so only the mask makes the ids fit
//! it). Every chosen id is admitted; greedy is the lowest id among the maxima of the admitted
//! logits; a mask of one id forces it; the ids are the same bits alone, in a batch of three,
//! under speculation (`--spec 4`, drafts checked on a copy) and after a snapshot + restore.

use super::session::{opts, prompt, session, Tiny};
use k3::constrain::{Constraint, Mask, Rejected};
use k3::generate::batch::{run_batch, BatchItem};
use k3::generate::guide::Constraints;
use k3::generate::session::StepEvent;

/// Admits, at step k, the ids ≡ k (mod 5) below 200 (ids ≥ 200 never) for `len` ids; then
/// only `end`. A bounded output: after `len` ids it is complete.
#[derive(Debug, Clone)]
struct Stride {
    len: usize,
    end: u32,
    k: usize,
}

impl Constraint for Stride {
    fn mask(&mut self, _remaining: Option<usize>, m: &mut Mask) {
        if self.k >= self.len {
            m.set(self.end);
            return;
        }
        for id in (0..200u32).filter(|id| *id as usize % 5 == self.k % 5) {
            m.set(id);
        }
    }
    fn accept(&mut self, id: u32) -> Result<(), Rejected> {
        let ok = if self.k >= self.len {
            id == self.end
        } else {
            id < 200 && id as usize % 5 == self.k % 5
        };
        if !ok {
            return Err(Rejected {
                id,
                reason: format!("step {}", self.k),
            });
        }
        self.k += 1;
        Ok(())
    }
    fn is_complete(&self) -> bool {
        self.k >= self.len
    }
    fn boxed_clone(&self) -> Box<dyn Constraint> {
        Box::new(self.clone())
    }
}

fn stride(len: usize) -> Box<dyn Constraint> {
    Box::new(Stride { len, end: 7, k: 0 })
}

/// (generated ids, logits hash, the logits each id was chosen from) of one constrained run.
fn run(
    sess: &mut Tiny,
    p: &[u32],
    t: f64,
    seed: u64,
    len: usize,
) -> (Vec<u32>, u64, Vec<Vec<f32>>) {
    let mut s = sess.sequence(p, 64, opts(t, seed, 20, vec![7])).unwrap();
    s.set_constraints(vec![stride(len)]);
    sess.prefill(&mut s, None, &mut |_| Ok(())).unwrap();
    let mut from = Vec::new();
    let mut cur = s.logits().to_vec();
    while s.active() {
        sess.step(&mut [&mut s], &mut |ev| {
            match ev {
                StepEvent::Chosen(..) => from.push(cur.clone()),
                StepEvent::Logits(_, l) => cur = l.to_vec(),
            }
            Ok(())
        })
        .unwrap();
    }
    (s.generated().to_vec(), s.logits_hash(), from)
}

#[test]
fn every_id_is_admitted_and_greedy_is_the_lowest_admitted_maximum() {
    let mut sess = session(2);
    for (t, seed) in [(0.0, 0), (0.9, 3), (1.5, 11)] {
        let (ids, _, from) = run(&mut sess, &prompt(9, 1), t, seed, 12);
        assert_eq!(ids.len(), 13, "{ids:?}");
        for (k, &id) in ids.iter().enumerate() {
            if k < 12 {
                assert!(id < 200 && id as usize % 5 == k % 5, "step {k}: {id}");
            } else {
                assert_eq!(id, 7, "the end id once complete");
            }
        }
        if t == 0.0 {
            for (k, (&id, z)) in ids.iter().zip(&from).enumerate().take(12) {
                let best = (0..200u32)
                    .filter(|i| *i as usize % 5 == k % 5)
                    .fold(None::<u32>, |b, i| match b {
                        Some(b) if z[i as usize] <= z[b as usize] => Some(b),
                        _ => Some(i),
                    })
                    .unwrap();
                assert_eq!(id, best, "step {k}");
            }
        }
    }
}

#[test]
fn constrained_ids_are_the_same_in_a_batch_under_speculation_and_after_restore() {
    let mut sess = session(2);
    let cases: Vec<(Vec<u32>, f64, u64, usize)> = vec![
        (prompt(9, 1), 0.0, 0, 12),
        (prompt(5, 2), 0.9, 3, 6),
        (prompt(14, 3), 1.2, 9, 15),
    ];
    let alone: Vec<_> = cases
        .iter()
        .map(|(p, t, s, n)| run(&mut sess, p, *t, *s, *n))
        .collect();
    // a batch of three, two at a time
    let items = cases
        .iter()
        .enumerate()
        .map(|(i, (p, t, s, n))| BatchItem {
            index: i as u64,
            prompt: p.clone(),
            capacity: 64,
            opts: opts(*t, *s, 20, vec![7]),
            constraints: Constraints::one(stride(*n)),
        })
        .collect();
    let mut got = vec![None; 3];
    run_batch(&mut sess, items, 2, &mut |i, s| {
        let s = s.unwrap();
        got[i as usize] = Some((s.generated().to_vec(), s.logits_hash()));
        Ok(())
    })
    .unwrap();
    for (a, g) in alone.iter().zip(&got) {
        assert_eq!(Some((a.0.clone(), a.1)), *g);
    }
    // speculation: four drafted rows at most, each verified under its own mask
    sess.spec.max_draft = 4;
    for ((p, t, s, n), a) in cases.iter().zip(&alone) {
        let r = run(&mut sess, p, *t, *s, *n);
        assert_eq!((r.0, r.1), (a.0.clone(), a.1));
    }
    sess.spec.max_draft = 0;
    // a snapshot mid-way carries the constraint's position
    let (p, t, seed, n) = &cases[1];
    let mut s = sess.sequence(p, 64, opts(*t, *seed, 20, vec![7])).unwrap();
    s.set_constraints(vec![stride(*n)]);
    sess.prefill(&mut s, None, &mut |_| Ok(())).unwrap();
    for _ in 0..3 {
        sess.step(&mut [&mut s], &mut |_| Ok(())).unwrap();
    }
    let snap = s.snapshot();
    while s.active() {
        sess.step(&mut [&mut s], &mut |_| Ok(())).unwrap();
    }
    let mut r = sess.sequence(p, 64, opts(*t, *seed, 20, vec![7])).unwrap();
    r.restore(&snap).unwrap();
    while r.active() {
        sess.step(&mut [&mut r], &mut |_| Ok(())).unwrap();
    }
    assert_eq!(r.generated(), s.generated());
    assert_eq!(s.generated(), &alone[1].0[..]);
}

/// The ids of an earlier run replayed into the constraint (a resumed state) continue it
/// where it stood; ids it never admitted are refused naming the index.
#[test]
fn replayed_constraints_continue_and_refuse_foreign_ids() {
    let sess = session(1);
    let p = prompt(9, 4);
    let mut s = sess.sequence(&p, 64, opts(0.0, 0, 20, vec![7])).unwrap();
    assert!(s.set_constraints_after(vec![stride(8)], &[0, 1, 2]).is_ok());
    let e = s
        .set_constraints_after(vec![stride(8)], &[0, 2])
        .unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.message.contains("generated id 1 (2)"), "{}", e.message);
    assert!(!s.constraints_complete());
}

// ---- `k3 run --json-schema` end to end on tests/fixtures/tiny-k3-text ----

use crate::support::{fixture, run_k3, scratch_dir};

/// A schema of every kind at once: nested object, bounded array, enum, anyOf, bounded
/// integer and number, maxLength string, a `$ref` recursion.
const SCHEMA: &str = r##"{"$defs": {"node": {"type": "object", "additionalProperties": false,
  "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                 "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
  "required": ["v", "kids"]}},
 "type": "object", "additionalProperties": false,
 "properties": {"name": {"type": "string", "maxLength": 6},
                "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
                "x": {"anyOf": [{"type": "number", "minimum": -2, "maximum": 3.5}, {"type": "null"}]},
                "tree": {"$ref": "#/$defs/node"}},
 "required": ["name", "tags", "x", "tree"]}"##;

fn text_model() -> String {
    fixture("tiny-k3-text").to_str().unwrap().to_string()
}

/// (stdout, report) of a successful run.
fn run_ok(args: &[&str], name: &str) -> (String, serde_json::Value) {
    let dir = scratch_dir(&format!("constrained-{name}"));
    let out = dir.join("o.json");
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["--out", out.to_str().unwrap(), "--no-progress"]);
    let o = run_k3(&a);
    let se = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "k3 {a:?} failed:\n{se}");
    let rep = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    (String::from_utf8_lossy(&o.stdout).to_string(), rep)
}

/// The generated text parses as JSON and has the schema's shape (the Python test validates
/// with the `jsonschema` package; this checks the keys and bounds by hand).
fn check_shape(text: &str) {
    let text = text.strip_suffix('\n').unwrap_or(text);
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let o = v.as_object().unwrap();
    assert!(o["name"].as_str().unwrap().chars().count() <= 6, "{text}");
    let tags = o["tags"].as_array().unwrap();
    assert!((1..=3).contains(&tags.len()), "{text}");
    assert!(tags
        .iter()
        .all(|t| ["a", "b", "c"].contains(&t.as_str().unwrap())));
    assert!(
        o["x"].is_null() || (-2.0..=3.5).contains(&o["x"].as_f64().unwrap()),
        "{text}"
    );
    fn node(n: &serde_json::Value) {
        assert!(n["v"].as_u64().unwrap() <= 9);
        let k = n["kids"].as_array().unwrap();
        assert!(k.len() <= 2);
        k.iter().for_each(node);
    }
    node(&o["tree"]);
    assert_eq!(o.len(), 4, "{text}");
    assert!(!text.contains(['\n', '\t']), "no whitespace: {text}");
}

#[test]
fn run_json_schema_is_valid_and_the_same_under_spec_batch_and_resume() {
    let m = text_model();
    let dir = scratch_dir("constrained-run");
    let schema = dir.join("schema.json");
    std::fs::write(&schema, SCHEMA).unwrap();
    let s = schema.to_str().unwrap();
    let settings: [&[&str]; 2] = [
        &[],
        &["--temperature", "0.9", "--top-p", "0.95", "--seed", "7"],
    ];
    for (i, smp) in settings.iter().enumerate() {
        let mut a = vec![
            m.as_str(),
            "--prompt",
            "JSON please:",
            "--gen",
            "300",
            "--json-schema",
            s,
        ];
        a.extend_from_slice(smp);
        let (text, rep) = run_ok(&a, &format!("plain-{i}"));
        assert_eq!(rep["stop_reason"], "end_of_turn", "{rep}");
        check_shape(&text);
        // speculation: the same ids and logits hash
        let mut b = a.clone();
        b.extend(["--spec", "4"]);
        let (t2, r2) = run_ok(&b, &format!("spec-{i}"));
        assert_eq!(
            (t2, &r2["generated_ids"], &r2["logits_hash"]),
            (text.clone(), &rep["generated_ids"], &rep["logits_hash"])
        );
        // resume: 20 ids, saved, then the rest from the state. The closing rule saw 20 ids
        // left, so the head need not be the uninterrupted run's; the constraint replayed over
        // it goes on where it stood, and the whole is valid JSON of the schema.
        let st = dir.join(format!("s{i}.state"));
        let mut c: Vec<&str> = a.clone();
        c[4] = "20";
        c.extend(["--save-state", st.to_str().unwrap()]);
        let (_, r1) = run_ok(&c, &format!("head-{i}"));
        let mut d = vec![
            m.as_str(),
            "--load-state",
            st.to_str().unwrap(),
            "--gen",
            "280",
            "--json-schema",
            s,
        ];
        d.extend_from_slice(smp);
        let (_, r3) = run_ok(&d, &format!("tail-{i}"));
        assert_eq!(r3["stop_reason"], "end_of_turn");
        let mut ids: Vec<String> = Vec::new();
        for r in [&r1, &r3] {
            ids.extend(
                r["generated_ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_string()),
            );
        }
        ids.pop(); // the end id
        let o = run_k3(["detokenize", "--tok", m.as_str(), "--ids", &ids.join(",")]);
        assert!(o.status.success());
        check_shape(&String::from_utf8_lossy(&o.stdout));
    }
    // a batch of the two settings, two at a time: each line as alone
    let batch = dir.join("b.jsonl");
    std::fs::write(&batch, "{\"prompt\": \"JSON please:\", \"gen\": 300}\n{\"prompt\": \"JSON please:\", \"gen\": 300, \"temperature\": 0.9, \"top_p\": 0.95, \"seed\": 7}\n").unwrap();
    let (out, _) = run_ok(
        &[
            m.as_str(),
            "--batch",
            batch.to_str().unwrap(),
            "--parallel",
            "2",
            "--json-schema",
            s,
        ],
        "batch",
    );
    for (i, line) in out.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let mut a = vec![
            m.as_str(),
            "--prompt",
            "JSON please:",
            "--gen",
            "300",
            "--json-schema",
            s,
        ];
        a.extend_from_slice(settings[i]);
        let (text, rep) = run_ok(&a, &format!("alone-{i}"));
        assert_eq!(v["generated_ids"], rep["generated_ids"], "line {i}");
        // the line's text is the JSON alone, as a run prints it (no end id's text)
        let t = v["generated_text"].as_str().unwrap();
        assert_eq!(t, text.trim_end(), "line {i}");
        serde_json::from_str::<serde_json::Value>(t)
            .unwrap_or_else(|e| panic!("line {i}: not JSON: {t:?}: {e}"));
    }
}

#[test]
fn a_schema_the_engine_cannot_enforce_is_exit_2_naming_file_and_keyword() {
    let m = text_model();
    let dir = scratch_dir("constrained-bad");
    for (body, word) in [
        (
            r#"{"type": "object", "properties": {"a": {"type": "frobnicate"}}}"#,
            "type",
        ),
        (r##"{"$ref": "#/$defs/none"}"##, "$ref"),
        ("[1, 2", "invalid JSON"),
    ] {
        let p = dir.join("s.json");
        std::fs::write(&p, body).unwrap();
        let o = run_k3([
            m.as_str(),
            "--prompt",
            "x",
            "--json-schema",
            p.to_str().unwrap(),
        ]);
        let se = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{se}");
        assert!(
            se.contains(p.to_str().unwrap()) && se.contains(word),
            "{word}: {se}"
        );
    }
}

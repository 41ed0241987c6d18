//! The turns of `k3 chat` continue one sequence (ENGINE.md §9): the second turn prefills
//! only its new ids and its logits are bit-identical to one run over the concatenated ids;
//! `/undo` restores the snapshot before the last exchange, so the same turn again gives the
//! same answer under the same seed; `/save` + `/load` continue the conversation in another
//! process with the same answer.

use super::{chat, ids, model};
use crate::support::run_k3;
use k3::json::Value;

const SAMPLED: &[&str] = &["--max-reply", "6", "--seed", "7", "--ctx", "300"];

/// `k3 run` over `ids` with the chat's sampling defaults and seed 7: (generated ids,
/// per-step logits hashes).
fn one_run(ids: &[u32], gen: usize, dir: &std::path::Path) -> (Vec<u32>, Vec<String>) {
    let out = dir.join("run.json");
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    let o = run_k3([
        model().as_str(),
        "--ids",
        &list.join(","),
        "--gen",
        &gen.to_string(),
        "--temperature",
        "1",
        "--top-p",
        "0.95",
        "--seed",
        "7",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rep = k3::json::parse(&std::fs::read(&out).unwrap()).unwrap();
    let steps = rep.get("steps").and_then(Value::as_array).unwrap();
    (
        ids_of(&rep, "generated_ids"),
        steps
            .iter()
            .map(|s| {
                s.get("logits_fnv1a64")
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect(),
    )
}

fn ids_of(v: &Value, key: &str) -> Vec<u32> {
    ids(v, key)
}

fn hashes(v: &Value) -> Vec<String> {
    v.get("logits_fnv1a64")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_string())
        .collect()
}

fn prefilled(v: &Value) -> usize {
    v.get("prefilled")
        .unwrap()
        .as_number()
        .unwrap()
        .as_u64()
        .unwrap() as usize
}

#[test]
fn second_turn_prefills_only_new_ids_and_matches_one_run() {
    let c = chat(
        "chat-two-turns",
        SAMPLED,
        "Hello there\nWhat is the capital of France?\n",
        None,
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let (r, inputs) = (c.replies(), c.inputs());
    assert_eq!((r.len(), inputs.len()), (2, 2), "{}", c.stderr());
    // the first turn runs its whole prompt; the second its input and the id the first
    // chose last but did not run
    assert_eq!(prefilled(r[0]), inputs[0].len());
    assert_eq!(prefilled(r[1]), inputs[1].len() + 1);
    assert!(
        c.stderr().contains(&format!(
            "[turn 2: prefilled {} new ids",
            inputs[1].len() + 1
        )),
        "{}",
        c.stderr()
    );
    let mut all = inputs[0].clone();
    all.extend(ids_of(r[0], "ids"));
    all.extend(&inputs[1]);
    let second = ids_of(r[1], "ids");
    let (gen, steps) = one_run(&all, second.len(), &c.dir);
    assert_eq!(gen, second, "the second turn's ids");
    assert_eq!(steps, hashes(r[1]), "the second turn's logits");
}

#[test]
fn undo_then_the_same_turn_gives_the_same_answer() {
    let c = chat(
        "chat-undo",
        SAMPLED,
        "Hello there\nName a colour\n/undo\nName a colour\n",
        None,
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let r = c.replies();
    assert_eq!(r.len(), 3, "{}", c.stderr());
    assert_eq!(ids_of(r[1], "ids"), ids_of(r[2], "ids"));
    assert_eq!(hashes(r[1]), hashes(r[2]));
    // restored from the snapshot: again only the new ids run
    assert_eq!(prefilled(r[1]), prefilled(r[2]));
    let inputs = c.inputs();
    assert_eq!(inputs[1], inputs[2]);
    // the answer printed twice, the same
    let out = c.stdout();
    let answers: Vec<&str> = out.split("</think>\n").collect();
    assert_eq!(answers.len(), 4, "{out}");
}

#[test]
fn undo_past_the_snapshot_runs_the_history_again_with_the_same_logits() {
    let c = chat(
        "chat-undo-deep",
        SAMPLED,
        "one\ntwo\nthree\n/undo\n/undo\ntwo\n",
        None,
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let r = c.replies();
    assert_eq!(r.len(), 4);
    assert_eq!(ids_of(r[1], "ids"), ids_of(r[3], "ids"));
    assert_eq!(hashes(r[1]), hashes(r[3]));
    // the ids before it are run again: the first turn's too
    let inputs = c.inputs();
    assert_eq!(
        prefilled(r[3]),
        inputs[0].len() + ids_of(r[0], "ids").len() + inputs[3].len()
    );
}

#[test]
fn save_and_load_continue_the_conversation() {
    let whole = chat("chat-whole", SAMPLED, "Hello there\nAnd then?\n", None);
    assert_eq!(whole.code(), 0, "{}", whole.stderr());
    let first = chat("chat-save", SAMPLED, "Hello there\n/save s.state\n", None);
    assert_eq!(first.code(), 0, "{}", first.stderr());
    assert!(first.dir.join("s.state").is_file() && first.dir.join("s.state.json").is_file());
    let t = k3::json::parse(&std::fs::read(first.dir.join("s.state.json")).unwrap()).unwrap();
    assert_eq!(t.get("thinking").unwrap().as_str(), Some("max"));
    let s = t.get("sampler").unwrap();
    assert_eq!(
        s.get("seed").unwrap().as_number().unwrap().as_u64(),
        Some(7)
    );
    assert_eq!(s.get("top_p").unwrap().as_number().unwrap().as_f64(), 0.95);
    let state = first.dir.join("s.state");
    let load = format!("/load {}\nAnd then?\n", state.display());
    let second = chat("chat-load", SAMPLED, &load, None);
    assert_eq!(second.code(), 0, "{}", second.stderr());
    let (w, l) = (whole.replies(), second.replies());
    assert_eq!(ids_of(w[1], "ids"), ids_of(l[0], "ids"));
    assert_eq!(hashes(w[1]), hashes(l[0]));
    assert_eq!(prefilled(w[1]), prefilled(l[0]));
}

#[test]
fn messages_file_is_answered_then_the_lines() {
    let dir = crate::support::scratch_dir("chat-messages-src");
    let f = dir.join("m.json");
    std::fs::write(
        &f,
        r#"{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "reasoning_effort": "low"}"#,
    )
    .unwrap();
    let c = chat(
        "chat-messages",
        &[
            "--max-reply",
            "3",
            "--seed",
            "1",
            "--ctx",
            "300",
            "--messages",
            f.to_str().unwrap(),
        ],
        "more\n",
        None,
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let want = super::template_ids(
        r#"{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "reasoning_effort": "low"}"#,
        None,
        true,
    );
    assert_eq!(c.inputs()[0], want);
    assert_eq!(c.replies().len(), 2);
    // the history starts with the chat's settings and the file's messages, then the turns
    let role = |i: usize| super::s(&c.history[i], "role");
    assert_eq!(super::s(&c.history[0], "command"), "chat");
    assert_eq!(super::s(&c.history[0], "thinking"), "low");
    assert_eq!(
        (role(1), super::s(&c.history[1], "content")),
        ("system", "Be brief.")
    );
    assert_eq!(
        (role(2), super::s(&c.history[2], "content")),
        ("user", "Hi")
    );
    assert_eq!(role(3), "prompt");
    assert!(c.history[1].get("turn").is_none() && c.history[3].get("turn").is_some());
    let more = c.history.iter().find(|l| super::s(l, "content") == "more");
    assert_eq!(
        more.and_then(|l| l.get("turn")).map(Value::to_json),
        Some("2".into())
    );
}

/// Blank lines (a stray Enter, the gaps of a piped file) are no message: only the one line of
/// text is answered (each blank line was sent as an empty turn).
#[test]
fn blank_lines_are_not_messages() {
    let c = chat(
        "chat-blank-lines",
        SAMPLED,
        "\n  \nHello there\n\n\t\n",
        None,
    );
    assert_eq!(c.code(), 0, "{}", c.stderr());
    assert_eq!(c.replies().len(), 1, "{}", c.stderr());
    assert_eq!(c.inputs().len(), 1);
}

/// `--prefix-cache DIR`: a second chat process starts the same conversation from the state
/// file the first wrote (turn 1 prefills the pending id alone) and answers with the same ids.
#[test]
fn a_prefix_cache_carries_the_prompt_across_processes() {
    let cache = crate::support::scratch_dir("chat-prefix-cache-dir");
    let c = cache.to_str().unwrap();
    let mut args = SAMPLED.to_vec();
    args.extend([
        "--system",
        "You are a careful assistant.",
        "--prefix-cache",
        c,
    ]);
    let first = chat(
        "chat-prefix-cache-1",
        &args,
        "Hello there\nAnd more\n",
        None,
    );
    assert_eq!(first.code(), 0, "{}", first.stderr());
    assert!(
        first.stderr().contains("[turn 1: prefilled"),
        "{}",
        first.stderr()
    );
    let files = std::fs::read_dir(&cache).unwrap().count();
    assert!(files >= 1, "no state file written");
    let second = chat(
        "chat-prefix-cache-2",
        &args,
        "Hello there\nAnd more\n",
        None,
    );
    assert_eq!(second.code(), 0, "{}", second.stderr());
    assert!(
        second.stderr().contains("[turn 1: prefilled 1 new ids"),
        "{}",
        second.stderr()
    );
    let replies =
        |c: &super::Chat| -> Vec<Vec<u32>> { c.replies().iter().map(|r| ids(r, "ids")).collect() };
    assert_eq!(replies(&first), replies(&second));
    assert_eq!(first.stdout(), second.stdout());
}

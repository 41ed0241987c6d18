//! `k3 chat --spec K` (issue 15 item 4, ENGINE.md §10): speculation changes no answer. The
//! same turns, with `/undo` and the turn again, give the same ids and per-id logits hashes
//! with `--spec` 1, 4 and 8 as without, greedy and sampled, on the model's own replies and on
//! a forced reply that repeats the user's text (drafts accepted).

use super::{chat, ids, text_ids, Chat};
use k3::json::Value;

const INPUT: &str =
    "the cat sat on the mat. the cat sat on the mat.\nName a colour\n/undo\nName a colour\n";

/// Each reply's ids and per-id logits hashes.
type Replies = Vec<(Vec<u32>, Value)>;

/// Each reply's ids and per-id logits hashes, and each turn's input ids.
fn turns(c: &Chat) -> (Replies, Vec<Vec<u32>>) {
    assert_eq!(c.code(), 0, "{}", c.stderr());
    let r = c
        .replies()
        .into_iter()
        .map(|v| (ids(v, "ids"), v.get("logits_fnv1a64").unwrap().clone()))
        .collect();
    (r, c.inputs())
}

#[test]
fn every_spec_gives_the_turns_of_chat_without_it() {
    let repeat = text_ids("the cat sat on the mat. the cat sat on the mat. the cat sat on the");
    for (si, sampling) in [["--temperature", "0"], ["--seed", "7"]].iter().enumerate() {
        for (fi, force) in [None, Some(&repeat[..])].into_iter().enumerate() {
            let mut args = vec!["--max-reply", "20", "--ctx", "400"];
            args.extend(sampling);
            let want = turns(&chat(&format!("chat-spec-{si}{fi}-0"), &args, INPUT, force));
            assert_eq!(want.0.len(), 3);
            for k in ["1", "4", "8"] {
                let mut a = args.clone();
                a.extend(["--spec", k]);
                let got = turns(&chat(&format!("chat-spec-{si}{fi}-{k}"), &a, INPUT, force));
                assert!(
                    got == want,
                    "--spec {k} {sampling:?} force {fi}: the turns differ"
                );
            }
        }
    }
}

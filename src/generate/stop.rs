//! Stop rules of a generating sequence (ENGINE.md §3, TOKENIZER.md §11): the end-of-turn ids,
//! `--stop-id`, `--stop TEXT` matched on the streamed generated text (held back until it cannot
//! begin a stop string, so TEXT itself is never printed), `--gen` and `--ctx`; and the
//! [`StopReason`] a run reports as `stop_reason` (FORMATS.md §10).

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// Why a sequence stopped: the values of the report's and batch lines' `stop_reason`
/// (FORMATS.md §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// `--gen` ids were generated.
    Length,
    /// An end-of-turn id: `[EOS]` or `<|end_of_msg|>` (TOKENIZER.md §11), or without a
    /// tokenizer the config's `eos_token_id`.
    EndOfTurn,
    /// An id named by `--stop-id`.
    StopId,
    /// The generated text contains a `--stop` string.
    StopText,
    /// The sequence reached `--ctx` positions.
    Context,
    /// A step failed.
    Error,
}

impl StopReason {
    /// The name written as `stop_reason`: `length`, `end_of_turn`, `stop_id`, `stop_text`,
    /// `context` or `error`.
    pub fn name(self) -> &'static str {
        match self {
            StopReason::Length => "length",
            StopReason::EndOfTurn => "end_of_turn",
            StopReason::StopId => "stop_id",
            StopReason::StopText => "stop_text",
            StopReason::Context => "context",
            StopReason::Error => "error",
        }
    }
}

/// The end ids of a run (ENGINE.md §3 `--stop-id`): with a tokenizer `[EOS]` and
/// `<|end_of_msg|>` (those it defines); without one, the config's `eos_token_id` when it is
/// below `vocab_size`.
pub fn end_ids(tok: Option<&Tokenizer>, eos_token_id: Option<u64>, vocab_size: usize) -> Vec<u32> {
    match tok {
        Some(t) => t.end_of_turn_ids(),
        None => eos_token_id
            .filter(|&e| e < vocab_size as u64)
            .map(|e| vec![e as u32])
            .unwrap_or_default(),
    }
}

/// The stop rules shared by the sequences of a run, validated once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopRules {
    end_ids: Vec<u32>,
    stop_ids: Vec<u32>,
    stop_texts: Vec<String>,
    gen: u64,
    ctx: u64,
}

impl StopRules {
    /// Rules for `gen` generated ids at most (`--gen`), `ctx` ids at most in the whole
    /// sequence (`--ctx`, prompt included), the run's `end_ids` ([`end_ids`]), the
    /// `--stop-id` values and the `--stop` strings.
    ///
    /// Errors (exit 2): a `--stop-id` ≥ `vocab_size` or an empty `--stop`, naming the flag.
    pub fn new(
        end_ids: Vec<u32>,
        stop_ids: Vec<u32>,
        stop_texts: Vec<String>,
        gen: u64,
        ctx: u64,
        vocab_size: usize,
    ) -> Result<StopRules> {
        if let Some(&id) = stop_ids.iter().find(|&&i| i as usize >= vocab_size) {
            return Err(Error::invalid(format!(
                "flag `--stop-id {id}`: id out of range; the vocabulary has {vocab_size} ids \
                 (0..{vocab_size})"
            )));
        }
        if stop_texts.iter().any(|s| s.is_empty()) {
            return Err(Error::invalid(
                "flag `--stop \"\"`: a stop string must not be empty; give the text to stop at",
            ));
        }
        Ok(StopRules {
            end_ids,
            stop_ids,
            stop_texts,
            gen,
            ctx,
        })
    }

    /// The `--stop` strings.
    pub fn stop_texts(&self) -> &[String] {
        &self.stop_texts
    }

    /// `--gen`: ids to generate at most.
    pub fn gen(&self) -> u64 {
        self.gen
    }

    /// `--ctx`: ids the whole sequence may hold (prompt + generated).
    pub fn ctx(&self) -> u64 {
        self.ctx
    }

    /// Checks a prompt of `prompt_len` ids against `--ctx`.
    ///
    /// Errors (exit 2): the prompt is longer than `--ctx`, naming both.
    pub fn check_prompt(&self, prompt_len: u64) -> Result<()> {
        if prompt_len > self.ctx {
            return Err(Error::invalid(format!(
                "flag `--ctx {}`: the prompt has {prompt_len} ids, more than the context; \
                 give --ctx {prompt_len} or more",
                self.ctx
            )));
        }
        Ok(())
    }

    /// Checks `--ctx` against the config's `max_position_embeddings` (when it has one).
    ///
    /// Errors (exit 2): `--ctx` above it, naming both.
    pub fn check_ctx_limit(&self, max_position_embeddings: Option<u64>) -> Result<()> {
        match max_position_embeddings {
            Some(m) if self.ctx > m => Err(Error::invalid(format!(
                "flag `--ctx {}`: above the config's max_position_embeddings {m}; give --ctx {m} \
                 or less",
                self.ctx
            ))),
            _ => Ok(()),
        }
    }

    /// Why a sequence of `len` ids stops before choosing any id: `--gen 0` (`length`), or the
    /// prompt already fills `--ctx` (`context`).
    pub fn before_first(&self, len: u64) -> Option<StopReason> {
        if self.gen == 0 {
            Some(StopReason::Length)
        } else if len >= self.ctx {
            Some(StopReason::Context)
        } else {
            None
        }
    }

    /// Why the id-rules stop after `id` was appended as the `generated`-th generated id of a
    /// sequence now holding `len` ids, in the order: end of turn, `--stop-id`, `--gen`, `--ctx`.
    /// The id itself stays generated (TOKENIZER.md §11). `--stop` text is [`StopText`]'s.
    pub fn after_id(&self, id: u32, generated: u64, len: u64) -> Option<StopReason> {
        if self.end_ids.contains(&id) {
            Some(StopReason::EndOfTurn)
        } else if self.stop_ids.contains(&id) {
            Some(StopReason::StopId)
        } else if generated >= self.gen {
            Some(StopReason::Length)
        } else if len >= self.ctx {
            Some(StopReason::Context)
        } else {
            None
        }
    }
}

/// What a [`StopText`] push gives back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    /// Text that can be printed now (never a part of a stop string).
    pub text: String,
    /// Index into the stop strings of the one found (the first to complete in the text;
    /// among those ending together the earliest start, then the first listed), if any: the
    /// sequence stops, and neither it nor what follows it is printed.
    pub stopped: Option<usize>,
}

/// The holdback buffer of `--stop TEXT` for one sequence: the streamed generated text goes
/// in, and comes out only once no stop string can begin in it. Pieces are whole UTF-8 text
/// (the tokenizer's stream decoder never splits a character), so everything released is too.
#[derive(Debug, Clone, Default)]
pub struct StopText {
    stops: Vec<String>,
    held: String,
    done: bool,
}

impl StopText {
    /// A buffer for `stops` (non-empty strings, [`StopRules::new`]); with none, every push
    /// is released at once.
    pub fn new(stops: &[String]) -> StopText {
        StopText {
            stops: stops.to_vec(),
            held: String::new(),
            done: false,
        }
    }

    /// Text held back so far (a suffix that may begin a stop string).
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Appends a piece of generated text. After a stop string was found, pushes release
    /// nothing.
    pub fn push(&mut self, piece: &str) -> Released {
        if self.done {
            return Released {
                text: String::new(),
                stopped: None,
            };
        }
        self.held.push_str(piece);
        if let Some((at, which)) = self.first_match() {
            let text = self.held[..at].to_string();
            self.held.clear();
            self.done = true;
            return Released {
                text,
                stopped: Some(which),
            };
        }
        let keep = self.held_suffix();
        let text = self.held[..keep].to_string();
        self.held.drain(..keep);
        Released {
            text,
            stopped: None,
        }
    }

    /// Releases the held text at the end of generation (no stop string completed).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// The (byte offset, stop index) of the stop string that completes first in `held`
    /// (smallest end, then smallest start, then first listed). Choosing by end makes the
    /// result independent of how the text was split into pieces: the first stop to complete
    /// in the whole text is always among those complete in `held` when it fires.
    fn first_match(&self) -> Option<(usize, usize)> {
        self.stops
            .iter()
            .enumerate()
            .filter_map(|(k, s)| self.held.find(s.as_str()).map(|at| (at + s.len(), at, k)))
            .min()
            .map(|(_, at, k)| (at, k))
    }

    /// Where the held-back suffix starts: the earliest char boundary from which the rest of
    /// `held` is a proper prefix of some stop string (`held.len()` if none).
    fn held_suffix(&self) -> usize {
        let h = self.held.as_str();
        h.char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let rest = &h[i..];
                self.stops
                    .iter()
                    .any(|s| s.len() > rest.len() && s.starts_with(rest))
            })
            .unwrap_or(h.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stops(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Pushes `pieces`; returns (printed text, stop index).
    fn run(st: &[&str], pieces: &[&str]) -> (String, Option<usize>) {
        let mut b = StopText::new(&stops(st));
        let mut out = String::new();
        for p in pieces {
            let r = b.push(p);
            out += &r.text;
            if r.stopped.is_some() {
                return (out, r.stopped);
            }
        }
        out += &b.finish();
        (out, None)
    }

    #[test]
    fn names_are_the_report_values() {
        let all = [
            (StopReason::Length, "length"),
            (StopReason::EndOfTurn, "end_of_turn"),
            (StopReason::StopId, "stop_id"),
            (StopReason::StopText, "stop_text"),
            (StopReason::Context, "context"),
            (StopReason::Error, "error"),
        ];
        for (r, n) in all {
            assert_eq!(r.name(), n);
        }
    }

    #[test]
    fn stop_text_is_never_printed() {
        assert_eq!(
            run(&["END"], &["ab", "cE", "N", "Dxyz"]),
            ("abc".into(), Some(0))
        );
        assert_eq!(run(&["END"], &["abcEND"]), ("abc".into(), Some(0)));
        assert_eq!(run(&["END"], &["abc", "EN", "d"]), ("abcENd".into(), None));
        // Overlapping prefixes: "aab" inside "aaab".
        assert_eq!(run(&["aab"], &["a", "a", "a", "b"]), ("a".into(), Some(0)));
        // Several stop strings: the first to complete wins, whatever the pieces.
        assert_eq!(run(&["xyz", "b"], &["axy", "zb"]), ("a".into(), Some(0)));
        assert_eq!(run(&["bc", "b"], &["abc"]), ("a".into(), Some(1)));
        assert_eq!(run(&["b", "bc"], &["abc"]), ("a".into(), Some(0)));
        assert_eq!(run(&["fé ", "é"], &["café "]), ("caf".into(), Some(1)));
        assert_eq!(
            run(&["fé ", "é"], &["caf", "é", " "]),
            ("caf".into(), Some(1))
        );
        // Ending together: the earlier start (the longer string) cuts more.
        assert_eq!(run(&["b", "ab"], &["xa", "b"]), ("x".into(), Some(1)));
        assert_eq!(run(&["b", "ab"], &["xab"]), ("x".into(), Some(1)));
        assert_eq!(run(&["zz", "c"], &["ab", "c"]), ("ab".into(), Some(1)));
        // No stop strings: everything at once.
        let mut b = StopText::new(&[]);
        assert_eq!(b.push("hello").text, "hello");
    }

    #[test]
    fn holdback_releases_only_what_cannot_begin_a_stop() {
        let mut b = StopText::new(&stops(&["<|im_end|>"]));
        assert_eq!(b.push("Hi <|im").text, "Hi ");
        assert_eq!(b.held(), "<|im");
        assert_eq!(b.push("x").text, "<|imx");
        assert_eq!(b.held(), "");
        assert_eq!(b.push("<").text, "");
        assert_eq!(b.finish(), "<");
    }

    #[test]
    fn utf8_stop_strings_and_text() {
        // "é" is two bytes; the holdback never splits it.
        assert_eq!(run(&["éé"], &["aé", "bé", "é!"]), ("aéb".into(), Some(0)));
        assert_eq!(run(&["éé"], &["aé", "bè", "é!"]), ("aébèé!".into(), None));
        let mut b = StopText::new(&stops(&["日本"]));
        assert_eq!(b.push("x日").text, "x");
        assert_eq!(b.push("x").text, "日x");
        // A stop string sharing a lead byte with the text but not its character.
        assert_eq!(run(&["é"], &["è"]), ("è".into(), None));
        assert_eq!(run(&["🦀!"], &["a🦀", "🦀", "!b"]), ("a🦀".into(), Some(0)));
    }

    #[test]
    fn nothing_after_a_stop() {
        let mut b = StopText::new(&stops(&["x"]));
        assert_eq!(b.push("axb").stopped, Some(0));
        assert_eq!(b.push("more").text, "");
        assert_eq!(b.finish(), "");
    }

    #[test]
    fn id_rules_in_order() {
        let r = StopRules::new(vec![9, 10], vec![3, 9], vec![], 4, 8, 16).unwrap();
        assert_eq!(r.after_id(9, 1, 3), Some(StopReason::EndOfTurn));
        assert_eq!(r.after_id(3, 1, 3), Some(StopReason::StopId));
        assert_eq!(r.after_id(5, 3, 5), None);
        assert_eq!(r.after_id(5, 4, 8), Some(StopReason::Length));
        assert_eq!(r.after_id(5, 2, 8), Some(StopReason::Context));
        assert_eq!(r.before_first(2), None);
        assert_eq!(r.before_first(8), Some(StopReason::Context));
        let g0 = StopRules::new(vec![], vec![], vec![], 0, 8, 16).unwrap();
        assert_eq!(g0.before_first(8), Some(StopReason::Length));
        assert!(r.check_prompt(8).is_ok());
        let e = r.check_prompt(9).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message.starts_with("flag `--ctx 8`:"), "{}", e.message);
        assert!(r.check_ctx_limit(Some(8)).is_ok() && r.check_ctx_limit(None).is_ok());
        let e = r.check_ctx_limit(Some(7)).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message.contains("max_position_embeddings 7"),
            "{}",
            e.message
        );
    }

    #[test]
    fn refusals_name_the_flag() {
        let e = StopRules::new(vec![], vec![16], vec![], 1, 2, 16).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.message.starts_with("flag `--stop-id 16`:"),
            "{}",
            e.message
        );
        let e = StopRules::new(vec![], vec![], stops(&["a", ""]), 1, 2, 16).unwrap_err();
        assert!(
            e.message.starts_with("flag `--stop \"\"`:"),
            "{}",
            e.message
        );
        assert!(StopRules::new(vec![], vec![15], stops(&["a"]), 1, 2, 16).is_ok());
    }

    #[test]
    fn end_ids_with_a_tokenizer_are_eos_and_end_of_msg() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-k3-text");
        let tok = Tokenizer::load(&dir).unwrap();
        let want: Vec<u32> = [crate::tokenizer::EOS, crate::tokenizer::END_OF_MSG]
            .iter()
            .map(|n| tok.special_id(n).unwrap())
            .collect();
        assert_eq!(want.len(), 2);
        // The config's eos_token_id is ignored when a tokenizer is present.
        assert_eq!(end_ids(Some(&tok), Some(0), tok.vocab_size()), want);
    }

    #[test]
    fn end_ids_without_a_tokenizer() {
        assert_eq!(end_ids(None, Some(5), 16), vec![5]);
        assert_eq!(end_ids(None, Some(16), 16), Vec::<u32>::new());
        assert_eq!(end_ids(None, None, 16), Vec::<u32>::new());
    }
}

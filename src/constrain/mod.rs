//! Structured output (ENGINE.md §8 "Constraints", issue 25): JSON Schema → a grammar → token
//! masks, and the reply grammar of the chat template (TOKENIZER.md §10, §11, §13).
//!
//! Pure: knows the tokenizer's byte strings and the template's XTML call syntax, nothing of
//! HTTP, sessions, the model or the sampler (the sampler applies a [`Mask`]).
//!
//! * `mask` — the admitted ids of one step (a bitset);
//! * `vocab` — the vocabulary trie (every rank's bytes; special ids as symbols of their own);
//! * `grammar` — the IR (byte ranges, special ids, calls) with its trim and closing distances;
//! * `pda` — the pushdown automaton running a grammar (sets of stacks);
//! * `walk` — the mask walk of the trie against a state;
//! * `closing` — termination steering (issue 25 item 4);
//! * `schema` — JSON Schema → grammar (the subset of issue 25 item 2; docs/structured-output.md);
//! * `pattern` — the anchored `pattern` subset;
//! * `xtml` — the reply grammar: think, response, tools channel, close, end id.

mod closing;
mod grammar;
mod mask;
mod pattern;
mod pda;
mod schema;
mod vocab;
mod walk;
mod xtml;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use grammar::MAX_NODES;
pub use mask::Mask;
pub use pda::MAX_DEPTH;
pub use schema::{Schema, SchemaError};
pub use vocab::Vocabulary;
pub use xtml::{ReplySpec, Specials, ToolChoice, MAX_CALLS};

use grammar::Grammar;
use pda::{Level, Scratch};
use walk::Walker;

/// How a JSON value is spelled where it is generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JsonStyle {
    /// No whitespace at all (`response_format`, `k3 run --json-schema`).
    Compact,
    /// The template's separators `", "` and `": "` (TOKENIZER.md §10: tool-call argument
    /// values), so a generated call renders back to the same text.
    Template,
}

/// An id the constraint did not admit at this point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The id.
    pub id: u32,
    /// Why, for logs and errors.
    pub reason: String,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "id {} rejected by the constraint: {}",
            self.id, self.reason
        )
    }
}

impl std::error::Error for Rejected {}

/// A constraint on one sequence's generated ids (ENGINE.md §8 "Constraints"). The mask is a
/// pure function of the ids accepted so far (and `remaining`), so every path, batch, resume
/// and speculation computes the same one.
pub trait Constraint: Send + Sync + std::fmt::Debug {
    /// Writes into `mask` (cleared first) the ids that may come next. `remaining` is how many
    /// more ids the request may generate (None: unbounded); near the end of that budget only
    /// the ids after which the output can still close in time are admitted (issue 25 item 4;
    /// `closing.rs` says exactly what). Admits nothing only when complete.
    fn mask(&mut self, remaining: Option<usize>, mask: &mut Mask);
    /// Advances past `id`. Err names why when the id cannot continue the output (the caller
    /// then treats it as a rejected draft or an internal error); the state is then unchanged.
    fn accept(&mut self, id: u32) -> Result<(), Rejected>;
    /// The ids so far are a complete output (nothing more is required or admitted).
    fn is_complete(&self) -> bool;
    /// A copy at the same point: speculation verifies each drafted row on a copy.
    fn boxed_clone(&self) -> Box<dyn Constraint>;
}

/// Masks kept per automaton state (the whole stack set is the key, so a mask is reused only
/// where it is exactly the same; free strings and free text hit on every step).
const CACHE_ENTRIES: usize = 1024;

/// Masks by state key, each with the largest closing distance after an admitted id.
type MaskCache = HashMap<Vec<u32>, (Arc<Mask>, u32)>;

/// What every copy of one constraint shares: the grammar, the vocabulary, the mask cache.
struct Shared {
    g: Grammar,
    vocab: Arc<Vocabulary>,
    cache: Mutex<MaskCache>,
}

/// A [`Constraint`] running a grammar over the vocabulary.
#[derive(Clone)]
pub struct Matcher {
    shared: Arc<Shared>,
    state: Level,
    next: Level,
    sc: Scratch,
    walker: Walker,
}

impl std::fmt::Debug for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher")
            .field("nodes", &self.shared.g.len())
            .field("state", &self.state.key())
            .finish()
    }
}

impl Matcher {
    fn new(g: Grammar, vocab: Arc<Vocabulary>) -> Matcher {
        let state = pda::start(&g);
        Matcher {
            shared: Arc::new(Shared {
                g,
                vocab,
                cache: Mutex::new(HashMap::new()),
            }),
            state,
            next: Level::default(),
            sc: Scratch::default(),
            walker: Walker::default(),
        }
    }

    /// Fewest ids that complete the output from here (bytes and special ids, each one id at
    /// most; `u32::MAX` never happens on a live constraint).
    pub fn closing_distance(&self) -> u32 {
        closing::dist(&self.shared.g, &self.state)
    }
}

impl Constraint for Matcher {
    fn mask(&mut self, remaining: Option<usize>, mask: &mut Mask) {
        let sh = &*self.shared;
        let limit = closing::limit(remaining, closing::dist(&sh.g, &self.state));
        let key = self.state.key();
        let cached = sh
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        let (m, d_max) = match cached {
            Some(c) => c,
            None => {
                let d_max = self.walker.walk(&sh.g, &sh.vocab, &self.state, None, mask);
                let m = Arc::new(mask.clone());
                let mut cache = sh.cache.lock().unwrap_or_else(|p| p.into_inner());
                if cache.len() >= CACHE_ENTRIES {
                    cache.clear();
                }
                cache.insert(key, (m.clone(), d_max));
                (m, d_max)
            }
        };
        match limit {
            // Near the end of the budget: the walk again, keeping only what can still close.
            Some(l) if d_max > l => {
                self.walker
                    .walk(&sh.g, &sh.vocab, &self.state, Some(l), mask);
            }
            _ => mask.copy_from(&m),
        }
    }

    fn accept(&mut self, id: u32) -> Result<(), Rejected> {
        let sh = &*self.shared;
        let reject = |why: &str| {
            Err(Rejected {
                id,
                reason: why.to_string(),
            })
        };
        if sh.vocab.is_special(id) {
            pda::step_special(&sh.g, &self.state, id, &mut self.next, &mut self.sc);
            if self.next.is_dead() {
                return reject("this special id cannot come here");
            }
            std::mem::swap(&mut self.state, &mut self.next);
            return Ok(());
        }
        let Some(bytes) = sh.vocab.token(id) else {
            return reject("not an id of the vocabulary (or a reserved special id)");
        };
        let mut cur = self.state.clone();
        for &b in bytes {
            pda::step_byte(&sh.g, &cur, b, &mut self.next, &mut self.sc);
            if self.next.is_dead() {
                return reject("its bytes cannot continue the output");
            }
            std::mem::swap(&mut cur, &mut self.next);
        }
        self.state = cur;
        Ok(())
    }

    fn is_complete(&self) -> bool {
        self.state.complete && !self.state.has_stacks()
    }

    fn boxed_clone(&self) -> Box<dyn Constraint> {
        Box::new(self.clone())
    }
}

/// Builds the constraint for one reply after the generation prompt of TOKENIZER.md §10
/// (issue 25 item 3): the think channel free when on; the response channel JSON of the
/// schema when `response` is set (else free text); the tools channel per `tool_choice`, each
/// call in the XTML syntax of §10 (declared names, argument keys/types/values from the tool's
/// parameters schema, values JSON with the template's separators, string values raw); then
/// close(`message`) and an end id (§11). Errors name the tool and the keyword.
pub fn reply(
    spec: &ReplySpec,
    vocab: Arc<Vocabulary>,
    specials: &Specials,
) -> Result<Box<dyn Constraint>, SchemaError> {
    let g = xtml::reply_grammar(spec, specials)?;
    Ok(Box::new(Matcher::new(g, vocab)))
}

/// A whole generated text that is exactly one JSON value of the schema (`k3 run
/// --json-schema`, plain prompts), then one of `end_ids`.
pub fn plain(schema: Arc<Schema>, vocab: Arc<Vocabulary>, end_ids: &[u32]) -> Box<dyn Constraint> {
    Box::new(Matcher::new(schema.plain_grammar(end_ids), vocab))
}

#[cfg(test)]
mod tests;

//! What a memory plan is short of (ENGINE.md §4, exit 3), as data: the plan knows the bytes,
//! not the command that asked for them, so it names no flag that only one command has. Each
//! command (`run`, `chat`, `serve`) words the advice in its own flags
//! ([`Shortfall::into_error`]): a run's positions are `--gen` and its prompt, chat's and
//! serve's are `--ctx` (and serve's sequences `--parallel`).

use crate::error::Error;
use crate::units::{gb, gb_pair};
use std::fmt;

/// What the plan had to stay within.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// The budget, by name (`auto`, `mem-gb`, a preset's name): the plan's minimum is above it.
    Budget(String),
    /// The memory available on the machine (or in its cgroup): the whole plan is above it.
    Available,
}

/// A plan that does not fit (exit 3): `needed` bytes against `available` bytes of the
/// [`Limit`], with the parts that make up the need. `kda_state` (per sequence) and
/// `mla_cache` (per position) are what fewer sequences or positions save, the parts a
/// command's advice is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    /// Bytes the plan needs (its minimum for [`Limit::Budget`], its total for
    /// [`Limit::Available`]).
    pub needed: u64,
    /// Bytes of the limit.
    pub available: u64,
    /// What `available` is.
    pub limit: Limit,
    /// The budget-dependent parts (trunk, tables, experts), bytes each, in the order named.
    pub parts: Vec<(&'static str, u64)>,
    /// Bytes of the KDA recurrent state (grows with the sequences).
    pub kda_state: u64,
    /// Bytes of the MLA KV cache (grows with the positions and the sequences).
    pub mla_cache: u64,
    /// The other fixed parts (scratch, tokenizer, index), bytes each.
    pub rest: Vec<(&'static str, u64)>,
}

impl Shortfall {
    /// Bytes missing: `needed − available` (≥ 1 for a real shortfall).
    pub fn short_by(&self) -> u64 {
        self.needed.saturating_sub(self.available)
    }

    /// The refusal (exit 3) with `advice` after the figures: what the command's user can
    /// change, in that command's flags (`give a larger --mem-gb, …`).
    pub fn into_error(self, advice: &str) -> Error {
        Error::resources(format!("{self}; {advice}"))
    }
}

/// The figures without advice: `memory plan does not fit: the budget 2.2 GB (mem-gb) is below
/// the minimum 3.1 GB this plan needs (KDA state …, MLA cache …, trunk …, …), short by 0.9 GB`.
impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items = vec![
            format!("KDA state {}", gb(self.kda_state)),
            format!("MLA cache {}", gb(self.mla_cache)),
        ];
        items.extend(
            self.parts
                .iter()
                .chain(&self.rest)
                .map(|(name, b)| format!("{name} {}", gb(*b))),
        );
        let items = items.join(", ");
        let short = gb(self.short_by());
        match &self.limit {
            Limit::Budget(name) => {
                let (have, need) = gb_pair(self.available, self.needed);
                write!(f, "memory plan does not fit: the budget {have} ({name}) is below the minimum {need} this plan needs ({items}), short by {short}")
            }
            Limit::Available => {
                let (need, have) = gb_pair(self.needed, self.available);
                write!(f, "memory plan does not fit: needs {need} ({items}) but {have} is available, short by {short}")
            }
        }
    }
}

/// Why a plan was refused: short of memory (the command words the advice), or another error
/// (a flag out of range, a trunk budget below one ring slot) whose text is final.
#[derive(Debug, Clone)]
pub enum Refusal {
    /// Not enough memory for the plan's minimum or its whole.
    Short(Shortfall),
    /// Any other refusal.
    Other(Error),
}

impl Refusal {
    /// The exit code (ENGINE.md §3): 3 for a shortfall.
    pub fn exit_code(&self) -> i32 {
        match self {
            Refusal::Short(_) => 3,
            Refusal::Other(e) => e.exit_code(),
        }
    }

    /// The error, a shortfall worded with `advice` (see [`Shortfall::into_error`]).
    pub fn into_error(self, advice: impl FnOnce(&Shortfall) -> String) -> Error {
        match self {
            Refusal::Short(s) => {
                let a = advice(&s);
                s.into_error(&a)
            }
            Refusal::Other(e) => e,
        }
    }
}

impl From<Error> for Refusal {
    fn from(e: Error) -> Self {
        Refusal::Other(e)
    }
}

impl From<Shortfall> for Refusal {
    fn from(s: Shortfall) -> Self {
        Refusal::Short(s)
    }
}

/// A shortfall without a command's advice (the figures only): for callers with no flags to
/// offer (tests, benchmarks, `k3 doctor`'s own wording).
impl From<Refusal> for Error {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::Short(s) => Error::resources(s.to_string()),
            Refusal::Other(e) => e,
        }
    }
}

impl From<Shortfall> for Error {
    fn from(s: Shortfall) -> Self {
        Error::resources(s.to_string())
    }
}

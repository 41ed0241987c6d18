//! The model tables' plan (ENGINE.md §4; the tables line of §6): how many lm_head rows are
//! resident, the chunk slots, the embedding table, and how a budget's rest is split.

use super::{buffer_bytes, ModelSizes, HEAD_CHUNK_SLOTS};
use crate::units::gb;

/// How the model tables are held (ENGINE.md §4; the tables line of §6): a prefix of lm_head
/// rows resident (possibly all V, possibly none), the rest streamed in chunks through slots,
/// and the embedding table resident or read row by row.
///
/// Why this order: a resident lm_head byte saves one byte read per decode token, an
/// expert-cache slot beyond top-k saves only its hit rate (0.2–0.4 measured), and a resident
/// embedding table saves 2·H bytes per token. Each logit is its own `dot`, so where a row comes
/// from never changes a bit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TablesPlan {
    /// lm_head rows 0..R held resident (R = V: the whole table; tied: of the one table).
    pub head_resident_rows: usize,
    /// V.
    pub vocab: usize,
    /// `embed_tokens` resident. Tied: true exactly when the whole table is resident (rows
    /// below R are then served from the resident prefix, the others read per token).
    pub embed_resident: bool,
    /// `tie_word_embeddings`: the lm_head is `embed_tokens`.
    pub tied: bool,
    /// Rows per streamed lm_head chunk.
    pub chunk_rows: usize,
    /// Chunk slots (0 when the whole lm_head is resident).
    pub chunk_slots: usize,
    /// Bytes: the plan's `model_tables` item.
    pub bytes: u64,
    /// Why, for the report.
    pub reason: String,
}

impl TablesPlan {
    /// True when anything of the tables is read during the run.
    pub fn streamed(&self) -> bool {
        self.head_resident_rows < self.vocab || !self.embed_resident
    }
    /// Bytes of the tables one decode step of `sequences` rows reads, each table row `row`
    /// bytes (2·H): the streamed lm_head rows once for all rows, and one embedding row per
    /// sequence when the embedding streams (ENGINE.md §4). Used for predictions
    /// (examples/hardware_table.rs, bench `batch_predict`).
    pub fn step_read_bytes(&self, row: u64, sequences: usize) -> u64 {
        let head = self.vocab.saturating_sub(self.head_resident_rows) as u64 * row;
        let embed = if self.embed_resident {
            0
        } else {
            sequences as u64 * row
        };
        head + embed
    }
    /// The tables line of the report (ENGINE.md §6).
    pub fn line(&self) -> String {
        let r = self.head_resident_rows;
        let head = if r >= self.vocab {
            format!("lm_head resident (all {} rows)", self.vocab)
        } else if r == 0 {
            format!(
                "lm_head streamed (all {} rows, in chunks of {} rows through {} slots)",
                self.vocab, self.chunk_rows, self.chunk_slots
            )
        } else {
            format!(
                "lm_head rows 0..{r} resident, rows {r}..{} streamed (chunks of {} rows through {} slots)",
                self.vocab, self.chunk_rows, self.chunk_slots
            )
        };
        let embed = match (self.tied, self.embed_resident) {
            (true, true) => "embedding = lm_head (tied)".to_string(),
            (true, false) => format!(
                "embedding = lm_head (tied): rows below {r} from the resident prefix, the others read per token"
            ),
            (false, true) => "embedding resident".to_string(),
            (false, false) => "embedding rows read per token".to_string(),
        };
        format!(
            "model tables: {}; {head}; {embed}; {}",
            gb(self.bytes),
            self.reason
        )
    }
}

/// Expert-cache slots for a cache budget, clamped to every bound expert.
pub(super) fn cache_slots(s: &ModelSizes, bytes: u64) -> usize {
    if s.experts_total == 0 || s.expert_stride == 0 {
        return 0;
    }
    ((bytes / s.expert_stride) as usize).min(s.experts_total)
}

/// Splits what a whole-process budget leaves after the fixed items, the trunk, the top-k cache
/// floor and the streamed-table minimum (`rest`): lm_head rows first, then expert-cache slots
/// (unless `--cache-gb` fixed the cache), then the embedding table (ENGINE.md §4; the reasons
/// in [`TablesPlan`]). Returns the tables plan and the cache bytes.
pub(super) fn split_rest(
    s: &ModelSizes,
    mut rest: u64,
    cache_floor: u64,
    cache_fixed: bool,
) -> (TablesPlan, u64) {
    let v = s.vocab;
    // 1. lm_head rows: the whole head (which also frees the chunk slots), or a prefix.
    let full_extra = s.tables_bytes(v, false).saturating_sub(s.tables_streamed());
    let rows = if full_extra <= rest {
        rest -= full_extra;
        v
    } else {
        let r = s.head_rows_within(rest);
        if r > 0 {
            rest -= buffer_bytes(r as u64 * s.row);
        }
        r
    };
    // 2. expert-cache slots beyond top-k, up to every expert.
    let cache = if cache_fixed {
        cache_floor
    } else {
        let c = s.cache_max().max(cache_floor).min(cache_floor + rest);
        rest -= c - cache_floor;
        c
    };
    // 3. the embedding table (untied; tied it is the head).
    let embed_extra = s
        .tables_bytes(rows, true)
        .saturating_sub(s.tables_bytes(rows, false));
    let embed = !s.tied() && embed_extra <= rest;
    let head_gb = gb(s.head_bytes());
    let reason = if rows == v {
        if s.tied() || embed {
            "the budget holds both tables".to_string()
        } else {
            format!(
                "the lm_head comes before expert-cache slots (a resident lm_head byte saves a byte read per token) and the embedding last (a resident table saves {} B per token); resident it needs {} more than the budget leaves",
                s.row,
                gb(embed_extra - rest)
            )
        }
    } else {
        let missing = full_extra - (s.tables_bytes(rows, false) - s.tables_streamed());
        format!(
            "lm_head rows come before expert-cache slots beyond top-k (a resident row is never read again; a cache slot saves only its hit rate); the whole lm_head ({head_gb}) needs {} more than the budget leaves, so {} per token is read",
            gb(missing),
            gb((v - rows) as u64 * s.row)
        )
    };
    (s.tables_plan(rows, embed, reason), cache)
}

impl ModelSizes {
    /// The tables plan for `rows` resident lm_head rows and the embedding resident or not.
    pub(super) fn tables_plan(
        &self,
        rows: usize,
        embed_resident: bool,
        reason: String,
    ) -> TablesPlan {
        let rows = rows.min(self.vocab);
        let full = rows == self.vocab;
        TablesPlan {
            head_resident_rows: rows,
            vocab: self.vocab,
            embed_resident: if self.tied() { full } else { embed_resident },
            tied: self.tied(),
            chunk_rows: self.head_chunk_rows(),
            chunk_slots: if full { 0 } else { HEAD_CHUNK_SLOTS },
            bytes: self.tables_bytes(rows, embed_resident),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TablesPlan;

    #[test]
    fn a_step_reads_the_streamed_head_rows_once_and_an_embedding_row_per_sequence() {
        let t = TablesPlan {
            head_resident_rows: 60,
            vocab: 100,
            embed_resident: false,
            ..TablesPlan::default()
        };
        assert_eq!(t.step_read_bytes(10, 1), 40 * 10 + 10);
        assert_eq!(t.step_read_bytes(10, 8), 40 * 10 + 80);
        let resident = TablesPlan {
            head_resident_rows: 100,
            embed_resident: true,
            ..t
        };
        assert_eq!(resident.step_read_bytes(10, 8), 0);
    }
}

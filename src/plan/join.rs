//! The joining slice (ENGINE.md §10, §11): how many prompt positions of joining sequences run
//! as rows of one step's forward next to the decoding sequences' rows.

/// Prompt positions that joining sequences run per step, in all, when `parallel` sequences
/// share a session whose prefill chunk is `chunk` positions and whose steps draft up to `spec`
/// ids per decoding sequence.
///
/// A step with a joiner has at most `parallel − 1` decoding sequences of `1 + spec` rows each;
/// the slice fills the rest of the forward the plan gave scratch for, `max(chunk, parallel ×
/// (1 + spec))` rows ([`super::ModelSizes::for_run`]), so a mixed forward never holds more rows
/// than a planned one, and a decoder waits at most one chunk's forward for its next id, never a
/// whole prompt. At least 1.
pub fn join_slice(chunk: usize, parallel: usize, spec: usize) -> usize {
    let per_seq = 1usize.saturating_add(spec);
    let rows = chunk.max(parallel.max(1).saturating_mul(per_seq));
    let decoding = (parallel.max(1) - 1).saturating_mul(per_seq);
    rows.saturating_sub(decoding).max(1)
}

#[cfg(test)]
mod tests {
    use super::join_slice;

    #[test]
    fn the_slice_fills_the_planned_rows_beside_the_decoders() {
        // 4 slots, chunk 64: 3 decoders, 61 prompt positions
        assert_eq!(join_slice(64, 4, 0), 61);
        // --spec 3: 3 decoders of 4 rows each
        assert_eq!(join_slice(64, 4, 3), 52);
        // a chunk smaller than a step's rows: the planned rows are the step's
        assert_eq!(join_slice(2, 4, 0), 1);
        assert_eq!(join_slice(1, 4, 3), 4);
        assert_eq!(join_slice(64, 1, 0), 64);
        assert_eq!(join_slice(0, 0, 0), 1);
    }
}

//! The joining slice (ENGINE.md §10, §11): how many prompt positions of joining sequences run
//! as rows of one step's forward next to the decoding sequences' rows.

/// Prompt positions that joining sequences may run in one step, in all, when `parallel`
/// sequences share a session whose prefill chunk is `chunk` positions and whose steps draft up
/// to `spec` ids per decoding sequence: the rows the plan gave a forward scratch for,
/// `max(chunk, parallel × (1 + spec))` ([`super::ModelSizes::for_run`]). Each row the
/// decoding sequences run in that step takes one of them (at least one position stays for the
/// joiners: `Session::join_rows`), so a mixed forward never holds more rows than a planned one,
/// and a decoder waits at most one chunk's forward for its next id, never a whole prompt.
pub fn join_slice(chunk: usize, parallel: usize, spec: usize) -> usize {
    let per_seq = 1usize.saturating_add(spec);
    chunk.max(parallel.saturating_mul(per_seq)).max(1)
}

#[cfg(test)]
mod tests {
    use super::join_slice;

    #[test]
    fn the_slice_is_the_planned_rows_of_a_forward() {
        assert_eq!(join_slice(64, 4, 0), 64);
        assert_eq!(join_slice(64, 4, 3), 64);
        // a chunk smaller than a step's rows: the planned rows are the step's
        assert_eq!(join_slice(2, 4, 0), 4);
        assert_eq!(join_slice(1, 4, 3), 16);
        assert_eq!(join_slice(64, 1, 0), 64);
        assert_eq!(join_slice(0, 0, 0), 1);
    }
}

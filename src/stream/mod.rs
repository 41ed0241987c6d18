//! Streaming: supplies weight bytes to the model within the memory budget (ENGINE.md §4–§5).
//! The expert cache with its pluggable eviction policies, expert traces (FORMATS.md §8) and the
//! cache simulator behind `k3 sim-cache`.

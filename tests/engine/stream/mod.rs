//! Streaming (ENGINE.md §4–§5): bit-identity at every budget and for every trunk piece, ring
//! and I/O-depth setting, peak RSS, faults, the packed
//! trunk (`k3 pack-trunk`), the expert cache and its policies, traces and `k3 sim-cache`.

mod codec;
mod expert_cache;
mod faults;
mod identity;
mod pack_trunk;
mod pieces;
mod policy;
mod rss;
mod sim_cache;

//! Message digests used to check downloaded files (`k3 verify`, docs/verify.md).

pub mod sha256;

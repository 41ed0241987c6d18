//! Shared measurement code for k3's benchmarks. Every figure is reported against a limit
//! measured in the same run (memory bandwidth, device read bandwidth), never as a bare time.

pub mod batch;
pub mod device;
pub mod harness;
pub mod idle;
pub mod machine;
pub mod membw;
pub mod predict;
pub mod roof;
pub mod roofline;

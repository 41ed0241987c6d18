//! The forward pass against the float64 reference (MODEL.md §6, §11) and the model's state
//! sizes (MODEL.md §7–§8).

mod configs;
mod experts;
mod plan;
mod variants;

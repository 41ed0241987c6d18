//! Binding: everything that turns a checkpoint's bytes into the typed views the model computes
//! on (MODEL.md §4; FORMATS.md §4, §6, §7). The tensor reader and lookups ([`reader`]), the
//! layer and table layouts ([`layout`]), one layer's weights and the output vectors
//! ([`layer`]), expert location and the on-demand expert source ([`experts`]), and the two
//! bindings: resident ([`resident`]) and streamed through the trunk ring, model tables and
//! expert cache ([`streamed`]).
//!
//! The model (`crate::model`) reads no file: it gets its views from here and its bytes through
//! the trunk- and expert-source interfaces.

pub mod experts;
pub mod layer;
pub mod layout;
pub mod reader;
pub mod resident;
pub mod streamed;

pub use experts::{locate_experts, ExpertLocation, PreadExperts};
pub use layout::{layer_layout, LayerLayout, TableLayout};
pub use reader::{Reader, TensorLookup, TensorMeta};
pub use resident::{bind_resident, Bound, ResidentTrunk};
pub use streamed::{bind, prepare, Prepared, StreamConfig, Streamed};

#[cfg(test)]
mod tests {
    /// The direction of dependency (DEVELOPERS.md): the model computes on views and reads no
    /// file, so none of its files names the I/O layer, the checkpoint, the catalogue or the
    /// streaming layer.
    #[test]
    fn model_uses_no_io_checkpoint_catalogue_or_stream() {
        let files = [
            ("attn_res.rs", include_str!("../model/attn_res.rs")),
            ("experts.rs", include_str!("../model/experts.rs")),
            ("ffn.rs", include_str!("../model/ffn.rs")),
            ("kda.rs", include_str!("../model/kda.rs")),
            ("mla.rs", include_str!("../model/mla.rs")),
            ("mod.rs", include_str!("../model/mod.rs")),
            ("moe.rs", include_str!("../model/moe.rs")),
            ("state.rs", include_str!("../model/state.rs")),
            ("weights.rs", include_str!("../model/weights.rs")),
        ];
        for (name, src) in files {
            for used in [
                "crate::io",
                "crate::checkpoint",
                "crate::catalogue",
                "crate::stream",
            ] {
                assert!(!src.contains(used), "src/model/{name} uses {used}");
            }
        }
    }
}

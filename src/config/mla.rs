//! The MLA section of MODEL.md §2.3: head count, ranks, head widths, output gate.

use super::lookup::Lookup;

/// The MLA keys, validated.
pub(super) struct Mla {
    pub(super) num_attention_heads: usize,
    pub(super) q_lora_rank: usize,
    pub(super) kv_lora_rank: usize,
    pub(super) qk_nope_head_dim: usize,
    pub(super) qk_rope_head_dim: usize,
    pub(super) v_head_dim: usize,
    pub(super) mla_use_output_gate: bool,
    pub(super) mla_use_nope: bool,
}

/// Reads the MLA keys in table order; `None` when any is missing or invalid (recorded).
pub(super) fn read(lk: &mut Lookup<'_>) -> Option<Mla> {
    let num_attention_heads = lk.req_int("num_attention_heads", "num_attention_heads", 1);
    let q_lora_rank = lk.req_int("q_lora_rank", "q_lora_rank", 1);
    let kv_lora_rank = lk.req_int("kv_lora_rank", "kv_lora_rank", 1);
    let qk_nope_head_dim = lk.req_int("qk_nope_head_dim", "qk_nope_head_dim", 1);
    let qk_rope_head_dim = lk.req_int("qk_rope_head_dim", "qk_rope_head_dim", 0);
    let v_head_dim = lk.req_int("v_head_dim", "v_head_dim", 1);
    let mla_use_output_gate = lk.opt_bool("mla_use_output_gate", true, None);
    let mla_use_nope = lk.opt_bool("mla_use_nope", true, Some(true));
    Some(Mla {
        num_attention_heads: num_attention_heads?,
        q_lora_rank: q_lora_rank?,
        kv_lora_rank: kv_lora_rank?,
        qk_nope_head_dim: qk_nope_head_dim?,
        qk_rope_head_dim: qk_rope_head_dim?,
        v_head_dim: v_head_dim?,
        mla_use_output_gate: mla_use_output_gate?,
        mla_use_nope: mla_use_nope?,
    })
}

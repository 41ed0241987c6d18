//! The derived constants of MODEL.md §2.6, overflow-checked.

use super::{AttnKind, Config, Derived};

fn checked(problems: &mut Vec<String>, what: &str, v: Option<usize>) -> usize {
    match v {
        Some(x) => x,
        None => {
            problems.push(format!(
                "derived width {what} overflows (docs/formats.md#configjson-keys): the config's widths are absurd"
            ));
            0
        }
    }
}

/// The derived constants of `c` (whose `derived` is not read). Errors: one problem per
/// derived width or tensor byte size that overflows.
pub(super) fn derive(c: &Config) -> Result<Derived, Vec<String>> {
    let mut problems = Vec::new();
    let p = &mut problems;
    let kda_proj_width = checked(p, "Pk = Hk·Dk", c.kda_num_heads.checked_mul(c.kda_head_dim));
    let mla_head_width = checked(
        p,
        "Dq = Dn + Dr",
        c.qk_nope_head_dim.checked_add(c.qk_rope_head_dim),
    );
    let q_b_rows = checked(
        p,
        "Hm·Dq",
        c.num_attention_heads.checked_mul(mla_head_width),
    );
    let kv_a_rows = checked(
        p,
        "Rkv + Dr",
        c.kv_lora_rank.checked_add(c.qk_rope_head_dim),
    );
    let kv_b_rows = checked(
        p,
        "Hm·(Dn + Dv)",
        c.qk_nope_head_dim
            .checked_add(c.v_head_dim)
            .and_then(|w| w.checked_mul(c.num_attention_heads)),
    );
    let mla_out_width = checked(p, "Hm·Dv", c.num_attention_heads.checked_mul(c.v_head_dim));
    let shared_width = checked(
        p,
        "Sw = num_shared_experts·I",
        c.num_shared_experts.checked_mul(c.moe_intermediate_size),
    );
    let h = c.hidden_size;
    // Every stored tensor must have a byte size that fits in u64 (the widest: [V, H] and
    // the [out, in] matrices), else no checkpoint can match it.
    for (what, a, b) in [
        ("V·H", c.vocab_size, h),
        ("Pk·H", kda_proj_width, h),
        ("Hm·Dq·Rq", q_b_rows, c.q_lora_rank),
        ("Hm·(Dn+Dv)·Rkv", kv_b_rows, c.kv_lora_rank),
        ("Hm·Dv·H", mla_out_width, h),
        ("F·H", c.intermediate_size, h),
        ("E·H", c.num_experts, h),
        ("L·H", c.routed_expert_hidden_size, h),
        ("Sw·H", shared_width, h),
        ("I·L", c.moe_intermediate_size, c.routed_expert_hidden_size),
        ("Rq·H", c.q_lora_rank, h),
        ("(Rkv+Dr)·H", kv_a_rows, h),
    ] {
        if a.checked_mul(b).and_then(|x| x.checked_mul(4)).is_none() {
            p.push(format!(
                "tensor size {what} overflows 64 bits (docs/formats.md#tensor-names): the config's widths are absurd"
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let nl = c.num_hidden_layers;
    let n_mla = c
        .layer_kinds
        .iter()
        .filter(|k| **k == AttnKind::Mla)
        .count();
    let snapshots = nl.div_ceil(c.attn_res_block_size);
    Ok(Derived {
        kda_proj_width,
        kda_query_scale: 1.0 / (c.kda_head_dim as f64).sqrt(),
        a_log_len: c.kda_head_dim.max(c.kda_num_heads),
        mla_head_width,
        mla_softmax_scale: 1.0 / (mla_head_width as f64).sqrt(),
        q_b_rows,
        kv_a_rows,
        kv_b_rows,
        mla_out_width,
        mla_cache_row: kv_a_rows,
        shared_width,
        groups_w13: c.routed_expert_hidden_size / 32,
        groups_w2: c.moe_intermediate_size / 32,
        conv_history: c.short_conv_kernel_size - 1,
        snapshots,
        max_agg_sources: snapshots + 1,
        n_dense: c.first_k_dense_replace,
        n_moe: nl - c.first_k_dense_replace,
        n_kda: nl - n_mla,
        n_mla,
    })
}

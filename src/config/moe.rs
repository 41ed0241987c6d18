//! The MoE and dense-FFN section of MODEL.md §2.3: experts, top-k, widths, routing, SiTU caps.

use super::lookup::Lookup;

/// The MoE and FFN keys, validated.
pub(super) struct Moe {
    pub(super) num_experts: usize,
    pub(super) num_experts_per_token: usize,
    pub(super) num_shared_experts: usize,
    pub(super) routed_expert_hidden_size: usize,
    pub(super) moe_intermediate_size: usize,
    pub(super) routed_scaling_factor: f64,
    pub(super) moe_renormalize: bool,
    pub(super) latent_moe_use_norm: bool,
    pub(super) moe_router_activation_func: String,
    pub(super) num_expert_group: usize,
    pub(super) topk_group: usize,
    pub(super) moe_layer_freq: usize,
    pub(super) first_k_dense_replace: usize,
    pub(super) intermediate_size: usize,
    pub(super) hidden_act: String,
    pub(super) situ_beta: f64,
    pub(super) situ_linear_beta: f64,
}

/// Reads the MoE and FFN keys in table order; `num_hidden_layers` bounds
/// `first_k_dense_replace` when it was read. `None` when any key failed (recorded).
pub(super) fn read(lk: &mut Lookup<'_>, num_hidden_layers: Option<usize>) -> Option<Moe> {
    let num_experts = lk.req_int("num_experts", "num_experts", 1);
    let topk_hit = lk.find("num_experts_per_token", "num_experts_per_token");
    let num_experts_per_token = match lk.required(topk_hit, "num_experts_per_token") {
        Some(h) => {
            let v = lk.int_in(&h, 1, None);
            match (v, num_experts) {
                (Some(k), Some(e)) if k > e => {
                    lk.bad(
                        &h.path,
                        format!("top-k {k} exceeds num_experts {e} (must be 1 ≤ Kt ≤ E)"),
                    );
                    None
                }
                _ => v,
            }
        }
        None => None,
    };
    let num_shared_experts = lk.req_int("num_shared_experts", "num_shared_experts", 0);
    let routed_expert_hidden_size = lk.req_mult32("routed_expert_hidden_size");
    let moe_intermediate_size = lk.req_mult32("moe_intermediate_size");
    let routed_scaling_factor = {
        let h = lk.find("routed_scaling_factor", "routed_scaling_factor");
        lk.required(h, "routed_scaling_factor")
            .and_then(|h| lk.as_float(&h))
    };
    let moe_renormalize = lk.opt_bool("moe_renormalize", true, None);
    let latent_moe_use_norm = lk.opt_bool("latent_moe_use_norm", true, None);
    let moe_router_activation_func = lk.opt_str_must("moe_router_activation_func", "sigmoid");
    let num_expert_group = lk.opt_int_must("num_expert_group", 1);
    let topk_group = lk.opt_int_must("topk_group", 1);
    let moe_layer_freq = lk.opt_int_must("moe_layer_freq", 1);
    let fkd_hit = lk.find("first_k_dense_replace", "first_k_dense_replace");
    let first_k_dense_replace = match lk.required(fkd_hit, "first_k_dense_replace") {
        Some(h) => {
            let v = lk.int_in(&h, 0, None);
            match (v, num_hidden_layers) {
                (Some(k), Some(nl)) if k > nl => {
                    lk.bad(
                        &h.path,
                        format!("{k} exceeds num_hidden_layers {nl} (must be 0 ≤ value ≤ NL)"),
                    );
                    None
                }
                _ => v,
            }
        }
        None => None,
    };
    let intermediate_size = lk.req_int("intermediate_size", "intermediate_size", 1);
    let hidden_act = lk.opt_str_must("hidden_act", "situ");
    let situ_beta = lk.req_positive_float("activation_situ_beta", "situ_beta");
    let situ_linear_beta = lk.req_positive_float("activation_situ_linear_beta", "situ_linear_beta");
    Some(Moe {
        num_experts: num_experts?,
        num_experts_per_token: num_experts_per_token?,
        num_shared_experts: num_shared_experts?,
        routed_expert_hidden_size: routed_expert_hidden_size?,
        moe_intermediate_size: moe_intermediate_size?,
        routed_scaling_factor: routed_scaling_factor?,
        moe_renormalize: moe_renormalize?,
        latent_moe_use_norm: latent_moe_use_norm?,
        moe_router_activation_func: moe_router_activation_func?,
        num_expert_group: num_expert_group?,
        topk_group: topk_group?,
        moe_layer_freq: moe_layer_freq?,
        first_k_dense_replace: first_k_dense_replace?,
        intermediate_size: intermediate_size?,
        hidden_act: hidden_act?,
        situ_beta: situ_beta?,
        situ_linear_beta: situ_linear_beta?,
    })
}

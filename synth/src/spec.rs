//! The specification of a synthetic checkpoint: widths, layer map, shard layout, seed.

/// Everything that determines a synthetic checkpoint: the model config (MODEL.md §2.3, config
/// key names in the field names), the file layout and the seed.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthSpec {
    /// `hidden_size` H.
    pub hidden_size: usize,
    /// `vocab_size` V.
    pub vocab_size: usize,
    /// `num_hidden_layers` NL.
    pub num_hidden_layers: usize,
    /// `rms_norm_eps` ε.
    pub rms_norm_eps: f64,
    /// `tie_word_embeddings`: true writes no `lm_head`.
    pub tie_word_embeddings: bool,
    /// `linear_attn_config.num_heads` Hk.
    pub kda_num_heads: usize,
    /// `linear_attn_config.head_dim` Dk.
    pub kda_head_dim: usize,
    /// `short_conv_kernel_size` Kc.
    pub short_conv_kernel_size: usize,
    /// `gate_lower_bound` gmin (< 0).
    pub gate_lower_bound: f64,
    /// `num_attention_heads` Hm (MLA).
    pub num_attention_heads: usize,
    /// `q_lora_rank` Rq.
    pub q_lora_rank: usize,
    /// `kv_lora_rank` Rkv.
    pub kv_lora_rank: usize,
    /// `qk_nope_head_dim` Dn.
    pub qk_nope_head_dim: usize,
    /// `qk_rope_head_dim` Dr.
    pub qk_rope_head_dim: usize,
    /// `v_head_dim` Dv.
    pub v_head_dim: usize,
    /// `mla_use_output_gate`: false writes no MLA `g_proj`.
    pub mla_use_output_gate: bool,
    /// `num_experts` E.
    pub num_experts: usize,
    /// `num_experts_per_token` Kt (top-k).
    pub num_experts_per_token: usize,
    /// `num_shared_experts` (0: no shared-expert tensors).
    pub num_shared_experts: usize,
    /// `routed_expert_hidden_size` L (latent width, multiple of 32).
    pub routed_expert_hidden_size: usize,
    /// `moe_intermediate_size` I (multiple of 32).
    pub moe_intermediate_size: usize,
    /// `routed_scaling_factor`.
    pub routed_scaling_factor: f64,
    /// `moe_renormalize`.
    pub moe_renormalize: bool,
    /// `latent_moe_use_norm`: false writes no `routed_expert_norm`.
    pub latent_moe_use_norm: bool,
    /// `first_k_dense_replace`: layers below it have a dense FFN, the others MoE.
    pub first_k_dense_replace: usize,
    /// `intermediate_size` F (dense FFN).
    pub intermediate_size: usize,
    /// `activation_situ_beta` β1.
    pub situ_beta: f64,
    /// `activation_situ_linear_beta` β2.
    pub situ_linear_beta: f64,
    /// `attn_res_block_size` Bs.
    pub attn_res_block_size: usize,
    /// `full_attn_layers`: the **one-based** MLA layers; `kda_layers` is written as the
    /// complement.
    pub full_attn_layers: Vec<usize>,
    /// `bos_token_id`, `eos_token_id`, `pad_token_id` (informational in the config).
    pub special_ids: [u64; 3],
    /// Nested (released) config shape if true, flat (test) shape otherwise (MODEL.md §2.1).
    pub nested_config: bool,
    /// Layers per shard after the first shard (which always holds layer 0 alone).
    pub layers_per_shard: usize,
    /// Digits of the shard index and of the total in shard names (released: 5 and 6).
    pub shard_name_digits: (usize, usize),
    /// Write the two dummy vision shards (`mm_projector.*`, `vision_tower.*`), which a text
    /// engine must ignore, as the released checkpoint has them.
    pub vision_dummies: bool,
    /// The seed of every value.
    pub seed: u64,
}

/// The released layer map rule: one-based layer l is MLA iff l is a multiple of 4, or l is
/// the last of at least 4 layers. For 93 layers this is the released
/// `[4, 8, …, 88, 92, 93]`; for 4 layers `[4]` (KDA, KDA, KDA, MLA); for 13 `[4, 8, 12, 13]`.
pub fn released_full_attn_layers(num_layers: usize) -> Vec<usize> {
    (1..=num_layers)
        .filter(|&l| l % 4 == 0 || (l == num_layers && num_layers >= 4))
        .collect()
}

impl SynthSpec {
    /// The released Kimi K3 widths (MODEL.md §1) with `layers` layers and `experts` routed
    /// experts per MoE layer: H 7168, V 163840, KDA 96 × 128, MLA 96 heads (Rq 1536, Rkv 512,
    /// Dn 128, Dr 64, Dv 128, output gate), latent L 3584, I 3072, 2 shared experts, top-16,
    /// dense layer 0 of F 33792, AttnRes block 12, the released layer map rule
    /// ([`released_full_attn_layers`]), nested config, one layer per shard, released shard
    /// naming, dummy vision shards, seed 0. `SynthSpec::k3(93, 896)` has the released tensor
    /// set and byte counts (MODEL.md §9).
    pub fn k3(layers: usize, experts: usize) -> SynthSpec {
        SynthSpec {
            hidden_size: 7168,
            vocab_size: 163_840,
            num_hidden_layers: layers,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: false,
            kda_num_heads: 96,
            kda_head_dim: 128,
            short_conv_kernel_size: 4,
            gate_lower_bound: -5.0,
            num_attention_heads: 96,
            q_lora_rank: 1536,
            kv_lora_rank: 512,
            qk_nope_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
            mla_use_output_gate: true,
            num_experts: experts,
            num_experts_per_token: 16,
            num_shared_experts: 2,
            routed_expert_hidden_size: 3584,
            moe_intermediate_size: 3072,
            routed_scaling_factor: 1.0,
            moe_renormalize: true,
            latent_moe_use_norm: true,
            first_k_dense_replace: layers.min(1),
            intermediate_size: 33_792,
            situ_beta: 4.0,
            situ_linear_beta: 25.0,
            attn_res_block_size: 12,
            full_attn_layers: released_full_attn_layers(layers),
            special_ids: [163_584, 163_586, 163_839],
            nested_config: true,
            layers_per_shard: 1,
            shard_name_digits: (5, 6),
            vision_dummies: true,
            seed: 0,
        }
    }

    /// Small widths for fast tests, the shape of the `tiny-k3` fixture (README §1.6): H 128,
    /// V 512 (special ids 509, 510, 511), KDA 4 × 16, MLA 4 heads (Rq 64, Rkv 32, Dn 24, Dr 8,
    /// Dv 16), L 64, I 64, 2 shared, top-2, dense layer 0 of F 96, AttnRes block 3, the
    /// released layer map rule, nested config, 3 layers per shard, fixture-style shard names
    /// (5 and 5 digits), dummy vision shards, seed 0. Every field may be changed afterwards.
    pub fn small(layers: usize, experts: usize) -> SynthSpec {
        SynthSpec {
            hidden_size: 128,
            vocab_size: 512,
            num_hidden_layers: layers,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: false,
            kda_num_heads: 4,
            kda_head_dim: 16,
            short_conv_kernel_size: 4,
            gate_lower_bound: -5.0,
            num_attention_heads: 4,
            q_lora_rank: 64,
            kv_lora_rank: 32,
            qk_nope_head_dim: 24,
            qk_rope_head_dim: 8,
            v_head_dim: 16,
            mla_use_output_gate: true,
            num_experts: experts,
            num_experts_per_token: 2.min(experts),
            num_shared_experts: 2,
            routed_expert_hidden_size: 64,
            moe_intermediate_size: 64,
            routed_scaling_factor: 1.0,
            moe_renormalize: true,
            latent_moe_use_norm: true,
            first_k_dense_replace: layers.min(1),
            intermediate_size: 96,
            situ_beta: 4.0,
            situ_linear_beta: 25.0,
            attn_res_block_size: 3,
            full_attn_layers: released_full_attn_layers(layers),
            special_ids: [509, 510, 511],
            nested_config: true,
            layers_per_shard: 3,
            shard_name_digits: (5, 5),
            vision_dummies: true,
            seed: 0,
        }
    }

    /// Whether zero-based layer `l` is MLA (MODEL.md §3: (l+1) ∈ `full_attn_layers`).
    pub fn is_mla(&self, l: usize) -> bool {
        self.full_attn_layers.contains(&(l + 1))
    }

    /// Whether zero-based layer `l` has a dense FFN (l < `first_k_dense_replace`).
    pub fn is_dense(&self, l: usize) -> bool {
        l < self.first_k_dense_replace
    }

    /// The layer map as one character per layer, `K` (KDA) or `M` (MLA), as in FORMATS.md §9.1.
    pub fn layer_map(&self) -> String {
        (0..self.num_hidden_layers)
            .map(|l| if self.is_mla(l) { 'M' } else { 'K' })
            .collect()
    }

    /// Checks the rules of MODEL.md §2.3/§2.5 that a generated checkpoint must satisfy, plus
    /// the layout parameters. Errors name the field and the rule.
    pub fn validate(&self) -> Result<(), String> {
        let mut bad = Vec::new();
        let positive = [
            ("hidden_size", self.hidden_size),
            ("vocab_size", self.vocab_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("kda_num_heads", self.kda_num_heads),
            ("kda_head_dim", self.kda_head_dim),
            ("short_conv_kernel_size", self.short_conv_kernel_size),
            ("num_attention_heads", self.num_attention_heads),
            ("q_lora_rank", self.q_lora_rank),
            ("kv_lora_rank", self.kv_lora_rank),
            ("qk_nope_head_dim", self.qk_nope_head_dim),
            ("v_head_dim", self.v_head_dim),
            ("num_experts", self.num_experts),
            ("routed_expert_hidden_size", self.routed_expert_hidden_size),
            ("moe_intermediate_size", self.moe_intermediate_size),
            ("intermediate_size", self.intermediate_size),
            ("attn_res_block_size", self.attn_res_block_size),
            ("layers_per_shard", self.layers_per_shard),
        ];
        for (name, v) in positive {
            if v == 0 {
                bad.push(format!("{name}: must be >= 1"));
            }
        }
        for (name, v) in [
            ("routed_expert_hidden_size", self.routed_expert_hidden_size),
            ("moe_intermediate_size", self.moe_intermediate_size),
        ] {
            if v % 32 != 0 {
                bad.push(format!(
                    "{name}: {v} is not a multiple of 32 (MXFP4 groups)"
                ));
            }
        }
        if self.num_experts_per_token == 0 || self.num_experts_per_token > self.num_experts {
            bad.push(format!(
                "num_experts_per_token: {} must be in 1..={} (num_experts)",
                self.num_experts_per_token, self.num_experts
            ));
        }
        if self.first_k_dense_replace > self.num_hidden_layers {
            bad.push(format!(
                "first_k_dense_replace: {} exceeds num_hidden_layers {}",
                self.first_k_dense_replace, self.num_hidden_layers
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for &l in &self.full_attn_layers {
            if l == 0 || l > self.num_hidden_layers {
                bad.push(format!(
                    "full_attn_layers: {l} is outside 1..={} (one-based)",
                    self.num_hidden_layers
                ));
            }
            if !seen.insert(l) {
                bad.push(format!("full_attn_layers: {l} appears twice"));
            }
        }
        if self.num_hidden_layers > 0 && (0..self.num_hidden_layers).all(|l| self.is_mla(l)) {
            bad.push("full_attn_layers: covers every layer; no KDA layer remains".to_string());
        }
        let finite_pos = [
            ("rms_norm_eps", self.rms_norm_eps),
            ("situ_beta", self.situ_beta),
            ("situ_linear_beta", self.situ_linear_beta),
        ];
        for (name, v) in finite_pos {
            if !(v.is_finite() && v > 0.0) {
                bad.push(format!("{name}: {v} must be finite and > 0"));
            }
        }
        if !(self.gate_lower_bound.is_finite() && self.gate_lower_bound < 0.0) {
            bad.push(format!(
                "gate_lower_bound: {} must be finite and < 0",
                self.gate_lower_bound
            ));
        }
        if !self.routed_scaling_factor.is_finite() {
            bad.push("routed_scaling_factor: must be finite".to_string());
        }
        let (a, b) = self.shard_name_digits;
        if a == 0 || b == 0 || a > 12 || b > 12 {
            bad.push(format!("shard_name_digits: ({a}, {b}) must be in 1..=12"));
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad.join("; "))
        }
    }
}

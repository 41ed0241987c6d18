mod model_ref;
use k3::model::weights::*;
use k3::model::*;
use model_ref::*;
use std::path::PathBuf;

struct L<'a>(&'a Ckpt);
impl TensorLookup for L<'_> {
    fn meta(&self, name: &str) -> Option<TensorMeta> {
        self.0.tensors.get(name).map(|t| TensorMeta {
            shard: t.shard,
            offset: t.offset,
            len: t.len,
            dtype: match t.dtype.as_str() {
                "BF16" => Dtype::Bf16,
                "F32" => Dtype::F32,
                "U8" => Dtype::U8,
                _ => Dtype::Other("?"),
            },
            shape: t.shape.clone(),
        })
    }
    fn shard_paths(&self) -> Vec<PathBuf> {
        self.0.shards.clone()
    }
}

#[test]
fn engine_matches_fixture() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-k3");
    let c = Ckpt::open(&dir);
    let full: Vec<usize> = c
        .key("full_attn_layers")
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let nl = c.u("num_hidden_layers");
    let d = Dims {
        h: c.u("hidden_size"),
        v: c.u("vocab_size"),
        nl,
        hk: c.u("num_heads"),
        dk: c.u("head_dim"),
        pk: c.u("num_heads") * c.u("head_dim"),
        kc: c.u("short_conv_kernel_size"),
        hm: c.u("num_attention_heads"),
        rq: c.u("q_lora_rank"),
        rkv: c.u("kv_lora_rank"),
        dn: c.u("qk_nope_head_dim"),
        dr: c.u("qk_rope_head_dim"),
        dv: c.u("v_head_dim"),
        dq: c.u("qk_nope_head_dim") + c.u("qk_rope_head_dim"),
        e: c.u("num_experts"),
        kt: c.u("num_experts_per_token"),
        l: c.u("routed_expert_hidden_size"),
        i: c.u("moe_intermediate_size"),
        sw: c.u("num_shared_experts") * c.u("moe_intermediate_size"),
        f: c.u("intermediate_size"),
        bs: c.u("attn_res_block_size"),
        first_dense: c.u("first_k_dense_replace"),
        eps: c.f("rms_norm_eps"),
        beta1: c.f("activation_situ_beta"),
        beta2: c.f("activation_situ_linear_beta"),
        gmin: c.f("gate_lower_bound"),
        rsf: c.f("routed_scaling_factor"),
        sd: 1.0 / (c.u("head_dim") as f64).sqrt(),
        sq: 1.0 / ((c.u("qk_nope_head_dim") + c.u("qk_rope_head_dim")) as f64).sqrt(),
        renorm: true,
        latent_norm: true,
        out_gate: true,
        tied: false,
        kinds: (0..nl)
            .map(|l| {
                if full.contains(&(l + 1)) {
                    AttnKind::Mla
                } else {
                    AttnKind::Kda
                }
            })
            .collect(),
    };
    let lk = L(&c);
    let mut r = Reader::new(&lk);
    let mut layers = vec![];
    let mut bufs = vec![];
    let mut locs = vec![];
    for l in 0..nl {
        let (lw, b) = bind_layer(&mut r, &d, l).unwrap();
        layers.push(lw);
        bufs.push(b);
        locs.push(if l >= d.first_dense {
            locate_experts(&r, &d, l).unwrap()
        } else {
            vec![]
        });
    }
    let tables = bind_tables(&mut r, &d).unwrap();
    let files = r.into_files().unwrap();
    let mut ex = experts::PreadExperts::new(
        files,
        locs,
        experts::ExpertShape {
            inter: d.i,
            latent: d.l,
        },
        64,
    );
    let model = Model {
        dims: d.clone(),
        layers,
        tables,
    };
    let mut trunk = ResidentTrunk { bufs };
    let e: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let ids: Vec<u32> = e["full_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let mut st = state::DecodeState::new(&d, nl, ids.len());
    let exx = Exec::default();
    let logits = model
        .forward(&exx, &mut trunk, &mut ex, &mut st, &ids, LogitRows::All)
        .unwrap();
    let expected = read_f32_rows(&dir.join("logits.f32"), d.v);
    let got: Vec<Vec<f64>> = logits
        .chunks(d.v)
        .map(|r| r.iter().map(|&x| x as f64).collect())
        .collect();
    let diff = max_abs_diff(&got, &expected);
    eprintln!("engine vs fixture {diff:e}");
    assert!(diff < 1.3e-3);
    // chunked
    let mut st2 = state::DecodeState::new(&d, nl, ids.len());
    let mut all = vec![];
    for ch in ids.chunks(7) {
        all.extend(
            model
                .forward(&exx, &mut trunk, &mut ex, &mut st2, ch, LogitRows::All)
                .unwrap(),
        );
    }
    assert!(all == logits, "chunked differs");
}

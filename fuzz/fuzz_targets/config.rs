//! Config reader: never panics; an accepted config has a consistent layer map and identity.
#![no_main]
use k3::config::{AttnKind, Config, MlaForm};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match Config::from_json(data, "fuzz/config.json") {
        Ok(c) => {
            let map = c.layer_map();
            assert_eq!(map.len(), c.num_hidden_layers);
            assert!(map.contains('K'), "no KDA layer must have been refused");
            assert_eq!(
                c.mla_layers().len() + c.kda_layers_zero_based().len(),
                c.num_hidden_layers
            );
            for l in 0..c.num_hidden_layers {
                let _ = (c.is_dense(l), c.is_boundary(l));
                assert_eq!(c.attn_kind(l) == AttnKind::Mla, map.as_bytes()[l] == b'M');
            }
            assert!(c.num_experts_per_token >= 1 && c.num_experts_per_token <= c.num_experts);
            assert_eq!(c.routed_expert_hidden_size % 32, 0);
            let _ = c.fingerprint(MlaForm::Absorbed);
            let _ = c.summary_json().to_json();
            let _ = k3::catalogue::required_count(&c);
            let _ = k3::catalogue::layer_tensors(&c, c.num_hidden_layers - 1);
        }
        Err(e) => {
            assert_eq!(e.exit_code(), 2);
            assert!(e.message.starts_with("fuzz/config.json: "));
        }
    }
});

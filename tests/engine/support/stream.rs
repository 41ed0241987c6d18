//! Shared by the streaming tests (tests/engine/stream/): the moderate-width synthetic checkpoint,
//! running `k3` with `--out` and reading the JSON, the bit-identity and RSS checks.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use crate::support::{copy_dir, fixture, run_k3, scratch_dir};

/// Peak RSS may exceed the plan by this much. The plan itself counts the process baseline
/// (`k3::plan::PROCESS_BASELINE`, 12 MiB, in `scratch`; 5–7 MB measured here); the slack covers
/// variation of the allocator and of the kernel's accounting between machines (qemu, other
/// libcs), not memory the engine forgot.
pub const RSS_SLACK: u64 = 4 << 20;

/// The moderate-width checkpoint: 6 layers (KKKMKM, dense layer 0), hidden 256, vocab 1024,
/// KDA 4 × 32, MLA 4 heads, 16 experts of 26,112 B top-4 (so a small cache evicts), 2 layers
/// per shard. Generated once per test binary.
pub fn moderate_spec() -> synth::SynthSpec {
    let mut s = synth::SynthSpec::small(6, 16);
    s.hidden_size = 256;
    s.vocab_size = 1024;
    s.special_ids = [1021, 1022, 1023];
    s.kda_num_heads = 4;
    s.kda_head_dim = 32;
    s.num_attention_heads = 4;
    s.q_lora_rank = 96;
    s.kv_lora_rank = 64;
    s.qk_nope_head_dim = 32;
    s.qk_rope_head_dim = 16;
    s.v_head_dim = 32;
    s.num_experts_per_token = 4;
    s.routed_expert_hidden_size = 128;
    s.moe_intermediate_size = 128;
    s.intermediate_size = 384;
    s.full_attn_layers = vec![4, 6];
    s.layers_per_shard = 2;
    s.seed = 7;
    s
}

/// Path of the generated moderate checkpoint (generated on first use).
pub fn moderate() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("stream_moderate_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        synth::generate(
            &moderate_spec(),
            &dir,
            synth::Options {
                threads: 2,
                ..synth::Options::default()
            },
        )
        .expect("generate the moderate checkpoint");
        dir
    })
    .clone()
}

/// One finished run: exit code, stdout, stderr, and the `--out` JSON (if written).
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub json: Option<Value>,
}

impl Run {
    pub fn json(&self) -> &Value {
        self.json.as_ref().expect("the run wrote no JSON")
    }
    pub fn hash(&self) -> String {
        self.json()["logits_hash"].as_str().unwrap().to_string()
    }
    pub fn u64(&self, path: &[&str]) -> u64 {
        let mut v = self.json();
        for k in path {
            v = &v[*k];
        }
        v.as_u64()
            .unwrap_or_else(|| panic!("{path:?} is not an integer: {v}"))
    }
    pub fn generated(&self) -> Vec<u64> {
        self.json()["generated_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    }
}

/// Runs `k3 <model> <args> --out <tmp>/run.json --quiet`.
pub fn run(model: &Path, tag: &str, args: &[&str]) -> Run {
    let dir = scratch_dir(&format!("stream_run_{tag}"));
    let out = dir.join("run.json");
    let mut a: Vec<String> = vec![model.display().to_string()];
    a.extend(args.iter().map(|s| s.to_string()));
    a.extend(["--out".into(), out.display().to_string(), "--quiet".into()]);
    let o = run_k3(&a);
    let json = std::fs::read(&out)
        .ok()
        .map(|b| serde_json::from_slice(&b).expect("valid JSON"));
    Run {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        json,
    }
}

/// `k3 <model> <base> <extra>` as [`run`] names it `{tag}_{name}`, checked with [`check_ok`].
pub fn checked_run(model: &Path, tag: &str, base: &[&str], name: &str, extra: &[&str]) -> Run {
    let mut a: Vec<&str> = base.to_vec();
    a.extend_from_slice(extra);
    let r = run(model, &format!("{tag}_{name}"), &a);
    check_ok(&r, &format!("{tag} {name} {extra:?}"));
    r
}

/// `k3 pack-trunk <model> <scratch dir named name> --quiet`, which must succeed; the packed
/// trunk's directory.
pub fn packed_trunk(model: &Path, name: &str) -> PathBuf {
    let packed = scratch_dir(name);
    let p = run_k3([
        "pack-trunk",
        model.to_str().unwrap(),
        packed.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    packed
}

/// A budget flag value for exactly `bytes` bytes (decimal GB with enough digits; one byte
/// of margin against rounding down).
pub fn gb_arg(bytes: u64) -> String {
    format!("{:.12}", (bytes + 1) as f64 / 1e9)
}

/// True when `k3` runs under an emulator (`K3_TEST_RUNNER`, e.g. qemu-user): its peak RSS is
/// then the emulator's (translation cache included), not the engine's.
pub fn emulated() -> bool {
    std::env::var("K3_TEST_RUNNER").is_ok_and(|r| !r.trim().is_empty())
}

/// Asserts a run succeeded and (natively) its peak RSS stayed within its plan plus
/// [`RSS_SLACK`].
pub fn check_ok(r: &Run, what: &str) {
    assert_eq!(r.code, Some(0), "{what}: k3 failed:\n{}", r.stderr);
    if emulated() {
        return;
    }
    let rss = r.u64(&["memory", "peak_rss_bytes"]);
    let plan = r.u64(&["memory", "plan", "total"]);
    assert!(
        rss <= plan + RSS_SLACK,
        "{what}: peak RSS {rss} exceeds the plan {plan} + slack {RSS_SLACK}"
    );
}

/// One tensor of a shard read back: name, dtype, shape, bytes.
pub struct ShardTensor {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

/// Reads every tensor of a safetensors shard (header via serde_json), in data order.
pub fn read_shard(path: &Path) -> Vec<ShardTensor> {
    let b = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let h: Value = serde_json::from_slice(&b[8..8 + n]).unwrap();
    let mut out: Vec<(u64, ShardTensor)> = Vec::new();
    for (k, v) in h.as_object().unwrap() {
        if k == "__metadata__" {
            continue;
        }
        let off = v["data_offsets"].as_array().unwrap();
        let (b0, b1) = (off[0].as_u64().unwrap(), off[1].as_u64().unwrap());
        out.push((
            b0,
            ShardTensor {
                name: k.clone(),
                dtype: v["dtype"].as_str().unwrap().to_string(),
                shape: v["shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .collect(),
                data: b[8 + n + b0 as usize..8 + n + b1 as usize].to_vec(),
            },
        ));
    }
    out.sort_by_key(|t| t.0);
    out.into_iter().map(|t| t.1).collect()
}

/// Writes `tensors` as a safetensors shard in the given order (header padded to 8).
pub fn write_shard(path: &Path, tensors: &[ShardTensor]) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for t in tensors {
        header.insert(
            t.name.clone(),
            serde_json::json!({"dtype": t.dtype, "shape": t.shape,
                "data_offsets": [data.len(), data.len() + t.data.len()]}),
        );
        data.extend_from_slice(&t.data);
    }
    let h = serde_json::to_string(&Value::Object(header)).unwrap();
    std::fs::write(path, crate::support::raw_safetensors(&h, &data)).unwrap();
}

/// The shard file holding tensor `name` (by the index file).
pub fn shard_of(dir: &Path, name: &str) -> PathBuf {
    let idx: Value =
        serde_json::from_slice(&std::fs::read(dir.join("model.safetensors.index.json")).unwrap())
            .unwrap();
    dir.join(idx["weight_map"][name].as_str().unwrap())
}

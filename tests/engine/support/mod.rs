//! Code shared by the integration tests: fixture paths and running the `k3` binary.
//!
//! Sub-modules: `io` (temporary directories, patterns, a PRNG), `model_ref` (the float64
//! reference model), `stream` (the moderate streamed checkpoint and its checks), `tokenizer`
//! (the reference tokenizer).

pub mod io;
pub mod model_ref;
pub mod pty;
pub mod released;
pub mod stream;
pub mod tokenizer;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Path of `tests/fixtures/<rel>` in this repository (never `../shared`).
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// A `Command` for the `k3` binary built for this test run. If `K3_TEST_RUNNER` is set (for
/// example `qemu-aarch64-static`), the binary runs under it, so the same tests run under
/// emulation. The runner string may carry arguments separated by spaces.
pub fn k3_command(bin: &str) -> Command {
    match std::env::var("K3_TEST_RUNNER") {
        Ok(runner) if !runner.trim().is_empty() => {
            let mut parts = runner.split_whitespace();
            let mut cmd = Command::new(parts.next().unwrap_or_default());
            cmd.args(parts);
            cmd.arg(bin);
            cmd
        }
        _ => Command::new(bin),
    }
}

/// A `Command` for the `k3` binary built for this test run, under `K3_TEST_RUNNER` if set.
pub fn k3() -> Command {
    k3_command(env!("CARGO_BIN_EXE_k3"))
}

/// Runs `k3 <args>` and returns its output (status, stdout, stderr).
pub fn run_k3<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    k3().args(args)
        .output()
        .expect("failed to start the k3 binary")
}

/// A fresh scratch directory under the target directory, removed and recreated.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Bytes per element of a safetensors dtype name (test helper; 1 for unknown names so that
/// deliberately bad dtypes still produce a file).
pub fn dtype_size(dtype: &str) -> u64 {
    match dtype {
        "BF16" | "F16" | "I16" | "U16" => 2,
        "F32" | "I32" | "U32" => 4,
        "F64" | "I64" | "U64" => 8,
        _ => 1,
    }
}

/// A well-formed safetensors file: tensors laid out in the given order, back to back, each
/// filled with the byte `index + 1`, header padded with spaces to a multiple of 8.
pub fn safetensors_file(tensors: &[(&str, &str, &[u64])]) -> Vec<u8> {
    let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
    let mut data: Vec<u8> = Vec::new();
    for (i, (name, dtype, shape)) in tensors.iter().enumerate() {
        let n: u64 = shape.iter().product::<u64>() * dtype_size(dtype);
        let begin = data.len() as u64;
        data.extend(std::iter::repeat_n((i + 1) as u8, n as usize));
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        header.push_str(&format!(
            ",\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{begin},{}]}}",
            dims.join(","),
            begin + n
        ));
    }
    header.push('}');
    raw_safetensors(&header, &data)
}

/// A safetensors file from a literal header (padded with spaces to a multiple of 8) and data.
pub fn raw_safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

/// Copies a fixture checkpoint (config, shards, index file) into a fresh scratch directory.
pub fn copy_checkpoint(fixture_name: &str, scratch: &str) -> PathBuf {
    let src = fixture(fixture_name);
    let dst = scratch_dir(scratch);
    for ent in std::fs::read_dir(&src).unwrap() {
        let ent = ent.unwrap();
        let name = ent.file_name().to_string_lossy().into_owned();
        if name.ends_with(".safetensors") || name.ends_with(".json") && name != "expected.json" {
            std::fs::copy(ent.path(), dst.join(&name)).unwrap();
        }
    }
    dst
}

/// Copies a checkpoint directory (config, shards, index, tokenizer files) into a fresh
/// scratch directory.
pub fn copy_dir(src: &std::path::Path, name: &str) -> PathBuf {
    let dst = scratch_dir(name);
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, dst.join(p.file_name().unwrap())).unwrap();
        }
    }
    dst
}

/// Runs `k3 <args>` (string arguments) and returns its output.
pub fn run_args(args: &[&str]) -> Output {
    run_k3(args)
}

/// The standard error of a finished `k3`, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The tiny-k3 fixture's path as an argument.
pub fn tiny() -> String {
    fixture("tiny-k3").display().to_string()
}

/// A copy of tiny-k3 (files only) whose config has no `max_position_embeddings` (optional in
/// MODEL.md), so only k3's own limits bound the positions.
pub fn tiny_without_max_positions(name: &str) -> PathBuf {
    let dir = copy_dir(&fixture("tiny-k3"), name);
    let cfg = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let kept: Vec<&str> = cfg
        .lines()
        .filter(|l| !l.contains("\"max_position_embeddings\""))
        .collect();
    assert_eq!(kept.len() + 1, cfg.lines().count());
    std::fs::write(dir.join("config.json"), kept.join("\n")).unwrap();
    dir
}

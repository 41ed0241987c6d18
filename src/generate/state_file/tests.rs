//! Round trips and one test per refusal of FORMATS.md §9.3.

use super::*;
use crate::generate::sample::splitmix64;

fn ident() -> StateIdentity {
    StateIdentity {
        canonical: "hidden_size=8;num_hidden_layers=3;vocab_size=100;layer_map=KKM;numerics=1;\
                    mla_form=absorbed;"
            .into(),
        weights_tag: 0x1234_5678_9abc_def0,
        n_layers: 3,
        n_kda: 2,
        n_mla: 1,
        hk: 2,
        dk: 3,
        kc: 4,
        mla_row: 5,
        vocab_size: 100,
    }
}

fn values(seed: u64, n: u64) -> Vec<f32> {
    (0..n)
        .map(|i| f32::from_bits(splitmix64(seed, i) as u32 & 0xbfff_ffff))
        .collect()
}

fn state(id: &StateIdentity, n_pos: u64) -> SequenceState {
    let mut st = SequenceState::empty(id, 7);
    st.ids = (0..n_pos)
        .map(|i| (splitmix64(1, i) % 100) as u32)
        .collect();
    for (l, k) in st.kda.iter_mut().enumerate() {
        k.s = values(10 + l as u64, id.kda_state_len());
        k.conv = values(20 + l as u64, id.conv_len());
    }
    for (l, m) in st.mla.iter_mut().enumerate() {
        *m = values(30 + l as u64, n_pos * id.mla_row as u64);
    }
    st.sampler = SamplerSettings {
        temperature: 0.7,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        seed: u64::MAX - 3,
    };
    st.logits_hash = 0xfeed_beef;
    st.generated = n_pos / 2;
    st
}

/// Recomputes the trailer after an edit, so the refusal under test is not the checksum's.
fn reseal(b: &mut [u8]) {
    let n = b.len() - 8;
    let h = fnv1a64(&b[..n]);
    b[n..].copy_from_slice(&h.to_le_bytes());
}

fn refused(b: &[u8], id: &StateIdentity) -> String {
    let e = parse(b, "s.state", id).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{}", e.message);
    assert!(e.message.starts_with("s.state: "), "{}", e.message);
    e.message
}

#[test]
fn round_trip_and_size_formula() {
    let id = ident();
    for n_pos in [0, 1, 2, 7] {
        let st = state(&id, n_pos);
        let b = to_bytes(&id, &st).unwrap();
        assert_eq!(
            b.len() as u64,
            id.file_size(n_pos).unwrap(),
            "n_pos {n_pos}"
        );
        let back = parse(&b, "s.state", &id).unwrap();
        assert_eq!(back, st);
        // Bit patterns survive (−0, NaN payloads are stored as they are).
        let a: Vec<u32> = st.kda[1].conv.iter().map(|x| x.to_bits()).collect();
        let c: Vec<u32> = back.kda[1].conv.iter().map(|x| x.to_bits()).collect();
        assert_eq!(a, c);
    }
}

#[test]
fn layout_offsets() {
    let id = ident();
    let st = state(&id, 3);
    let b = to_bytes(&id, &st).unwrap();
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    assert_eq!(&b[0..8], b"K3STATE\0");
    assert_eq!(u32_at(8), 1);
    let hl = (136 + id.canonical.len()).div_ceil(8) * 8;
    assert_eq!(u32_at(12) as usize, hl);
    assert_eq!(u64_at(16), fnv1a64(id.canonical.as_bytes()));
    let dims: Vec<u32> = (0..8).map(|k| u32_at(24 + 4 * k)).collect();
    assert_eq!(dims, [3, 2, 1, 2, 3, 4, 5, id.canonical.len() as u32]);
    assert_eq!((u64_at(56), u64_at(64)), (3, 4));
    assert_eq!(u64_at(72), id.weights_tag);
    assert_eq!(u64_at(80), 0xfeed_beef);
    assert_eq!(f64::from_bits(u64_at(88)), 0.7);
    assert_eq!(f64::from_bits(u64_at(96)), 0.95);
    assert_eq!(f64::from_bits(u64_at(104)), 0.05);
    assert_eq!(
        (u64_at(112), u64_at(120), u64_at(128)),
        (40, u64::MAX - 3, 1)
    );
    assert_eq!(&b[136..136 + id.canonical.len()], id.canonical.as_bytes());
    assert!(b[136 + id.canonical.len()..hl].iter().all(|&x| x == 0));
    // ids: 4 ids, the pending one last, 16 bytes (already a multiple of 8).
    assert_eq!(u32_at(hl + 12), 7);
    // KDA layer 0's state starts right after the ids.
    assert_eq!(
        f32::from_le_bytes(b[hl + 16..hl + 20].try_into().unwrap()).to_bits(),
        st.kda[0].s[0].to_bits()
    );
    let n = b.len() - 8;
    assert_eq!(u64_at(n), fnv1a64(&b[..n]));
}

#[test]
fn save_and_load_through_files() {
    let id = ident();
    let dir = std::env::temp_dir().join(format!("k3-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("a.state");
    let st = state(&id, 5);
    save("--save-state", &p, &id, &st).unwrap();
    assert!(!dir.join("a.state.tmp").exists());
    assert_eq!(load("--load-state", &p, &id).unwrap(), st);
    // A failed save (here a state of the wrong shape) leaves the earlier file intact.
    let mut wrong = st.clone();
    wrong.mla[0].pop();
    let e = save("--save-state", &p, &id, &wrong).unwrap_err();
    assert_eq!(e.exit_code(), 1);
    assert!(!dir.join("a.state.tmp").exists());
    assert_eq!(load("--load-state", &p, &id).unwrap(), st);
    let e = load("--load-state", &dir.join("missing"), &id).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.message.starts_with("flag `--load-state "),
        "{}",
        e.message
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn refuses_wrong_magic() {
    let id = ident();
    let mut b = to_bytes(&id, &state(&id, 2)).unwrap();
    b[0] = b'X';
    assert!(refused(&b, &id).contains("magic"));
    assert!(refused(b"K3S", &id).contains("magic"));
    assert!(refused(b"", &id).contains("magic"));
}

#[test]
fn refuses_other_version() {
    let id = ident();
    let mut b = to_bytes(&id, &state(&id, 2)).unwrap();
    b[8] = 2;
    reseal(&mut b);
    let m = refused(&b, &id);
    assert!(m.contains("byte 8: version: 2"), "{m}");
}

#[test]
fn refuses_bad_header_len() {
    let id = ident();
    let mut b = to_bytes(&id, &state(&id, 2)).unwrap();
    b[12] += 8;
    reseal(&mut b);
    assert!(refused(&b, &id).contains("byte 12: header_len"));
}

#[test]
fn refuses_other_model_naming_first_differing_key() {
    let id = ident();
    let mut other = ident();
    other.canonical = other.canonical.replace("vocab_size=100", "vocab_size=101");
    let b = to_bytes(&other, &state(&other, 2)).unwrap();
    let m = refused(&b, &id);
    assert!(m.contains("config fingerprint"), "{m}");
    assert!(
        m.contains("the state has `vocab_size=101`, the running config has `vocab_size=100`"),
        "{m}"
    );
    // A longer canonical string (one more key) names the extra key.
    other.canonical = format!("{}extra=1;", id.canonical);
    let b = to_bytes(&other, &state(&other, 2)).unwrap();
    assert!(refused(&b, &id).contains("the state has `extra=1`, the running config ends"));
}

#[test]
fn refuses_fingerprint_that_does_not_match_its_string() {
    let id = ident();
    let mut b = to_bytes(&id, &state(&id, 2)).unwrap();
    b[16] ^= 1;
    reseal(&mut b);
    let m = refused(&b, &id);
    assert!(
        m.contains("byte 16: config fingerprint") && m.contains("hashes to"),
        "{m}"
    );
}

#[test]
fn refuses_other_weights() {
    let id = ident();
    let mut other = ident();
    other.weights_tag ^= 0xff;
    let b = to_bytes(&other, &state(&other, 2)).unwrap();
    assert!(refused(&b, &id).contains("byte 72: weights tag"));
}

#[test]
fn refuses_header_fields_inconsistent_with_the_model() {
    let id = ident();
    let b0 = to_bytes(&id, &state(&id, 2)).unwrap();
    for (k, field) in ["n_layers", "n_kda", "n_mla", "Hk", "Dk", "Kc", "mla_row"]
        .iter()
        .enumerate()
    {
        let mut b = b0.clone();
        b[24 + 4 * k] += 1;
        reseal(&mut b);
        let m = refused(&b, &id);
        assert!(
            m.contains(&format!("byte {}: {field}: ", 24 + 4 * k)),
            "{m}"
        );
    }
}

#[test]
fn refuses_n_ids_other_than_n_pos_plus_one() {
    let id = ident();
    let mut b = to_bytes(&id, &state(&id, 2)).unwrap();
    b[64] = 2;
    reseal(&mut b);
    assert!(refused(&b, &id).contains("byte 64: n_ids: 2, expected n_pos + 1 = 3"));
    b[56..64].copy_from_slice(&u64::MAX.to_le_bytes());
    reseal(&mut b);
    assert!(refused(&b, &id).contains("n_ids"));
}

/// A `stats` of 2^64-1 loaded, and the next save's `generated_before + generated` overflowed
/// (a panic in a debug build, a wrapped count in a release one).
#[test]
fn refuses_stats_beyond_the_ids_held() {
    let id = ident();
    let mut b = to_bytes(&id, &state(&id, 2)).unwrap();
    for g in [4, u64::MAX] {
        b[128..136].copy_from_slice(&g.to_le_bytes());
        reseal(&mut b);
        let e = refused(&b, &id);
        assert!(
            e.contains(&format!(
                "byte 128: stats: {g} ids generated, more than the 3 ids"
            )),
            "{e}"
        );
        assert!(e.contains("expected 0 to 3"), "{e}");
    }
    b[128..136].copy_from_slice(&3u64.to_le_bytes());
    reseal(&mut b);
    assert_eq!(parse(&b, "m", &id).unwrap().generated, 3);
}

#[test]
fn refuses_truncated_and_oversized_files() {
    let id = ident();
    let b = to_bytes(&id, &state(&id, 3)).unwrap();
    for cut in [b.len() - 1, b.len() - 9, 200, 137, 135, 60, 9] {
        let m = refused(&b[..cut], &id);
        assert!(m.contains("truncated"), "cut at {cut}: {m}");
    }
    let mut long = b.clone();
    long.push(0);
    assert!(refused(&long, &id).contains("file size"));
    // n_pos claiming more positions than the file holds: a size error, no allocation.
    let mut big = b.clone();
    big[56..64].copy_from_slice(&(1u64 << 40).to_le_bytes());
    big[64..72].copy_from_slice(&((1u64 << 40) + 1).to_le_bytes());
    reseal(&mut big);
    assert!(refused(&big, &id).contains("file size"));
    big[56..64].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
    big[64..72].copy_from_slice(&u64::MAX.to_le_bytes());
    reseal(&mut big);
    assert!(refused(&big, &id).contains("n_pos"));
}

#[test]
fn refuses_wrong_checksum() {
    let id = ident();
    let b0 = to_bytes(&id, &state(&id, 3)).unwrap();
    // A flipped bit in the body, in the ids, in the trailer.
    for at in [b0.len() - 20, id.header_len() as usize + 1, b0.len() - 1] {
        let mut b = b0.clone();
        b[at] ^= 0x10;
        let m = refused(&b, &id);
        assert!(m.contains("checksum"), "flip at {at}: {m}");
    }
}

#[test]
fn refuses_id_outside_the_vocabulary() {
    let id = ident();
    let st = state(&id, 3);
    let mut bad = st.clone();
    bad.pending = 100;
    let b = to_bytes(&id, &bad).unwrap();
    let m = refused(&b, &id);
    assert!(m.contains("ids[3]: 100 is not below vocab_size 100"), "{m}");
}

#[test]
fn refuses_sampler_settings_out_of_range() {
    let id = ident();
    type Edit = fn(&mut SamplerSettings);
    let cases: [(Edit, &str); 4] = [
        (|s| s.temperature = -1.0, "temperature"),
        (|s| s.temperature = f64::INFINITY, "temperature"),
        (|s| s.top_p = 0.0, "top_p"),
        (|s| s.min_p = 1.0, "min_p"),
    ];
    for (edit, key) in cases {
        let mut st = state(&id, 1);
        edit(&mut st.sampler);
        let b = to_bytes(&id, &st).unwrap();
        let m = refused(&b, &id);
        assert!(m.contains(&format!("byte 88: sampler: {key}: ")), "{m}");
    }
}

#[test]
fn first_difference_cases() {
    use super::read::first_difference;
    assert_eq!(
        first_difference("a=1;b=2;", "a=1;b=3;"),
        "the state has `b=2`, the running config has `b=3`"
    );
    assert_eq!(
        first_difference("a=1;", "a=1;"),
        "the canonical strings are equal"
    );
    assert_eq!(
        first_difference("a=1;", "a=1;c=0;"),
        "the state ends, the running config has `c=0`"
    );
}

#[test]
fn identity_from_the_tiny_config() {
    let p =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-k3/config.json");
    let cfg = Config::from_json(&std::fs::read(&p).unwrap(), "config.json").unwrap();
    let id = StateIdentity::from_config(&cfg, MlaForm::Absorbed, 9).unwrap();
    assert_eq!((id.n_layers, id.n_kda, id.n_mla), (13, 9, 4));
    assert_eq!(id.vocab_size, 512);
    assert_eq!(id.fingerprint(), cfg.fingerprint(MlaForm::Absorbed));
    assert_eq!(id.mla_row as usize, cfg.kv_lora_rank + cfg.qk_rope_head_dim);
    let st = SequenceState::empty(&id, 3);
    let b = to_bytes(&id, &st).unwrap();
    assert_eq!(parse(&b, "t", &id).unwrap(), st);
}

#[test]
fn fuzz_seed_written_independently_loads_and_writes_back() {
    // fuzz/seeds/state_file/one-position.state was written by a Python script from the
    // FORMATS.md §9.2 table (not by this writer), for the fuzz target's model shape.
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds/state_file/one-position.state");
    let b = std::fs::read(p).unwrap();
    let id = StateIdentity {
        canonical: "a=1;".into(),
        weights_tag: 7,
        n_layers: 2,
        n_kda: 1,
        n_mla: 1,
        hk: 1,
        dk: 2,
        kc: 2,
        mla_row: 2,
        vocab_size: 16,
    };
    let st = parse(&b, "seed", &id).unwrap();
    assert_eq!((st.ids.clone(), st.pending, st.generated), (vec![3], 5, 1));
    assert_eq!(st.kda[0].s, [0.5, -0.0, 1.5, 2.0]);
    assert_eq!(st.kda[0].s[1].to_bits(), 0x8000_0000);
    assert_eq!(st.kda[0].conv, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(st.mla[0], [-1.0, 0.25]);
    assert_eq!(st.sampler.seed, 12345);
    assert_eq!(st.logits_hash, FNV_OFFSET);
    assert_eq!(to_bytes(&id, &st).unwrap(), b);
}

#[test]
fn mutated_files_are_refused_or_round_trip() {
    // A small in-test fuzz (the fuzz target does this at length): bit flips, truncations,
    // resealed byte edits and header words set to random values.
    let id = ident();
    let b0 = to_bytes(&id, &state(&id, 3)).unwrap();
    for k in 0..4000u64 {
        let r = splitmix64(77, k);
        let mut b = b0.clone();
        let at = (r >> 8) as usize % b.len();
        match r % 4 {
            0 => b[at] ^= 1 << ((r >> 40) % 8),
            1 => b.truncate(at),
            2 => {
                b[at] = (r >> 48) as u8;
                reseal(&mut b);
            }
            _ => {
                let off = 8 + 4 * ((r >> 8) as usize % 30);
                b[off..off + 4].copy_from_slice(&((r >> 32) as u32).to_le_bytes());
                reseal(&mut b);
            }
        }
        match parse(&b, "m", &id) {
            Ok(st) => assert_eq!(to_bytes(&id, &st).unwrap(), b, "mutation {k}"),
            Err(e) => assert_eq!(e.exit_code(), 2, "mutation {k}: {}", e.message),
        }
    }
}

#[test]
fn refuses_non_zero_padding() {
    // Found by the mutation test: padding bytes were ignored, so two different files loaded
    // as the same state.
    let id = ident();
    let mut b = to_bytes(&id, &state(&id, 2)).unwrap(); // n_ids = 3: 4 bytes of ids padding
    let hl = id.header_len() as usize;
    assert!(hl > 136 + id.canonical.len());
    b[hl - 1] = 1;
    reseal(&mut b);
    let m = refused(&b, &id);
    assert!(
        m.contains(&format!("byte {}: header padding", hl - 1)),
        "{m}"
    );
    let mut b = to_bytes(&id, &state(&id, 2)).unwrap();
    b[hl + 12] = 1;
    reseal(&mut b);
    let m = refused(&b, &id);
    assert!(m.contains(&format!("byte {}: ids padding", hl + 12)), "{m}");
}

#[test]
fn size_formula_at_the_released_widths() {
    // FORMATS.md §9.2: "K3 with 4,096 positions: ≈ 464.6 MB of KDA state + 226.5 MB of MLA
    // rows" (69 KDA layers of 96 heads × 128, Kc 4; 24 MLA layers of 512 + 64).
    let id = StateIdentity {
        canonical: String::new(),
        weights_tag: 0,
        n_layers: 93,
        n_kda: 69,
        n_mla: 24,
        hk: 96,
        dk: 128,
        kc: 4,
        mla_row: 576,
        vocab_size: 163_840,
    };
    let kda = 69 * 4 * (id.kda_state_len() + id.conv_len());
    let mla = 24 * 4096 * 4 * 576;
    assert_eq!(kda / 100_000, 4646);
    assert_eq!(mla / 100_000, 2264);
    let ids = 4097u64.div_ceil(2) * 8;
    assert_eq!(id.file_size(4096), Some(136 + ids + kda + mla + 8));
}

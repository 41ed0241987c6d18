//! safetensors header parser: the input is a whole shard file. Never panics; an accepted
//! header tiles its data section exactly and indexes cleanly.
#![no_main]
use k3::checkpoint::IndexBuilder;
use k3::safetensors;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let size = data.len() as u64;
    let n = match safetensors::header_len("fuzz.safetensors", data, size) {
        Ok(n) => n as usize,
        Err(e) => {
            assert_eq!(e.exit_code(), 2);
            return;
        }
    };
    let h = match safetensors::parse_header("fuzz.safetensors", &data[8..8 + n], size) {
        Ok(h) => h,
        Err(e) => {
            assert_eq!(e.exit_code(), 2);
            return;
        }
    };
    let mut cursor = 0u64;
    for t in h.iter() {
        assert_eq!(t.begin, cursor, "tensors must tile the data section");
        cursor = t.end;
    }
    assert_eq!(cursor, h.data_len);
    let mut b = IndexBuilder::new(Path::new("fuzz"));
    b.add_shard("fuzz.safetensors", "fuzz/fuzz.safetensors".into(), size, &h)
        .expect("a valid header indexes");
    let idx = b.finish();
    assert_eq!(idx.len(), h.len());
    for t in h.iter() {
        let i = idx.get(t.name).expect("every tensor is found");
        assert_eq!(i.shape, t.shape);
        assert_eq!(i.offset, h.absolute(t.begin));
    }
    idx.for_each(|_, name, _| assert!(h.iter().any(|t| t.name == name)));
});

//! Sizes as the reports print them (decimal GB, MB, kB with three significant digits, bytes),
//! counts with their noun, the trunk size, and compact index lists: one formatting for the run
//! report, the plan, `inspect` and `pack-trunk`.

/// A size in decimal units with three significant digits (ENGINE.md §6: one unit style for
/// every report): `1.23 GB`, `12.3 GB`, `109 GB` (and `1560 GB` past a thousand), `5.30 MB`,
/// `24.6 kB`, and below 1000 the exact bytes (`1 byte`, `76 bytes`), so a non-zero size never
/// reads as zero.
pub fn gb(bytes: u64) -> String {
    let b = bytes as f64;
    // A figure that would round up to 1000 of a unit is shown in the next unit.
    if b >= 999.5e6 {
        sig3(b / 1e9, "GB")
    } else if b >= 999.5e3 {
        sig3(b / 1e6, "MB")
    } else if bytes >= 1000 {
        sig3(b / 1e3, "kB")
    } else {
        count(bytes, "byte", "bytes")
    }
}

/// `x` (at least 1) with three significant digits (more above 1000, never in exponent form).
fn sig3(x: f64, unit: &str) -> String {
    if x >= 99.95 {
        format!("{x:.0} {unit}")
    } else if x >= 9.995 {
        format!("{x:.1} {unit}")
    } else {
        format!("{x:.2} {unit}")
    }
}

/// `n` followed by the singular or plural noun: `1 token`, `2 tokens`, `0 tokens`.
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The trunk size as `inspect`, the run's plan and `pack-trunk` print it, under one name:
/// `trunk weights 209 kB (5 layers)`: the bytes of the layers' trunk runs (the dense weights
/// as they lie in the shards, the same bytes a packed `trunk.bin` holds before its alignment
/// padding), for `layers` layers.
pub fn trunk_size(bytes: u64, layers: usize) -> String {
    format!(
        "trunk weights {} ({})",
        gb(bytes),
        count(layers as u64, "layer", "layers")
    )
}

/// `a` and `b` as [`gb`] gives them, with more digits (down to the exact bytes) when two
/// different sizes would read the same: for messages that compare them ("the budget … is
/// below the minimum …").
pub fn gb_pair(a: u64, b: u64) -> (String, String) {
    let (x, y) = (gb(a), gb(b));
    if x != y || a == b {
        return (x, y);
    }
    // Large sizes: more decimals of GB; small ones (or still equal): the exact bytes.
    for digits in (4..=8).filter(|_| a.min(b) >= 10_000_000) {
        let f = |v: u64| format!("{:.digits$} GB", v as f64 / 1e9);
        let (x, y) = (f(a), f(b));
        if x != y {
            return (x, y);
        }
    }
    (format!("{a} bytes"), format!("{b} bytes"))
}

/// Compact list of layer indices: `0, 3-5, 9` (`none` when empty).
pub fn layer_list(ls: impl IntoIterator<Item = usize>) -> String {
    let v: Vec<usize> = ls.into_iter().collect();
    index_ranges(&v, "-", ", ")
}

/// Runs of consecutive indices of an ascending list, each `a{dash}b` (or `a` alone), joined by
/// `sep`; `none` when empty.
pub fn index_ranges(v: &[usize], dash: &str, sep: &str) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}{dash}{}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(sep)
    }
}

/// A hash as written in JSON and reports: 16 lowercase hex digits.
pub fn hex(h: u64) -> String {
    format!("{h:016x}")
}

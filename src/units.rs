//! Sizes as the reports print them (decimal GB, MB, kB, bytes) and compact index lists: one
//! formatting for the run report, the plan, `inspect` and `pack-trunk`.

/// Decimal gigabytes with enough digits for tiny and huge figures: GB, MB, kB (decimal), and
/// below 10 kB the exact bytes, so a non-zero size never reads as zero.
pub fn gb(bytes: u64) -> String {
    let g = bytes as f64 / 1e9;
    if g >= 10.0 {
        format!("{g:.1} GB")
    } else if g >= 0.01 {
        format!("{g:.3} GB")
    } else if bytes >= 1_000_000 {
        format!("{:.1} MB", bytes as f64 / 1e6)
    } else if bytes >= 10_000 {
        format!("{:.1} kB", bytes as f64 / 1e3)
    } else {
        format!("{bytes} bytes")
    }
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

//! Greedy choice and the non-finite check (MODEL.md §5.6, §6.8).

/// Index of the first maximum of `x` (greedy decoding: the lowest id among equal maxima,
/// MODEL.md §6.8). −0 and +0 compare equal. Returns `None` for an empty slice or when any
/// element is NaN: the engine refuses non-finite logits before choosing (MODEL.md §5.6), and
/// a NaN must never be silently skipped or chosen. ±inf are ordinary values here.
pub fn argmax(x: &[f32]) -> Option<usize> {
    let mut best = 0;
    let mut m = *x.first()?;
    if m.is_nan() {
        return None;
    }
    for (i, &v) in x.iter().enumerate().skip(1) {
        if v.is_nan() {
            return None;
        }
        if v > m {
            m = v;
            best = i;
        }
    }
    Some(best)
}

/// Index of the first NaN or ±inf in `x`, if any. The engine calls it on each layer output and
/// on the logits and stops with exit 2 naming the layer and position (MODEL.md §5.6).
pub fn first_non_finite(x: &[f32]) -> Option<usize> {
    x.iter().position(|v| !v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_maximum_wins() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), Some(1));
        assert_eq!(argmax(&[-0.0, 0.0]), Some(0));
        assert_eq!(argmax(&[0.0, f32::INFINITY]), Some(1));
        assert_eq!(argmax(&[]), None);
        assert_eq!(argmax(&[1.0, f32::NAN, 5.0]), None);
        assert_eq!(argmax(&[f32::NAN]), None);
        assert_eq!(first_non_finite(&[1.0, f32::NEG_INFINITY]), Some(1));
        assert_eq!(first_non_finite(&[1.0, 2.0]), None);
    }
}

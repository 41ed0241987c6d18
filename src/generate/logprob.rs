//! Log-probabilities for the server's `logprobs` (ENGINE.md §11): a log-softmax in f64 with
//! the engine's own `exp64` and `log64` (MODEL.md §5.4), the sum a `seqsum` in id order
//! (§5.3), so the figures are the same bits on every machine.

use crate::constrain::Mask;
use k3_kernels::{exp64, log64, seqsum};

/// The log-softmax of the logits `z` (length V) at every id, in one pass over the sum:
/// m = max z; L = log64(Σ_{i ascending} exp64(f64(z_i) − m)); out_i = (f64(z_i) − m) − L.
/// Returns `None` for empty logits or any non-finite logit (refused before choosing,
/// MODEL.md §5.6).
pub fn log_softmax(z: &[f32]) -> Option<Vec<f64>> {
    let (m, log_sum) = norm(z)?;
    Some(z.iter().map(|&v| (v as f64 - m) - log_sum).collect())
}

/// The log-probability of `id` alone (same formula and bits as [`log_softmax`]`[id]`);
/// `None` also for `id` ≥ V.
pub fn logprob(z: &[f32], id: u32) -> Option<f64> {
    let v = *z.get(id as usize)?;
    let (m, log_sum) = norm(z)?;
    Some((v as f64 - m) - log_sum)
}

/// The log-softmax of the masked distribution (ENGINE.md §8 "Constraints": logprobs are of
/// it): the same formula over the ids `mask` admits only (m their maximum, the sum over them
/// in id order); an id the mask forbids gets −∞. Without a mask, [`log_softmax`]. `None` as
/// there, and when the mask admits nothing.
pub fn log_softmax_masked(z: &[f32], mask: Option<&Mask>) -> Option<Vec<f64>> {
    let Some(mask) = mask else {
        return log_softmax(z);
    };
    if z.is_empty() || z.iter().any(|v| !v.is_finite()) || mask.count() == 0 {
        return None;
    }
    let m = mask
        .iter()
        .filter_map(|id| z.get(id as usize))
        .fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let log_sum = log64(seqsum(
        mask.iter()
            .filter_map(|id| z.get(id as usize))
            .map(|&v| exp64(v as f64 - m)),
    ));
    let mut out = vec![f64::NEG_INFINITY; z.len()];
    for id in mask.iter() {
        if let Some(&v) = z.get(id as usize) {
            out[id as usize] = (v as f64 - m) - log_sum;
        }
    }
    Some(out)
}

/// (m, L) of [`log_softmax`].
fn norm(z: &[f32]) -> Option<(f64, f64)> {
    if z.is_empty() || z.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let m = z.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    Some((m, log64(seqsum(z.iter().map(|&v| exp64(v as f64 - m))))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_worked() {
        // Two equal logits: log(1/2) each, as (0 − 0) − log64(2).
        let l = log_softmax(&[3.0, 3.0]).unwrap();
        assert_eq!(l, [-log64(2.0), -log64(2.0)]);
        assert!((l[0] + std::f64::consts::LN_2).abs() < 1e-15);
        // One logit: probability 1.
        assert_eq!(log_softmax(&[-7.5]).unwrap(), [0.0]);
        assert_eq!(logprob(&[1.0, 2.0], 2), None);
        assert_eq!(logprob(&[1.0, f32::NAN], 0), None);
        assert_eq!(log_softmax(&[]), None);
    }

    #[test]
    fn masked_log_softmax_is_over_the_admitted_ids() {
        let z = [1.0f32, 2.0, 3.0, 4.0];
        let mut m = Mask::new(4);
        m.set(0);
        m.set(2);
        let l = log_softmax_masked(&z, Some(&m)).unwrap();
        let alone = log_softmax(&[1.0, 3.0]).unwrap();
        assert_eq!(l[0].to_bits(), alone[0].to_bits());
        assert_eq!(l[2].to_bits(), alone[1].to_bits());
        assert!(l[1] == f64::NEG_INFINITY && l[3] == f64::NEG_INFINITY);
        assert_eq!(log_softmax_masked(&z, None), log_softmax(&z));
        assert_eq!(log_softmax_masked(&z, Some(&Mask::new(4))), None);
    }

    #[test]
    fn probabilities_sum_to_one_and_logprob_matches() {
        let z: Vec<f32> = (0..300)
            .map(|i| ((i * 37) % 101) as f32 * 0.173 - 8.0)
            .collect();
        let l = log_softmax(&z).unwrap();
        let total: f64 = l.iter().map(|&x| exp64(x)).sum();
        assert!((total - 1.0).abs() < 1e-12, "{total}");
        for id in [0u32, 17, 299] {
            assert_eq!(logprob(&z, id).unwrap().to_bits(), l[id as usize].to_bits());
        }
        // The maximum has the largest log-probability, ≤ 0.
        let best = k3_kernels::argmax(&z).unwrap();
        assert!(l.iter().all(|&x| x <= l[best]) && l[best] <= 0.0);
    }
}

//! MoE routing arithmetic (MODEL.md §6.7 steps 2–3): top-k selection from biased sigmoid
//! scores and the combine weights from the unbiased ones. Scalar only: a few hundred
//! comparisons per token, no vector work.

use crate::error::KernelError;
use crate::num::rnd;

/// Selects the `k` experts with the largest key_e = (f64)scores\[e\] + (f64)bias\[e\] (f64, not
/// rounded), ties to the lower expert index (MODEL.md §6.7 step 2). Returns the expert
/// indices in *selection order*: key descending, ties by lower index.
///
/// `scores` are the rounded sigmoid scores s_e = rnd(sig64(r_e)) and `bias` the
/// `e_score_correction_bias` (one per expert). A NaN key is an error naming the expert
/// (`router key of expert 17 is NaN (score NaN, bias 0.5)`).
///
/// Panics if the lengths differ or `k` is 0 or exceeds the number of experts.
pub fn moe_select(scores: &[f32], bias: &[f32], k: usize) -> Result<Vec<usize>, KernelError> {
    assert_eq!(scores.len(), bias.len(), "moe_select: one bias per expert");
    assert!(
        k >= 1 && k <= scores.len(),
        "moe_select: top-{k} of {}",
        scores.len()
    );
    let mut keyed = Vec::with_capacity(scores.len());
    for (e, (&s, &b)) in scores.iter().zip(bias).enumerate() {
        let key = s as f64 + b as f64;
        if key.is_nan() {
            return Err(KernelError::new(format!(
                "router key of expert {e} is NaN (score {s}, bias {b})"
            )));
        }
        keyed.push((key, e));
    }
    // Total order: key descending (no NaN left; −0 and +0 compare equal), then index.
    keyed.sort_unstable_by(|a, b| b.0.partial_cmp(&a.0).expect("no NaN").then(a.1.cmp(&b.1)));
    Ok(keyed[..k].iter().map(|&(_, e)| e).collect())
}

/// Combine weights of the selected experts (MODEL.md §6.7 step 3), in selection order:
/// if `renormalize` and more than one expert is selected,
/// Z = seqsum_{selection order}((f64)s_e) and w_e = rnd(((f64)s_e / (Z + 1e-20)) × rsf);
/// otherwise w_e = rnd((f64)s_e × rsf). `rsf` = `routed_scaling_factor`; the scores are the
/// unbiased ones. out \[selected.len()\].
///
/// Panics if `out` is not as long as `selected` or an index is out of range.
pub fn moe_weights(
    scores: &[f32],
    selected: &[usize],
    renormalize: bool,
    rsf: f64,
    out: &mut [f32],
) {
    assert_eq!(
        selected.len(),
        out.len(),
        "moe_weights: one weight per selected expert"
    );
    if renormalize && selected.len() > 1 {
        let mut z = 0.0f64;
        for &e in selected {
            z += scores[e] as f64;
        }
        for (w, &e) in out.iter_mut().zip(selected) {
            *w = rnd((scores[e] as f64 / (z + 1e-20)) * rsf);
        }
    } else {
        for (w, &e) in out.iter_mut().zip(selected) {
            *w = rnd(scores[e] as f64 * rsf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_go_to_the_lower_index_and_order_is_key_descending() {
        let s = [0.5f32, 0.7, 0.5, 0.9, 0.7];
        let b = [0.0f32; 5];
        assert_eq!(moe_select(&s, &b, 3).unwrap(), vec![3, 1, 4]);
        assert_eq!(moe_select(&s, &b, 5).unwrap(), vec![3, 1, 4, 0, 2]);
    }

    #[test]
    fn bias_changes_selection_but_not_weights() {
        let s = [0.6f32, 0.5, 0.4];
        let b = [0.0f32, 0.0, 0.3];
        let sel = moe_select(&s, &b, 2).unwrap();
        assert_eq!(sel, vec![2, 0]);
        let mut w = [0.0f32; 2];
        moe_weights(&s, &sel, true, 1.0, &mut w);
        let z = 0.4f32 as f64 + 0.6f32 as f64;
        assert_eq!(
            w,
            [
                rnd(0.4f32 as f64 / (z + 1e-20)),
                rnd(0.6f32 as f64 / (z + 1e-20))
            ]
        );
        moe_weights(&s, &sel[..1], true, 2.5, &mut w[..1]);
        assert_eq!(w[0], rnd(0.4f32 as f64 * 2.5));
    }

    #[test]
    fn nan_key_is_an_error_naming_the_expert() {
        let e = moe_select(&[0.1, f32::NAN], &[0.0, 0.0], 1).unwrap_err();
        assert!(
            e.message.starts_with("router key of expert 1 is NaN"),
            "{e}"
        );
    }
}

//! MODEL.md §11 silent-failure checklist, model rows: the independent float64 reference
//! (tests/model_ref) reproduces the fixture logits, and each wrong-but-plausible variant moves
//! them beyond the tolerance the engine is held to — so the engine's fixture tests would fail
//! on that variant.

mod model_ref;
use model_ref::*;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

struct Fx {
    model: RefModel,
    ids: Vec<u32>,
    expected: Vec<Vec<f32>>,
    tol: f64,
}

fn tiny() -> Fx {
    let dir = fixture("tiny-k3");
    let c = Ckpt::open(&dir);
    let e: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let ids: Vec<u32> = e["full_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let model = RefModel::load(&c);
    let expected = read_f32_rows(&dir.join("logits.f32"), model.v);
    let tol = 1e-4 * e["max_abs_logit"].as_f64().unwrap().max(1.0);
    Fx {
        model,
        ids,
        expected,
        tol,
    }
}

#[test]
fn reference_matches_fixture_and_every_variant_is_detected() {
    let mut fx = tiny();
    let (logits, _) = fx.model.forward(&fx.ids);
    let base = max_abs_diff(&logits, &fx.expected);
    eprintln!("reference vs fixture: {base:e} (tol {:e})", fx.tol);
    assert!(
        base < fx.tol * 0.01,
        "reference disagrees with the fixture: {base}"
    );
    use Variant::*;
    for v in [
        ALogPerChannel,
        KdaReadBeforeDecay,
        KdaOutputOldState,
        L2NormMean,
        QScaleMissing,
        QScaleOnK,
        ConvTapsReversed,
        ConvHistoryPostConv,
        KdaGateBeforeNorm,
        KdaPerHeadGain,
        KdaNormEps1e6,
        MlaRotary,
        MlaScaleDn,
        MlaKpeNormed,
        MlaNormOverRow,
        MlaEps1e5,
        MlaGateNorm,
        RouterSoftmax,
        BiasInWeights,
        NormPerExpert,
        SharedWeighted,
        SituSigmoidOfCapped,
        SituCapsSwapped,
        AggNormalisedValues,
        AttnResNoClear,
        SnapshotAfterClear,
        NoOutputAgg,
        MlaUnnormCached,
    ] {
        fx.model.variant = v;
        let (l, _) = fx.model.forward(&fx.ids);
        let d = max_abs_diff(&l, &fx.expected);
        eprintln!("{v:?}: {d:e}");
    }
}

//! `K3_ISA` / `K3_THREADS` selection (ENGINE.md §3): a path the CPU lacks, an unknown name or
//! a bad thread count is an error naming the variable, never a silent fallback. One test
//! function, so no other test of this binary observes the changed environment.

use k3_kernels::{Isa, Kernels};

#[test]
fn environment_selection_and_refusals() {
    std::env::set_var("K3_ISA", "scalar");
    std::env::set_var("K3_THREADS", "3");
    let k = Kernels::from_env().unwrap();
    assert_eq!((k.isa(), k.threads()), (Isa::Scalar, 3));

    std::env::set_var("K3_ISA", "avx512");
    let e = Kernels::from_env().unwrap_err();
    assert!(
        e.message
            .starts_with("K3_ISA avx512: unknown instruction set"),
        "{e}"
    );

    let missing = if cfg!(target_arch = "aarch64") {
        "avx2"
    } else {
        "neon"
    };
    std::env::set_var("K3_ISA", missing);
    let e = Kernels::from_env().unwrap_err();
    assert!(
        e.message.starts_with(&format!(
            "K3_ISA {missing}: this CPU does not support {missing}"
        )),
        "{e}"
    );
    assert!(Kernels::new(Isa::parse(missing).unwrap(), 1).is_err());

    std::env::set_var("K3_ISA", "");
    std::env::set_var("K3_THREADS", "0");
    let e = Kernels::from_env().unwrap_err();
    assert!(e.message.starts_with("K3_THREADS 0:"), "{e}");
    std::env::set_var("K3_THREADS", "two");
    assert!(Kernels::from_env()
        .unwrap_err()
        .message
        .starts_with("K3_THREADS two:"));

    std::env::remove_var("K3_THREADS");
    std::env::remove_var("K3_ISA");
    let k = Kernels::from_env().unwrap();
    assert_eq!(k.isa(), Isa::best());
    assert_eq!(k.threads(), k3_kernels::pool::default_threads());
}

#[test]
fn kernels_can_be_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Kernels>();
    assert_send_sync::<k3_kernels::ThreadPool>();
    assert_send_sync::<k3_kernels::Mxfp4<'static>>();
}

//! [`Kernels`]: the public face of every numeric operation of the forward pass (MODEL.md §6),
//! bound to one ISA path and one thread pool.
//!
//! Each method checks its shapes (a mismatch is a caller bug and panics with the operation's
//! name), cuts its output into a fixed partition, runs the pieces on the pool and calls the
//! selected path's serial kernel for each piece. Results never depend on the path or the
//! thread count (MODEL.md §5.5).

use crate::error::KernelError;
use crate::isa::Isa;
use crate::mxfp4::{Mxfp4, GROUP};
use crate::pool::{threads_from_env, SyncPtr, ThreadPool, MAX_THREADS};
use crate::scalar;

/// Output rows per task of a matrix product. A constant, so the partition never depends
/// on the thread count; large enough that per-task work (widening x, the first cache
/// misses of a block) stays small next to the block's weights.
const ROW_BLOCK: usize = 64;
/// Elements per task of an element-wise operation (inputs shorter than this run inline).
const EW_CHUNK: usize = 8192;

/// Rows per task of a matrix-vector product: `ROW_BLOCK`, or fewer for small matrices so
/// that even a 64-row router or a 96-row projection is split into 8 or more tasks (an even
/// number of rows, for the paired row kernels). Depends on the shape only.
fn matvec_block(rows: usize) -> usize {
    (rows.div_ceil(8).div_ceil(2) * 2).clamp(2, ROW_BLOCK)
}

thread_local! {
    /// The widened input vector of a matrix-vector product, kept per thread between calls so
    /// decode allocates nothing in steady state.
    static X64: std::cell::Cell<Vec<f64>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Upper bound, in bytes, of the scratch one thread keeps between kernel calls: the prepared
/// (widened) inputs of one call, at most `x_elems` f64 elements in all, and the tiled prefill
/// product's accumulators (`ROW_BLOCK` rows × `t` positions × `DOT_LANES`), x chunk (`t` ×
/// at most 1024 columns) and widened rows (2048 values: the tiled products use four rows of
/// 488), plus a task's output block. The buffers are
/// kept per thread so that decode allocates nothing in steady state; a memory plan counts
/// this once per thread ([`Kernels::threads`]). Depends on shapes only, not on the path.
pub fn thread_scratch_bytes(t: usize, x_elems: usize) -> u64 {
    let (t, rb, lanes) = (
        t.max(1) as u64,
        ROW_BLOCK as u64,
        crate::num::DOT_LANES as u64,
    );
    const MAX_CHUNK_COLS: u64 = 1024;
    // padding of prepared inputs to whole 32-column groups, generously
    let prep = x_elems as u64 + 4096;
    let tile = rb * t * lanes + t * MAX_CHUNK_COLS + 2 * MAX_CHUNK_COLS;
    8 * (prep + tile) + 4 * rb * t
}

/// Runs `f` with this thread's reusable f64 buffer (taken out for the call, so a nested call
/// just gets an empty one of its own).
fn with_scratch<R>(f: impl FnOnce(&mut Vec<f64>) -> R) -> R {
    let mut v = X64.take();
    let r = f(&mut v);
    X64.set(v);
    r
}

/// Calls the serial kernel `f` of the path `isa`.
macro_rules! dispatch {
    ($isa:expr, $f:ident($($arg:expr),* $(,)?)) => {
        match $isa {
            Isa::Scalar => scalar::$f($($arg),*),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a `Kernels` only holds an ISA that `Isa::is_available` confirmed.
            Isa::Avx2 => unsafe { crate::x86_64::avx2::$f($($arg),*) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: a `Kernels` only holds an ISA that `Isa::is_available` confirmed.
            Isa::Neon => unsafe { crate::aarch64::neon::$f($($arg),*) },
            #[allow(unreachable_patterns)]
            other => unreachable!("ISA {other} is not compiled into this build"),
        }
    };
}

// After `dispatch!` (textual macro scope).
mod matmul;

/// The numeric kernels on one ISA path with one thread pool.
///
/// Every method follows MODEL.md §5 exactly, so the results are bit-identical for every
/// [`Isa`] and every thread count. Vectors are fp32 (`f32`) unless marked f64; BF16 weights
/// are raw bit patterns (`u16`, see [`crate::cast`]); matrices are `[rows, cols]` row-major
/// and a batch of T input vectors is `[T, cols]`.
///
/// Methods panic when slice lengths do not match the documented shapes: that is a bug in
/// the caller, never a property of the input files (the engine validates those first).
pub struct Kernels {
    isa: Isa,
    pool: ThreadPool,
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels")
            .field("isa", &self.isa)
            .field("threads", &self.pool.threads())
            .finish()
    }
}

impl Kernels {
    /// Kernels on path `isa` with `threads` participants (the calling thread counts as one).
    ///
    /// Errors when the CPU lacks `isa` (`…: this CPU does not support neon …`) or `threads`
    /// is outside 1…1024.
    pub fn new(isa: Isa, threads: usize) -> Result<Kernels, KernelError> {
        if !isa.is_available() {
            return Err(KernelError::new(format!(
                "instruction set {isa}: not supported by this CPU (available: {})",
                crate::isa::available()
                    .iter()
                    .map(|i| i.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if !(1..=MAX_THREADS).contains(&threads) {
            return Err(KernelError::new(format!(
                "{threads} threads: expected 1 to {MAX_THREADS}"
            )));
        }
        Ok(Kernels {
            isa,
            pool: ThreadPool::new(threads),
        })
    }

    /// Kernels configured from the environment: `K3_ISA` (else the best path) and
    /// `K3_THREADS` (else all available CPUs). Errors name the variable.
    pub fn from_env() -> Result<Kernels, KernelError> {
        Kernels::new(Isa::from_env()?, threads_from_env()?)
    }

    /// The path these kernels run on.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Number of threads (workers + caller).
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// The thread pool, for callers that split work of their own by output element (heads,
    /// query positions, experts: MODEL.md §5.5). Kernel methods called from inside a task run
    /// serially on that task's thread.
    pub fn pool(&self) -> &ThreadPool {
        &self.pool
    }

    // ----- §5.2 dot -------------------------------------------------------------------------

    /// `dot(a, b)` of two fp32 vectors (MODEL.md §5.2), f64 result. Serial.
    pub fn dot_f32(&self, a: &[f32], b: &[f32]) -> f64 {
        assert_eq!(a.len(), b.len(), "dot_f32: length mismatch");
        dispatch!(self.isa, dot_f32(a, b))
    }

    /// `dot(w, x)` of a BF16 vector (bit patterns) and an fp32 vector (MODEL.md §5.2). Serial.
    pub fn dot_bf16(&self, w: &[u16], x: &[f32]) -> f64 {
        assert_eq!(w.len(), x.len(), "dot_bf16: length mismatch");
        dispatch!(self.isa, dot_bf16(w, x))
    }

    // ----- §5.4 transcendentals over f64 slices -----------------------------------------------

    /// y\[i\] = exp64(x\[i\]) (MODEL.md §5.4), f64 in and out.
    pub fn exp64(&self, x: &[f64], y: &mut [f64]) {
        check_len("exp64", x.len(), y.len());
        let isa = self.isa;
        self.pool.for_each_chunk(y, EW_CHUNK, |i, yc| {
            let s = i * EW_CHUNK;
            dispatch!(isa, exp64(&x[s..s + yc.len()], yc))
        });
    }

    /// y\[i\] = tanh64(x\[i\]) (MODEL.md §5.4), f64 in and out.
    pub fn tanh64(&self, x: &[f64], y: &mut [f64]) {
        check_len("tanh64", x.len(), y.len());
        let isa = self.isa;
        self.pool.for_each_chunk(y, EW_CHUNK, |i, yc| {
            let s = i * EW_CHUNK;
            dispatch!(isa, tanh64(&x[s..s + yc.len()], yc))
        });
    }

    /// y\[i\] = sig64(x\[i\]) (MODEL.md §5.4), f64 in and out.
    pub fn sig64(&self, x: &[f64], y: &mut [f64]) {
        check_len("sig64", x.len(), y.len());
        let isa = self.isa;
        self.pool.for_each_chunk(y, EW_CHUNK, |i, yc| {
            let s = i * EW_CHUNK;
            dispatch!(isa, sig64(&x[s..s + yc.len()], yc))
        });
    }

    /// y\[i\] = silu64(x\[i\]) (MODEL.md §5.4), f64 in and out.
    pub fn silu64(&self, x: &[f64], y: &mut [f64]) {
        check_len("silu64", x.len(), y.len());
        let isa = self.isa;
        self.pool.for_each_chunk(y, EW_CHUNK, |i, yc| {
            let s = i * EW_CHUNK;
            dispatch!(isa, silu64(&x[s..s + yc.len()], yc))
        });
    }

    // ----- element-wise fp32 operations -------------------------------------------------------

    /// y\[i\] = rnd(sig64(x\[i\])): KDA β (MODEL.md §6.4 step 5), router scores (§6.7 step 1).
    pub fn sigmoid(&self, x: &[f32], y: &mut [f32]) {
        check_len("sigmoid", x.len(), y.len());
        let isa = self.isa;
        self.pool.for_each_chunk(y, EW_CHUNK, |i, yc| {
            let s = i * EW_CHUNK;
            dispatch!(isa, sigmoid(&x[s..s + yc.len()], yc))
        });
    }

    /// y\[i\] = rnd(silu64(x\[i\])) (MODEL.md §5.4).
    pub fn silu(&self, x: &[f32], y: &mut [f32]) {
        check_len("silu", x.len(), y.len());
        let isa = self.isa;
        self.pool.for_each_chunk(y, EW_CHUNK, |i, yc| {
            let s = i * EW_CHUNK;
            dispatch!(isa, silu(&x[s..s + yc.len()], yc))
        });
    }

    /// SiTU-GLU (MODEL.md §6.1): y\[i\] = rnd(((β1 × tanh64(a/β1)) × sig64(a)) ×
    /// (β2 × tanh64(b/β2))) with a = gate\[i\], b = up\[i\] widened to f64; β1 = `situ_beta`,
    /// β2 = `situ_linear_beta` (f64 from the config). |y| < β1·β2.
    pub fn situ_glu(&self, gate: &[f32], up: &[f32], beta1: f64, beta2: f64, y: &mut [f32]) {
        check_len("situ_glu", gate.len(), y.len());
        check_len("situ_glu", up.len(), y.len());
        let isa = self.isa;
        self.pool.for_each_chunk(y, EW_CHUNK, |i, yc| {
            let s = i * EW_CHUNK;
            let e = s + yc.len();
            dispatch!(isa, situ_glu(&gate[s..e], &up[s..e], beta1, beta2, yc))
        });
    }

    /// Output gate in place: o\[i\] = rnd((f64)o\[i\] × sig64(g\[i\])) (KDA §6.4 step 8 after the
    /// norm; MLA §6.5 step 5).
    pub fn sigmoid_gate(&self, o: &mut [f32], g: &[f32]) {
        check_len("sigmoid_gate", g.len(), o.len());
        let isa = self.isa;
        self.pool.for_each_chunk(o, EW_CHUNK, |i, oc| {
            let s = i * EW_CHUNK;
            dispatch!(isa, sigmoid_gate(oc, &g[s..s + oc.len()]))
        });
    }

    /// Residual add in place: p\[i\] = rnd((f64)p\[i\] + (f64)y\[i\]) (MODEL.md §6.3 steps 4, 7;
    /// §6.7 step 10).
    pub fn add(&self, p: &mut [f32], y: &[f32]) {
        check_len("add", y.len(), p.len());
        let isa = self.isa;
        self.pool.for_each_chunk(p, EW_CHUNK, |i, pc| {
            let s = i * EW_CHUNK;
            dispatch!(isa, add(pc, &y[s..s + pc.len()]))
        });
    }

    /// Exact BF16 → fp32 widening of a vector (embedding rows, MODEL.md §6.2; §5.1).
    pub fn widen_bf16(&self, w: &[u16], y: &mut [f32]) {
        check_len("widen_bf16", w.len(), y.len());
        let isa = self.isa;
        self.pool.for_each_chunk(y, EW_CHUNK, |i, yc| {
            let s = i * EW_CHUNK;
            dispatch!(isa, widen_bf16(&w[s..s + yc.len()], yc))
        });
    }

    // ----- norms --------------------------------------------------------------------------

    /// RMSNorm (MODEL.md §6.1) of each row of x \[T, n\] with gain w \[n\] and eps (f64: the
    /// config's `rms_norm_eps`, or 1e-6 for the MLA latent norms): ss = dot(x, x);
    /// r = 1/sqrt(ss/n + eps); y\[i\] = rnd(((f64)x\[i\] × r) × (f64)w\[i\]). y \[T, n\].
    /// Also the KDA head-wise output norm: x \[T·Hk, Dk\] with the shared Dk gain.
    pub fn rmsnorm(&self, x: &[f32], w: &[f32], eps: f64, y: &mut [f32]) {
        let n = w.len();
        assert!(n > 0, "rmsnorm: empty gain");
        assert!(
            x.len() % n == 0,
            "rmsnorm: input length {} not a multiple of {n}",
            x.len()
        );
        check_len("rmsnorm", x.len(), y.len());
        let isa = self.isa;
        let rows_per_task = EW_CHUNK.div_ceil(n);
        self.pool.for_each_chunk(y, n * rows_per_task, |i, yc| {
            let s = i * n * rows_per_task;
            for (xr, yr) in x[s..s + yc.len()]
                .chunks_exact(n)
                .zip(yc.chunks_exact_mut(n))
            {
                dispatch!(isa, rmsnorm(xr, w, eps, yr))
            }
        });
    }

    /// The L2Norm factor r = 1/sqrt(dot(x, x) + 1e-6) of one head (MODEL.md §6.1), f64.
    pub fn l2norm_factor(&self, x: &[f32]) -> f64 {
        1.0 / (self.dot_f32(x, x) + 1e-6).sqrt()
    }

    /// L2Norm per head in place, then a scale (MODEL.md §6.4 steps 3–4): for each head of
    /// `head_dim` values, x\[i\] = rnd(((f64)x\[i\] × r) × scale) with r the head's L2Norm factor.
    /// KDA q uses scale = sD = 1/sqrt(Dk); k uses 1.0 (× 1.0 is exact, so this equals
    /// rnd((f64)k × r)). x \[T·H, head_dim\].
    pub fn l2norm_heads(&self, x: &mut [f32], head_dim: usize, scale: f64) {
        assert!(head_dim > 0, "l2norm_heads: head_dim 0");
        assert!(
            x.len() % head_dim == 0,
            "l2norm_heads: length {} not a multiple of {head_dim}",
            x.len()
        );
        let isa = self.isa;
        let heads_per_task = EW_CHUNK.div_ceil(head_dim);
        self.pool
            .for_each_chunk(x, head_dim * heads_per_task, |_, xc| {
                for h in xc.chunks_exact_mut(head_dim) {
                    dispatch!(isa, l2norm_scale(h, scale))
                }
            });
    }

    // ----- softmax, attention, mixes ----------------------------------------------------------

    /// Softmax in place over f64 scores, two passes (MODEL.md §6.5 step 4): m = max;
    /// e = exp64(s − m); Z = seqsum of e in ascending index order; s ← e / Z (f64). Serial.
    pub fn softmax(&self, s: &mut [f64]) {
        dispatch!(self.isa, softmax(s))
    }

    /// Attention scores (MODEL.md §6.5, absorbed form): scores\[s\] = dot(q, row_s) × scale
    /// (f64) for s < scores.len(), where row_s = rows\[s·stride .. s·stride + q.len()\] (MLA
    /// cache rows \[lat | k_pe\], stride Rkv + Dr; scale sQ). Serial (callers split heads).
    pub fn attn_scores(
        &self,
        q: &[f32],
        rows: &[f32],
        stride: usize,
        scale: f64,
        scores: &mut [f64],
    ) {
        check_rows("attn_scores", scores.len(), stride, q.len(), rows.len());
        dispatch!(self.isa, attn_scores(q, rows, stride, scale, scores))
    }

    /// Weighted sum over positions (MODEL.md §5.3, §6.5): y\[c\] = rnd(seqsum_{s ascending}
    /// (p\[s\] × (f64)rows\[s·stride + c\])) for c < y.len(). Used for ō = Σ p_s·lat_s over the
    /// MLA cache. Serial.
    pub fn mix_rows(&self, p: &[f64], rows: &[f32], stride: usize, y: &mut [f32]) {
        check_rows("mix_rows", p.len(), stride, y.len(), rows.len());
        dispatch!(self.isa, mix_rows(p, rows, stride, y))
    }

    /// As [`Kernels::mix_rows`] over BF16 rows: the absorbed MLA query
    /// q̂\[c\] = rnd(seqsum_{d ascending}((f64)q_nope\[d\] × W_kb\[d\]\[c\])) with coef = q_nope
    /// widened to f64 and rows = the head's `kv_b_proj` rows (stride Rkv). Serial.
    pub fn mix_rows_bf16(&self, coef: &[f64], rows: &[u16], stride: usize, y: &mut [f32]) {
        check_rows("mix_rows_bf16", coef.len(), stride, y.len(), rows.len());
        dispatch!(self.isa, mix_rows_bf16(coef, rows, stride, y))
    }

    /// Weighted sum of separate vectors in the given order: y\[c\] = rnd(seqsum_i(coef\[i\] ×
    /// (f64)srcs\[i\]\[c\])). The MoE aggregate (MODEL.md §6.7 step 6: coef = (f64)w_e, srcs = y_e
    /// in selection order) and the AttnRes mix (§6.1 step 3). Threads split c.
    pub fn mix(&self, coef: &[f64], srcs: &[&[f32]], y: &mut [f32]) {
        assert_eq!(coef.len(), srcs.len(), "mix: coefficient count");
        for s in srcs {
            check_len("mix", s.len(), y.len());
        }
        let isa = self.isa;
        self.pool.for_each_chunk(y, EW_CHUNK, |i, yc| {
            let s = i * EW_CHUNK;
            let e = s + yc.len();
            let parts: Vec<&[f32]> = srcs.iter().map(|v| &v[s..e]).collect();
            dispatch!(isa, mix_slices(coef, &parts, yc))
        });
    }

    /// Block AttnRes aggregation Agg(v_0 … v_n; f) (MODEL.md §6.1): for each source
    /// r_i = 1/sqrt(dot(v_i, v_i)/H + eps), s_i = r_i × dot(v_i, f); p = softmax(s) as in
    /// [`Kernels::softmax`]; y\[d\] = rnd(seqsum_i(p_i × (f64)v_i\[d\])). Sources in source order
    /// (snapshots oldest first, running sum last), each of width H = f.len(); eps = ε.
    ///
    /// Panics if there are no sources.
    pub fn attn_res_agg(&self, sources: &[&[f32]], f: &[f32], eps: f64, y: &mut [f32]) {
        assert!(!sources.is_empty(), "attn_res_agg: no sources");
        let h = f.len() as f64;
        let mut p: Vec<f64> = sources
            .iter()
            .map(|v| {
                check_len("attn_res_agg", v.len(), f.len());
                let r = 1.0 / (self.dot_f32(v, v) / h + eps).sqrt();
                r * self.dot_f32(v, f)
            })
            .collect();
        self.softmax(&mut p);
        self.mix(&p, sources, y);
    }

    // ----- KDA ------------------------------------------------------------------------------

    /// KDA short causal depthwise conv + SiLU (MODEL.md §6.4 step 2, §7) for one stream over a
    /// chunk of T positions. u \[T, C\] pre-conv inputs; taps \[C, kc\] (`q/k/v_conv1d.weight`
    /// \[C, 1, kc\], tap kc−1 multiplies the current input); hist \[(kc−1), C\] the previous
    /// pre-conv inputs, oldest first (zeros for a fresh sequence); y \[T, C\]:
    /// y\[t\]\[c\] = rnd(silu64(seqsum_{m=0…kc−1}((f64)taps\[c\]\[kc−1−m\] × (f64)u(t−m)))), the
    /// current input first. Afterwards `hist` holds the last kc−1 pre-conv inputs (the
    /// history shifts by T slots). Serial (callers may run the q, k, v streams in parallel).
    pub fn kda_short_conv(
        &self,
        u: &[f32],
        taps: &[f32],
        kc: usize,
        hist: &mut [f32],
        y: &mut [f32],
    ) {
        assert!(kc > 0, "kda_short_conv: kernel size 0");
        assert!(
            taps.len() % kc == 0 && !taps.is_empty(),
            "kda_short_conv: taps shape"
        );
        let c = taps.len() / kc;
        assert!(u.len() % c == 0, "kda_short_conv: input not [T, {c}]");
        check_len("kda_short_conv", u.len(), y.len());
        check_len("kda_short_conv history", hist.len(), (kc - 1) * c);
        dispatch!(self.isa, short_conv(u, taps, kc, hist, y));
        // Shift the history: keep the newest kc−1 pre-conv inputs, oldest first.
        let t = u.len() / c;
        let keep = kc - 1;
        if t >= keep {
            hist.copy_from_slice(&u[(t - keep) * c..]);
        } else {
            hist.copy_within(t * c.., 0);
            let n = hist.len();
            hist[n - t * c..].copy_from_slice(u);
        }
    }

    /// KDA bounded decay (MODEL.md §6.4 step 6) for T positions: z \[T, Hk·Dk\] (from
    /// `f_b_proj`), a_log (`A_log`, at least Hk values; only the first Hk are read, per head),
    /// dt_bias \[Hk·Dk\], gmin = `gate_lower_bound` (f64), head_dim = Dk; alpha \[T, Hk·Dk\]:
    /// a_h = exp64(A_log\[h\]); g = gmin × sig64(a_h × ((f64)z + (f64)dt_bias));
    /// alpha = rnd(exp64(g)) ∈ \[e^gmin, 1\].
    pub fn kda_decay(
        &self,
        z: &[f32],
        a_log: &[f32],
        dt_bias: &[f32],
        gmin: f64,
        head_dim: usize,
        alpha: &mut [f32],
    ) {
        let p = dt_bias.len();
        assert!(
            head_dim > 0 && p > 0 && p % head_dim == 0,
            "kda_decay: dt_bias shape"
        );
        assert!(
            a_log.len() >= p / head_dim,
            "kda_decay: fewer A_log values than heads"
        );
        assert!(z.len() % p == 0, "kda_decay: z not [T, {p}]");
        check_len("kda_decay", z.len(), alpha.len());
        let isa = self.isa;
        self.pool.for_each_chunk(alpha, p, |t, a| {
            dispatch!(
                isa,
                kda_decay(&z[t * p..(t + 1) * p], a_log, dt_bias, gmin, head_dim, a)
            )
        });
    }

    /// KDA recurrence (MODEL.md §6.4 step 7) over T positions in increasing order.
    /// st: Sᵀ of every head, \[Hk\]\[Dk (value j)\]\[Dk (key i)\], updated in place; q, k, v, alpha
    /// \[T, Hk·Dk\] (q already L2-normed and scaled by sD, k L2-normed); beta \[T, Hk\]; o
    /// \[T, Hk·Dk\]. Per head and position, for each value channel j: decay ST\[j\]\[i\] ←
    /// rnd(α\[i\]·ST\[j\]\[i\]); u = dot(k, ST\[j\]); δ = rnd(β × ((f64)v\[j\] − u));
    /// ST\[j\]\[i\] ← rnd(ST\[j\]\[i\] + k\[i\]·δ); o\[j\] = rnd(dot(q, ST\[j\])) from the updated state.
    /// Threads split heads.
    #[allow(clippy::too_many_arguments)]
    pub fn kda_recurrence(
        &self,
        st: &mut [f32],
        q: &[f32],
        k: &[f32],
        v: &[f32],
        alpha: &[f32],
        beta: &[f32],
        head_dim: usize,
        o: &mut [f32],
    ) {
        let dk = head_dim;
        assert!(
            dk > 0 && st.len() % (dk * dk) == 0,
            "kda_recurrence: state shape"
        );
        let hk = st.len() / (dk * dk);
        assert!(hk > 0, "kda_recurrence: no heads");
        let p = hk * dk;
        assert!(q.len() % p == 0, "kda_recurrence: q not [T, {p}]");
        let t_n = q.len() / p;
        for (name, len) in [
            ("k", k.len()),
            ("v", v.len()),
            ("alpha", alpha.len()),
            ("o", o.len()),
        ] {
            assert_eq!(len, t_n * p, "kda_recurrence: {name} length");
        }
        assert_eq!(beta.len(), t_n * hk, "kda_recurrence: beta length");
        let isa = self.isa;
        let op = SyncPtr::new(o);
        self.pool.for_each_chunk(st, dk * dk, |h, sth| {
            for t in 0..t_n {
                let r = t * p + h * dk..t * p + (h + 1) * dk;
                // SAFETY: head h of position t owns o[t·p + h·dk ..][..dk]; heads are disjoint
                // and o stays mutably borrowed for the whole call.
                let oh = unsafe { op.slice(r.start, dk) };
                let b = beta[t * hk + h];
                dispatch!(
                    isa,
                    kda_step(
                        sth,
                        &q[r.clone()],
                        &k[r.clone()],
                        &v[r.clone()],
                        &alpha[r.clone()],
                        b,
                        oh
                    )
                )
            }
        });
    }
}

/// Checks a matrix product's shapes and returns T.
fn check_matmul(
    op: &str,
    w_len: usize,
    rows: usize,
    cols: usize,
    x_len: usize,
    y_len: usize,
) -> usize {
    assert!(rows > 0 && cols > 0, "{op}: empty matrix {rows} x {cols}");
    assert_eq!(
        w_len,
        rows * cols,
        "{op}: weight length for {rows} x {cols}"
    );
    assert!(
        x_len % cols == 0 && x_len > 0,
        "{op}: input length {x_len} not a positive multiple of {cols}"
    );
    let t = x_len / cols;
    assert_eq!(
        y_len,
        t * rows,
        "{op}: output length for T = {t}, rows = {rows}"
    );
    t
}

fn check_len(op: &str, got: usize, want: usize) {
    assert_eq!(got, want, "{op}: length mismatch");
}

/// Checks n strided rows of `width` values inside a buffer of `len`.
fn check_rows(op: &str, n: usize, stride: usize, width: usize, len: usize) {
    assert!(
        width <= stride || n <= 1,
        "{op}: width {width} exceeds stride {stride}"
    );
    if n > 0 {
        assert!(
            (n - 1) * stride + width <= len,
            "{op}: {n} rows of stride {stride} and width {width} exceed {len} values"
        );
    }
}

/// Ensures `GROUP` stays the FORMATS.md §5 constant the kernels assume.
const _: () = assert!(GROUP == 32);

//! The matrix products of [`Kernels`] (MODEL.md §5.2): BF16, F32 and MXFP4 weights, one
//! position or several, row blocks spread over the thread pool.

use super::*;

impl Kernels {
    /// y = W x for T input vectors: W BF16 \[rows, cols\], x \[T, cols\], y \[T, rows\] with
    /// y\[t\]\[r\] = rnd(dot(W\[r\], x\[t\])) (MODEL.md §1, §5.2). T = x.len() / cols ≥ 1. Each
    /// weight is read once per call: one position (decode) widens x once and streams the rows;
    /// several positions (prefill) compute every position while a tile of rows sits in cache.
    /// Threads split rows.
    pub fn matmul_bf16(&self, w: &[u16], rows: usize, cols: usize, x: &[f32], y: &mut [f32]) {
        let t = check_matmul("matmul_bf16", w.len(), rows, cols, x.len(), y.len());
        let isa = self.isa;
        if t == 1 {
            with_scratch(|x64| {
                x64.clear();
                dispatch!(isa, prep_x_bf16(x, x64));
                let x64 = &x64[..];
                let blk = matvec_block(rows);
                self.pool.for_each_chunk(y, blk, |bi, out| {
                    let r0 = bi * blk;
                    let wb = &w[r0 * cols..(r0 + out.len()) * cols];
                    dispatch!(isa, matvec_bf16(wb, cols, x64, out))
                });
            });
            return;
        }
        self.row_blocks(rows, t, y, |r0, nr, out| {
            dispatch!(
                isa,
                matmul_bf16(&w[r0 * cols..(r0 + nr) * cols], cols, x, out)
            )
        });
    }

    /// Several independent BF16 products in one parallel job: for every j, ys\[j\] = W_j xs\[j\]
    /// with W_j = ws\[j\] = (weights, rows, cols), each exactly as [`Kernels::matmul_bf16`]
    /// computes it. The projections that read the same input (KDA q, k, v, g; the FFN gate and
    /// up) run as one job, so threads never wait at a barrier between them. Threads split rows
    /// of every product.
    ///
    /// Panics if the three slices differ in length or a product's shapes do not match.
    pub fn matmul_bf16_many(
        &self,
        ws: &[(&[u16], usize, usize)],
        xs: &[&[f32]],
        ys: &mut [&mut [f32]],
    ) {
        let n = ws.len();
        assert!(
            xs.len() == n && ys.len() == n,
            "matmul_bf16_many: {n} matrices, {} inputs, {} outputs",
            xs.len(),
            ys.len()
        );
        let isa = self.isa;
        // Per product: positions, rows per task, first task, range of its prepared x.
        let mut plan: Vec<(usize, usize, usize, usize, usize)> = Vec::with_capacity(n);
        let mut tasks = 0usize;
        with_scratch(|xp| {
            xp.clear();
            for (j, &(w, rows, cols)) in ws.iter().enumerate() {
                let t = check_matmul(
                    "matmul_bf16_many",
                    w.len(),
                    rows,
                    cols,
                    xs[j].len(),
                    ys[j].len(),
                );
                let (blk, off, end) = if t == 1 {
                    // Products reading the same input vector share its prepared copy.
                    let same = (0..j).find(|&i| plan[i].0 == 1 && std::ptr::eq(xs[i], xs[j]));
                    let (off, end) = match same {
                        Some(i) => (plan[i].3, plan[i].4),
                        None => {
                            let off = xp.len();
                            dispatch!(isa, prep_x_bf16(xs[j], xp));
                            (off, xp.len())
                        }
                    };
                    (matvec_block(rows), off, end)
                } else {
                    (ROW_BLOCK, 0, 0)
                };
                plan.push((t, blk, tasks, off, end));
                tasks += rows.div_ceil(blk);
            }
            let xp = &xp[..];
            let outs: Vec<SyncPtr<f32>> = ys.iter_mut().map(|y| SyncPtr::new(y)).collect();
            self.pool.run(tasks, |task| {
                let j = plan.partition_point(|p| p.2 <= task) - 1;
                let (t, blk, first, off, end) = plan[j];
                let (w, rows, cols) = ws[j];
                let r0 = (task - first) * blk;
                let nr = blk.min(rows - r0);
                let wb = &w[r0 * cols..(r0 + nr) * cols];
                if t == 1 {
                    // SAFETY: task (j, block) owns rows [r0, r0 + nr) of ys[j]; tasks are
                    // disjoint and ys stays mutably borrowed for the whole call.
                    let out = unsafe { outs[j].slice(r0, nr) };
                    dispatch!(isa, matvec_bf16(wb, cols, &xp[off..end], out));
                } else {
                    let mut out = vec![0.0f32; t * nr];
                    dispatch!(isa, matmul_bf16(wb, cols, xs[j], &mut out));
                    for (ti, o) in out.chunks_exact(nr).enumerate() {
                        // SAFETY: as above, for row range [r0, r0 + nr) of every position.
                        unsafe { outs[j].slice(ti * rows + r0, nr) }.copy_from_slice(o);
                    }
                }
            });
        });
    }

    /// As [`Kernels::matmul_bf16`] with fp32 weights W \[rows, cols\].
    pub fn matmul_f32(&self, w: &[f32], rows: usize, cols: usize, x: &[f32], y: &mut [f32]) {
        let t = check_matmul("matmul_f32", w.len(), rows, cols, x.len(), y.len());
        let isa = self.isa;
        self.row_blocks(rows, t, y, |r0, nr, out| {
            dispatch!(
                isa,
                matmul_f32(&w[r0 * cols..(r0 + nr) * cols], cols, x, out)
            )
        });
    }

    /// y = W x for an MXFP4 matrix straight from its packed bytes (FORMATS.md §5): x
    /// \[T, cols\], y \[T, rows\], y\[t\]\[r\] = rnd(dot(W\[r\], x\[t\])) where element (r, c) is
    /// E2M1 × 2^(s−127), multiplied exactly in f64 and added into lane c mod 16, so the result
    /// equals dequantise-(in f64)-then-`dot` bit for bit. Never dequantises the matrix.
    /// Threads split rows.
    pub fn matmul_mxfp4(&self, w: &Mxfp4<'_>, x: &[f32], y: &mut [f32]) {
        let (rows, cols) = (w.rows(), w.cols());
        let t = check_matmul("matmul_mxfp4", rows * cols, rows, cols, x.len(), y.len());
        let isa = self.isa;
        if t == 1 {
            with_scratch(|xp| {
                xp.clear();
                dispatch!(isa, prep_x_mxfp4(x, xp));
                let xp = &xp[..];
                let blk = matvec_block(rows);
                self.pool.for_each_chunk(y, blk, |bi, out| {
                    let b = w.row_block(bi * blk, out.len());
                    dispatch!(isa, matvec_mxfp4(b.packed(), b.scales(), cols, xp, out))
                });
            });
            return;
        }
        self.row_blocks(rows, t, y, |r0, nr, out| {
            let b = w.row_block(r0, nr);
            dispatch!(isa, matmul_mxfp4(b.packed(), b.scales(), cols, x, out))
        });
    }

    /// Several independent MXFP4 products in one parallel job: ys\[j\] = ws\[j\] xs\[j\] for every
    /// j, each exactly as [`Kernels::matmul_mxfp4`] computes it (same shapes, same bits). The
    /// routed experts of a MoE layer are many small products; one job for all of them keeps
    /// both threads busy without a barrier per matrix. Threads split rows of every product.
    ///
    /// Panics if the three slices differ in length or a product's shapes do not match.
    pub fn matmul_mxfp4_many(&self, ws: &[Mxfp4<'_>], xs: &[&[f32]], ys: &mut [&mut [f32]]) {
        let n = ws.len();
        assert!(
            xs.len() == n && ys.len() == n,
            "matmul_mxfp4_many: {n} matrices, {} inputs, {} outputs",
            xs.len(),
            ys.len()
        );
        let isa = self.isa;
        // Per product: positions, rows per task, first task, offset of its prepared x.
        let mut plan = Vec::with_capacity(n);
        let mut tasks = 0usize;
        with_scratch(|xp| {
            xp.clear();
            for (j, w) in ws.iter().enumerate() {
                let (rows, cols) = (w.rows(), w.cols());
                let t = check_matmul(
                    "matmul_mxfp4_many",
                    rows * cols,
                    rows,
                    cols,
                    xs[j].len(),
                    ys[j].len(),
                );
                let off = xp.len();
                let blk = if t == 1 {
                    dispatch!(isa, prep_x_mxfp4(xs[j], xp));
                    matvec_block(rows)
                } else {
                    ROW_BLOCK
                };
                plan.push((t, blk, tasks, off));
                tasks += rows.div_ceil(blk);
            }
            let xp = &xp[..];
            let outs: Vec<SyncPtr<f32>> = ys.iter_mut().map(|y| SyncPtr::new(y)).collect();
            self.pool.run(tasks, |task| {
                let j = plan.partition_point(|p| p.2 <= task) - 1;
                let (t, blk, first, off) = plan[j];
                let w = &ws[j];
                let (rows, cols) = (w.rows(), w.cols());
                let r0 = (task - first) * blk;
                let nr = blk.min(rows - r0);
                let b = w.row_block(r0, nr);
                if t == 1 {
                    // SAFETY: task (j, block) owns rows [r0, r0 + nr) of ys[j]; tasks are
                    // disjoint and ys stays mutably borrowed for the whole call.
                    let out = unsafe { outs[j].slice(r0, nr) };
                    let x = &xp[off..off + cols];
                    dispatch!(isa, matvec_mxfp4(b.packed(), b.scales(), cols, x, out));
                } else {
                    let mut out = vec![0.0f32; t * nr];
                    dispatch!(
                        isa,
                        matmul_mxfp4(b.packed(), b.scales(), cols, xs[j], &mut out)
                    );
                    for (ti, o) in out.chunks_exact(nr).enumerate() {
                        // SAFETY: as above, for row range [r0, r0 + nr) of every position.
                        unsafe { outs[j].slice(ti * rows + r0, nr) }.copy_from_slice(o);
                    }
                }
            });
        });
    }

    /// Runs `f(r0, nr, out)` for fixed blocks of `ROW_BLOCK` rows, `out` being \[t, nr\], and
    /// places the block results into y \[t, rows\].
    fn row_blocks<F>(&self, rows: usize, t: usize, y: &mut [f32], f: F)
    where
        F: Fn(usize, usize, &mut [f32]) + Sync,
    {
        if t == 1 {
            self.pool
                .for_each_chunk(y, ROW_BLOCK, |bi, out| f(bi * ROW_BLOCK, out.len(), out));
            return;
        }
        let yp = SyncPtr::new(y);
        self.pool.run(rows.div_ceil(ROW_BLOCK), |bi| {
            let r0 = bi * ROW_BLOCK;
            let nr = ROW_BLOCK.min(rows - r0);
            let mut out = vec![0.0f32; t * nr];
            f(r0, nr, &mut out);
            for (ti, o) in out.chunks_exact(nr).enumerate() {
                // SAFETY: block bi owns rows [r0, r0 + nr) of every position; blocks are
                // disjoint and y stays mutably borrowed for the whole call.
                unsafe { yp.slice(ti * rows + r0, nr) }.copy_from_slice(o);
            }
        });
    }
}

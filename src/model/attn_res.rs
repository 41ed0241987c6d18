//! Block Attention Residuals (MODEL.md §6.1 Agg, §6.3): the depth-softmax over the block
//! snapshots and the running block sum, per position of a chunk.

use super::Exec;

/// Per-position depth state of a chunk: snapshots B (oldest first) and the running sum P,
/// each `[T, H]`.
#[derive(Debug, Clone)]
pub struct Depth {
    /// B: snapshots, oldest first.
    pub snapshots: Vec<Vec<f32>>,
    /// P: running block sum.
    pub p: Vec<f32>,
    /// True while P is *empty* (right after a boundary, before the attention output).
    pub p_empty: bool,
}

impl Depth {
    /// B = [], P = the embeddings `[T, H]`.
    pub fn new(embeddings: Vec<f32>) -> Depth {
        Depth {
            snapshots: Vec::new(),
            p: embeddings,
            p_empty: false,
        }
    }

    /// Boundary (ℓ mod Bs = 0): append P to B, then make P empty.
    pub fn push_snapshot(&mut self) {
        self.snapshots.push(self.p.clone());
        self.p_empty = true;
    }

    /// P = y if P is empty, else P[d] = rnd(P[d] + y[d]) (MODEL.md §6.3 steps 4 and 7).
    pub fn add(&mut self, ex: &Exec, y: &[f32]) {
        if self.p_empty {
            self.p.copy_from_slice(y);
            self.p_empty = false;
        } else {
            ex.add(&mut self.p, y);
        }
    }

    /// out = Agg(B ++ [P]; f) for every position (P must not be empty), `out` [T, H].
    pub fn agg(&self, ex: &Exec, f: &[f32], eps: f64, out: &mut [f32]) {
        let h = f.len();
        let t = self.p.len() / h;
        for pos in 0..t {
            let r = pos * h..(pos + 1) * h;
            let mut src: Vec<&[f32]> = self.snapshots.iter().map(|s| &s[r.clone()]).collect();
            src.push(&self.p[r.clone()]);
            ex.attn_res_agg(&src, f, eps, &mut out[r]);
        }
    }

    /// out = Agg(B ++ [P]; f) for the positions `rows` only, `out` [rows.len(), H]: the output
    /// aggregation of the rows whose logits are used (MODEL.md §6.8).
    pub fn agg_rows(&self, ex: &Exec, f: &[f32], eps: f64, rows: &[usize], out: &mut [f32]) {
        let h = f.len();
        for (j, &pos) in rows.iter().enumerate() {
            let r = pos * h..(pos + 1) * h;
            let mut src: Vec<&[f32]> = self.snapshots.iter().map(|s| &s[r.clone()]).collect();
            src.push(&self.p[r.clone()]);
            ex.attn_res_agg(&src, f, eps, &mut out[j * h..(j + 1) * h]);
        }
    }
}

//! The expert-source interface: the MoE block asks for a layer's set of routed experts all at
//! once and gets views of each expert's six MXFP4 tensors, or an error that fails the token
//! (MODEL.md §6.7: a missing expert is never a zero contribution). The sources live elsewhere:
//! `crate::bind::experts::PreadExperts` reads them on every request, the streaming layer puts a
//! bounded cache behind the same trait.

use crate::error::{Error, Result};

pub use k3_kernels::Mxfp4;

/// One routed expert: `w1` gate [I, L], `w2` down [L, I], `w3` up [I, L] (validated MXFP4:
/// shapes checked, no E8M0 255).
#[derive(Debug, Clone, Copy)]
pub struct ExpertView<'a> {
    pub w1: Mxfp4<'a>,
    pub w2: Mxfp4<'a>,
    pub w3: Mxfp4<'a>,
}

/// Counters an expert source keeps (ENGINE.md §6, FORMATS.md §10 `expert_cache`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ExpertStats {
    /// Expert requests (T × Kt per MoE layer and chunk).
    pub requests: u64,
    /// Requests served by an expert already resident when its layer asked.
    pub resident_hits: u64,
    /// Experts read from the shards.
    pub reads: u64,
    /// Bytes read from the shards.
    pub bytes_read: u64,
    /// Seconds spent reading.
    pub read_seconds: f64,
}

/// What [`ExpertSource::with_experts`] calls with some of the experts asked for: their ids and
/// one view per id, in the same order.
pub type UseExperts<'f> = dyn FnMut(&[u32], &[ExpertView<'_>]) -> Result<()> + 'f;

/// Supplies routed experts to the MoE block.
pub trait ExpertSource {
    /// The largest number of distinct experts one [`ExpertSource::with_experts`] call may ask
    /// for (at least Kt). Larger sets are split by the caller.
    fn max_batch(&self) -> usize;

    /// Records the chunk's requests of one MoE layer (T × Kt ids, positions ascending, each in
    /// selection order — the request order of FORMATS.md §8). Counters and traces only; an
    /// error (a failed trace write) fails the forward.
    fn note_requests(&mut self, layer: usize, requests: &[u32]) -> Result<()>;

    /// Makes the experts `experts` (distinct ids) of zero-based `layer` available and calls
    /// `f(ids, views)` one or more times, each time with some of them and one view per id in
    /// the same order, every id exactly once over the calls. A source that reads may hand over
    /// the experts it holds first and the others as their reads land, so the caller computes
    /// while the rest is read. The views are valid only during the call. A failed read (exit 4)
    /// or a corrupt expert (exit 2) is returned, and `f` is not called again; what it computed
    /// before belongs to a failed token.
    fn with_experts(&mut self, layer: usize, experts: &[u32], f: &mut UseExperts<'_>)
        -> Result<()>;

    /// Counters so far.
    fn stats(&self) -> ExpertStats;
}

/// Geometry of the three matrices: (I, L).
#[derive(Debug, Clone, Copy)]
pub struct ExpertShape {
    /// moe_intermediate_size I.
    pub inter: usize,
    /// routed_expert_hidden_size L.
    pub latent: usize,
}

/// Validated views of the six tensors of an expert laid out in the fixed order in `b`
/// (FORMATS.md §4): every E8M0 scale byte is checked; a 255 is an error naming the tensor
/// (`names`, the six tensor names), the row and the group (exit 2, FORMATS.md §5).
pub fn expert_view<'a>(
    b: &'a [u8],
    inter: usize,
    latent: usize,
    names: &[String; 6],
) -> Result<ExpertView<'a>> {
    let p13 = inter * latent / 2;
    let s13 = inter * latent / 32;
    if b.len() != 3 * (p13 + s13) {
        return Err(Error::internal(format!(
            "{}: expert buffer of {} bytes, expected {}",
            names[0],
            b.len(),
            3 * (p13 + s13)
        )));
    }
    let (w1p, rest) = b.split_at(p13);
    let (w1s, rest) = rest.split_at(s13);
    let (w2p, rest) = rest.split_at(p13);
    let (w2s, rest) = rest.split_at(s13);
    let (w3p, w3s) = rest.split_at(p13);
    let m = |p, s, rows, cols, name: &String| {
        Mxfp4::new(p, s, rows, cols).map_err(|e| Error::invalid(format!("{name}: {}", e.message)))
    };
    Ok(ExpertView {
        w1: m(w1p, w1s, inter, latent, &names[1])?,
        w2: m(w2p, w2s, latent, inter, &names[3])?,
        w3: m(w3p, w3s, inter, latent, &names[5])?,
    })
}

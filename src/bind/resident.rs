//! The resident binding: every bound layer's matrices and both model tables read into memory
//! now, routed experts located now and read on demand (MODEL.md §4). The reference binding
//! of the tests and the bench; a run streams through [`super::streamed`].

use super::experts::{locate_experts, PreadExperts};
use super::layer::{bind_layer, bind_output};
use super::reader::{Reader, TensorLookup};
use crate::catalogue;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::model::experts::ExpertShape;
use crate::model::weights::{Bf16Mat, LayerPart, PartBuf};
use crate::model::{Dims, Model, TrunkSource};

/// Every bound layer's matrices and both model tables held in memory.
#[derive(Debug, Default)]
pub struct ResidentTrunk {
    pub bufs: Vec<Vec<u16>>,
    /// `embed_tokens` [V, H].
    pub embed: Vec<u16>,
    /// `lm_head` [V, H]; None when tied.
    pub lm_head: Option<Vec<u16>>,
    /// H.
    pub hidden: usize,
}

impl TrunkSource for ResidentTrunk {
    fn layer_part(&mut self, l: usize, _part: LayerPart) -> Result<PartBuf<'_>> {
        self.bufs
            .get(l)
            .map(|b| PartBuf::whole(b))
            .ok_or_else(|| Error::internal(format!("layer {l} is not bound")))
    }
    fn embed_row(&mut self, id: usize) -> Result<&[u16]> {
        let h = self.hidden;
        self.embed
            .get(id * h..(id + 1) * h)
            .ok_or_else(|| Error::internal(format!("embedding row {id} is outside the table")))
    }
    fn lm_head(&mut self, f: &mut dyn FnMut(usize, Bf16Mat<'_>) -> Result<()>) -> Result<()> {
        let data = self.lm_head.as_deref().unwrap_or(&self.embed);
        f(
            0,
            Bf16Mat {
                rows: data.len() / self.hidden.max(1),
                cols: self.hidden,
                data,
            },
        )
    }
}

/// A model bound with every trunk layer resident and experts read on demand.
pub struct Bound {
    pub model: Model,
    pub trunk: ResidentTrunk,
    pub experts: PreadExperts,
}

/// Binds the first `layers` layers and the model tables of the checkpoint behind `lookup`
/// (MODEL.md §4): every bound tensor checked for shape and dtype and read now, except the
/// routed experts, which are located (shape and dtype checked) and read on demand into
/// `expert_buffers` buffers. Errors (exit 2) name the tensor.
pub fn bind_resident(
    lookup: &dyn TensorLookup,
    cfg: &Config,
    layers: usize,
    expert_buffers: usize,
) -> Result<Bound> {
    let dims = Dims::from_config(cfg);
    let mut r = Reader::new(lookup);
    let mut lw = Vec::with_capacity(layers);
    let mut bufs = Vec::with_capacity(layers);
    let mut locs = Vec::with_capacity(layers);
    for l in 0..layers {
        let specs = catalogue::layer_suffixes(cfg, l);
        let (w, b) = bind_layer(&mut r, &dims, &specs, l)?;
        lw.push(w);
        bufs.push(b);
        locs.push(if l >= dims.first_dense {
            locate_experts(&mut r, cfg, l)?
        } else {
            Vec::new()
        });
    }
    let (output, tl) = bind_output(&mut r, &dims)?;
    let hidden = dims.h;
    let embed = r.read_table_u16(catalogue::EMBED_TOKENS, &tl.embed)?;
    let lm_head = match &tl.lm_head {
        Some(m) => Some(r.read_table_u16(catalogue::LM_HEAD, m)?),
        None => None,
    };
    let files = r.into_files()?;
    let shape = ExpertShape {
        inter: dims.i,
        latent: dims.l,
    };
    Ok(Bound {
        model: Model {
            dims,
            layers: lw,
            output,
        },
        trunk: ResidentTrunk {
            bufs,
            embed,
            lm_head,
            hidden,
        },
        experts: PreadExperts::new(files, locs, shape, expert_buffers)?,
    })
}

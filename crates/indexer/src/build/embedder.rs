//! The embedding interface of a build: [`Embedder`], with the burn encoder
//! (`kernels::Encoder`) as the production implementation and [`HashEmbedder`] as a stand-in
//! for tests and benchmarks.

/// Why embedding failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The model could not run.
    #[error(transparent)]
    Model(#[from] kernels::ModelError),
    #[error("encoder returned more groups than it was given")]
    ExtraGroup,
    #[error("encoder returned {got} of {want} groups")]
    MissingGroups { got: usize, want: usize },
    #[error("encoder returned {floats} floats for {texts} texts")]
    WrongLength { floats: usize, texts: usize },
    /// Another implementation's failure (a test stand-in, a device lost mid-training).
    #[error("{0}")]
    Other(String),
}

/// Texts per embedding call on the CPU: larger groups measured no faster there (a forward
/// pass costs little beyond its tokens), and a different grouping batches texts differently,
/// so vectors (and segment ids) would change by rounding.
pub const CPU_EMBED_GROUP: usize = 256;

/// Texts per embedding call on a GPU. Each call's batches run, then its vectors are read
/// back before the next call's batches are queued, so small calls leave the device waiting.
/// On an H200 (CUDA, f16, 2026-12-04), `indexer build --device cuda` over the `.py` files of
/// transformers (99,264 chunks, 13.7M tokens): embed phase 46.87 s at 256, 17.93 s at 4,096
/// (292k → 764k tokens/s); over ten Python packages (455,186 chunks) the whole build took
/// 111.4 s at 4,096 against 198.4 s at 256 on 2026-11-26.
pub const DEVICE_EMBED_GROUP: usize = 4096;

/// Something that turns texts into L2-normalised vectors (the burn encoder in production).
pub trait Embedder: Sync {
    fn model_id(&self) -> &str;
    fn dim(&self) -> usize;
    /// Row-major `texts.len() × dim` in input order, and the number of (unpadded) tokens.
    fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), EmbedError>;

    /// Embeds `groups` in order, handing each group's vectors and token count to `sink` as they
    /// come. The burn encoder overlaps the CPU half (tokenising, batching) of the next groups
    /// with the device work of the current one, through a bounded queue.
    fn embed_groups(
        &self,
        groups: Vec<Vec<&str>>,
        sink: &mut dyn FnMut(Vec<f32>, usize) -> Result<(), EmbedError>,
    ) -> Result<(), EmbedError> {
        for g in groups {
            let (v, tokens) = self.embed(&g)?;
            sink(v, tokens)?;
        }
        Ok(())
    }

    /// Texts per embedding call when the build names none (`BuildOptions::embed_group`):
    /// [`CPU_EMBED_GROUP`], or [`DEVICE_EMBED_GROUP`] on a device.
    fn default_group(&self) -> usize {
        if self.on_device() {
            DEVICE_EMBED_GROUP
        } else {
            CPU_EMBED_GROUP
        }
    }

    /// Whether embedding runs on a device (a GPU) and leaves the CPU's cores free: a build
    /// then writes each segment beside the next one's embedding. On the CPU the two would
    /// only share the same cores, and hold two segments in memory instead of one.
    fn on_device(&self) -> bool {
        false
    }

    /// `k` IVF coarse centroids for `sample` trained on the embedder's GPU, when it runs on
    /// one (`None`: the segment writer trains them on the CPU, `format::ivf_write`).
    fn ivf_centroids(
        &self,
        _sample: &[f32],
        _dim: usize,
        _k: usize,
    ) -> Option<Result<Vec<f32>, EmbedError>> {
        None
    }
}

/// Deterministic pseudo-random unit vectors from blake3 of the text: a stand-in [`Embedder`]
/// for tests and benchmarks that exercise everything but the model (reports 0 tokens).
pub struct HashEmbedder {
    pub dim: usize,
}

impl Embedder for HashEmbedder {
    fn model_id(&self) -> &str {
        "hash-embedder"
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), EmbedError> {
        let mut out = Vec::with_capacity(texts.len() * self.dim);
        for t in texts {
            let mut xof = blake3::Hasher::new().update(t.as_bytes()).finalize_xof();
            let mut bytes = vec![0u8; self.dim];
            xof.fill(&mut bytes);
            let v: Vec<f32> = bytes.iter().map(|b| *b as f32 - 127.5).collect();
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
            out.extend(v.iter().map(|x| x / n));
        }
        Ok((out, 0))
    }
}

/// Prepared groups waiting for the device in [`Embedder::embed_groups`].
const PIPELINE_DEPTH: usize = 2;

/// On the CPU, the encoder's freed pages stay in the process while it runs
/// ([`crate::alloc::KeepFreedPages`]); on a device its activations are not host memory.
fn keep_pages(e: &kernels::Encoder) -> Option<crate::alloc::KeepFreedPages> {
    (!e.on_device()).then(crate::alloc::KeepFreedPages::new)
}

impl Embedder for kernels::Encoder {
    fn model_id(&self) -> &str {
        kernels::Encoder::model_id(self)
    }
    fn dim(&self) -> usize {
        kernels::Encoder::dim(self)
    }
    fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), EmbedError> {
        let _keep = keep_pages(self);
        Ok(kernels::Encoder::embed(self, texts).map(|(v, s)| (v, s.tokens))?)
    }
    fn embed_groups(
        &self,
        groups: Vec<Vec<&str>>,
        sink: &mut dyn FnMut(Vec<f32>, usize) -> Result<(), EmbedError>,
    ) -> Result<(), EmbedError> {
        let _keep = keep_pages(self);
        self.embed_pipelined(groups, PIPELINE_DEPTH, |v, stats| sink(v, stats.tokens))
    }
    fn on_device(&self) -> bool {
        kernels::Encoder::on_device(self)
    }
    fn ivf_centroids(
        &self,
        sample: &[f32],
        dim: usize,
        k: usize,
    ) -> Option<Result<Vec<f32>, EmbedError>> {
        self.train_ivf_centroids(sample, dim, k)
            .map(|r| r.map_err(EmbedError::from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IndexerError;

    /// The default group is the CPU's for the hash stand-in and the device's for an embedder
    /// that runs on one.
    #[test]
    fn default_group_by_device() {
        struct OnDevice(HashEmbedder);
        impl Embedder for OnDevice {
            fn model_id(&self) -> &str {
                self.0.model_id()
            }
            fn dim(&self) -> usize {
                self.0.dim
            }
            fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), EmbedError> {
                self.0.embed(texts)
            }
            fn on_device(&self) -> bool {
                true
            }
        }
        assert_eq!(HashEmbedder { dim: 8 }.default_group(), CPU_EMBED_GROUP);
        assert_eq!(
            OnDevice(HashEmbedder { dim: 8 }).default_group(),
            DEVICE_EMBED_GROUP
        );
    }

    /// The build error says the cause once: no `source` chain that `{:#}` would print again.
    #[test]
    fn embed_errors_are_said_once() {
        let e: IndexerError = EmbedError::MissingGroups { got: 1, want: 2 }.into();
        assert_eq!(
            e.to_string(),
            "embedding failed: encoder returned 1 of 2 groups"
        );
        assert!(std::error::Error::source(&e).is_none());
    }
}

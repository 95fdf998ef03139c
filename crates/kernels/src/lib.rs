//! BERT-family sentence encoder (all-MiniLM-L6-v2 and friends) on burn, CPU by default.
//!
//! [`Encoder::load`] reads a sentence-transformers style model directory (`config.json`,
//! `model.safetensors`, `tokenizer.json`, optional `sentence_bert_config.json` and
//! `1_Pooling/config.json`); [`Encoder::embed`] turns texts into L2-normalised vectors.

mod batch;
mod bert;
mod cpu;
mod device;
mod error;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod gpu;
pub mod kmeans;
mod load;
pub mod pool;
mod tokenize;
pub mod topk;

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

pub use batch::{plan_batches, Batch, DEFAULT_MAX_BATCH, DEFAULT_TOKEN_BUDGET};
pub use device::DeviceChoice;
pub use error::{ModelError, FETCH_HINT};

use bert::Bert;
use tokenize::TextTokenizer;

/// The model directory a command uses: the `--model` flag if given, else `$CIX_MODEL_DIR`, else
/// `./models/all-MiniLM-L6-v2` (where `scripts/fetch-model.sh` puts it).
pub fn resolve_model_dir(flag: Option<std::path::PathBuf>) -> std::path::PathBuf {
    flag.or_else(|| std::env::var_os("CIX_MODEL_DIR").map(std::path::PathBuf::from))
        .unwrap_or_else(|| std::path::PathBuf::from("models/all-MiniLM-L6-v2"))
}

/// Counters describing one [`Encoder::embed`] call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmbedStats {
    /// Number of input texts.
    pub texts: usize,
    /// Real tokens (after truncation, including `[CLS]`/`[SEP]`).
    pub tokens: usize,
    /// Tokens actually computed, padding included (`>= tokens`).
    pub padded_tokens: usize,
    /// Forward passes run.
    pub batches: usize,
}

/// A loaded sentence encoder. Cheap to share by reference across threads.
pub struct Encoder {
    model: Bert,
    tokenizer: TextTokenizer,
    model_id: String,
    device_description: String,
    token_budget: usize,
    max_batch: usize,
}

impl Encoder {
    /// Loads a BERT sentence-embedding model directory onto the chosen device.
    pub fn load(model_dir: &Path, device: DeviceChoice) -> Result<Encoder, ModelError> {
        let [config_path, weights_path, tokenizer_path] = load::required_files(model_dir)?;
        let config_bytes = load::read_bytes(&config_path)?;
        let cfg = load::parse_config(model_dir, &config_path, &config_bytes)?;

        let file = File::open(&weights_path).map_err(|source| ModelError::Io {
            path: weights_path.clone(),
            source,
        })?;
        // SAFETY: the mapping is read-only and dropped before `load` returns; model files are
        // not expected to be modified while they are being loaded.
        let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| ModelError::Io {
            path: weights_path.clone(),
            source,
        })?;
        let weights = load::Weights::parse(&weights_path, &mmap)?;
        let model_id = load::model_id(model_dir, &config_bytes, &mmap);
        let tokenizer = TextTokenizer::load(&tokenizer_path, cfg.max_tokens, cfg.vocab_size)?;

        let selected = device::select_device(device)?;
        let model = Bert::load(cfg, &weights, selected.device, selected.host_memory)?;
        Ok(Encoder {
            model,
            tokenizer,
            model_id,
            device_description: selected.description,
            token_budget: DEFAULT_TOKEN_BUDGET,
            max_batch: DEFAULT_MAX_BATCH,
        })
    }

    /// `"<dir name>@<16 hex of blake3(config.json ++ model.safetensors)>"`, stable across runs.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// Embedding dimension.
    pub fn dim(&self) -> usize {
        self.model.hidden_size()
    }

    /// Token cap per text, including `[CLS]`/`[SEP]`.
    pub fn max_tokens(&self) -> usize {
        self.model.max_tokens()
    }

    /// Which backend runs the model, and why `auto` chose it.
    pub fn device_description(&self) -> String {
        self.device_description.clone()
    }

    /// Tokens `text` occupies after truncation, including `[CLS]`/`[SEP]`.
    pub fn count_tokens(&self, text: &str) -> usize {
        self.tokenizer.count(text)
    }

    /// Overrides batching limits (padded tokens per batch, texts per batch).
    pub fn with_batch_limits(mut self, token_budget: usize, max_batch: usize) -> Self {
        self.token_budget = token_budget.max(1);
        self.max_batch = max_batch.max(1);
        self
    }

    /// Runs every op through burn's backend-generic kernels (the path GPU backends take) even
    /// on the CPU, instead of the fused host kernels. Slower; meant for testing that path.
    #[doc(hidden)]
    pub fn with_portable_kernels(mut self) -> Self {
        self.model.disable_host_kernels();
        self
    }

    /// Embeds texts; returns `texts.len() * dim` f32 row-major in input order, each row
    /// L2-normalised.
    ///
    /// Texts are tokenised (truncated to [`max_tokens`](Self::max_tokens)), sorted by length
    /// and cut into batches under the padded-token budget, then results are unsorted.
    pub fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, EmbedStats), ModelError> {
        let dim = self.dim();
        let mut stats = EmbedStats {
            texts: texts.len(),
            ..EmbedStats::default()
        };
        if texts.is_empty() {
            return Ok((Vec::new(), stats));
        }
        let ids = self.tokenizer.encode_many(texts)?;
        let lengths: Vec<usize> = ids.iter().map(Vec::len).collect();
        let plan = plan_batches(&lengths, self.token_budget, self.max_batch);

        let mut out = vec![0.0f32; texts.len() * dim];
        for batch in &plan {
            let seq = batch.seq_len;
            let mut padded = vec![0i64; batch.indices.len() * seq];
            let mut batch_lengths = Vec::with_capacity(batch.indices.len());
            for (row, &i) in padded.chunks_exact_mut(seq).zip(&batch.indices) {
                for (dst, &id) in row.iter_mut().zip(&ids[i]) {
                    *dst = i64::from(id);
                }
                batch_lengths.push(lengths[i]);
            }
            let pooled = catch_unwind(AssertUnwindSafe(|| {
                self.model.forward(padded, &batch_lengths, seq)
            }))
            .map_err(|panic| ModelError::Inference(panic_message(panic)))??;
            if pooled.len() != batch.indices.len() * dim {
                return Err(ModelError::Inference(format!(
                    "backend returned {} values for a batch of {} x {dim}",
                    pooled.len(),
                    batch.indices.len()
                )));
            }
            for (src, &i) in pooled.chunks_exact(dim).zip(&batch.indices) {
                let dst = &mut out[i * dim..(i + 1) * dim];
                let norm = src.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = s / norm;
                }
            }
            stats.tokens += batch_lengths.iter().sum::<usize>();
            stats.padded_tokens += batch.padded_tokens();
            stats.batches += 1;
        }
        Ok((out, stats))
    }
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "backend panicked".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn encoder_is_send_sync() {
        assert_send_sync::<Encoder>();
    }

    #[test]
    fn missing_model_dir_is_actionable() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("nope");
        let err = Encoder::load(&dir, DeviceChoice::Cpu).err().unwrap();
        assert!(matches!(err, ModelError::MissingModelDir(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("scripts/fetch-model.sh"), "{msg}");
        assert!(msg.contains("--model DIR"), "{msg}");
    }

    #[test]
    fn missing_file_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("config.json"), "{}").unwrap();
        let err = Encoder::load(tmp.path(), DeviceChoice::Cpu).err().unwrap();
        let msg = err.to_string();
        assert!(matches!(err, ModelError::MissingFile { .. }), "{err:?}");
        assert!(msg.contains("model.safetensors"), "{msg}");
        assert!(msg.contains("scripts/fetch-model.sh"), "{msg}");
    }

    #[test]
    fn corrupt_config_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("config.json"), "{\"hidden_size\": 384,").unwrap();
        fs::write(tmp.path().join("model.safetensors"), b"").unwrap();
        fs::write(tmp.path().join("tokenizer.json"), "{}").unwrap();
        let err = Encoder::load(tmp.path(), DeviceChoice::Cpu).err().unwrap();
        assert!(matches!(err, ModelError::Config { .. }), "{err:?}");
        assert!(err.to_string().contains("config.json"), "{err}");
    }

    #[test]
    fn corrupt_weights_are_reported() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(
            tmp.path().join("config.json"),
            r#"{"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
                "num_attention_heads": 2, "intermediate_size": 16}"#,
        )
        .unwrap();
        fs::write(tmp.path().join("model.safetensors"), b"not safetensors").unwrap();
        fs::write(tmp.path().join("tokenizer.json"), "{}").unwrap();
        let err = Encoder::load(tmp.path(), DeviceChoice::Cpu).err().unwrap();
        assert!(matches!(err, ModelError::Safetensors { .. }), "{err:?}");
    }
}

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
mod host;
pub mod kmeans;
mod load;
pub mod pool;
mod small;
mod tokenize;
pub mod topk;

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

pub use batch::{plan_batches, Batch, DEFAULT_MAX_BATCH, DEFAULT_TOKEN_BUDGET};
pub use device::{DeviceChoice, Precision};
pub use error::{ModelError, FETCH_HINT};

use bert::Bert;
use burn::tensor::{DType, Tensor};
use tokenize::TextTokenizer;

/// Lowest cosine between an f32 and a half-precision embedding of the same probe text that
/// half precision may show before it is refused.
pub const HALF_PARITY_MIN_COSINE: f32 = 0.999;

/// k-means iterations for IVF centroids trained on the GPU (FAISS's IVF default, too).
pub const IVF_KMEANS_ITERS: usize = 10;

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
    precision: Precision,
    token_budget: usize,
    max_batch: usize,
}

/// Texts tokenised and cut into batches ([`Encoder::prepare`]), ready for
/// [`Encoder::embed_prepared`].
pub struct Prepared {
    ids: Vec<Vec<u32>>,
    plan: Vec<Batch>,
}

impl Prepared {
    /// Number of texts.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are no texts.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// What running this plan would compute: texts, real tokens, padded tokens and forward
    /// passes (the counts [`Encoder::embed_prepared`] reports), without running it.
    pub fn stats(&self) -> EmbedStats {
        EmbedStats {
            texts: self.ids.len(),
            tokens: self.ids.iter().map(Vec::len).sum(),
            padded_tokens: self.plan.iter().map(Batch::padded_tokens).sum(),
            batches: self.plan.len(),
        }
    }
}

impl Encoder {
    /// Loads a BERT sentence-embedding model directory onto the chosen device, in
    /// [`Precision::Auto`] (f32 on the CPU; on a GPU, f16 when it passes the parity check).
    pub fn load(model_dir: &Path, device: DeviceChoice) -> Result<Encoder, ModelError> {
        Self::load_with(model_dir, device, Precision::Auto)
    }

    /// Loads a model directory onto the chosen device in the chosen precision.
    ///
    /// Half precision (f16, bf16) runs only on GPU devices whose backend supports the type, and
    /// only after a parity check at load time: a fixed set of probe texts is embedded in f32
    /// and in half precision, and every pair must reach cosine [`HALF_PARITY_MIN_COSINE`]. An
    /// explicit `F16`/`Bf16` that cannot run or fails the check is an error; `Auto` falls back
    /// to f32 and says why in [`device_description`](Self::device_description).
    pub fn load_with(
        model_dir: &Path,
        device: DeviceChoice,
        precision: Precision,
    ) -> Result<Encoder, ModelError> {
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
        let load = |dtype: DType| {
            Bert::load(
                cfg.clone(),
                &weights,
                selected.device.clone(),
                selected.host_memory,
                dtype,
            )
        };
        let (model, resolved, why) = choose_precision(precision, &selected, &tokenizer, load)?;
        let description = format!("{}; precision {resolved}{why}", selected.description);
        Ok(Encoder {
            model,
            tokenizer,
            model_id,
            device_description: description,
            precision: resolved,
            token_budget: DEFAULT_TOKEN_BUDGET,
            max_batch: DEFAULT_MAX_BATCH,
        })
    }

    /// Trains `k` IVF coarse centroids on `sample` (row-major, `dim` wide, normalised
    /// embeddings) on the encoder's GPU: spherical k-means, [`IVF_KMEANS_ITERS`] iterations,
    /// entirely on the device ([`gpu::kmeans`]). `None` when the encoder runs on the CPU (the
    /// segment writer then runs the same k-means on the CPU, `format::ivf_write`).
    pub fn train_ivf_centroids(
        &self,
        sample: &[f32],
        dim: usize,
        k: usize,
    ) -> Option<Result<Vec<f32>, ModelError>> {
        if self.model.host_kernels() {
            return None;
        }
        if dim == 0 || !sample.len().is_multiple_of(dim) || k == 0 || k > sample.len() / dim {
            return Some(Err(ModelError::Inference(format!(
                "k-means: {} floats of dimension {dim} cannot train {k} centroids",
                sample.len()
            ))));
        }
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        {
            let client = gpu::client_of(self.model.device())?;
            Some(guarded(|| {
                Ok(gpu::kmeans(
                    &client,
                    sample,
                    dim,
                    k,
                    IVF_KMEANS_ITERS,
                    kmeans::Metric::InnerProduct,
                ))
            }))
        }
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        None
    }

    /// Exact top-`k` rows of `base` by inner product for each query (row-major, `dim` wide),
    /// best first, ties to the lower row, on the encoder's GPU ([`gpu::top_k_inner_product`]):
    /// ground truth for recall measurement. `None` when the encoder runs on the CPU; `k` at
    /// most [`topk::MAX_K`].
    /// The [`topk::TopKTimes`] say where the time went (upload, kernel, host merge).
    #[allow(clippy::type_complexity)]
    pub fn exact_top_k(
        &self,
        queries: &[f32],
        base: &[f32],
        dim: usize,
        k: usize,
    ) -> Option<Result<(Vec<Vec<(u32, f32)>>, topk::TopKTimes), ModelError>> {
        self.exact_top_k_with(queries, base, dim, k, topk::TopKKernel::default())
    }

    /// [`Encoder::exact_top_k`] with the given kernel (the benchmark runs both).
    #[allow(clippy::type_complexity)]
    pub fn exact_top_k_with(
        &self,
        queries: &[f32],
        base: &[f32],
        dim: usize,
        k: usize,
        kernel: topk::TopKKernel,
    ) -> Option<Result<(Vec<Vec<(u32, f32)>>, topk::TopKTimes), ModelError>> {
        if self.model.host_kernels() {
            return None;
        }
        if !topk::valid_input(queries, base, dim, k) {
            return Some(Err(ModelError::Inference(format!(
                "top-k: k must be 1..={} and both inputs multiples of dimension {dim}",
                topk::MAX_K
            ))));
        }
        #[cfg(any(feature = "wgpu", feature = "cuda"))]
        {
            let client = gpu::client_of(self.model.device())?;
            Some(guarded(|| {
                Ok(gpu::top_k_inner_product_with(
                    &client, queries, base, dim, k, kernel,
                ))
            }))
        }
        #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
        {
            let _ = kernel; // no GPU kernels in this build
            None
        }
    }

    /// The precision the encoder computes in (never `Auto`).
    pub fn precision(&self) -> Precision {
        self.precision
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

    /// Whether the model runs on a GPU (wgpu or CUDA) rather than the CPU: then the host's
    /// cores are free while a batch computes.
    pub fn on_device(&self) -> bool {
        !self.model.host_kernels()
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
        self.embed_prepared(self.prepare(texts)?)
    }

    /// Embeds one search query; returns its L2-normalised vector. On the CPU backend the
    /// encoder's layers run with their weights in half precision (`small`: a dozen rows cannot
    /// use the f32 matmuls' bandwidth; cosine ≥ 0.9999 to [`embed`](Self::embed)'s vector,
    /// tested); elsewhere, and for what is stored (documents, memories), [`embed`](Self::embed).
    pub fn embed_query(&self, text: &str) -> Result<Vec<f32>, ModelError> {
        if !self.model.query_path() {
            return self.embed(&[text]).map(|(v, _)| v);
        }
        if self.model.prepare_query_path().is_err() {
            // Its weights could not be made (reported by `prepare_query_path`): the f32 path.
            return self.embed(&[text]).map(|(v, _)| v);
        }
        let p = self.prepare(&[text])?;
        // On one of rayon's threads throughout: the ~30 parallel steps of a query then split
        // from inside the pool instead of each being handed to it and waited for.
        let mut v = guarded(|| rayon::scope(|_| self.model.forward_query(&p.ids[0])))?;
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        v.iter_mut().for_each(|x| *x /= norm);
        Ok(v)
    }

    /// Makes the half-precision weights [`embed_query`](Self::embed_query) uses (37-60 ms on
    /// the 2-core VM), so that a server's first query does not pay for them; nothing where
    /// queries take the f32 path. On an error queries take the f32 path.
    pub fn prepare_query_path(&self) -> Result<(), ModelError> {
        if self.model.query_path() {
            self.model.prepare_query_path()?;
        }
        Ok(())
    }

    /// The CPU half of [`embed`](Self::embed): tokenisation and batch planning.
    pub fn prepare(&self, texts: &[&str]) -> Result<Prepared, ModelError> {
        prepare(&self.tokenizer, texts, self.token_budget, self.max_batch)
    }

    /// The device half of [`embed`](Self::embed): the forward passes over prepared batches.
    pub fn embed_prepared(&self, p: Prepared) -> Result<(Vec<f32>, EmbedStats), ModelError> {
        run(&self.model, p)
    }

    /// Embeds `groups` in order, handing each group's vectors to `sink` as soon as they are
    /// read back, with the CPU work (tokenisation, batch planning) of the next groups done on a
    /// second thread while the device computes: a bounded pipeline, at most `depth` prepared
    /// groups wait, so memory stays flat however many groups there are. On the CPU backend
    /// the two halves would compete for the same cores, so groups run one after the other.
    /// Stops at the first error (the sink's or the encoder's) and returns it.
    pub fn embed_pipelined<'t, I, F, E>(
        &self,
        groups: I,
        depth: usize,
        mut sink: F,
    ) -> Result<(), E>
    where
        I: IntoIterator<Item = Vec<&'t str>>,
        I::IntoIter: Send,
        F: FnMut(Vec<f32>, EmbedStats) -> Result<(), E>,
        E: From<ModelError> + Send,
    {
        let groups = groups.into_iter();
        if self.model.host_kernels() {
            for g in groups {
                let (v, stats) = self.embed(&g)?;
                sink(v, stats)?;
            }
            return Ok(());
        }
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Prepared, ModelError>>(depth.max(1));
        std::thread::scope(|scope| {
            let tokenizer = &self.tokenizer;
            let (budget, max_batch) = (self.token_budget, self.max_batch);
            scope.spawn(move || {
                for g in groups {
                    let p = prepare(tokenizer, &g, budget, max_batch);
                    let failed = p.is_err();
                    if tx.send(p).is_err() || failed {
                        break; // consumer gone, or nothing more worth preparing
                    }
                }
            });
            // Owned here, so an early return drops it and unblocks the producer's `send`.
            let rx = rx;
            for p in rx.iter() {
                let (v, stats) = run(&self.model, p?)?;
                sink(v, stats)?;
            }
            Ok(())
        })
    }
}

/// The model in the precision `precision` resolves to on `selected`, that precision, and the
/// reason (for the device description: the parity measured, or why half precision was not
/// used). Half precision must be supported by the device and pass [`half_parity`]; an explicit
/// request that cannot is an error, `Auto` falls back to f32.
fn choose_precision(
    precision: Precision,
    selected: &device::SelectedDevice,
    tokenizer: &TextTokenizer,
    load: impl Fn(DType) -> Result<Bert, ModelError>,
) -> Result<(Bert, Precision, String), ModelError> {
    let on = &selected.description;
    if selected.host_memory || precision == Precision::F32 {
        if matches!(precision, Precision::F16 | Precision::Bf16) {
            return Err(ModelError::UnsupportedPrecision(format!(
                "{precision} needs a GPU device; {on} computes in f32 (use --precision f32 or auto)"
            )));
        }
        return Ok((load(DType::F32)?, Precision::F32, String::new()));
    }
    let half = if precision == Precision::Bf16 {
        Precision::Bf16
    } else {
        Precision::F16
    };
    let dtype = half.dtype().expect("explicit precision");
    let explicit = precision != Precision::Auto;
    if !selected.device.supports_dtype(dtype) {
        if explicit {
            return Err(ModelError::UnsupportedPrecision(format!(
                "{half} requested but {on} does not support it; use --precision f32 or auto"
            )));
        }
        return Ok((
            load(DType::F32)?,
            Precision::F32,
            format!(" (device lacks {half})"),
        ));
    }
    let reference = load(DType::F32)?;
    let candidate = load(dtype)?;
    let why = match half_parity(&reference, &candidate, tokenizer) {
        Ok(cos) if cos >= HALF_PARITY_MIN_COSINE => {
            return Ok((
                candidate,
                half,
                format!(
                    " (parity vs f32: min cosine {cos:.6} over {} probe texts)",
                    PROBE_TEXTS.len()
                ),
            ));
        }
        Ok(cos) => format!("min cosine {cos:.6} < {HALF_PARITY_MIN_COSINE}"),
        Err(e) => e.to_string(),
    };
    if explicit {
        return Err(ModelError::UnsupportedPrecision(format!(
            "{half} failed the parity check against f32 on {on} ({why}); use --precision f32 or auto"
        )));
    }
    Ok((
        reference,
        Precision::F32,
        format!(" ({half} failed the parity check: {why})"),
    ))
}

fn prepare(
    tokenizer: &TextTokenizer,
    texts: &[&str],
    token_budget: usize,
    max_batch: usize,
) -> Result<Prepared, ModelError> {
    if texts.is_empty() {
        return Ok(Prepared {
            ids: Vec::new(),
            plan: Vec::new(),
        });
    }
    let ids = tokenizer.encode_many(texts)?;
    let lengths: Vec<usize> = ids.iter().map(Vec::len).collect();
    let plan = plan_batches(&lengths, token_budget, max_batch);
    Ok(Prepared { ids, plan })
}

/// Padded `[batch, seq]` ids and the real lengths of one planned batch.
fn padded_batch(ids: &[Vec<u32>], batch: &Batch) -> (Vec<i64>, Vec<usize>) {
    let seq = batch.seq_len;
    let mut padded = vec![0i64; batch.indices.len() * seq];
    let mut lengths = Vec::with_capacity(batch.indices.len());
    for (row, &i) in padded.chunks_exact_mut(seq).zip(&batch.indices) {
        for (dst, &id) in row.iter_mut().zip(&ids[i]) {
            *dst = i64::from(id);
        }
        lengths.push(ids[i].len());
    }
    (padded, lengths)
}

/// Runs `f`, turning a backend panic (GPU runtimes report failures that way) into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, ModelError>) -> Result<T, ModelError> {
    catch_unwind(AssertUnwindSafe(f))
        .map_err(|panic| ModelError::Inference(panic_message(panic)))?
}

/// The forward passes over prepared batches on `model`.
///
/// Host path: one batch at a time through the fused CPU kernels, normalised on the host.
/// Device path: every batch is submitted (pooled and normalised on the device) before anything
/// is read back, then one read returns all rows, so the device queue never drains between
/// batches and the only transfer back is the results.
fn run(model: &Bert, p: Prepared) -> Result<(Vec<f32>, EmbedStats), ModelError> {
    let dim = model.hidden_size();
    let n = p.ids.len();
    let mut stats = EmbedStats {
        texts: n,
        ..EmbedStats::default()
    };
    let mut out = vec![0.0f32; n * dim];
    for batch in &p.plan {
        stats.tokens += batch.indices.iter().map(|&i| p.ids[i].len()).sum::<usize>();
        stats.padded_tokens += batch.padded_tokens();
        stats.batches += 1;
    }
    if n == 0 {
        return Ok((out, stats));
    }
    let check_len = |got: usize, rows: usize| {
        if got == rows * dim {
            Ok(())
        } else {
            Err(ModelError::Inference(format!(
                "backend returned {got} values for {rows} rows of {dim}"
            )))
        }
    };
    if model.host_kernels() {
        for batch in &p.plan {
            let (padded, lengths) = padded_batch(&p.ids, batch);
            let pooled = guarded(|| model.forward(padded, &lengths, batch.seq_len))?;
            check_len(pooled.len(), batch.indices.len())?;
            for (src, &i) in pooled.chunks_exact(dim).zip(&batch.indices) {
                let dst = &mut out[i * dim..(i + 1) * dim];
                let norm = src.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = s / norm;
                }
            }
        }
        return Ok((out, stats));
    }
    let rows: Vec<usize> = p
        .plan
        .iter()
        .flat_map(|b| b.indices.iter().copied())
        .collect();
    let values = guarded(|| {
        let mut pending: Vec<Tensor<2>> = Vec::with_capacity(p.plan.len());
        for batch in &p.plan {
            let (padded, lengths) = padded_batch(&p.ids, batch);
            pending.push(model.forward_device(padded, &lengths, batch.seq_len)?);
        }
        Tensor::cat(pending, 0)
            .try_into_data()
            .map_err(|e| ModelError::Inference(e.to_string()))?
            .try_into_vec::<f32>()
            .map_err(|e| ModelError::Inference(format!("{e:?}")))
    })?;
    check_len(values.len(), rows.len())?;
    for (src, &i) in values.chunks_exact(dim).zip(&rows) {
        out[i * dim..(i + 1) * dim].copy_from_slice(src);
    }
    Ok((out, stats))
}

/// Probe texts for the half-precision parity check: code and prose, short and at the token cap.
const PROBE_TEXTS: [&str; 12] = [
    "fn main() { println!(\"hello\"); }",
    "How do I open a memory-mapped file read-only in Rust?",
    "def parse_config(path):\n    with open(path) as f:\n        return json.load(f)",
    "SELECT id, name FROM users WHERE created_at > now() - interval '1 day' ORDER BY id;",
    "The write-ahead log is fsynced before the acknowledgement is sent to the client.",
    "impl<T: Ord> BinaryHeap<T> { pub fn push(&mut self, item: T) { self.data.push(item); self.sift_up(0, self.data.len() - 1); } }",
    "x",
    "class LRUCache:\n    def __init__(self, capacity):\n        self.capacity = capacity\n        self.cache = OrderedDict()\n    def get(self, key):\n        if key not in self.cache:\n            return -1\n        self.cache.move_to_end(key)\n        return self.cache[key]",
    "error[E0502]: cannot borrow `v` as mutable because it is also borrowed as immutable",
    "Segments are immutable, content-addressed and memory-mapped; a manifest names the live ones.",
    "for (i, chunk) in chunks.iter().enumerate() { let v = encoder.embed(&[chunk.text.as_str()])?; index.add(i as u64, &v)?; } // repeated to reach the token cap: for (i, chunk) in chunks.iter().enumerate() { let v = encoder.embed(&[chunk.text.as_str()])?; index.add(i as u64, &v)?; } for (i, chunk) in chunks.iter().enumerate() { let v = encoder.embed(&[chunk.text.as_str()])?; index.add(i as u64, &v)?; } for (i, chunk) in chunks.iter().enumerate() { let v = encoder.embed(&[chunk.text.as_str()])?; index.add(i as u64, &v)?; } for (i, chunk) in chunks.iter().enumerate() { let v = encoder.embed(&[chunk.text.as_str()])?; index.add(i as u64, &v)?; }",
    "  ",
];

/// Lowest cosine between `reference` (f32) and `candidate` embeddings of [`PROBE_TEXTS`].
fn half_parity(
    reference: &Bert,
    candidate: &Bert,
    tokenizer: &TextTokenizer,
) -> Result<f32, ModelError> {
    let embed = |model: &Bert| {
        let p = prepare(
            tokenizer,
            &PROBE_TEXTS,
            DEFAULT_TOKEN_BUDGET,
            DEFAULT_MAX_BATCH,
        )?;
        run(model, p).map(|(v, _)| v)
    };
    let (a, b) = (embed(reference)?, embed(candidate)?);
    let dim = reference.hidden_size();
    Ok(a.chunks_exact(dim)
        .zip(b.chunks_exact(dim))
        .map(|(x, y)| {
            let dot: f32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
            let nx = x.iter().map(|v| v * v).sum::<f32>().sqrt();
            let ny = y.iter().map(|v| v * v).sum::<f32>().sqrt();
            if !dot.is_finite() {
                return f32::NEG_INFINITY; // NaN/overflow in half precision
            }
            dot / (nx * ny).max(1e-12)
        })
        .fold(f32::INFINITY, f32::min))
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

//! Reading a BERT model directory: config files, safetensors weights and the model identity.

use std::fs;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

use crate::ModelError;

/// Files every model directory must provide.
pub(crate) const CONFIG_FILE: &str = "config.json";
pub(crate) const WEIGHTS_FILE: &str = "model.safetensors";
pub(crate) const TOKENIZER_FILE: &str = "tokenizer.json";
const SBERT_CONFIG_FILE: &str = "sentence_bert_config.json";
const POOLING_CONFIG_FILE: &str = "1_Pooling/config.json";
/// Sequence cap used when the directory does not say otherwise.
const DEFAULT_MAX_TOKENS: usize = 256;

/// Feed-forward activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activation {
    /// Exact GELU, `x * Φ(x)` with erf.
    Gelu,
    /// tanh approximation of GELU.
    GeluTanh,
}

/// How token states become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pooling {
    /// Average over non-padding tokens.
    Mean,
    /// The `[CLS]` token's state.
    Cls,
}

/// Hyperparameters of a BERT encoder (the subset of HF `config.json` we use).
#[derive(Debug, Clone)]
pub(crate) struct BertConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub activation: Activation,
    /// Sequence cap in tokens including `[CLS]`/`[SEP]`.
    pub max_tokens: usize,
    pub pooling: Pooling,
}

#[derive(Deserialize)]
struct RawConfig {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "default_max_pos")]
    max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    type_vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default = "default_pos_type")]
    position_embedding_type: String,
}

fn default_max_pos() -> usize {
    512
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".to_string()
}
fn default_pos_type() -> String {
    "absolute".to_string()
}

#[derive(Deserialize)]
struct SbertConfig {
    max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

/// Checks that the directory and its required files exist; returns their paths.
pub(crate) fn required_files(dir: &Path) -> Result<[PathBuf; 3], ModelError> {
    if !dir.is_dir() {
        return Err(ModelError::MissingModelDir(dir.to_path_buf()));
    }
    let mut out: [PathBuf; 3] = Default::default();
    for (slot, file) in out
        .iter_mut()
        .zip([CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE])
    {
        let path = dir.join(file);
        if !path.is_file() {
            return Err(ModelError::MissingFile {
                dir: dir.to_path_buf(),
                file: file.to_string(),
            });
        }
        *slot = path;
    }
    Ok(out)
}

pub(crate) fn read_bytes(path: &Path) -> Result<Vec<u8>, ModelError> {
    fs::read(path).map_err(|source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn config_err(path: &Path, message: impl Into<String>) -> ModelError {
    ModelError::Config {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn parse_json<T: for<'de> Deserialize<'de>>(path: &Path, bytes: &[u8]) -> Result<T, ModelError> {
    serde_json::from_slice(bytes).map_err(|e| config_err(path, e.to_string()))
}

/// Parses `config.json` (bytes already read) plus the optional sentence-transformers files.
pub(crate) fn parse_config(
    dir: &Path,
    config_path: &Path,
    config_bytes: &[u8],
) -> Result<BertConfig, ModelError> {
    let raw: RawConfig = parse_json(config_path, config_bytes)?;
    let positive = [
        ("vocab_size", raw.vocab_size),
        ("hidden_size", raw.hidden_size),
        ("num_hidden_layers", raw.num_hidden_layers),
        ("num_attention_heads", raw.num_attention_heads),
        ("intermediate_size", raw.intermediate_size),
        ("max_position_embeddings", raw.max_position_embeddings),
        ("type_vocab_size", raw.type_vocab_size),
    ];
    for (name, value) in positive {
        if value == 0 {
            return Err(config_err(config_path, format!("`{name}` must be > 0")));
        }
    }
    if !raw.hidden_size.is_multiple_of(raw.num_attention_heads) {
        return Err(config_err(
            config_path,
            format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                raw.hidden_size, raw.num_attention_heads
            ),
        ));
    }
    if !(raw.layer_norm_eps.is_finite() && raw.layer_norm_eps >= 0.0) {
        return Err(config_err(config_path, "`layer_norm_eps` must be >= 0"));
    }
    let activation = match raw.hidden_act.as_str() {
        "gelu" => Activation::Gelu,
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
        other => {
            return Err(config_err(
                config_path,
                format!("unsupported hidden_act `{other}` (supported: gelu, gelu_new)"),
            ))
        }
    };
    if raw.position_embedding_type != "absolute" {
        return Err(config_err(
            config_path,
            format!(
                "unsupported position_embedding_type `{}` (only `absolute`)",
                raw.position_embedding_type
            ),
        ));
    }

    let sbert_path = dir.join(SBERT_CONFIG_FILE);
    let mut max_tokens = DEFAULT_MAX_TOKENS;
    if sbert_path.is_file() {
        let sb: SbertConfig = parse_json(&sbert_path, &read_bytes(&sbert_path)?)?;
        if let Some(n) = sb.max_seq_length {
            max_tokens = n;
        }
    }
    // [CLS] + [SEP] need two slots.
    let max_tokens = max_tokens.min(raw.max_position_embeddings).max(2);

    let pooling_path = dir.join(POOLING_CONFIG_FILE);
    let mut pooling = Pooling::Mean;
    if pooling_path.is_file() {
        let p: PoolingConfig = parse_json(&pooling_path, &read_bytes(&pooling_path)?)?;
        pooling = match (
            p.pooling_mode_mean_tokens,
            p.pooling_mode_cls_token,
            p.pooling_mode_max_tokens || p.pooling_mode_mean_sqrt_len_tokens,
        ) {
            (true, false, false) => Pooling::Mean,
            (false, true, false) => Pooling::Cls,
            _ => {
                return Err(config_err(
                    &pooling_path,
                    "unsupported pooling mode; exactly one of pooling_mode_mean_tokens or pooling_mode_cls_token must be true",
                ))
            }
        };
    }

    Ok(BertConfig {
        vocab_size: raw.vocab_size,
        hidden_size: raw.hidden_size,
        num_hidden_layers: raw.num_hidden_layers,
        num_attention_heads: raw.num_attention_heads,
        intermediate_size: raw.intermediate_size,
        max_position_embeddings: raw.max_position_embeddings,
        type_vocab_size: raw.type_vocab_size,
        layer_norm_eps: raw.layer_norm_eps,
        activation,
        max_tokens,
        pooling,
    })
}

/// Memory-mapped safetensors file with name resolution (`bert.` prefix optional) and
/// shape/dtype checks.
pub(crate) struct Weights<'a> {
    path: &'a Path,
    tensors: SafeTensors<'a>,
}

impl<'a> Weights<'a> {
    pub(crate) fn parse(path: &'a Path, bytes: &'a [u8]) -> Result<Self, ModelError> {
        let tensors = SafeTensors::deserialize(bytes).map_err(|e| ModelError::Safetensors {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(Self { path, tensors })
    }

    /// Returns the tensor `name` as f32 values after checking its shape.
    pub(crate) fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let view = [name.to_string(), format!("bert.{name}")]
            .iter()
            .find_map(|n| self.tensors.tensor(n).ok())
            .ok_or_else(|| ModelError::MissingTensor {
                path: self.path.to_path_buf(),
                name: name.to_string(),
            })?;
        if view.dtype() != Dtype::F32 {
            return Err(ModelError::TensorDtype {
                path: self.path.to_path_buf(),
                name: name.to_string(),
                dtype: format!("{:?}", view.dtype()),
            });
        }
        if view.shape() != shape {
            return Err(ModelError::TensorShape {
                path: self.path.to_path_buf(),
                name: name.to_string(),
                expected: shape.to_vec(),
                actual: view.shape().to_vec(),
            });
        }
        Ok(view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Returns an HF linear weight `[out, in]` transposed to `[in, out]`.
    pub(crate) fn get_linear_t(
        &self,
        name: &str,
        out_dim: usize,
        in_dim: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let w = self.get(name, &[out_dim, in_dim])?;
        Ok(transpose(&w, out_dim, in_dim))
    }
}

/// Transposes a row-major `[rows, cols]` matrix.
pub(crate) fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; w.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = w[r * cols + c];
        }
    }
    t
}

/// `"<dir name>@<first 16 hex of blake3(config.json ++ model.safetensors)>"`.
pub(crate) fn model_id(dir: &Path, config_bytes: &[u8], weights_bytes: &[u8]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(config_bytes);
    hasher.update(weights_bytes);
    let hex = hasher.finalize().to_hex();
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".to_string());
    format!("{name}@{}", &hex.as_str()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_small() {
        // [[1,2,3],[4,5,6]] -> [[1,4],[2,5],[3,6]]
        assert_eq!(
            transpose(&[1., 2., 3., 4., 5., 6.], 2, 3),
            vec![1., 4., 2., 5., 3., 6.]
        );
    }

    fn write_config(dir: &Path, body: &str) -> PathBuf {
        let p = dir.join(CONFIG_FILE);
        fs::write(&p, body).unwrap();
        p
    }

    const MINI: &str = r#"{"vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 64}"#;

    #[test]
    fn config_defaults_and_max_tokens() {
        let tmp = tempfile::tempdir().unwrap();
        let p = write_config(tmp.path(), MINI);
        let cfg = parse_config(tmp.path(), &p, MINI.as_bytes()).unwrap();
        assert_eq!(cfg.max_tokens, 64); // 256 capped by max_position_embeddings
        assert_eq!(cfg.layer_norm_eps, 1e-12);
        assert_eq!(cfg.activation, Activation::Gelu);
        assert_eq!(cfg.pooling, Pooling::Mean);

        fs::write(
            tmp.path().join(SBERT_CONFIG_FILE),
            r#"{"max_seq_length": 32}"#,
        )
        .unwrap();
        fs::create_dir_all(tmp.path().join("1_Pooling")).unwrap();
        fs::write(
            tmp.path().join(POOLING_CONFIG_FILE),
            r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
        )
        .unwrap();
        let cfg = parse_config(tmp.path(), &p, MINI.as_bytes()).unwrap();
        assert_eq!(cfg.max_tokens, 32);
        assert_eq!(cfg.pooling, Pooling::Cls);
    }

    #[test]
    fn config_rejects_bad_values() {
        let tmp = tempfile::tempdir().unwrap();
        for (body, needle) in [
            ("{not json", "malformed"),
            (r#"{"hidden_size": 8}"#, "missing field"),
            (
                &MINI.replace("\"num_attention_heads\": 2", "\"num_attention_heads\": 3"),
                "not divisible",
            ),
            (
                &MINI.replace("\"hidden_size\": 8", "\"hidden_size\": 0"),
                "> 0",
            ),
            (
                &MINI.replace('}', r#", "hidden_act": "relu"}"#),
                "unsupported hidden_act",
            ),
            (
                &MINI.replace('}', r#", "position_embedding_type": "relative_key"}"#),
                "position_embedding_type",
            ),
        ] {
            let p = write_config(tmp.path(), body);
            let err = parse_config(tmp.path(), &p, body.as_bytes()).unwrap_err();
            assert!(matches!(err, ModelError::Config { .. }), "{err:?}");
            let msg = err.to_string();
            assert!(msg.contains(needle), "{msg}");
            assert!(msg.contains("config.json"), "{msg}");
        }
    }

    #[test]
    fn weights_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(WEIGHTS_FILE);
        assert!(matches!(
            Weights::parse(&path, b"garbage bytes"),
            Err(ModelError::Safetensors { .. })
        ));

        let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let view = safetensors::tensor::TensorView::new(Dtype::F32, vec![2, 3], &data).unwrap();
        let bytes = safetensors::serialize([("bert.pooler.dense.weight", view)], None).unwrap();
        let w = Weights::parse(&path, &bytes).unwrap();
        // `bert.` prefix resolved transparently, linear weights transposed.
        assert_eq!(
            w.get_linear_t("pooler.dense.weight", 2, 3).unwrap(),
            vec![1., 4., 2., 5., 3., 6.]
        );
        let err = w.get("pooler.dense.weight", &[3, 2]).unwrap_err();
        assert!(matches!(err, ModelError::TensorShape { .. }));
        assert!(err.to_string().contains("[3, 2]"));
        let err = w
            .get("embeddings.word_embeddings.weight", &[1])
            .unwrap_err();
        assert!(matches!(err, ModelError::MissingTensor { .. }));
        assert!(err
            .to_string()
            .contains("embeddings.word_embeddings.weight"));
    }
}

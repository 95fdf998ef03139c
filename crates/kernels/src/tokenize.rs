//! WordPiece tokenisation via the HF `tokenizers` crate, truncated to the model's cap.

use std::path::Path;

use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::ModelError;

/// Tokenizer configured for single-sequence encoding: no padding (batches are padded by the
/// encoder), truncation to `max_tokens` including `[CLS]`/`[SEP]`.
pub(crate) struct TextTokenizer {
    inner: Tokenizer,
    vocab_size: usize,
}

impl TextTokenizer {
    pub(crate) fn load(
        path: &Path,
        max_tokens: usize,
        vocab_size: usize,
    ) -> Result<Self, ModelError> {
        let mut inner = Tokenizer::from_file(path)
            .map_err(|e| ModelError::Tokenizer(format!("cannot load {}: {e}", path.display())))?;
        inner.with_padding(None);
        inner
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: max_tokens,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", path.display())))?;
        Ok(Self { inner, vocab_size })
    }

    /// Token ids (with special tokens, truncated) for each text, in input order.
    pub(crate) fn encode_many(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>, ModelError> {
        let encodings = self
            .inner
            .encode_batch_fast(texts.to_vec(), true)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        encodings
            .into_iter()
            .map(|enc| {
                let ids = enc.get_ids().to_vec();
                if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
                    return Err(ModelError::Tokenizer(format!(
                        "token id {bad} is outside the model vocabulary ({}); tokenizer.json does not match config.json",
                        self.vocab_size
                    )));
                }
                Ok(ids)
            })
            .collect()
    }

    /// Number of tokens after truncation, including special tokens.
    pub(crate) fn count(&self, text: &str) -> usize {
        self.inner
            .encode_fast(text, true)
            .map(|e| e.len())
            .unwrap_or(0)
    }
}

//! The tokenizer, set up as sentence-transformers uses it.
//!
//! The packaged tokenizer.json pads every input to 128 tokens and truncates at 128. Sentence
//! transformers truncate at the model's `max_seq_length` (256 for all-MiniLM-L6-v2) and pad to the
//! longest text of a batch: a 15-token sentence then costs 15 tokens, not 128. Both are overridden.

use std::path::Path;

use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::EmbedError;

/// Token ids of a batch, padded to its longest member.
pub struct Batch {
    pub rows: usize,
    pub cols: usize,
    pub ids: Vec<i64>,
    pub mask: Vec<i64>,
    pub type_ids: Vec<i64>,
}

pub struct TextTokenizer {
    inner: Tokenizer,
}

impl TextTokenizer {
    /// Load `dir/tokenizer.json`; the truncation length is `max_seq_length` of
    /// `sentence_bert_config.json` when present, else 256.
    pub fn load(dir: &Path) -> Result<TextTokenizer, EmbedError> {
        let path = dir.join("tokenizer.json");
        let mut inner = Tokenizer::from_file(&path)
            .map_err(|e| EmbedError::Load(format!("{}: {e}", path.display())))?;
        let max_length = std::fs::read_to_string(dir.join("sentence_bert_config.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .and_then(|v| v["max_seq_length"].as_u64())
            .unwrap_or(256) as usize;
        inner
            .with_truncation(Some(TruncationParams {
                max_length,
                ..Default::default()
            }))
            .map_err(|e| EmbedError::Load(e.to_string()))?;
        let pad = inner.get_padding().cloned().unwrap_or_default();
        inner.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_to_multiple_of: None,
            ..pad
        }));
        Ok(TextTokenizer { inner })
    }

    pub fn encode(&self, texts: &[&str]) -> Result<Batch, EmbedError> {
        let encs = self
            .inner
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| EmbedError::Run(e.to_string()))?;
        let rows = encs.len();
        let cols = encs.iter().map(|e| e.len()).max().unwrap_or(0);
        let mut b = Batch {
            rows,
            cols,
            ids: Vec::with_capacity(rows * cols),
            mask: Vec::with_capacity(rows * cols),
            type_ids: Vec::with_capacity(rows * cols),
        };
        for e in &encs {
            b.ids.extend(e.get_ids().iter().map(|&x| x as i64));
            b.mask
                .extend(e.get_attention_mask().iter().map(|&x| x as i64));
            b.type_ids
                .extend(e.get_type_ids().iter().map(|&x| x as i64));
        }
        Ok(b)
    }
}

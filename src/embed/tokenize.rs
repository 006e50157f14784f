//! The tokenizer, set up as sentence-transformers uses it, and the padded batches fed to a model.
//!
//! The packaged tokenizer.json pads every input to 128 tokens and truncates at 128. Sentence
//! transformers truncate at the model's `max_seq_length` (256 for all-MiniLM-L6-v2; see
//! `layout`) and pad to the longest text of a batch: a 15-token sentence then costs 15 tokens,
//! not 128. Both are overridden:
//! texts are tokenised one by one (on the calling thread — the tokenizer's own thread pool would
//! only compete with ONNX Runtime's for the same cores) and padded here, per batch.

use std::path::Path;

use tokenizers::{Tokenizer, TruncationParams};

use super::EmbedError;

/// One text's token ids (truncated, unpadded).
pub struct Tokens {
    pub ids: Vec<i64>,
    pub type_ids: Vec<i64>,
}

impl Tokens {
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Token ids of a batch, padded to its longest member.
pub struct Batch {
    pub rows: usize,
    pub cols: usize,
    pub ids: Vec<i64>,
    pub mask: Vec<i64>,
    pub type_ids: Vec<i64>,
}

impl Batch {
    /// Pad `rows` to the longest of them with `pad_id` (mask 0 on padding).
    pub fn pad(rows: &[&Tokens], pad_id: i64) -> Batch {
        let cols = rows.iter().map(|t| t.len()).max().unwrap_or(0);
        let n = rows.len() * cols;
        let mut b = Batch {
            rows: rows.len(),
            cols,
            ids: Vec::with_capacity(n),
            mask: Vec::with_capacity(n),
            type_ids: Vec::with_capacity(n),
        };
        for t in rows {
            let fill = cols - t.len();
            b.ids.extend_from_slice(&t.ids);
            b.ids.extend(std::iter::repeat_n(pad_id, fill));
            b.mask.extend(std::iter::repeat_n(1, t.len()));
            b.mask.extend(std::iter::repeat_n(0, fill));
            b.type_ids.extend_from_slice(&t.type_ids);
            b.type_ids.extend(std::iter::repeat_n(0, fill));
        }
        b
    }
}

/// A model run costs about this many tokens' worth of time besides its tokens (measured on
/// all-MiniLM-L6-v2 with ONNX Runtime on 2 cores: 1×16 tokens 4.2 ms, 8×16 21 ms, about 6 tokens/ms).
const RUN_OVERHEAD_TOKENS: usize = 12;

/// Cut texts sorted by ascending token length into runs (index ranges) so that the padded tokens
/// plus a per-run overhead are least, no run above `budget` padded tokens (rows × its longest)
/// unless it is a single text. Dynamic programming over the cut points: O(n²) for n texts.
pub fn plan_runs(sorted_lens: &[usize], budget: usize) -> Vec<std::ops::Range<usize>> {
    let n = sorted_lens.len();
    // best[j]: least cost of the first j texts; from[j]: where its last run starts.
    let mut best = vec![usize::MAX; n + 1];
    let mut from = vec![0; n + 1];
    best[0] = 0;
    for j in 1..=n {
        let longest = sorted_lens[j - 1].max(1);
        for i in (0..j).rev() {
            let padded = (j - i) * longest;
            if padded > budget && j - i > 1 {
                break;
            }
            let cost = best[i].saturating_add(RUN_OVERHEAD_TOKENS + padded);
            if cost < best[j] {
                best[j] = cost;
                from[j] = i;
            }
        }
    }
    let mut runs = Vec::new();
    let mut j = n;
    while j > 0 {
        runs.push(from[j]..j);
        j = from[j];
    }
    runs.reverse();
    runs
}

pub struct TextTokenizer {
    inner: Tokenizer,
    pad_id: i64,
}

impl TextTokenizer {
    /// Load `dir/tokenizer.json`; the truncation length is `max_seq_length` of
    /// `sentence_bert_config.json` when present, else 256 ([`super::layout::max_seq_length`]).
    pub fn load(dir: &Path) -> Result<TextTokenizer, EmbedError> {
        Self::with_max_length(dir, super::layout::max_seq_length(dir)?)
    }

    /// Load `dir/tokenizer.json`, truncating texts at `max_length` tokens (special tokens
    /// included).
    pub fn with_max_length(dir: &Path, max_length: usize) -> Result<TextTokenizer, EmbedError> {
        let path = dir.join("tokenizer.json");
        let mut inner = Tokenizer::from_file(&path)
            .map_err(|e| EmbedError::Load(format!("{}: {e}", path.display())))?;
        inner
            .with_truncation(Some(TruncationParams {
                max_length,
                ..Default::default()
            }))
            .map_err(|e| EmbedError::Load(e.to_string()))?;
        let pad_id = inner.get_padding().map(|p| p.pad_id as i64).unwrap_or(0);
        inner.with_padding(None);
        Ok(TextTokenizer { inner, pad_id })
    }

    /// One text's tokens, with the special tokens, truncated.
    pub fn tokens(&self, text: &str) -> Result<Tokens, EmbedError> {
        let e = self
            .inner
            .encode(text, true)
            .map_err(|e| EmbedError::Run(e.to_string()))?;
        Ok(Tokens {
            ids: e.get_ids().iter().map(|&x| x as i64).collect(),
            type_ids: e.get_type_ids().iter().map(|&x| x as i64).collect(),
        })
    }

    /// The padding token's id.
    pub fn pad_id(&self) -> i64 {
        self.pad_id
    }

    /// `texts` tokenised and padded as one batch, in order.
    pub fn encode(&self, texts: &[&str]) -> Result<Batch, EmbedError> {
        let toks = texts
            .iter()
            .map(|t| self.tokens(t))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Batch::pad(&toks.iter().collect::<Vec<_>>(), self.pad_id))
    }
}

#[cfg(test)]
mod tests {
    use super::plan_runs;

    #[test]
    fn runs_keep_long_texts_apart_from_short_ones() {
        // 28 sentences of 18 tokens and 4 paragraphs of 70: one padded run would be 32 × 70.
        let mut lens = vec![18; 28];
        lens.extend([70; 4]);
        assert_eq!(plan_runs(&lens, 2048), vec![0..28, 28..32]);
        // Similar lengths share a run; the budget splits a big one; a text over it runs alone.
        assert_eq!(plan_runs(&[10, 11, 12, 12], 2048), vec![0..4]);
        assert_eq!(plan_runs(&[100; 8], 400), vec![0..4, 4..8]);
        assert_eq!(plan_runs(&[300], 64), vec![0..1]);
        assert!(plan_runs(&[], 64).is_empty());
    }
}

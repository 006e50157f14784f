//! How a model directory says its token embeddings become a sentence embedding, read as
//! sentence-transformers reads it, with the settings that override each part.
//!
//! - `modules.json`: the modules in order. A `Pooling` module's path holds its `config.json`; a
//!   `Normalize` module means unit-length vectors; a `Transformer` module's path holds
//!   `sentence_bert_config.json`. Modules memproxy does not apply to token embeddings (`Dense`, …)
//!   are listed in [`Layout::unapplied`] (a graph that outputs `sentence_embedding` has them inside).
//! - `1_Pooling/config.json` (or the `Pooling` module's path): `pooling_mode_cls_token`,
//!   `_max_tokens`, `_mean_tokens`, `_mean_sqrt_len_tokens`, `_weightedmean_tokens`,
//!   `_lasttoken`; several modes are concatenated in that order, as sentence-transformers does.
//! - `sentence_bert_config.json`: `max_seq_length`, the truncation length in tokens (the prompt
//!   counts).
//! - `config_sentence_transformers.json`: `prompts` and `default_prompt_name`. The query prompt is
//!   `prompts.query`, the document prompt the first of `prompts.document`, `.passage`, `.corpus`
//!   (sentence-transformers' `encode_query` / `encode_document`); either falls back to the
//!   default prompt. A prompt is prepended to the text before tokenisation.
//!
//! A directory without these files is read as memproxy always read it: mean pooling, unit
//! length, 256 tokens (at most the `max_position_embeddings` of `config.json`), no prompts. A file
//! that is present but malformed is an error naming it; a part given by a setting is not read.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::EmbedError;

pub use crate::config::Pooling;
use crate::config::POOLING_MODES;

/// Settings that replace what the model's files say (`None`: read the files).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub pooling: Option<Vec<Pooling>>,
    pub normalize: Option<bool>,
    pub max_seq_length: Option<usize>,
    /// An empty prompt means none.
    pub query_prompt: Option<String>,
    pub document_prompt: Option<String>,
}

impl Overrides {
    pub fn from_config(cfg: &crate::config::Config) -> Result<Overrides, EmbedError> {
        let pooling = cfg
            .pooling
            .as_deref()
            .map(Pooling::parse_list)
            .transpose()
            .map_err(|e| EmbedError::Load(format!("pooling: {e}")))?;
        Ok(Overrides {
            pooling,
            normalize: cfg.normalize,
            max_seq_length: cfg.max_seq_length,
            query_prompt: cfg.query_prompt.clone(),
            document_prompt: cfg.document_prompt.clone(),
        })
    }
}

/// Everything between the graph's token embeddings and memproxy's vectors, and the texts' prompts.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// Applied to token embeddings (rank-3 output); a graph that outputs sentence embeddings
    /// pools itself.
    pub pooling: Vec<Pooling>,
    /// The pooling comes from the `pooling` setting, not the model's files.
    pub pooling_set: bool,
    /// L2-normalise the sentence embedding.
    pub normalize: bool,
    /// Tokens read of a text (its prompt included), special tokens counted.
    pub max_seq_length: usize,
    /// Prepended to a recall's question.
    pub query_prompt: String,
    /// Prepended to what is remembered.
    pub document_prompt: String,
    /// The Pooling module's `include_prompt` (false: sentence-transformers leaves the prompt's
    /// tokens out of the pooling, which memproxy does not do).
    pub include_prompt: bool,
    /// Modules of `modules.json` that memproxy does not apply to token embeddings (type names).
    pub unapplied: Vec<String>,
    /// `similarity_fn_name` of `config_sentence_transformers.json` when present (memproxy's
    /// index measures cosine distance).
    pub similarity: Option<String>,
}

/// The truncation length when nothing says otherwise.
pub const DEFAULT_MAX_SEQ_LENGTH: usize = 256;

fn read_json(path: &Path) -> Result<Option<Value>, EmbedError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EmbedError::Load(format!("{}: {e}", path.display()))),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| EmbedError::Load(format!("{}: {e}", path.display())))
}

fn malformed(path: &Path, what: impl std::fmt::Display) -> EmbedError {
    EmbedError::Load(format!("{}: {what}", path.display()))
}

/// One entry of `modules.json`: its type's last name (`Pooling`, `Normalize`, …) and path.
struct Module {
    kind: String,
    path: String,
}

fn modules(dir: &Path) -> Result<Option<Vec<Module>>, EmbedError> {
    let file = dir.join("modules.json");
    let Some(v) = read_json(&file)? else {
        return Ok(None);
    };
    let list = v
        .as_array()
        .ok_or_else(|| malformed(&file, "not a list of modules"))?;
    let mut out = Vec::new();
    for m in list {
        let kind = m["type"]
            .as_str()
            .ok_or_else(|| malformed(&file, "a module has no type"))?;
        out.push(Module {
            kind: kind.rsplit('.').next().unwrap_or(kind).to_string(),
            path: m["path"].as_str().unwrap_or_default().to_string(),
        });
    }
    Ok(Some(out))
}

/// The truncation length the directory states (`sentence_bert_config.json` at the root, for
/// tokenizers loaded on their own), else the default.
pub fn max_seq_length(dir: &Path) -> Result<usize, EmbedError> {
    stated_max_seq_length(dir, dir)
}

fn stated_max_seq_length(dir: &Path, transformer: &Path) -> Result<usize, EmbedError> {
    let file = transformer.join("sentence_bert_config.json");
    if let Some(v) = read_json(&file)? {
        match &v["max_seq_length"] {
            Value::Null => {}
            n => {
                return match n.as_u64() {
                    Some(n) if n > 0 => Ok(n as usize),
                    _ => Err(malformed(
                        &file,
                        format!("max_seq_length {n} is not a length"),
                    )),
                }
            }
        }
    }
    Ok(DEFAULT_MAX_SEQ_LENGTH.min(max_positions(dir)?.unwrap_or(usize::MAX)))
}

/// `max_position_embeddings` of `config.json`: the longest input the graph takes.
fn max_positions(dir: &Path) -> Result<Option<usize>, EmbedError> {
    Ok(read_json(&dir.join("config.json"))?
        .and_then(|v| v["max_position_embeddings"].as_u64())
        .map(|n| n as usize))
}

fn pooling_config(file: &Path) -> Result<Option<(Vec<Pooling>, bool)>, EmbedError> {
    let Some(v) = read_json(file)? else {
        return Ok(None);
    };
    if !v.is_object() {
        return Err(malformed(file, "not an object"));
    }
    let modes: Vec<Pooling> = POOLING_MODES
        .iter()
        .filter(|m| v[m.1].as_bool() == Some(true))
        .map(|m| m.2)
        .collect();
    if modes.is_empty() {
        return Err(malformed(
            file,
            "no pooling_mode_… is true (set pooling to choose one)",
        ));
    }
    Ok(Some((modes, v["include_prompt"].as_bool().unwrap_or(true))))
}

/// (query prompt, document prompt, similarity_fn_name) from `config_sentence_transformers.json`.
fn prompts(dir: &Path) -> Result<(String, String, Option<String>), EmbedError> {
    let file = dir.join("config_sentence_transformers.json");
    let Some(v) = read_json(&file)? else {
        return Ok((String::new(), String::new(), None));
    };
    let similarity = v["similarity_fn_name"].as_str().map(str::to_string);
    let table = match &v["prompts"] {
        Value::Null => serde_json::Map::new(),
        Value::Object(m) => m.clone(),
        _ => return Err(malformed(&file, "prompts is not an object")),
    };
    let prompt = |name: &str| -> Result<Option<String>, EmbedError> {
        match table.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(malformed(&file, format!("prompt {name:?} is not a string"))),
        }
    };
    let default = match &v["default_prompt_name"] {
        Value::Null => String::new(),
        Value::String(name) => prompt(name)?.ok_or_else(|| {
            malformed(
                &file,
                format!("default_prompt_name {name:?} is not one of the prompts"),
            )
        })?,
        _ => return Err(malformed(&file, "default_prompt_name is not a string")),
    };
    let query = prompt("query")?.unwrap_or_else(|| default.clone());
    let mut document = None;
    for name in ["document", "passage", "corpus"] {
        if let Some(p) = prompt(name)? {
            document = Some(p);
            break;
        }
    }
    Ok((query, document.unwrap_or(default), similarity))
}

impl Layout {
    /// What `dir` says, each part replaced by its override when one is given (its file is then
    /// not read).
    pub fn load(dir: &Path, o: &Overrides) -> Result<Layout, EmbedError> {
        let modules = modules(dir)?;
        let path_of = |kind: &str| -> Option<PathBuf> {
            modules.as_ref().and_then(|ms| {
                ms.iter()
                    .find(|m| m.kind == kind)
                    .map(|m| dir.join(&m.path))
            })
        };
        let transformer = path_of("Transformer").unwrap_or_else(|| dir.to_path_buf());

        let (pooling, include_prompt) = match &o.pooling {
            Some(p) => (p.clone(), true),
            None => {
                let file = match (&modules, path_of("Pooling")) {
                    (_, Some(p)) => Some(p.join("config.json")),
                    (None, None) => Some(dir.join("1_Pooling/config.json")),
                    (Some(_), None) => None,
                };
                let read = match &file {
                    Some(f) => pooling_config(f)?,
                    None => None,
                };
                match (read, &modules, &file) {
                    (Some(r), _, _) => r,
                    // modules.json names a Pooling module whose config is missing.
                    (None, Some(_), Some(f)) => {
                        return Err(EmbedError::Load(format!(
                            "{} not found (modules.json names it; set pooling to choose one)",
                            f.display()
                        )))
                    }
                    _ => (vec![Pooling::Mean], true),
                }
            }
        };

        let normalize = match (o.normalize, &modules) {
            (Some(n), _) => n,
            (None, Some(ms)) => ms.iter().any(|m| m.kind == "Normalize"),
            (None, None) => true,
        };

        let max_seq_length = match o.max_seq_length {
            Some(n) => n,
            None => stated_max_seq_length(dir, &transformer)?,
        };
        if let Some(positions) = max_positions(dir)? {
            if max_seq_length > positions {
                return Err(EmbedError::Load(format!(
                    "max_seq_length {max_seq_length} is more than the model's max_position_embeddings {positions} ({})",
                    dir.join("config.json").display()
                )));
            }
        }

        let need_prompts = o.query_prompt.is_none() || o.document_prompt.is_none();
        let (query, document, similarity) = if need_prompts {
            prompts(dir)?
        } else {
            (String::new(), String::new(), None)
        };

        // Modules applied by memproxy (or by the graph memproxy runs): the transformer, pooling,
        // normalisation; anything else after them is not.
        let unapplied = modules
            .iter()
            .flatten()
            .filter(|m| !["Transformer", "Pooling", "Normalize"].contains(&m.kind.as_str()))
            .map(|m| m.kind.clone())
            .collect();

        Ok(Layout {
            pooling,
            pooling_set: o.pooling.is_some(),
            normalize,
            max_seq_length,
            query_prompt: o.query_prompt.clone().unwrap_or(query),
            document_prompt: o.document_prompt.clone().unwrap_or(document),
            include_prompt,
            unapplied,
            similarity,
        })
    }

    /// Sentence embeddings from token embeddings `data` (`[rows, seq, dim]`, row-major) and
    /// the attention `mask` (`[rows, seq]`: 1 on a text's tokens, 0 on padding), pooled as
    /// sentence-transformers' `Pooling` does and normalised when the layout says so.
    pub fn pool(
        &self,
        data: &[f32],
        mask: &[i64],
        rows: usize,
        seq: usize,
        dim: usize,
    ) -> Vec<Vec<f32>> {
        let mut out = Vec::with_capacity(rows);
        for r in 0..rows {
            let token = |t: usize| &data[(r * seq + t) * dim..(r * seq + t + 1) * dim];
            let real = |t: usize| mask[r * seq + t] != 0;
            let mut v = Vec::with_capacity(dim * self.pooling.len());
            for mode in &self.pooling {
                match mode {
                    Pooling::Cls => v.extend_from_slice(token(0)),
                    Pooling::Max => {
                        // Padding counts as -1e9, as in sentence-transformers.
                        let mut m = vec![-1e9f32; dim];
                        for t in (0..seq).filter(|&t| real(t)) {
                            m.iter_mut().zip(token(t)).for_each(|(a, x)| *a = a.max(*x));
                        }
                        v.extend(m);
                    }
                    Pooling::Mean | Pooling::MeanSqrtLen | Pooling::WeightedMean => {
                        let mut sum = vec![0f32; dim];
                        let mut count = 0f32;
                        for t in (0..seq).filter(|&t| real(t)) {
                            let w = if *mode == Pooling::WeightedMean {
                                (t + 1) as f32
                            } else {
                                1.0
                            };
                            count += w;
                            if w == 1.0 {
                                sum.iter_mut().zip(token(t)).for_each(|(a, x)| *a += x);
                            } else {
                                sum.iter_mut().zip(token(t)).for_each(|(a, x)| *a += w * x);
                            }
                        }
                        let by = if *mode == Pooling::MeanSqrtLen {
                            count.max(1e-9).sqrt()
                        } else {
                            count.max(1e-9)
                        };
                        sum.iter_mut().for_each(|a| *a /= by);
                        v.extend(sum);
                    }
                    Pooling::LastToken => {
                        let last = (0..seq)
                            .rev()
                            .find(|&t| real(t))
                            .unwrap_or(seq.saturating_sub(1));
                        v.extend_from_slice(token(last));
                    }
                }
            }
            if self.normalize {
                super::normalize(&mut v);
            }
            out.push(v);
        }
        out
    }

    /// One line for the log.
    pub fn describe(&self) -> String {
        format!(
            "pooling {}, normalize {}, max_seq_length {}, query prompt {:?}, document prompt {:?}",
            Pooling::describe(&self.pooling),
            self.normalize,
            self.max_seq_length,
            self.query_prompt,
            self.document_prompt
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory holding `files` (path, contents).
    fn model_dir(files: &[(&str, &str)]) -> PathBuf {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "memproxy-layout-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn load(files: &[(&str, &str)], o: &Overrides) -> Result<Layout, EmbedError> {
        let dir = model_dir(files);
        let l = Layout::load(&dir, o);
        std::fs::remove_dir_all(&dir).unwrap();
        l
    }

    const MODULES_NORMALIZED: &str = r#"[
      {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
      {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
      {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
    ]"#;
    const MODULES_PLAIN: &str = r#"[
      {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
      {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
    ]"#;
    const CLS: &str = r#"{"word_embedding_dimension": 768, "pooling_mode_cls_token": true,
      "pooling_mode_mean_tokens": false, "pooling_mode_max_tokens": false,
      "pooling_mode_mean_sqrt_len_tokens": false, "pooling_mode_weightedmean_tokens": false,
      "pooling_mode_lasttoken": false, "include_prompt": true}"#;

    #[test]
    fn a_bare_directory_reads_as_before() {
        let l = load(&[("tokenizer.json", "{}")], &Overrides::default()).unwrap();
        assert_eq!(l.pooling, vec![Pooling::Mean]);
        assert!(l.normalize && l.include_prompt);
        assert_eq!(l.max_seq_length, 256);
        assert_eq!(
            (l.query_prompt.as_str(), l.document_prompt.as_str()),
            ("", "")
        );
        assert!(l.unapplied.is_empty());
        // config.json caps the default length at the graph's positions.
        let l = load(
            &[("config.json", r#"{"max_position_embeddings": 128}"#)],
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(l.max_seq_length, 128);
    }

    #[test]
    fn all_minilm_l6_v2_as_shipped() {
        let l = load(
            &[
                ("modules.json", MODULES_NORMALIZED),
                (
                    "1_Pooling/config.json",
                    r#"{"word_embedding_dimension": 384, "pooling_mode_cls_token": false,
                        "pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": false,
                        "pooling_mode_mean_sqrt_len_tokens": false}"#,
                ),
                (
                    "sentence_bert_config.json",
                    r#"{"max_seq_length": 256, "do_lower_case": false}"#,
                ),
                (
                    "config_sentence_transformers.json",
                    r#"{"__version__": {"sentence_transformers": "2.0.0"}}"#,
                ),
                ("config.json", r#"{"max_position_embeddings": 512}"#),
            ],
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(l.pooling, vec![Pooling::Mean]);
        assert!(l.normalize);
        assert_eq!(l.max_seq_length, 256);
        assert_eq!(
            (l.query_prompt.as_str(), l.document_prompt.as_str()),
            ("", "")
        );
    }

    #[test]
    fn pooling_normalize_and_length_come_from_the_files() {
        let l = load(
            &[
                ("modules.json", MODULES_PLAIN),
                ("1_Pooling/config.json", CLS),
                ("sentence_bert_config.json", r#"{"max_seq_length": 512}"#),
            ],
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(l.pooling, vec![Pooling::Cls]);
        assert!(!l.normalize, "no Normalize module");
        assert_eq!(l.max_seq_length, 512);
        // Last token (decoder embedders), prompt excluded from pooling; a module path of its
        // own; several modes concatenate in sentence-transformers' order.
        let l = load(
            &[
                (
                    "modules.json",
                    r#"[{"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
                        {"idx": 1, "name": "1", "path": "pool", "type": "sentence_transformers.models.Pooling"},
                        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
                        {"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"}]"#,
                ),
                (
                    "pool/config.json",
                    r#"{"pooling_mode_lasttoken": true, "pooling_mode_max_tokens": true, "include_prompt": false}"#,
                ),
                ("0_Transformer/sentence_bert_config.json", r#"{"max_seq_length": 64}"#),
            ],
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(l.pooling, vec![Pooling::Max, Pooling::LastToken]);
        assert!(l.normalize && !l.include_prompt);
        assert_eq!(l.max_seq_length, 64);
        assert_eq!(l.unapplied, vec!["Dense".to_string()]);
    }

    #[test]
    fn prompts_as_encode_query_and_encode_document_choose_them() {
        let with = |json: &str| {
            load(
                &[("config_sentence_transformers.json", json)],
                &Overrides::default(),
            )
        };
        // e5: query / passage.
        let l = with(r#"{"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": null}"#).unwrap();
        assert_eq!(
            (l.query_prompt.as_str(), l.document_prompt.as_str()),
            ("query: ", "passage: ")
        );
        // document wins over passage and corpus.
        let l =
            with(r#"{"prompts": {"corpus": "c: ", "document": "d: ", "passage": "p: "}}"#).unwrap();
        assert_eq!(l.document_prompt, "d: ");
        // Only a query prompt (bge-style instruction): documents go bare.
        let l = with(r#"{"prompts": {"query": "Represent this sentence for searching relevant passages: "}}"#).unwrap();
        assert!(l.query_prompt.starts_with("Represent") && l.document_prompt.is_empty());
        // The default prompt stands in for a missing role.
        let l = with(r#"{"prompts": {"query": "q: ", "classification": "x: "}, "default_prompt_name": "classification"}"#).unwrap();
        assert_eq!(
            (l.query_prompt.as_str(), l.document_prompt.as_str()),
            ("q: ", "x: ")
        );
        assert_eq!(
            with(r#"{"similarity_fn_name": "dot"}"#)
                .unwrap()
                .similarity
                .as_deref(),
            Some("dot")
        );
        // Malformed: named, not guessed.
        let e = with(r#"{"prompts": {"query": 3}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("config_sentence_transformers.json") && e.contains("query"),
            "{e}"
        );
        let e = with(r#"{"prompts": {}, "default_prompt_name": "nope"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("default_prompt_name"), "{e}");
        assert!(with("{not json").is_err());
    }

    #[test]
    fn settings_override_the_files_and_skip_reading_them() {
        let files = [
            ("modules.json", MODULES_NORMALIZED),
            ("1_Pooling/config.json", "{broken"),
            ("sentence_bert_config.json", r#"{"max_seq_length": 512}"#),
            (
                "config_sentence_transformers.json",
                r#"{"prompts": {"query": "query: ", "document": "passage: "}}"#,
            ),
            ("config.json", r#"{"max_position_embeddings": 512}"#),
        ];
        let e = load(&files, &Overrides::default()).unwrap_err().to_string();
        assert!(e.contains("1_Pooling/config.json"), "{e}");
        let o = Overrides {
            pooling: Some(Pooling::parse_list("lasttoken").unwrap()),
            normalize: Some(false),
            max_seq_length: Some(128),
            query_prompt: Some("Represent this sentence for searching relevant passages: ".into()),
            document_prompt: Some(String::new()),
        };
        let l = load(&files, &o).unwrap();
        assert_eq!(l.pooling, vec![Pooling::LastToken]);
        assert!(!l.normalize);
        assert_eq!(l.max_seq_length, 128);
        assert!(l.query_prompt.starts_with("Represent") && l.document_prompt.is_empty());
        // One prompt overridden, the other still read.
        let l = load(
            &files,
            &Overrides {
                pooling: Some(vec![Pooling::Mean]),
                query_prompt: Some("search_query: ".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            (l.query_prompt.as_str(), l.document_prompt.as_str()),
            ("search_query: ", "passage: ")
        );
        // A length past the graph's positions is refused.
        let e = load(
            &files,
            &Overrides {
                pooling: Some(vec![Pooling::Mean]),
                max_seq_length: Some(1024),
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("max_position_embeddings 512"), "{e}");
    }

    #[test]
    fn a_pooling_module_without_its_config_or_mode_is_an_error() {
        let e = load(&[("modules.json", MODULES_PLAIN)], &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("1_Pooling/config.json not found"), "{e}");
        let e = load(
            &[
                ("modules.json", MODULES_PLAIN),
                (
                    "1_Pooling/config.json",
                    r#"{"pooling_mode_mean_tokens": false}"#,
                ),
            ],
            &Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no pooling_mode"), "{e}");
    }

    #[test]
    fn pooling_names() {
        assert_eq!(Pooling::parse_list("mean").unwrap(), vec![Pooling::Mean]);
        assert_eq!(
            Pooling::parse_list("LastToken").unwrap(),
            vec![Pooling::LastToken]
        );
        assert_eq!(
            Pooling::parse_list("mean+cls").unwrap(),
            vec![Pooling::Cls, Pooling::Mean]
        );
        assert_eq!(
            Pooling::describe(&[Pooling::Cls, Pooling::Mean]),
            "cls+mean"
        );
        assert!(Pooling::parse_list("avg").unwrap_err().contains("avg"));
        assert!(Pooling::parse_list("").is_err());
    }

    #[test]
    fn pooling_arithmetic() {
        // Two texts, 3 positions, dim 2; the second text has one padding position.
        let data = [
            1.0, 2.0, 3.0, -4.0, 5.0, 0.0, // text 0
            -1.0, 1.0, 3.0, 3.0, 100.0, 100.0, // text 1 (last position is padding)
        ];
        let mask = [1, 1, 1, 1, 1, 0];
        let layout = |pooling: Vec<Pooling>| Layout {
            pooling,
            pooling_set: false,
            normalize: false,
            max_seq_length: 8,
            query_prompt: String::new(),
            document_prompt: String::new(),
            include_prompt: true,
            unapplied: Vec::new(),
            similarity: None,
        };
        let pool = |p: Pooling| layout(vec![p]).pool(&data, &mask, 2, 3, 2);
        assert_eq!(pool(Pooling::Cls), vec![vec![1.0, 2.0], vec![-1.0, 1.0]]);
        assert_eq!(
            pool(Pooling::Mean),
            vec![vec![3.0, -2.0 / 3.0], vec![1.0, 2.0]]
        );
        assert_eq!(pool(Pooling::Max), vec![vec![5.0, 2.0], vec![3.0, 3.0]]);
        assert_eq!(
            pool(Pooling::LastToken),
            vec![vec![5.0, 0.0], vec![3.0, 3.0]]
        );
        let s = pool(Pooling::MeanSqrtLen);
        assert!((s[1][0] - 2.0 / 2f32.sqrt()).abs() < 1e-6, "{s:?}");
        // Weights 1, 2 (, 3 on padding: not counted).
        assert_eq!(
            pool(Pooling::WeightedMean)[1],
            vec![(-1.0 + 6.0) / 3.0, (1.0 + 6.0) / 3.0]
        );
        let both = layout(vec![Pooling::Cls, Pooling::LastToken]).pool(&data, &mask, 2, 3, 2);
        assert_eq!(both[1], vec![-1.0, 1.0, 3.0, 3.0]);
        let mut unit = layout(vec![Pooling::LastToken]);
        unit.normalize = true;
        let v = unit.pool(&data, &mask, 2, 3, 2);
        assert!((v[1][0] - 0.5f32.sqrt()).abs() < 1e-6);
    }
}

//! The ONNX Runtime backend.
//!
//! ONNX Runtime is loaded at run time (`load-dynamic`) from the configured library. The graph's
//! inputs are fed by name (`input_ids`, `attention_mask`, and `token_type_ids` when declared). Its
//! output is `sentence_embedding` when it has one, else `token_embeddings` or
//! `last_hidden_state`, else the first. A rank-2 output is taken as sentence embeddings (the graph
//! pools); a rank-3 output (token embeddings) is pooled as the model directory says
//! ([`Layout`]: mean, CLS, max, last token, …). Either way the result is L2-normalised when the
//! layout says so, texts are truncated at its `max_seq_length`, and the dimension is read from
//! the model. Prompts are not applied here: the caller prepends them (`Embedder`).
//!
//! A call's texts are tokenised, sorted by length and cut into runs ([`plan_runs`]: least padding
//! plus per-run overhead, at most `batch_tokens` padded tokens a run), so a long text does not make
//! every short one in its batch pay for its padding.
//! A graph that fails at the configured optimisation level (ONNX Runtime's higher levels rewrite
//! some exports into graphs that cannot run) is loaded again at the basic level, with a warning.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ort::environment::Environment;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionInputValue};
use ort::value::Tensor;

use super::layout::{Layout, Overrides};
use super::tokenize::{plan_runs, Batch, TextTokenizer, Tokens};
use super::{normalize, EmbedError, Model};

pub struct Options {
    pub library: PathBuf,
    pub intra_threads: usize,
    pub optimization: u8,
    pub spinning: bool,
    /// Most padded tokens (rows × longest) in one model run.
    pub batch_tokens: usize,
}

pub struct OnnxModel {
    session: Session,
    tokenizer: TextTokenizer,
    inputs: Vec<String>,
    /// The graph output read.
    output: String,
    layout: Layout,
    /// Rank of the output in the last run (2: the graph pools, 3: token embeddings).
    rank: usize,
    dim: usize,
    batch_tokens: usize,
    optimization: u8,
}

static ENVIRONMENT: OnceLock<Result<Environment, String>> = OnceLock::new();

/// ONNX Runtime's environment, loaded from `library` on first use (one per process: ONNX Runtime
/// allows no second; a program that runs sessions of its own beside memproxy's takes this one).
pub fn environment(library: &Path) -> Result<&'static Environment, EmbedError> {
    ENVIRONMENT
        .get_or_init(|| {
            if !library.exists() {
                return Err(format!(
                    "ONNX Runtime library {} not found (run scripts/setup.sh, or set --ort-library / ORT_DYLIB_PATH)",
                    library.display()
                ));
            }
            ort::init_from(library)
                .map_err(|e| format!("{}: {e}", library.display()))?
                .with_name("memproxy")
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| EmbedError::Load(e.clone()))
}

impl OnnxModel {
    /// Load the model of `dir`, read as its own files say ([`Layout`], no overrides).
    pub fn load(dir: &Path, opts: &Options) -> Result<OnnxModel, EmbedError> {
        Self::load_with_layout(dir, opts, &Layout::load(dir, &Overrides::default())?)
    }

    /// Load the model of `dir`, pooled, normalised and truncated as `layout` says.
    pub fn load_with_layout(
        dir: &Path,
        opts: &Options,
        layout: &Layout,
    ) -> Result<OnnxModel, EmbedError> {
        match Self::load_at(dir, opts, opts.optimization, layout) {
            Err(EmbedError::Run(e)) if opts.optimization > 1 => {
                tracing::warn!(
                    level = opts.optimization,
                    error = %e,
                    "the graph does not run at this optimisation level; loading it at level 1"
                );
                Self::load_at(dir, opts, 1, layout)
            }
            other => other,
        }
    }

    fn load_at(
        dir: &Path,
        opts: &Options,
        optimization: u8,
        layout: &Layout,
    ) -> Result<OnnxModel, EmbedError> {
        let env = environment(&opts.library)?;
        let file = dir.join("model.onnx");
        if !file.exists() {
            return Err(EmbedError::Load(format!("{} not found", file.display())));
        }
        let level = match optimization {
            0 => GraphOptimizationLevel::Disable,
            1 => GraphOptimizationLevel::Level1,
            2 => GraphOptimizationLevel::Level2,
            _ => GraphOptimizationLevel::All,
        };
        let load = |e: String| EmbedError::Load(format!("{}: {e}", file.display()));
        let session = Session::builder(env)
            .map_err(|e| load(e.to_string()))?
            .with_optimization_level(level)
            .map_err(|e| load(e.to_string()))?
            .with_intra_threads(opts.intra_threads)
            .map_err(|e| load(e.to_string()))?
            .with_intra_op_spinning(opts.spinning)
            .map_err(|e| load(e.to_string()))?
            .commit_from_file(&file)
            .map_err(|e| load(e.to_string()))?;
        let inputs: Vec<String> = session
            .inputs()
            .iter()
            .map(|i| i.name().to_string())
            .collect();
        for required in ["input_ids", "attention_mask"] {
            if !inputs.iter().any(|n| n == required) {
                return Err(load(format!(
                    "the graph has no input {required:?} (inputs: {inputs:?})"
                )));
            }
        }
        let outputs: Vec<&str> = session.outputs().iter().map(|o| o.name()).collect();
        let output = [
            "sentence_embedding",
            "token_embeddings",
            "last_hidden_state",
        ]
        .into_iter()
        .find(|n| outputs.contains(n))
        .or(outputs.first().copied())
        .ok_or_else(|| load("the graph has no output".into()))?
        .to_string();
        let tokenizer = TextTokenizer::with_max_length(dir, layout.max_seq_length)?;
        let mut model = OnnxModel {
            session,
            tokenizer,
            inputs,
            output,
            layout: layout.clone(),
            rank: 0,
            dim: 0,
            batch_tokens: opts.batch_tokens.max(1),
            optimization,
        };
        // The dimension is whatever the model produces; a batch of two texts of different
        // lengths also proves padding runs at this level.
        model.dim = model.run(&["dimension probe", "a longer dimension probe sentence"])?[0].len();
        if model.rank == 3 && !layout.unapplied.is_empty() {
            tracing::warn!(
                modules = ?layout.unapplied,
                "modules.json lists modules after pooling that memproxy does not apply to token embeddings: vectors differ from the model's own (export a graph that outputs sentence_embedding)"
            );
        }
        if model.rank == 2 && layout.pooling_set {
            tracing::warn!(
                output = %model.output,
                "the pooling setting does not apply: the graph outputs sentence embeddings (it pools them itself)"
            );
        }
        Ok(model)
    }

    /// What the model reads and how its output becomes a vector.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The graph optimisation level the session was built at (lower than configured when the
    /// graph failed at that level).
    pub fn optimization(&self) -> u8 {
        self.optimization
    }

    /// Embed `texts` in runs of similar length, each within the token budget; results in order.
    fn run(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let toks = texts
            .iter()
            .map(|t| self.tokenizer.tokens(t))
            .collect::<Result<Vec<_>, _>>()?;
        let mut order: Vec<usize> = (0..toks.len()).collect();
        order.sort_by_key(|&i| toks[i].len());
        let lens: Vec<usize> = order.iter().map(|&i| toks[i].len()).collect();
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); toks.len()];
        for run in plan_runs(&lens, self.batch_tokens) {
            let rows: Vec<&Tokens> = order[run.clone()].iter().map(|&i| &toks[i]).collect();
            let b = Batch::pad(&rows, self.tokenizer.pad_id());
            for (&i, v) in order[run].iter().zip(self.run_batch(&b)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    fn run_batch(&mut self, b: &Batch) -> Result<Vec<Vec<f32>>, EmbedError> {
        let shape = [b.rows as i64, b.cols as i64];
        let err = |e: ort::Error| EmbedError::Run(e.to_string());
        let mut feed: Vec<(Cow<'_, str>, SessionInputValue<'_>)> = Vec::with_capacity(3);
        for name in &self.inputs {
            let data = match name.as_str() {
                "input_ids" => b.ids.clone(),
                "attention_mask" => b.mask.clone(),
                "token_type_ids" => b.type_ids.clone(),
                other => return Err(EmbedError::Run(format!("unexpected model input {other:?}"))),
            };
            feed.push((
                Cow::Owned(name.clone()),
                Tensor::from_array((shape, data)).map_err(err)?.into(),
            ));
        }
        let outputs = self.session.run(feed).map_err(err)?;
        let (oshape, data) = outputs[self.output.as_str()]
            .try_extract_tensor::<f32>()
            .map_err(err)?;
        let dims: Vec<usize> = oshape.iter().map(|&d| d as usize).collect();
        self.rank = dims.len();
        match dims.as_slice() {
            [rows, dim] if *rows == b.rows => Ok((0..b.rows)
                .map(|r| {
                    let mut v = data[r * dim..(r + 1) * dim].to_vec();
                    if self.layout.normalize {
                        normalize(&mut v);
                    }
                    v
                })
                .collect()),
            [rows, seq, dim] if *rows == b.rows && *seq == b.cols => {
                Ok(self.layout.pool(data, &b.mask, b.rows, *seq, *dim))
            }
            other => Err(EmbedError::Run(format!(
                "unexpected shape {other:?} of output {:?}",
                self.output
            ))),
        }
    }
}

impl Model for OnnxModel {
    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.run(texts)
    }
}

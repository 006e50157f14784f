//! The ONNX Runtime backend.
//!
//! ONNX Runtime is loaded at run time (`load-dynamic`) from the configured library. The graph's
//! inputs are fed by name (`input_ids`, `attention_mask`, and `token_type_ids` when declared). The
//! output decides the pooling: rank 2 is taken as sentence embeddings; rank 3 (token embeddings) is
//! mean-pooled over the attention mask. Either way the result is L2-normalised and its dimension is
//! read from the model.
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
    dim: usize,
    batch_tokens: usize,
    optimization: u8,
}

static ENVIRONMENT: OnceLock<Result<Environment, String>> = OnceLock::new();

fn environment(library: &Path) -> Result<&'static Environment, EmbedError> {
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
    pub fn load(dir: &Path, opts: &Options) -> Result<OnnxModel, EmbedError> {
        match Self::load_at(dir, opts, opts.optimization) {
            Err(EmbedError::Run(e)) if opts.optimization > 1 => {
                tracing::warn!(
                    level = opts.optimization,
                    error = %e,
                    "the graph does not run at this optimisation level; loading it at level 1"
                );
                Self::load_at(dir, opts, 1)
            }
            other => other,
        }
    }

    fn load_at(dir: &Path, opts: &Options, optimization: u8) -> Result<OnnxModel, EmbedError> {
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
        let tokenizer = TextTokenizer::load(dir)?;
        let mut model = OnnxModel {
            session,
            tokenizer,
            inputs,
            dim: 0,
            batch_tokens: opts.batch_tokens.max(1),
            optimization,
        };
        // The dimension is whatever the model produces; a batch of two texts of different
        // lengths also proves padding runs at this level.
        model.dim = model.run(&["dimension probe", "a longer dimension probe sentence"])?[0].len();
        Ok(model)
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
        let (oshape, data) = outputs[0].try_extract_tensor::<f32>().map_err(err)?;
        let dims: Vec<usize> = oshape.iter().map(|&d| d as usize).collect();
        let mut out = Vec::with_capacity(b.rows);
        match dims.as_slice() {
            [rows, dim] if *rows == b.rows => {
                for r in 0..b.rows {
                    let mut v = data[r * dim..(r + 1) * dim].to_vec();
                    normalize(&mut v);
                    out.push(v);
                }
            }
            [rows, seq, dim] if *rows == b.rows && *seq == b.cols => {
                for r in 0..b.rows {
                    let mut v = vec![0f32; *dim];
                    let mut count = 0f32;
                    for t in 0..*seq {
                        if b.mask[r * seq + t] == 0 {
                            continue;
                        }
                        count += 1.0;
                        let tok = &data[(r * seq + t) * dim..(r * seq + t + 1) * dim];
                        v.iter_mut().zip(tok).for_each(|(a, x)| *a += x);
                    }
                    v.iter_mut().for_each(|a| *a /= count.max(1e-9));
                    normalize(&mut v);
                    out.push(v);
                }
            }
            other => {
                return Err(EmbedError::Run(format!(
                    "unexpected output shape {other:?}"
                )))
            }
        }
        Ok(out)
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

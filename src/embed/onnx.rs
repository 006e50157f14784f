//! The ONNX Runtime backend.
//!
//! ONNX Runtime is loaded at run time (`load-dynamic`) from the configured library. The graph's
//! inputs are fed by name (`input_ids`, `attention_mask`, and `token_type_ids` when declared). The
//! output decides the pooling: rank 2 is taken as sentence embeddings; rank 3 (token embeddings) is
//! mean-pooled over the attention mask. Either way the result is L2-normalised and its dimension is
//! read from the model.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ort::environment::Environment;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionInputValue};
use ort::value::Tensor;

use super::tokenize::TextTokenizer;
use super::{normalize, EmbedError, Model};

pub struct Options {
    pub library: PathBuf,
    pub intra_threads: usize,
    pub optimization: u8,
    pub spinning: bool,
}

pub struct OnnxModel {
    session: Session,
    tokenizer: TextTokenizer,
    inputs: Vec<String>,
    dim: usize,
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
        let env = environment(&opts.library)?;
        let file = dir.join("model.onnx");
        if !file.exists() {
            return Err(EmbedError::Load(format!("{} not found", file.display())));
        }
        let level = match opts.optimization {
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
        };
        // The dimension is whatever the model produces.
        model.dim = model.run(&["dimension probe"])?[0].len();
        Ok(model)
    }

    fn run(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let b = self.tokenizer.encode(texts)?;
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

//! Where the model files come from.
//!
//! `--model` is a directory holding `model.onnx` and `tokenizer.json`, or a Hugging Face model id
//! such as `sentence-transformers/all-MiniLM-L6-v2`, whose `onnx/model.onnx` and tokenizer files
//! are fetched with `hf-hub` into `<deps>/hub` when the hub is reachable. Offline, that fails at once
//! with a message that says to pass a directory.

use std::path::{Path, PathBuf};

use super::EmbedError;

pub fn model_dir(location: &str, deps: &Path) -> Result<PathBuf, EmbedError> {
    let path = Path::new(location);
    if path.is_dir() {
        return Ok(path.to_path_buf());
    }
    if path.is_absolute() || location.starts_with('.') || location.matches('/').count() != 1 {
        return Err(EmbedError::Load(format!(
            "model directory {location} not found (run scripts/setup.sh, or pass --model DIR with model.onnx and tokenizer.json)"
        )));
    }
    fetch_from_hub(location, &deps.join("hub"))
}

fn fetch_from_hub(id: &str, cache: &Path) -> Result<PathBuf, EmbedError> {
    let offline = |e: String| {
        EmbedError::Load(format!(
            "cannot fetch {id} from the Hugging Face hub ({e}); pass --model DIR with model.onnx and tokenizer.json"
        ))
    };
    // HF_ENDPOINT (a mirror, or an unreachable address in tests) is honoured.
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_cache_dir(cache.to_path_buf())
        .with_progress(false)
        .with_retries(0)
        .build()
        .map_err(|e| offline(e.to_string()))?;
    let repo = api.model(id.to_string());
    let onnx = repo
        .get("onnx/model.onnx")
        .map_err(|e| offline(e.to_string()))?;
    let dir = onnx
        .parent()
        .and_then(|p| p.parent())
        .map(Path::to_path_buf)
        .ok_or_else(|| offline("bad cache path".into()))?;
    for f in ["tokenizer.json", "config.json", "sentence_bert_config.json"] {
        let got = repo.get(f).map_err(|e| offline(e.to_string()))?;
        let want = dir.join(f);
        if got != want && !want.exists() {
            std::fs::copy(&got, &want).map_err(|e| offline(e.to_string()))?;
        }
    }
    // The hub keeps the graph under onnx/; memproxy reads <dir>/model.onnx.
    let top = dir.join("model.onnx");
    if !top.exists() {
        std::fs::copy(&onnx, &top).map_err(|e| offline(e.to_string()))?;
    }
    Ok(dir)
}

//! Where the model files come from.
//!
//! `--model` is a directory holding `model.onnx` and `tokenizer.json`, or a Hugging Face model id
//! such as `sentence-transformers/all-MiniLM-L6-v2`, whose `onnx/model.onnx`, tokenizer files and
//! sentence-transformers files (`modules.json`, the pooling config, prompts: `layout`) are
//! fetched with `hf-hub` into `<deps>/hub` when the hub is reachable. Offline, that fails at once
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
    let place = |f: &str, got: PathBuf| -> Result<(), EmbedError> {
        let want = dir.join(f);
        if got != want && !want.exists() {
            if let Some(parent) = want.parent() {
                std::fs::create_dir_all(parent).map_err(|e| offline(e.to_string()))?;
            }
            std::fs::copy(&got, &want).map_err(|e| offline(e.to_string()))?;
        }
        Ok(())
    };
    for f in ["tokenizer.json", "config.json", "sentence_bert_config.json"] {
        place(f, repo.get(f).map_err(|e| offline(e.to_string()))?)?;
    }
    // The sentence-transformers files, where the repository has them (the hub has answered
    // above, so a failure here is a file the repository does not hold).
    for f in ["modules.json", "config_sentence_transformers.json"] {
        if let Ok(got) = repo.get(f) {
            place(f, got)?;
        }
    }
    let pooling = std::fs::read_to_string(dir.join("modules.json"))
        .ok()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
        .and_then(|v| {
            v.as_array()?.iter().find_map(|m| {
                let kind = m["type"].as_str()?;
                kind.ends_with(".Pooling")
                    .then(|| m["path"].as_str().map(str::to_string))
                    .flatten()
            })
        });
    if let Some(path) = pooling {
        let f = format!("{path}/config.json");
        if let Ok(got) = repo.get(&f) {
            place(&f, got)?;
        }
    }
    // The hub keeps the graph under onnx/; memproxy reads <dir>/model.onnx.
    let top = dir.join("model.onnx");
    if !top.exists() {
        std::fs::copy(&onnx, &top).map_err(|e| offline(e.to_string()))?;
    }
    Ok(dir)
}

//! MEM.EMBED: the embedding of a text.

use super::args::Args;
use crate::engine::Engine;
use crate::error::{MemError, MemResult};
use crate::resp::Reply;

/// # Format
/// `MEM.EMBED text` → array of doubles (the model's dimension, unit length).
pub struct Embed {
    pub text: String,
}

impl Embed {
    pub fn parse(a: &mut Args) -> MemResult<Embed> {
        let text = a.text("text")?;
        a.at_end()?;
        Ok(Embed { text })
    }

    pub async fn apply(self, engine: &Engine) -> MemResult<Reply> {
        let v = embed(engine, &self.text).await?;
        Ok(Reply::Array(
            v.iter().map(|x| Reply::Double(*x as f64)).collect(),
        ))
    }
}

/// Embed through the engine's embedder, mapping its errors for replies.
pub async fn embed(engine: &Engine, text: &str) -> MemResult<crate::embed::Vector> {
    engine
        .embedder
        .embed(text)
        .await
        .map_err(|e| MemError::Embedder(e.to_string()))
}

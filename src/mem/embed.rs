//! MEM.EMBED: the embedding of a text.

use super::args::Args;
use crate::engine::Engine;
use crate::error::{MemError, MemResult};
use crate::resp::Reply;
use crate::store::keyspace::Spec;
use crate::upstream::Link;

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

    pub async fn apply(self, engine: &Engine, link: &mut Link) -> MemResult<Reply> {
        let v = embed(engine, link, &self.text, &[]).await?;
        Ok(Reply::Array(
            v.iter().map(|x| Reply::Double(*x as f64)).collect(),
        ))
    }
}

/// Embed through the engine's embedder, mapping its errors for replies. When the model has to
/// run, the client's rights for what will follow (`rights`, plus running scripts at all) are
/// checked first on its own connection: Redis's NOAUTH / NOPERM come before any model run.
pub async fn embed(
    engine: &Engine,
    link: &mut Link,
    text: &str,
    rights: &[Spec],
) -> MemResult<crate::embed::Vector> {
    if !engine.embedder.cache().contains(text) {
        engine.store.precheck(link, rights).await?;
    }
    engine
        .embedder
        .embed(text)
        .await
        .map_err(|e| MemError::Embedder(e.to_string()))
}

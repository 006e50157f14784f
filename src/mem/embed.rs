//! MEM.EMBED: the embedding of a text, as a document (what MEM.REMEMBER stores) or, with QUERY,
//! as a query (what a recall's question is embedded as: the model's query prompt before it).
//! Also the embedding helpers the other verbs share ([`embed`], [`embed_as`], [`windows`]).

use super::args::Args;
use crate::embed::Role;
use crate::engine::Engine;
use crate::error::{MemError, MemResult};
use crate::resp::Reply;
use crate::store::keyspace::Spec;
use crate::upstream::Link;

/// # Format
/// `MEM.EMBED text [QUERY]` → array of doubles (the model's dimension; unit length unless the
/// model does not normalise). QUERY: embedded as a recall's question is.
#[derive(Clone)]
pub struct Embed {
    pub text: String,
    pub role: Role,
}

impl Embed {
    pub fn parse(a: &mut Args) -> MemResult<Embed> {
        let text = a.text("text")?;
        let role = match a.peek_keyword().as_deref() {
            Some("QUERY") => {
                a.rest_skip(1);
                Role::Query
            }
            _ => Role::Document,
        };
        a.at_end()?;
        Ok(Embed { text, role })
    }

    pub async fn apply(self, engine: &Engine, link: &mut Link, trusted: bool) -> MemResult<Reply> {
        let v = embed_as(
            engine,
            link,
            &self.text,
            self.role,
            Precheck::unless(trusted, &[]),
        )
        .await?;
        Ok(Reply::Array(
            v.iter().map(|x| Reply::Double(*x as f64)).collect(),
        ))
    }
}

/// What to ask Redis before the model runs for a text that is not cached.
pub enum Precheck<'a> {
    /// The client's rights for what will follow (plus running scripts at all): Redis's NOAUTH /
    /// NOPERM come before any model run.
    Rights(&'a [Spec]),
    /// Nothing: an earlier MEM.* on this connection got past Redis's authentication (the same
    /// trust under which queued MEM.* are embedded ahead of their turn), and what follows reads
    /// only; the script still checks the rights before it touches anything.
    Skip,
}

impl<'a> Precheck<'a> {
    /// Skip the round trip for a trusted connection, else check `rights`.
    pub fn unless(trusted: bool, rights: &'a [Spec]) -> Precheck<'a> {
        if trusted {
            Precheck::Skip
        } else {
            Precheck::Rights(rights)
        }
    }
}

/// Embed as a document (what is stored) through the engine's embedder: [`embed_as`] with
/// [`Role::Document`].
pub async fn embed(
    engine: &Engine,
    link: &mut Link,
    text: &str,
    precheck: Precheck<'_>,
) -> MemResult<crate::embed::Vector> {
    embed_as(engine, link, text, Role::Document, precheck).await
}

/// Embed in `role` (a recall's question: [`Role::Query`]) through the engine's embedder,
/// mapping its errors for replies; when the model has to run, `precheck` says what Redis is
/// asked first on the client's own connection.
pub async fn embed_as(
    engine: &Engine,
    link: &mut Link,
    text: &str,
    role: Role,
    precheck: Precheck<'_>,
) -> MemResult<crate::embed::Vector> {
    if let Precheck::Rights(rights) = precheck {
        if !engine.embedder.is_cached(text, role) {
            engine.store.precheck(link, rights).await?;
        }
    }
    engine
        .embedder
        .embed_as(text, role)
        .await
        .map_err(|e| MemError::Embedder(e.to_string()))
}

/// The embeddings of a long text's windows (`embed::windows`), queued together behind callers'
/// texts (the workers take a few a run); none for a text within one window. Called after [`embed`] has checked
/// the client's rights for the write.
pub async fn windows(engine: &Engine, text: &str) -> MemResult<Vec<crate::embed::Vector>> {
    let parts = crate::embed::windows::split(text);
    if parts.is_empty() {
        return Ok(Vec::new());
    }
    futures::future::join_all(parts.iter().map(|w| engine.embedder.embed_window(w)))
        .await
        .into_iter()
        .map(|r| r.map_err(|e| MemError::Embedder(e.to_string())))
        .collect()
}

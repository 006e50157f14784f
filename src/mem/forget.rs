//! MEM.FORGET: delete one memory, or every memory of a scope (erasure requests).

use super::args::{Args, Opt};
use crate::engine::{ClientState, Engine};
use crate::error::MemResult;
use crate::resp::Reply;
use crate::store::Scope;
use crate::upstream::Link;

/// # Format
/// `MEM.FORGET id` → 1 or 0; `MEM.FORGET USER u [NS ns] [KIND k]` → the number deleted. Without NS
/// (and KIND), every namespace (kind) of the user.
#[derive(Clone)]
pub enum Forget {
    Id(String),
    Scope(Scope),
}

impl Forget {
    pub fn parse(a: &mut Args) -> MemResult<Forget> {
        match a.peek_keyword().as_deref() {
            None => Err(a.arity()),
            Some("USER") => {
                let o = a.options(&[Opt("USER", 1), Opt("NS", 1), Opt("KIND", 1)])?;
                let mut scope = o.scope(a)?;
                if !o.has("NS") {
                    scope.namespace = String::new();
                }
                Ok(Forget::Scope(scope))
            }
            Some(_) => {
                let id = a.name("id")?;
                a.at_end()?;
                Ok(Forget::Id(id))
            }
        }
    }

    pub async fn apply(
        self,
        engine: &Engine,
        link: &mut Link,
        client: &ClientState,
    ) -> MemResult<Reply> {
        let n = match self {
            Forget::Id(id) => {
                // Bound to a user, a connection may only delete that user's memories.
                let owner = engine.bound_user(client);
                engine.store.forget_id(link, &id, owner.as_deref()).await?
            }
            Forget::Scope(scope) => engine.store.forget_scope(link, &scope).await?,
        };
        Ok(Reply::Int(n))
    }
}

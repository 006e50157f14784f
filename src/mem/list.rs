//! MEM.LIST: a scope's memories, newest first, without embeddings.

use super::args::{parse_int, Args, Opt};
use super::hit;
use crate::engine::Engine;
use crate::error::MemResult;
use crate::resp::Reply;
use crate::store::Scope;
use crate::upstream::Link;

/// # Format
/// `MEM.LIST [USER u] [NS ns] [KIND k] [LIMIT offset count]` → array of memories (default LIMIT 0 20).
#[derive(Clone)]
pub struct List {
    pub scope: Scope,
    pub offset: usize,
    pub count: usize,
}

impl List {
    pub fn parse(a: &mut Args) -> MemResult<List> {
        let o = a.options(&[
            Opt("USER", 1),
            Opt("NS", 1),
            Opt("KIND", 1),
            Opt("LIMIT", 2),
        ])?;
        let (offset, count) = match o.values("LIMIT") {
            None => (0, 20),
            Some(v) => (
                parse_int(a, "LIMIT offset", &v[0], &(0..=1_000_000))?,
                parse_int(a, "LIMIT count", &v[1], &(1..=1000))?,
            ),
        };
        Ok(List {
            scope: o.scope(a)?,
            offset: offset as usize,
            count: count as usize,
        })
    }

    pub async fn apply(self, engine: &Engine, link: &mut Link) -> MemResult<Reply> {
        let hits = engine
            .store
            .list(link, &self.scope, self.offset, self.count)
            .await?;
        Ok(Reply::Array(hits.iter().map(hit::listed).collect()))
    }
}

//! MEM.REMEMBER: write a memory, or bump the near-identical one already there.

use super::args::{Args, Opt};
use super::embed::embed;
use super::hit;
use crate::engine::Engine;
use crate::error::MemResult;
use crate::resp::Reply;
use crate::store::memory::NewMemory;
use crate::store::{Kind, Scope};

/// # Format
/// `MEM.REMEMBER text [USER u] [NS ns] [KIND episodic|semantic] [THREAD t] [TTL seconds | PERSIST]
/// [DEDUP distance | NODEDUP]` → map `id, deduped, distance, ttl`.
pub struct Remember {
    pub text: String,
    pub scope: Scope,
    pub kind: Kind,
    pub ttl: Option<u64>,
    pub dedup: Option<f64>,
}

/// Options shared with MEM.TURN's write.
pub fn kind_ttl(kind: Kind, engine_ttl: u64) -> Option<u64> {
    match kind {
        Kind::Episodic => Some(engine_ttl),
        Kind::Semantic => None,
    }
}

impl Remember {
    pub fn parse(a: &mut Args) -> MemResult<Remember> {
        let text = a.text("text")?;
        let o = a.options(&[
            Opt("USER", 1),
            Opt("NS", 1),
            Opt("KIND", 1),
            Opt("THREAD", 1),
            Opt("TTL", 1),
            Opt("PERSIST", 0),
            Opt("DEDUP", 1),
            Opt("NODEDUP", 0),
        ])?;
        o.exclusive(a, "TTL", "PERSIST")?;
        o.exclusive(a, "DEDUP", "NODEDUP")?;
        let mut scope = o.scope(a)?;
        let kind = scope.kind.take().unwrap_or(Kind::Episodic);
        let ttl = match o.int(a, "TTL", 1..=i64::from(i32::MAX))? {
            Some(s) => Some(s as u64),
            None if o.has("PERSIST") => None,
            // u64::MAX marks "the kind's default", resolved against config in apply.
            None => Some(u64::MAX),
        };
        let dedup = if o.has("NODEDUP") {
            None
        } else {
            Some(o.float(a, "DEDUP", 0.0..=2.0)?.unwrap_or(f64::NAN))
        };
        Ok(Remember {
            text,
            scope,
            kind,
            ttl,
            dedup,
        })
    }

    pub async fn apply(self, engine: &Engine) -> MemResult<Reply> {
        let cfg = engine.config();
        let ttl = match self.ttl {
            Some(u64::MAX) => kind_ttl(self.kind, cfg.episodic_ttl_seconds),
            other => other,
        };
        let dedup = self
            .dedup
            .map(|d| if d.is_nan() { cfg.dedup_threshold } else { d });
        let vector = embed(engine, &self.text).await?;
        let m = NewMemory {
            text: &self.text,
            scope: &self.scope,
            kind: self.kind,
            ttl,
            dedup,
        };
        let r = engine.store.remember(&m, &vector).await?;
        Ok(hit::remembered(&r))
    }
}

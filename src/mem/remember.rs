//! MEM.REMEMBER: write a memory, or bump the near-identical one already there.

use super::args::{Args, Opt};
use super::embed::{embed, Precheck};
use super::hit;
use crate::engine::Engine;
use crate::error::MemResult;
use crate::resp::Reply;
use crate::store::memory::NewMemory;
use crate::store::{Kind, Scope};
use crate::upstream::Link;

/// # Format
/// `MEM.REMEMBER text [USER u] [NS ns] [KIND episodic|semantic] [THREAD t] [TTL seconds | PERSIST]
/// [DEDUP distance | NODEDUP]` → map `id, deduped, distance, ttl`.
pub struct Remember {
    pub text: String,
    pub scope: Scope,
    pub kind: Kind,
    pub ttl: Ttl,
    pub dedup: Dedup,
}

/// TTL as the request gave it.
pub enum Ttl {
    /// The kind's default (episodic: `episodic_ttl_seconds`, semantic: none).
    KindDefault,
    Seconds(u64),
    Persist,
}

/// Dedup as the request gave it.
pub enum Dedup {
    /// `dedup_threshold` from the config.
    Default,
    At(f64),
    Off,
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
            Some(s) => Ttl::Seconds(s as u64),
            None if o.has("PERSIST") => Ttl::Persist,
            None => Ttl::KindDefault,
        };
        let dedup = match o.float(a, "DEDUP", 0.0..=2.0)? {
            Some(d) => Dedup::At(d),
            None if o.has("NODEDUP") => Dedup::Off,
            None => Dedup::Default,
        };
        Ok(Remember {
            text,
            scope,
            kind,
            ttl,
            dedup,
        })
    }

    pub async fn apply(self, engine: &Engine, link: &mut Link) -> MemResult<Reply> {
        let cfg = engine.config();
        let ttl = match self.ttl {
            Ttl::KindDefault => kind_ttl(self.kind, cfg.episodic_ttl_seconds),
            Ttl::Seconds(s) => Some(s),
            Ttl::Persist => None,
        };
        let dedup = match self.dedup {
            Dedup::Default => Some(cfg.dedup_threshold),
            Dedup::At(d) => Some(d),
            Dedup::Off => None,
        };
        let rights = engine
            .store
            .keys
            .rights_remember(&engine.store.keys.memory("0"));
        let vector = embed(engine, link, &self.text, Precheck::Rights(&rights)).await?;
        let m = NewMemory {
            text: &self.text,
            scope: &self.scope,
            kind: self.kind,
            ttl,
            dedup,
        };
        let r = engine.store.remember(link, &m, &vector).await?;
        Ok(hit::remembered(&r))
    }
}

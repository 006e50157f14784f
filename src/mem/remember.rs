//! MEM.REMEMBER: write a memory, or bump the near-identical one already there.

use super::args::{Args, Opt};
use super::durability::{self, DURABILITY_OPTS};
use super::embed::{embed, windows, Precheck};
use super::hit;
use crate::config::Config;
use crate::engine::Engine;
use crate::error::MemResult;
use crate::resp::Reply;
use crate::store::durable::{self, Durability};
use crate::store::memory::NewMemory;
use crate::store::{Kind, Scope};
use crate::upstream::Link;

/// # Format
/// `MEM.REMEMBER text [USER u] [NS ns] [KIND episodic|semantic] [THREAD t] [TTL seconds | PERSIST]
/// [DEDUP distance | NODEDUP] [CREATED unix-seconds] [HITS n] [REPLICAS n] [FSYNC]` → map `id,
/// deduped, distance, ttl`.
///
/// REPLICAS and FSYNC (defaults `write_replicas`, `write_fsync`): the reply waits until that many
/// replicas (and the AOF) have the write; if they do not within `write_wait_ms`, the reply is a
/// `NOREPLICAS` error that says what was written and how many acknowledged it.
///
/// CREATED and HITS restore a memory learned earlier (`memproxy import` uses them): a new memory
/// gets that `created_ts` and `hit_count`; a dedup adds 1 + HITS to the existing one's count (as
/// without HITS it adds 1). Both are written by the same script call as the memory.
#[derive(Clone)]
pub struct Remember {
    pub text: String,
    pub scope: Scope,
    pub kind: Kind,
    pub ttl: Ttl,
    pub dedup: Dedup,
    pub created_ts: Option<f64>,
    pub hits: Option<i64>,
    pub durability: Durability,
}

/// How far in the future CREATED may be (clocks of the machine that wrote it may run ahead).
const CREATED_AHEAD_SECONDS: f64 = 86_400.0;

/// TTL as the request gave it.
#[derive(Clone)]
pub enum Ttl {
    /// The kind's default (episodic: `episodic_ttl_seconds`, semantic: none).
    KindDefault,
    Seconds(u64),
    Persist,
}

/// Dedup as the request gave it.
#[derive(Clone)]
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
    pub fn parse(a: &mut Args, cfg: &Config) -> MemResult<Remember> {
        let text = a.text("text")?;
        let mut allowed = vec![
            Opt("USER", 1),
            Opt("NS", 1),
            Opt("KIND", 1),
            Opt("THREAD", 1),
            Opt("TTL", 1),
            Opt("PERSIST", 0),
            Opt("DEDUP", 1),
            Opt("NODEDUP", 0),
            Opt("CREATED", 1),
            Opt("HITS", 1),
        ];
        allowed.extend(DURABILITY_OPTS);
        let o = a.options(&allowed)?;
        let durability = durability::parse(&o, a, cfg)?;
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
        let latest = crate::store::now_ts() + CREATED_AHEAD_SECONDS;
        let created_ts = o.float(a, "CREATED", 0.0..=latest)?;
        let hits = o.int(a, "HITS", 0..=i64::from(i32::MAX))?;
        Ok(Remember {
            text,
            scope,
            kind,
            ttl,
            dedup,
            created_ts,
            hits,
            durability,
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
        let keys = &engine.store.keys;
        let rights = engine
            .store
            .site(link)
            .keys
            .rights_remember(&keys.memory(&keys.new_memory_id(&self.scope.user)));
        let vector = embed(engine, link, &self.text, Precheck::Rights(&rights)).await?;
        let windows = windows(engine, &self.text).await?;
        let m = NewMemory {
            text: &self.text,
            scope: &self.scope,
            kind: self.kind,
            ttl,
            dedup,
            created_ts: self.created_ts,
            hits: self.hits,
            windows: &windows,
        };
        let r = engine.store.remember(link, &m, &vector).await?;
        let what = format!(
            "MEM.REMEMBER {} memory {}",
            if r.deduped { "bumped" } else { "wrote" },
            r.id
        );
        durable::wait(link, self.durability, cfg.write_wait(), &what).await?;
        Ok(hit::remembered(&r))
    }
}

//! MEM.RECALL: memories of a scope, by meaning, by keyword, or both fused.

use super::args::{Args, Opt};
use super::embed::{embed_as, Precheck};
use super::hit;
use crate::config::Config;
use crate::embed::Role;
use crate::engine::Engine;
use crate::error::{Fault, MemResult};
use crate::resp::Reply;
use crate::store::memory::{Recall, Retrieval};
use crate::store::Scope;
use crate::upstream::Link;

/// Largest K.
pub const MAX_K: i64 = 1000;

/// # Format
/// `MEM.RECALL query [USER u] [NS ns] [KIND k] [THREAD t] [K n] [THRESHOLD distance]
/// [MODE auto|rank|vector|keyword|hybrid] [WEIGHTS kw vec] [AT unix-seconds]` → array of hits,
/// best first.
#[derive(Clone)]
pub struct RecallCmd {
    pub query: String,
    pub scope: Scope,
    pub opts: RecallOpts,
}

/// K, THRESHOLD, MODE, WEIGHTS and AT, shared with MEM.TURN.
#[derive(Clone)]
pub struct RecallOpts {
    pub k: usize,
    pub threshold: f64,
    pub mode: Retrieval,
    pub weights: (f64, f64),
    /// The question's own time (unix seconds); `None`: now.
    pub at: Option<f64>,
}

pub const RECALL_OPTS: [Opt; 5] = [
    Opt("K", 1),
    Opt("THRESHOLD", 1),
    Opt("MODE", 1),
    Opt("WEIGHTS", 2),
    Opt("AT", 1),
];

/// The latest `AT`: 9999-12-31T23:59:59Z.
pub const MAX_AT: f64 = 253_402_300_799.0;

impl RecallOpts {
    pub fn from(o: &super::args::Options, a: &Args, cfg: &Config) -> MemResult<RecallOpts> {
        let mode = match o.str("MODE") {
            None => cfg.recall_mode.into(),
            Some(m) => Retrieval::parse(m).ok_or_else(|| {
                a.err(format!(
                    "unknown MODE '{m}' (auto, rank, vector, keyword or hybrid)"
                ))
            })?,
        };
        let weights = match o.values("WEIGHTS") {
            None => (1.0, 1.0),
            Some(w) => (
                super::args::parse_float(a, "WEIGHTS", &w[0], &(0.0..=1000.0))?,
                super::args::parse_float(a, "WEIGHTS", &w[1], &(0.0..=1000.0))?,
            ),
        };
        Ok(RecallOpts {
            k: o.int(a, "K", 1..=MAX_K)?
                .map(|k| k as usize)
                .unwrap_or(cfg.default_k),
            // THRESHOLD caps the distance in every mode; `auto` has a cut-off of its own.
            // THRESHOLD is `auto`'s gate, and caps the distance of every hit in the other modes
            // (`rank` has none unless given).
            threshold: o.float(a, "THRESHOLD", 0.0..=2.0)?.unwrap_or(match mode {
                Retrieval::Auto => cfg.recall_auto_threshold,
                Retrieval::Rank => 2.0,
                _ => cfg.recall_threshold,
            }),
            mode,
            weights,
            at: o.float(a, "AT", 0.0..=MAX_AT)?,
        })
    }
}

impl RecallOpts {
    /// What to recall for `text` (embedded as `vector`) in `scope`. MEM.RECALL and MEM.TURN both
    /// build their recall here.
    pub fn recall<'a>(&self, scope: &'a Scope, text: &'a str, vector: &'a [f32]) -> Recall<'a> {
        Recall {
            scope,
            text,
            vector,
            k: self.k,
            threshold: self.threshold,
            mode: self.mode,
            weights: self.weights,
            at: self.at.unwrap_or_else(crate::store::now_ts),
        }
    }
}

impl RecallCmd {
    pub fn parse(a: &mut Args, cfg: &Config) -> MemResult<RecallCmd> {
        let query = a.text("query")?;
        let mut allowed = vec![
            Opt("USER", 1),
            Opt("NS", 1),
            Opt("KIND", 1),
            Opt("THREAD", 1),
        ];
        allowed.extend(RECALL_OPTS);
        let o = a.options(&allowed)?;
        Ok(RecallCmd {
            scope: o.scope(a)?,
            opts: RecallOpts::from(&o, a, cfg)?,
            query,
        })
    }

    pub async fn apply(self, engine: &Engine, link: &mut Link, trusted: bool) -> MemResult<Reply> {
        // Keyword recall needs no embedding; hybrid recall whose embedding fails (overloaded,
        // timed out, model error) answers with its keyword side, marked `keyword`.
        let mut mode = self.opts.mode;
        let vector = match mode {
            Retrieval::Keyword => None,
            _ => {
                let rights = engine.store.site(link).keys.rights_read();
                match embed_as(
                    engine,
                    link,
                    &self.query,
                    Role::Query,
                    Precheck::unless(trusted, &rights),
                )
                .await
                {
                    Ok(v) => Some(v),
                    Err(e) if mode == Retrieval::Hybrid && e.fault() == Fault::Embedder => {
                        tracing::warn!(error = %e, "hybrid recall: no embedding, answering with the keyword side");
                        mode = Retrieval::Keyword;
                        None
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let opts = RecallOpts { mode, ..self.opts };
        let r = opts.recall(&self.scope, &self.query, vector.as_deref().unwrap_or(&[]));
        let hits = engine.store.recall(link, &r).await?;
        Ok(Reply::Array(hits.iter().map(hit::recalled).collect()))
    }
}

//! MEM.CONSOLIDATE: merge near-duplicate memories of one exact scope into their oldest member.

use super::args::{Args, Opt};
use crate::config::Config;
use crate::engine::Engine;
use crate::error::MemResult;
use crate::resp::Reply;
use crate::store::Scope;
use crate::upstream::Link;

/// # Format
/// `MEM.CONSOLIDATE [USER u] [NS ns] [KIND k] [THRESHOLD distance] [DRYRUN]` → array of maps
/// `kept, merged, hit_count, ttl`, one per group merged (with DRYRUN: that would be). Groups never
/// span users, namespaces or kinds; without NS (KIND) each namespace (kind) is consolidated on its
/// own. THRESHOLD defaults to the dedup threshold.
#[derive(Clone)]
pub struct Consolidate {
    pub scope: Scope,
    pub threshold: f64,
    pub dry_run: bool,
}

impl Consolidate {
    pub fn parse(a: &mut Args, cfg: &Config) -> MemResult<Consolidate> {
        let o = a.options(&[
            Opt("USER", 1),
            Opt("NS", 1),
            Opt("KIND", 1),
            Opt("THRESHOLD", 1),
            Opt("DRYRUN", 0),
        ])?;
        let mut scope = o.scope(a)?;
        if !o.has("NS") {
            scope.namespace = String::new();
        }
        Ok(Consolidate {
            scope,
            threshold: o
                .float(a, "THRESHOLD", 0.0..=2.0)?
                .unwrap_or(cfg.dedup_threshold),
            dry_run: o.has("DRYRUN"),
        })
    }

    pub async fn apply(self, engine: &Engine, link: &mut Link) -> MemResult<Reply> {
        let merges = engine
            .store
            .consolidate(link, &self.scope, self.threshold, self.dry_run, 1.0)
            .await?;
        Ok(Reply::Array(
            merges
                .iter()
                .map(|m| {
                    Reply::Map(vec![
                        ("kept", Reply::text(&m.kept)),
                        (
                            "merged",
                            Reply::Array(m.merged.iter().map(Reply::text).collect()),
                        ),
                        ("hit_count", Reply::Int(m.hit_count)),
                        ("ttl", Reply::Int(m.ttl)),
                    ])
                })
                .collect(),
        ))
    }
}

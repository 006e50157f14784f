//! MEM.INFO: what memproxy is configured with and what the index holds.
//!
//! # Format
//! `MEM.INFO` → map `index, storage, num_docs, indexing_failures, model, dim, dedup_threshold,
//! recall_threshold, recall_auto_threshold, recall_hit_threshold, recall_relative_cutoff, recall_mode, ttl_by_kind, consolidator, mem_key_prefix, session_key_prefix, event_key_prefix,
//! embed_cache_hits, embed_cache_misses, embed_batches, embed_texts, embed_workers_replaced,
//! version, upstream`.

use crate::engine::Engine;
use crate::error::MemResult;
use crate::resp::Reply;
use crate::upstream::Link;

pub async fn apply(engine: &Engine, link: &mut Link) -> MemResult<Reply> {
    let cfg = engine.config();
    let (docs, failures) = engine.store.index_stats(link).await?;
    let (hits, misses, _, _) = engine.embedder.cache().stats();
    let (batches, texts) = engine.embedder.batch_stats();
    let up = engine.upstream_addr();
    Ok(Reply::Map(vec![
        ("index", Reply::text(&cfg.mem_index_name)),
        ("storage", Reply::text(engine.store.storage().name())),
        ("num_docs", Reply::Int(docs)),
        ("indexing_failures", Reply::Int(failures)),
        ("model", Reply::text(&engine.embedder.info().name)),
        ("dim", Reply::Int(engine.embedder.info().dim as i64)),
        ("dedup_threshold", Reply::Double(cfg.dedup_threshold)),
        ("recall_threshold", Reply::Double(cfg.recall_threshold)),
        (
            "recall_auto_threshold",
            Reply::Double(cfg.recall_auto_threshold),
        ),
        (
            "recall_hit_threshold",
            Reply::Double(cfg.recall_hit_threshold),
        ),
        (
            "recall_relative_cutoff",
            Reply::Double(cfg.recall_relative_cutoff),
        ),
        ("recall_mode", Reply::text(cfg.recall_mode.name())),
        (
            "ttl_by_kind",
            Reply::Map(vec![
                ("episodic", Reply::Int(cfg.episodic_ttl_seconds as i64)),
                ("semantic", Reply::Int(-1)),
            ]),
        ),
        ("mem_key_prefix", Reply::text(&cfg.mem_key_prefix)),
        ("session_key_prefix", Reply::text(&cfg.session_key_prefix)),
        ("event_key_prefix", Reply::text(&cfg.event_key_prefix)),
        ("consolidator", {
            let c = engine.consolidator.lock().expect("stats").clone();
            Reply::Map(vec![
                (
                    "interval_seconds",
                    Reply::Int(cfg.consolidate_interval_seconds as i64),
                ),
                ("runs", Reply::Int(c.runs as i64)),
                ("groups_merged", Reply::Int(c.groups as i64)),
                ("memories_removed", Reply::Int(c.removed as i64)),
                ("last_run", Reply::opt_double(c.last_run)),
                ("last_error", Reply::opt_text(c.last_error)),
            ])
        }),
        ("embed_cache_hits", Reply::Int(hits as i64)),
        ("embed_cache_misses", Reply::Int(misses as i64)),
        ("embed_batches", Reply::Int(batches as i64)),
        ("embed_texts", Reply::Int(texts as i64)),
        (
            "embed_workers_replaced",
            Reply::Int(engine.embedder.workers_replaced() as i64),
        ),
        ("version", Reply::text(env!("CARGO_PKG_VERSION"))),
        ("upstream", Reply::text(up.describe())),
    ]))
}

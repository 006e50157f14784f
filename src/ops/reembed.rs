//! `memproxy reembed`: re-embed every stored memory with the configured model, then stamp the
//! index with it (see `Store::check_model`: until then MEM.* refuse, so vectors of two models
//! are never searched together).
//!
//! Memories whose stored vector already is this model's (within the same-model distance) are
//! skipped, so an interrupted run resumes by running it again. Each memory is one JSON.SET of its
//! `$.embedding`; RediSearch re-indexes it on the spot.

use std::time::Duration;

use crate::embed::PROBE;
use crate::engine::Engine;
use crate::error::{MemError, MemResult};
use crate::store::keyspace::{cmd, Keyspace};
use crate::store::memory::ScopeKeys;
use crate::store::{ModelStamp, SAME_MODEL};

/// Texts embedded concurrently (the embedder batches them).
const CONCURRENT: usize = 32;

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Reembedded {
    pub examined: usize,
    pub rewritten: usize,
}

/// Re-embed; `progress(examined, total)` is called after every page.
pub async fn reembed(
    engine: &Engine,
    mut progress: impl FnMut(usize, usize),
) -> MemResult<Reembedded> {
    let store = &engine.store;
    let timeout = Duration::from_millis(engine.config().op_timeout_ms);
    let mut done = Reembedded::default();
    // One Redis, or each master of a cluster in turn (its own index).
    let places = store.places(engine.upstream_addr());
    let mut total = 0;
    let mut links = Vec::new();
    for (keys, addr, node) in places {
        let mut link = addr.admin(timeout).await?;
        link.node = node;
        let info = crate::error::ok(link.call1(Keyspace::index_info(&keys.index)).await?)?;
        if let Some(layout) = crate::store::schema::layout_of(&info) {
            keys.layout.set(layout);
        }
        total += crate::resp::read::field(crate::resp::read::array(&info), "num_docs")
            .and_then(|v| crate::resp::read::text(v).and_then(|t| t.parse::<usize>().ok()))
            .unwrap_or(0);
        links.push((keys, link));
    }
    for (keys, mut link) in links {
        reembed_index(engine, &keys, &mut link, &mut done, total, &mut progress).await?;
    }
    let probe = engine
        .embedder
        .embed(PROBE)
        .await
        .map_err(|e| MemError::Embedder(e.to_string()))?;
    store
        .write_stamp(&ModelStamp {
            name: engine.embedder.info().name.clone(),
            probe: probe.to_vec(),
        })
        .await?;
    store.index_lost();
    Ok(done)
}

/// Re-embed the memories of one index (the single Redis's, or one master's).
async fn reembed_index(
    engine: &Engine,
    keys: &crate::store::keyspace::Keyspace,
    link: &mut crate::upstream::Link,
    done: &mut Reembedded,
    total: usize,
    progress: &mut impl FnMut(usize, usize),
) -> MemResult<()> {
    let store = &engine.store;
    let ks = keys;
    let mut pages = ScopeKeys::new(keys, None);
    while let Some(keys) = pages.next(link).await? {
        let memories = store.read_memories(link, &keys, ks.compact()).await?;
        for chunk in memories.chunks(CONCURRENT) {
            let vectors =
                futures::future::join_all(chunk.iter().map(|m| engine.embedder.embed(&m.text)))
                    .await;
            let mut writes = Vec::new();
            let mut windows = Vec::new();
            for (m, v) in chunk.iter().zip(vectors) {
                let v = v.map_err(|e| MemError::Embedder(e.to_string()))?;
                done.examined += 1;
                if m.embedding.len() == v.len()
                    && crate::embed::cosine_distance(&m.embedding, &v) <= SAME_MODEL
                {
                    continue;
                }
                // A long text's later windows, by the same model (`embed::windows`).
                let ws = crate::mem::embed::windows(engine, &m.text).await?;
                if ks.compact() {
                    // Only where the key exists, so a memory deleted meanwhile stays deleted.
                    let blob = ks.vector_blob(&v);
                    writes.push(Keyspace::hset_existing(&m.key, "embedding", blob));
                    for (i, w) in ws.iter().enumerate() {
                        let wkey = crate::store::keyspace::window_key(&m.key, i + 1);
                        windows.push(Keyspace::hset_existing(&wkey, "windows", ks.vector_blob(w)));
                    }
                    continue;
                }
                let json = serde_json::to_string(&v[..]).unwrap_or_default();
                writes.push(cmd(&["JSON.SET", &m.key, "$.embedding", &json, "XX"]));
                if !ws.is_empty() {
                    let ws: Vec<&[f32]> = ws.iter().map(|w| &w[..]).collect();
                    let json = serde_json::to_string(&ws).unwrap_or_default();
                    windows.push(cmd(&["JSON.SET", &m.key, "$.windows", &json]));
                }
            }
            if !writes.is_empty() {
                let n = writes.len();
                for r in link.call(&writes).await? {
                    // A memory deleted meanwhile is fine (XX: nothing written).
                    crate::error::ok(r)?;
                }
                // A memory deleted meanwhile makes its windows' JSON.SET fail: nothing to do.
                if !windows.is_empty() {
                    link.call(&windows).await?;
                }
                done.rewritten += n;
            }
        }
        progress(done.examined, total);
    }
    Ok(())
}

//! `memproxy export` and `memproxy import`: memories as JSON lines, for backups, moves between
//! Redis deployments and a user's copy of their data (`MEM.FORGET USER` stays the erasure path).
//!
//! A line: `{"id", "text", "kind", "user", "namespace", "source_thread", "created_ts",
//! "hit_count", "ttl"}` (`ttl` in seconds, -1 for none), plus `"embedding"` and `"model"` with
//! `--embeddings`. Export reads by cursor and pipelined JSON.GET on a connection of its own (the
//! `--upstream` URL's user). Import runs MEM.REMEMBER for every line through [`Verbs`] — the
//! verb's embedding, dedup and limits — with the line's `created_ts` and `hit_count` as its
//! CREATED and HITS (a new memory gets them; a line deduplicated onto an existing memory adds
//! its hit count to it), so each line is written by one script call.
//!
//! `import --trust-embeddings` skips the model for lines that carry this memproxy's model name and
//! a unit vector of its dimension: the vector is put into the embedder's cache under the line's
//! text just before the same MEM.REMEMBER runs, so the verb finds it there. Trust is checked: the
//! first [`CHECK_FIRST`] such lines and one in [`CHECK_EVERY`] after them are embedded by the
//! model anyway, and one that differs by more than [`SAME_VECTOR`] (cosine distance) ends the
//! trust for the rest of the file.

use std::io::{BufRead, Write};
use std::time::Duration;

use serde_json::{json, Value};

use crate::engine::Engine;
use crate::error::{MemError, MemResult};
use crate::mem::verbs::Verbs;
use crate::store::memory::ScopeKeys;
use crate::store::{Kind, Scope};

/// Which memories to export: every one, or a user's (and namespace's, kind's).
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub user: Option<String>,
    pub namespace: Option<String>,
    pub kind: Option<Kind>,
    pub embeddings: bool,
}

/// Write the selected memories to `out`, one JSON line each; returns how many.
///
/// In front of a cluster, every master's memories (each master's own index, on a connection of
/// memproxy's own to it).
pub async fn export(engine: &Engine, sel: &Selection, out: &mut impl Write) -> MemResult<usize> {
    let store = &engine.store;
    store.ready().await?;
    let timeout = Duration::from_millis(engine.config().op_timeout_ms);
    let mut n = 0;
    for (keys, addr, node) in store.places(engine.upstream_addr()) {
        let mut link = addr.admin(timeout).await?;
        link.node = node;
        n += export_from(engine, sel, &keys, &mut link, out).await?;
    }
    out.flush()
        .map_err(|e| MemError::Internal(format!("write: {e}")))?;
    Ok(n)
}

/// The selected memories of one index (the single Redis's, or one master's).
async fn export_from(
    engine: &Engine,
    sel: &Selection,
    keys: &crate::store::keyspace::Keyspace,
    link: &mut crate::upstream::Link,
    out: &mut impl Write,
) -> MemResult<usize> {
    let store = &engine.store;
    let scope = sel.user.as_ref().map(|u| Scope {
        user: u.clone(),
        namespace: sel.namespace.clone().unwrap_or_default(),
        kind: sel.kind,
        thread: None,
    });
    let mut pages = ScopeKeys::new(keys, scope.as_ref());
    let compact = keys.compact();
    let model = &engine.embedder.info().name;
    let mut n = 0;
    let link = &mut *link;
    while let Some(keys) = pages.next(link).await? {
        for m in store.read_memories(link, &keys, compact).await? {
            let wanted = match &scope {
                Some(s) => s.matches(&m.user, &m.namespace, &m.kind, None),
                None => {
                    sel.namespace.as_ref().is_none_or(|ns| *ns == m.namespace)
                        && sel.kind.is_none_or(|k| k.as_str() == m.kind)
                }
            };
            if !wanted {
                continue;
            }
            let mut line = json!({
                "id": m.id,
                "text": m.text,
                "kind": m.kind,
                "user": m.user,
                "namespace": m.namespace,
                "source_thread": m.source_thread,
                "created_ts": m.created_ts,
                "hit_count": m.hit_count,
                "ttl": if m.pttl < 0 { -1 } else { (m.pttl + 999) / 1000 },
            });
            if sel.embeddings {
                line["embedding"] = json!(m.embedding);
                line["model"] = json!(model);
            }
            writeln!(out, "{line}").map_err(|e| MemError::Internal(format!("write: {e}")))?;
            n += 1;
        }
    }
    Ok(n)
}

/// What an import did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Imported {
    pub written: usize,
    pub deduped: usize,
    /// (line number, one-line error) of every line not imported.
    pub failed: Vec<(usize, String)>,
    /// Lines whose own embedding was used (`--trust-embeddings`).
    pub reused: usize,
    /// Lines whose own embedding was compared with the model's.
    pub checked: usize,
    /// The line whose embedding differed from the model's, ending the trust.
    pub mismatch: Option<usize>,
}

/// Lines with a usable embedding that are always compared with the model's.
pub const CHECK_FIRST: usize = 16;
/// After those, one in this many is compared.
pub const CHECK_EVERY: usize = 64;
/// The largest cosine distance between a line's embedding and the model's that counts as the
/// same vector (the same graph gives ~1e-7; another model or graph gives far more).
pub const SAME_VECTOR: f64 = 1e-4;

/// Import JSON lines from `input`; `trust`: use the lines' own embeddings (checked, see above).
///
/// In front of a cluster each line goes to its user's master (see [`Verbs`]): `export` from one
/// Redis and `import` into a cluster is how a deployment moves from one to the other.
pub async fn import(engine: &Engine, input: impl BufRead, trust: bool) -> MemResult<Imported> {
    let mut verbs = Verbs::open(engine, None)
        .await
        .map_err(|e| MemError::upstream(e.line))?;
    let mut report = Imported::default();
    let mut usable = 0;
    let mut lines = input.lines().enumerate();
    loop {
        // The next lines, parsed; the texts the model will have to embed start embedding now,
        // so that the model batches them while the lines before are written.
        let mut window = Vec::with_capacity(READ_AHEAD);
        for (i, line) in lines.by_ref().take(READ_AHEAD) {
            let line = line.map_err(|e| MemError::Internal(format!("read: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            let parsed = serde_json::from_str::<Value>(&line);
            if let Ok(v) = &parsed {
                let trusted =
                    trust && report.mismatch.is_none() && own_embedding(engine, v).is_some();
                if let (false, Some(text)) = (trusted, v.get("text").and_then(|x| x.as_str())) {
                    engine.embedder.prefetch(text.to_owned());
                }
            }
            window.push((i + 1, parsed));
        }
        if window.is_empty() {
            break;
        }
        for (no, parsed) in window {
            import_parsed(
                engine,
                &mut verbs,
                &mut report,
                &mut usable,
                trust,
                no,
                parsed,
            )
            .await;
        }
    }
    Ok(report)
}

/// Lines read ahead of the one being written (their texts embed meanwhile).
const READ_AHEAD: usize = 64;

/// Write one parsed line, and account for it in `report`.
async fn import_parsed(
    engine: &Engine,
    verbs: &mut Verbs<'_>,
    report: &mut Imported,
    usable: &mut usize,
    trust: bool,
    no: usize,
    parsed: serde_json::Result<Value>,
) {
    let v: Value = match parsed {
        Ok(v) => v,
        Err(e) => {
            report.failed.push((no, format!("not JSON: {e}")));
            return;
        }
    };
    let own = (trust && report.mismatch.is_none())
        .then(|| own_embedding(engine, &v))
        .flatten();
    let check = own.as_ref().map(|_| {
        *usable += 1;
        *usable <= CHECK_FIRST || usable.is_multiple_of(CHECK_EVERY)
    });
    let text = v.get("text").and_then(|x| x.as_str()).unwrap_or_default();
    let cache = engine.embedder.cache();
    // Keyed as MEM.REMEMBER will look it up: the text as a document.
    let key = engine
        .embedder
        .model_input(text, crate::embed::Role::Document);
    match (&own, check) {
        (Some(own), Some(false)) => cache.put(&key, own.clone()),
        // The model must run for this one: nothing cached may stand in for it.
        (Some(_), _) => cache.remove(&key),
        _ => {}
    }
    let imported = match import_line(verbs, &v).await {
        Ok(true) => {
            report.deduped += 1;
            true
        }
        Ok(false) => {
            report.written += 1;
            true
        }
        Err(e) => {
            report.failed.push((no, e));
            false
        }
    };
    match (own, check) {
        // The line's vector stood in for the model only for its own verb.
        (Some(own), Some(false)) => {
            if cache.get(text).is_some_and(|v| v == own) {
                report.reused += 1;
            }
            cache.remove(text);
        }
        // The verb embedded the text with the model (a failed line is not compared).
        (Some(own), Some(true)) if imported => {
            if let Ok(model) = engine.embedder.embed(text).await {
                report.checked += 1;
                if crate::embed::cosine_distance(&own, &model) > SAME_VECTOR {
                    report.mismatch = Some(no);
                }
            }
        }
        _ => {}
    }
}

/// The line's `embedding` when its `model` is this memproxy's and it is a unit vector of the
/// model's dimension.
fn own_embedding(engine: &Engine, v: &Value) -> Option<crate::embed::Vector> {
    let info = engine.embedder.info();
    if v.get("model").and_then(|m| m.as_str()) != Some(info.name.as_str()) {
        return None;
    }
    let e = v.get("embedding")?.as_array()?;
    let x: Vec<f32> = e
        .iter()
        .map(|n| n.as_f64().map(|f| f as f32))
        .collect::<Option<_>>()?;
    let norm = x.iter().map(|a| (*a as f64) * (*a as f64)).sum::<f64>();
    (x.len() == info.dim && x.iter().all(|a| a.is_finite()) && (norm - 1.0).abs() < 1e-3)
        .then(|| x.into())
}

/// One parsed line; `Ok(deduped)`.
async fn import_line(verbs: &mut Verbs<'_>, v: &Value) -> Result<bool, String> {
    let field = |f: &str| v.get(f).and_then(|x| x.as_str()).filter(|s| !s.is_empty());
    let text = field("text").ok_or("no \"text\"")?;
    let mut args: Vec<String> = vec!["MEM.REMEMBER".into(), text.into()];
    for (name, token) in [
        ("user", "USER"),
        ("namespace", "NS"),
        ("kind", "KIND"),
        ("source_thread", "THREAD"),
    ] {
        if let Some(x) = field(name) {
            args.extend([token.into(), x.into()]);
        }
    }
    match v.get("ttl").and_then(|t| t.as_i64()) {
        Some(t) if t > 0 => args.extend(["TTL".into(), t.to_string()]),
        Some(_) => args.push("PERSIST".into()),
        None => {}
    }
    // The line's time and uses go in with the memory, in the same script call: an import
    // stopped at any point leaves no memory with the import's time instead of its own.
    if let Some(ts) = v.get("created_ts").and_then(|t| t.as_f64()) {
        args.extend(["CREATED".into(), ts.to_string()]);
    }
    let hits = v
        .get("hit_count")
        .and_then(|h| h.as_i64())
        .unwrap_or(0)
        .max(0);
    args.extend(["HITS".into(), hits.to_string()]);
    let r = verbs.run(args).await.map_err(|e| e.line)?;
    let deduped = r["deduped"].as_i64() == Some(1);
    Ok(deduped)
}

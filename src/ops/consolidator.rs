//! The background consolidator (off unless `consolidate_interval_seconds` is set): every
//! interval, [`Store::consolidate`](crate::store::Store::consolidate) for every scope in the
//! index (user, namespace and kind, from one FT.AGGREGATE GROUPBY), on a connection of its own
//! (the `--upstream` URL's user), keeping Redis busy for at most `consolidate_redis_share` of
//! the time. What it did shows in MEM.INFO and the metrics.

use std::time::Duration;

use crate::engine::Engine;
use crate::error::ok;
use crate::error::MemResult;
use crate::resp::read::{array, field, text};
use crate::store::keyspace::Keyspace;
use crate::store::{Kind, Scope};

/// Run every `consolidate_interval_seconds` until the task is dropped; what it did goes to
/// [`Engine::consolidator`].
pub async fn run_forever(engine: &Engine) {
    let every = Duration::from_secs(engine.config().consolidate_interval_seconds);
    loop {
        tokio::time::sleep(every).await;
        let outcome = run_once(engine).await;
        let mut s = engine.consolidator.lock().expect("stats");
        s.runs += 1;
        s.last_run = Some(crate::store::now_ts());
        match outcome {
            Ok((groups, removed)) => {
                s.groups += groups;
                s.removed += removed;
                s.last_error = None;
                engine.metrics.consolidated.inc_by(removed);
            }
            Err(e) => {
                tracing::warn!(error = %e, "background consolidation failed");
                s.last_error = Some(e.line());
            }
        }
    }
}

/// One pass over every scope: (groups merged, memories removed). In front of a cluster,
/// every master's scopes, on a connection to that master.
pub async fn run_once(engine: &Engine) -> MemResult<(u64, u64)> {
    let cfg = engine.config();
    let store = &engine.store;
    store.ready().await?;
    let timeout = Duration::from_millis(cfg.op_timeout_ms);
    let (mut merged, mut removed) = (0, 0);
    for (keys, addr, node) in store.places(engine.upstream_addr()) {
        let mut link = addr.admin(timeout).await?;
        link.node = node.clone();
        let scopes = if node.is_some() {
            user_scopes(&mut link, &keys.index).await?
        } else {
            exact_scopes(&mut link, &keys.index).await?
        };
        for scope in scopes {
            let done = store
                .consolidate(
                    &mut link,
                    &scope,
                    cfg.consolidate_threshold,
                    false,
                    cfg.consolidate_redis_share,
                )
                .await?;
            merged += done.len() as u64;
            removed += done.iter().map(|m| m.merged.len() as u64).sum::<u64>();
        }
    }
    Ok((merged, removed))
}

/// Every (user, namespace, kind) of an index (FT.AGGREGATE … GROUPBY, which loads the fields).
async fn exact_scopes(link: &mut crate::upstream::Link, index: &str) -> MemResult<Vec<Scope>> {
    let groups = ok(link.call1(Keyspace::exact_scopes(index)).await?)?;
    let mut scopes = Vec::new();
    for row in array(&groups).iter().skip(1) {
        let get = |f: &str| field(array(row), f).and_then(text);
        let (Some(user), Some(namespace), Some(kind)) =
            (get("user"), get("namespace"), get("kind"))
        else {
            continue;
        };
        let Some(kind) = Kind::parse(&kind) else {
            continue;
        };
        scopes.push(Scope {
            user,
            namespace,
            kind: Some(kind),
            thread: None,
        });
    }
    Ok(scopes)
}

/// Every user of a cluster master's index, each as one scope over all its namespaces and kinds
/// (RediSearch cannot load documents there, so GROUPBY has nothing to group: the user TAG's
/// values come from the index itself; consolidation still merges only within one exact
/// user, namespace and kind).
async fn user_scopes(link: &mut crate::upstream::Link, index: &str) -> MemResult<Vec<Scope>> {
    let users = ok(link.call1(Keyspace::users(index)).await?)?;
    Ok(array(&users)
        .iter()
        .filter_map(text)
        .map(|user| Scope {
            user,
            namespace: String::new(),
            kind: None,
            thread: None,
        })
        .collect())
}

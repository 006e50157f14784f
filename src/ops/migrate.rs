//! `memproxy migrate`: move an index memproxy refuses (another prefix, missing or mistyped fields,
//! another metric or dimension), or the guide's own schema (scope tags without CASESENSITIVE), to
//! memproxy's, without touching the guide's documents.
//!
//! The steps, each recorded in the hash `<index>:migration` (`step`) so that a run interrupted
//! anywhere resumes where it stopped when run again:
//! 1. **wait** until the source index has indexed everything;
//! 2. **baseline**: its document count, a sample of 20 keys and its own FT.CREATE arguments
//!    (rebuilt from FT.INFO, for the rollback) are saved in the hash;
//! 3. **build**: documents under another prefix are copied (COPY, never overwriting) to the
//!    configured prefix, and memproxy's index is created as `<index>.migrated` and waited for;
//! 4. **verify**: the new index holds at least the baseline's count and every sampled document;
//! 5. **switch**: the source index is dropped (its documents kept) and the configured name becomes
//!    an alias of the new index (FT.ALIASADD), so every memproxy and the guide's code keep using
//!    the same name.
//!
//! **Between layouts**: when the index's layout (read from it: JSON is the guide's, HASH the
//! compact one) is not the `storage` setting's, step 3 writes every memory again under the
//! configured prefix (which must differ from the source's) in the setting's layout instead of
//! copying it, with its TTL; a long text's windows are embedded again, as are vectors of another
//! dimension. The count and the sample are of memories only (a compact index's windows are
//! documents too).
//!
//! `--rollback` returns to the original: the alias removed, the source index created again from
//! its saved arguments, the copies deleted, the new index dropped. A source of another vector
//! dimension is migrated by re-embedding the copies (step 3) with this memproxy's model, so it
//! needs a configured prefix other than the source's (the source's documents stay as they were).
//!
//! In front of a Redis Cluster every master is migrated in turn, each its own index
//! (`<index>{n}`), state hash (`<index>{n}:migration`, in the same slot) and documents, on a
//! connection of memproxy's own to it; a master with no index, or one memproxy already accepts, is
//! passed over. A copy keeps its key's hash tag (`old:{alice}:id` → `agent:mem:{alice}:id`), so
//! it stays on its master; a key whose copy would hash elsewhere (no tag after the prefix) stops
//! the migration with an error naming it: such documents move with `export` and `import`.

use std::time::Duration;

use redis::Value;

use crate::config::Storage;
use crate::engine::Engine;
use crate::error::ok;
use crate::error::{MemError, MemResult};
use crate::resp::read::{array, field, text};
use crate::store::keyspace::{cmd, Keyspace, Spec};
use crate::store::schema;
use crate::upstream::Link;

/// Keys the baseline samples.
const SAMPLE: usize = 20;
/// Keys one COPY pipeline moves.
const COPY_BATCH: usize = 200;

/// The steps, in order.
pub const STEPS: [&str; 4] = ["baseline", "built", "verified", "switched"];

/// Progress reports: (what, done, total).
pub type Progress<'a> = &'a mut dyn FnMut(&str, usize, usize);

struct Migration<'e> {
    engine: &'e Engine,
    link: Link,
    /// In front of a cluster: copies must hash to the slot of their source.
    cluster: bool,
    index: String,
    target: String,
    state: String,
}

fn err(msg: impl Into<String>) -> MemError {
    MemError::client(msg.into())
}

/// Run (or resume) the migration; returns each index and the step it ended at (one index on a
/// single Redis, one per master in front of a cluster). `stop_after` (tests and operators): stop
/// after that step, as an interruption would.
pub async fn migrate(
    engine: &Engine,
    stop_after: Option<&str>,
    progress: Progress<'_>,
) -> MemResult<Vec<(String, String)>> {
    let mut done = Vec::new();
    for mut m in Migration::every(engine).await? {
        let index = m.index.clone();
        let step = match m.run(stop_after, progress).await {
            Err(MemError::Client(e)) if m.cluster && e.ends_with(PASSED_OVER) => e,
            other => other?,
        };
        done.push((index, step));
    }
    Ok(done)
}

/// Undo a migration (finished or not): of the single Redis, or of every master that has one.
pub async fn rollback(engine: &Engine) -> MemResult<()> {
    let cluster = engine.store.cluster().is_some();
    for mut m in Migration::every(engine).await? {
        if cluster && m.get("source_args").await?.is_none() {
            continue;
        }
        m.rollback().await?;
    }
    Ok(())
}

/// How a master the cluster migration leaves alone is reported.
const PASSED_OVER: &str = "nothing to migrate";

impl<'e> Migration<'e> {
    /// The migrations to run: the single Redis's, or one per master.
    async fn every(engine: &'e Engine) -> MemResult<Vec<Migration<'e>>> {
        let timeout = Duration::from_millis(engine.config().op_timeout_ms.max(30_000));
        let mut all = Vec::new();
        for (keys, addr, node) in engine.store.places(engine.upstream_addr()) {
            let mut link = addr.admin(timeout).await?;
            let cluster = node.is_some();
            link.node = node;
            let index = keys.index.clone();
            all.push(Migration {
                engine,
                link,
                cluster,
                target: Keyspace::migration_target(&index),
                state: Keyspace::migration(&index),
                index,
            });
        }
        Ok(all)
    }

    async fn run(&mut self, stop_after: Option<&str>, progress: Progress<'_>) -> MemResult<String> {
        loop {
            let step = self.step().await?;
            if step.as_deref() == Some("switched") {
                return Ok("switched".into());
            }
            if let (Some(stop), Some(s)) = (stop_after, step.as_deref()) {
                if stop == s {
                    return Ok(s.to_string());
                }
            }
            match step.as_deref() {
                None => self.baseline(progress).await?,
                Some("baseline") => self.build(progress).await?,
                Some("built") => self.verify().await?,
                Some("verified") => self.switch().await?,
                Some(other) => return Err(err(format!("unknown migration step '{other}'"))),
            }
        }
    }

    async fn call(&mut self, args: &[&str]) -> MemResult<Value> {
        self.call_spec(cmd(args)).await
    }

    async fn call_spec(&mut self, spec: Spec) -> MemResult<Value> {
        ok(self.link.call1(spec).await?)
    }

    async fn get(&mut self, f: &str) -> MemResult<Option<String>> {
        let state = self.state.clone();
        Ok(text(&self.call(&["HGET", &state, f]).await?))
    }

    async fn set(&mut self, fields: &[(&str, &str)]) -> MemResult<()> {
        let state = self.state.clone();
        let mut args = vec!["HSET", state.as_str()];
        for (k, v) in fields {
            args.extend([*k, *v]);
        }
        self.call(&args).await.map(|_| ())
    }

    async fn step(&mut self) -> MemResult<Option<String>> {
        self.get("step").await
    }

    async fn info(&mut self, index: &str) -> MemResult<Option<Value>> {
        match self.call_spec(Keyspace::index_info(index)).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_missing_index() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Wait until `index` has indexed every document.
    async fn indexed(&mut self, index: &str, progress: Progress<'_>) -> MemResult<()> {
        loop {
            let info = self
                .info(index)
                .await?
                .ok_or_else(|| err(format!("index {index} is gone")))?;
            let a = array(&info);
            let pct: f64 = field(a, "percent_indexed")
                .and_then(text)
                .and_then(|t| t.parse().ok())
                .unwrap_or(1.0);
            let docs: usize = field(a, "num_docs")
                .and_then(text)
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            progress(
                &format!("indexing {index} ({docs} documents)"),
                (pct * 100.0) as usize,
                100,
            );
            if pct >= 1.0 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn baseline(&mut self, progress: Progress<'_>) -> MemResult<()> {
        let cfg = self.engine.config();
        let index = self.index.clone();
        let info = self
            .info(&index)
            .await?
            .ok_or_else(|| err(format!("there is no index {index}: {PASSED_OVER}")))?;
        // The layout the source has, and the one the `storage` setting asks for: converting
        // between them is a migration too.
        let layout = schema::layout_of(&info).unwrap_or(Storage::Guide);
        let convert = layout != cfg.storage;
        // The guide's own schema passes the check (memproxy compares scopes exactly itself), but
        // its scope tags match case-insensitively: migrating it gives memproxy's exact index.
        if !convert
            && schema::check(&info, &index, &cfg.mem_key_prefix, self.engine.store.dim()).is_ok()
            && schema::scope_tags_case_sensitive(&info)
        {
            return Err(err(format!(
                "index {index} already has memproxy's schema: {PASSED_OVER}"
            )));
        }
        let source = schema::create_args_from_info(&info, &index)
            .map_err(|e| err(format!("cannot migrate {index}: {e}")))?;
        let prefix = source_prefix(&info);
        if convert && prefix == cfg.mem_key_prefix {
            return Err(err(format!(
                "index {index} is in the {} layout and storage is {}: the converted copies need a prefix of their own (set --mem-key-prefix to a new prefix and run migrate again)",
                layout.name(),
                cfg.storage.name()
            )));
        }
        if let Some(dim) = schema::vector_dim(&info) {
            if dim != self.engine.store.dim() && prefix == cfg.mem_key_prefix {
                return Err(err(format!(
                    "index {index} holds {dim}-dimensional vectors and the model makes {}: the re-embedded copies need a prefix of their own (set --mem-key-prefix to a new prefix and run migrate again)",
                    self.engine.store.dim()
                )));
            }
        }
        self.indexed(&index, progress).await?;
        // Memories only: a compact index's windows are documents too.
        let memories = Keyspace::memories_only(layout);
        let counted = self
            .call_spec(Keyspace::key_page(&index, memories, 0, 0))
            .await?;
        let count = array(&counted)
            .first()
            .and_then(crate::resp::read::int)
            .unwrap_or(0)
            .to_string();
        let sample = self
            .call_spec(Keyspace::key_page(&index, memories, 0, SAMPLE))
            .await?;
        let keys: Vec<String> = array(&sample).iter().skip(1).filter_map(text).collect();
        self.set(&[
            (
                "source_args",
                &serde_json::to_string(&source).unwrap_or_default(),
            ),
            ("source_prefix", &prefix),
            ("source_layout", layout.name()),
            ("count", &count),
            ("sample", &serde_json::to_string(&keys).unwrap_or_default()),
            ("target", &self.target.clone()),
            ("step", "baseline"),
        ])
        .await
    }

    async fn build(&mut self, progress: Progress<'_>) -> MemResult<()> {
        let cfg = self.engine.config();
        let prefix = cfg.mem_key_prefix.clone();
        let source_prefix = self.get("source_prefix").await?.unwrap_or_default();
        let layout = match self.get("source_layout").await?.as_deref() {
            Some("compact") => Storage::Compact,
            _ => Storage::Guide,
        };
        if layout != cfg.storage {
            self.convert(&source_prefix, &prefix, layout, progress)
                .await?;
        } else if source_prefix != prefix {
            self.copy(&source_prefix, &prefix, progress).await?;
            self.reembed_copies(progress).await?;
        }
        let target = self.target.clone();
        if self.info(&target).await?.is_none() {
            let dim = self.engine.store.dim();
            self.call_spec(Keyspace::index_create(&target, &prefix, dim, cfg.storage))
                .await?;
        }
        self.indexed(&target, progress).await?;
        self.set(&[("step", "built")]).await
    }

    /// One page of a SCAN-like command: the next cursor and the keys.
    async fn scan_page(&mut self, spec: Spec) -> MemResult<(String, Vec<String>)> {
        let page = self.call_spec(spec).await?;
        let a = array(&page);
        let cursor = a.first().and_then(text).unwrap_or_else(|| "0".into());
        let keys = a
            .get(1)
            .map(array)
            .unwrap_or_default()
            .iter()
            .filter_map(text)
            .collect();
        Ok((cursor, keys))
    }

    /// In front of a cluster a copy must hash to its source's slot (it stays on its master).
    fn same_slot(&self, k: &str, dest: &str) -> MemResult<()> {
        let slot = |k: &str| crate::upstream::cluster::slot::slot(k.as_bytes());
        if self.cluster && slot(k) != slot(dest) {
            return Err(err(format!(
                "{k} would be copied to {dest}, in another hash slot (slot {} to {}): keys without a hash tag after their prefix move with export and import",
                slot(k),
                slot(dest)
            )));
        }
        Ok(())
    }

    /// COPY every key under `from` to the same name under `to` (never overwriting), recording the
    /// copies for the rollback.
    async fn copy(&mut self, from: &str, to: &str, progress: Progress<'_>) -> MemResult<()> {
        let copies = Keyspace::migration_copies(&self.state);
        let total: usize = {
            let index = self.index.clone();
            field(
                array(&self.info(&index).await?.unwrap_or_default()),
                "num_docs",
            )
            .and_then(text)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0)
        };
        let mut cursor = "0".to_string();
        let mut done = 0;
        loop {
            let keys: Vec<String>;
            (cursor, keys) = self
                .scan_page(Keyspace::prefix_scan(from, &cursor, 1000))
                .await?;
            for batch in keys.chunks(COPY_BATCH) {
                let mut cmds = Vec::new();
                for k in batch {
                    let dest = Keyspace::under_prefix(k, from, to);
                    self.same_slot(k, &dest)?;
                    cmds.push(cmd(&["COPY", k, &dest]));
                    cmds.push(cmd(&["SADD", &copies, &dest]));
                }
                for r in self.link.call(&cmds).await? {
                    ok(r)?;
                }
                done += batch.len();
                progress("copying", done, total.max(done));
            }
            if cursor == "0" {
                return Ok(());
            }
        }
    }

    /// Write every memory under `from` (kept in `layout`) again under `to` in the layout the
    /// `storage` setting names (never over an existing key), with its TTL; vectors of another
    /// dimension, and a long text's windows, are embedded by this memproxy's model. Every key
    /// written is recorded for the rollback. Resumable: a memory whose copy exists is skipped.
    async fn convert(
        &mut self,
        from: &str,
        to: &str,
        layout: Storage,
        progress: Progress<'_>,
    ) -> MemResult<()> {
        let cfg = self.engine.config();
        let target = cfg.storage;
        let dim = self.engine.store.dim();
        let copies = Keyspace::migration_copies(&self.state);
        let total: usize = self
            .get("count")
            .await?
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let mut cursor = "0".to_string();
        let mut done = 0;
        loop {
            let keys: Vec<String>;
            (cursor, keys) = self
                .scan_page(Keyspace::prefix_scan(from, &cursor, 1000))
                .await?;
            let keys: Vec<String> = keys
                .into_iter()
                .filter(|k| !Keyspace::is_window_key(k))
                .collect();
            for batch in keys.chunks(COPY_BATCH) {
                let dests: Vec<String> = batch
                    .iter()
                    .map(|k| Keyspace::under_prefix(k, from, to))
                    .collect();
                for (k, dest) in batch.iter().zip(&dests) {
                    self.same_slot(k, dest)?;
                }
                let exists: Vec<Spec> = dests.iter().map(|d| cmd(&["EXISTS", d])).collect();
                let there: Vec<bool> = self
                    .link
                    .call(&exists)
                    .await?
                    .into_iter()
                    .map(|r| ok(r).ok().and_then(|v| crate::resp::read::int(&v)) == Some(1))
                    .collect();
                let memories = self
                    .engine
                    .store
                    .read_memories(&mut self.link, batch, layout == Storage::Compact)
                    .await?;
                let mut writes = Vec::new();
                for mut m in memories {
                    let dest = Keyspace::under_prefix(&m.key, from, to);
                    let i = batch.iter().position(|k| *k == m.key).unwrap_or(0);
                    if there.get(i).copied().unwrap_or(false) {
                        continue;
                    }
                    if m.embedding.len() != dim {
                        m.embedding = self
                            .engine
                            .embedder
                            .embed(&m.text)
                            .await
                            .map_err(|e| MemError::Embedder(e.to_string()))?
                            .to_vec();
                    }
                    m.id = Keyspace::under_prefix(&dest, to, "");
                    let windows = crate::mem::embed::windows(self.engine, &m.text).await?;
                    // Recorded first (the rollback deletes them); then the memory, its windows
                    // and TTLs as one transaction (one slot: the windows share the memory's tag),
                    // so a memory that exists is whole and a resumed run may skip it.
                    for k in Keyspace::memory_keys(target, &dest, windows.len()) {
                        writes.push(cmd(&["SADD", &copies, &k]));
                    }
                    writes.push(cmd(&["MULTI"]));
                    writes.extend(Keyspace::memory_write(target, &dest, &m, &windows));
                    writes.push(cmd(&["EXEC"]));
                }
                for r in self.link.call(&writes).await? {
                    ok(r)?;
                }
                done += batch.len();
                progress("converting", done, total.max(done));
            }
            if cursor == "0" {
                return Ok(());
            }
        }
    }

    /// Copies whose vectors are not of the model's dimension (the source index had another)
    /// are embedded again by this memproxy's model. Resumable: copies already of the right
    /// dimension are skipped.
    async fn reembed_copies(&mut self, progress: Progress<'_>) -> MemResult<()> {
        let copies = Keyspace::migration_copies(&self.state);
        let dim = self.engine.store.dim();
        let total =
            crate::resp::read::int(&self.call(&["SCARD", &copies]).await?).unwrap_or(0) as usize;
        let mut cursor = "0".to_string();
        let mut done = 0;
        loop {
            let keys: Vec<String>;
            (cursor, keys) = self
                .scan_page(cmd(&["SSCAN", &copies, &cursor, "COUNT", "200"]))
                .await?;
            let compact = self.engine.config().storage == Storage::Compact;
            let memories = self
                .engine
                .store
                .read_memories(&mut self.link, &keys, compact)
                .await?;
            let stale: Vec<_> = memories
                .iter()
                .filter(|m| m.embedding.len() != dim)
                .collect();
            let vectors = futures::future::join_all(
                stale.iter().map(|m| self.engine.embedder.embed(&m.text)),
            )
            .await;
            let mut writes = Vec::new();
            for (m, v) in stale.iter().zip(vectors) {
                let v = v.map_err(|e| MemError::Embedder(e.to_string()))?;
                if compact {
                    let mut c = cmd(&["HSET", &m.key, "embedding"]);
                    c.push(crate::store::keyspace::f16_blob(&v));
                    writes.push(c);
                } else {
                    let json = serde_json::to_string(&v[..]).unwrap_or_default();
                    writes.push(cmd(&["JSON.SET", &m.key, "$.embedding", &json]));
                }
            }
            if !writes.is_empty() {
                for r in self.link.call(&writes).await? {
                    ok(r)?;
                }
            }
            done += keys.len();
            progress("re-embedding the copies", done, total.max(done));
            if cursor == "0" {
                return Ok(());
            }
        }
    }

    async fn verify(&mut self) -> MemResult<()> {
        let cfg = self.engine.config();
        let target = self.target.clone();
        let count: usize = self
            .get("count")
            .await?
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        if self.info(&target).await?.is_none() {
            return Err(err(format!(
                "index {target} is gone; run migrate --rollback"
            )));
        }
        // Memories only: a compact index's windows are documents too.
        let counted = self
            .call_spec(Keyspace::key_page(
                &target,
                Keyspace::memories_only(cfg.storage),
                0,
                0,
            ))
            .await?;
        let got = array(&counted)
            .first()
            .and_then(crate::resp::read::int)
            .unwrap_or(0) as usize;
        if got < count {
            return Err(err(format!(
                "verification failed: {target} holds {got} documents, the baseline {count}; run migrate again, or migrate --rollback"
            )));
        }
        let sample: Vec<String> = self
            .get("sample")
            .await?
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default();
        let source_prefix = self.get("source_prefix").await?.unwrap_or_default();
        let keys: Vec<String> = sample
            .iter()
            .map(|k| {
                format!(
                    "{}{}",
                    cfg.mem_key_prefix,
                    &k[source_prefix.len().min(k.len())..]
                )
            })
            .collect();
        if !keys.is_empty() {
            let found = self.call_spec(Keyspace::count_in(&target, &keys)).await?;
            let found = array(&found)
                .first()
                .and_then(crate::resp::read::int)
                .unwrap_or(0);
            if found as usize != keys.len() {
                return Err(err(format!(
                    "verification failed: {found} of the {} sampled documents are in {target}; run migrate --rollback",
                    keys.len()
                )));
            }
        }
        self.set(&[("step", "verified")]).await
    }

    async fn switch(&mut self) -> MemResult<()> {
        let (index, target) = (self.index.clone(), self.target.clone());
        // Resumable: the source may already be dropped.
        if let Some(info) = self.info(&index).await? {
            let name = field(array(&info), "index_name")
                .and_then(text)
                .unwrap_or_default();
            if name == index {
                self.call_spec(Keyspace::index_drop(&index)).await?;
            }
        }
        if self.info(&index).await?.is_none() {
            self.call_spec(Keyspace::alias_add(&index, &target)).await?;
        }
        self.set(&[("step", "switched")]).await?;
        self.engine.store.index_lost();
        Ok(())
    }

    async fn rollback(&mut self) -> MemResult<()> {
        let (index, target) = (self.index.clone(), self.target.clone());
        let Some(source) = self.get("source_args").await? else {
            return Err(err(format!("no migration of {index} to roll back")));
        };
        let source: Vec<String> = serde_json::from_str(&source).unwrap_or_default();
        if let Some(info) = self.info(&index).await? {
            let name = field(array(&info), "index_name")
                .and_then(text)
                .unwrap_or_default();
            if name != index {
                self.call_spec(Keyspace::alias_del(&index)).await?;
            }
        }
        if self.info(&index).await?.is_none() {
            self.call_spec(Keyspace::index_create_with(&source)).await?;
        }
        // The original index indexes its documents again in the background: wait for it.
        self.indexed(&index, &mut |_, _, _| {}).await?;
        if self.info(&target).await?.is_some() {
            self.call_spec(Keyspace::index_drop(&target)).await?;
        }
        let copies = Keyspace::migration_copies(&self.state);
        loop {
            let popped = self.call(&["SPOP", &copies, "500"]).await?;
            let keys: Vec<String> = array(&popped).iter().filter_map(text).collect();
            if keys.is_empty() {
                break;
            }
            let mut del = vec!["DEL"];
            del.extend(keys.iter().map(String::as_str));
            self.call(&del).await?;
        }
        let state = self.state.clone();
        self.call(&["DEL", &state]).await?;
        self.engine.store.index_lost();
        Ok(())
    }
}

fn source_prefix(info: &Value) -> String {
    let def = field(array(info), "index_definition")
        .map(array)
        .unwrap_or_default();
    field(def, "prefixes")
        .map(array)
        .unwrap_or_default()
        .first()
        .and_then(text)
        .unwrap_or_default()
}

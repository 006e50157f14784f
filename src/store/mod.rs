//! Everything that touches memproxy's data in Redis.
//!
//! - [`keyspace`]: key names, query strings, escaping, the rights each operation needs (the only
//!   place that builds them);
//! - [`schema`]: the index, created when missing and checked when present;
//! - [`scripts`]: the Lua scripts that make every MEM.* write atomic and all-or-nothing;
//! - [`memory`]: long-term memory (remember, recall, forget, list);
//! - [`rank`]: `MODE auto`'s gate and ranking over the KNN candidates (pure; the recall bench runs
//!   it too), with [`when`]: the time window a question names;
//! - [`consolidate`]: near-duplicates merged into their oldest member;
//! - [`session`]: working memory, agent turns and the event log.
//!
//! Every data operation runs on the client's own connection (a [`Link`]), with the client's ACL
//! user and database. memproxy's own connection (the upstream URL's credentials) is used only to
//! manage the index: check it, and create it when it is missing — at first use, after a lost
//! connection, and whenever an operation finds it gone (FLUSHALL, FLUSHDB, FT.DROPINDEX), in
//! which case the operation is retried once. An existing index is never dropped or altered.

/// Run an operation (an expression that awaits) with the index in place; if the index vanished
/// meanwhile (FLUSHALL, FT.DROPINDEX …), create it again and run the operation once more.
macro_rules! indexed {
    ($store:expr, $link:expr, $op:expr) => {{
        let site = $store.site($link);
        $store.ready_at(&site).await?;
        match $op {
            Err(e) if e.is_missing_index() => {
                tracing::info!(index = %site.keys.index, "the index is gone; creating it again");
                site.index_lost();
                $store.ready_at(&site).await?;
                $op
            }
            other => other,
        }
    }};
}

pub mod consolidate;
pub mod durable;
pub mod keyspace;
pub mod memory;
pub mod rank;
pub mod schema;
pub mod scripts;
pub mod session;
pub mod when;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::config::Config;
use crate::error::{MemError, MemResult};
use crate::resp::read as value;
use crate::upstream::{Link, UpstreamAddr};
use keyspace::{Keyspace, Spec};
use scripts::{push_search, Scripts};

pub use keyspace::{Kind, Scope};

enum IndexState {
    Unchecked,
    /// Checked at that instant; checked again after `index_recheck_ms` (another memproxy may
    /// have re-embedded the index with another model meanwhile).
    Ready(Instant),
    /// Checked and unusable; checked again after a while (an operator may fix it).
    Broken(MemError, Instant),
}

/// One upstream the store keeps an index on: the Redis (single mode), or one master of a
/// cluster (its own index, under a name that hashes to a slot it serves).
pub struct Site {
    pub keys: Arc<Keyspace>,
    upstream: UpstreamAddr,
    /// memproxy's own connection to it, for index management only.
    conn: tokio::sync::Mutex<Option<Link>>,
    index: std::sync::Mutex<IndexState>,
    /// The index has the `windows` field (long texts' later windows): `MODE auto` also searches it.
    windows: std::sync::atomic::AtomicBool,
    /// Held by the one request that checks the index; the others wait for it only when there is
    /// no usable answer yet (see [`Store::ready_at`]).
    checking: tokio::sync::Mutex<()>,
}

impl Site {
    fn new(keys: Arc<Keyspace>, upstream: UpstreamAddr) -> Site {
        Site {
            keys,
            upstream,
            conn: tokio::sync::Mutex::new(None),
            index: std::sync::Mutex::new(IndexState::Unchecked),
            windows: std::sync::atomic::AtomicBool::new(false),
            checking: tokio::sync::Mutex::new(()),
        }
    }

    /// The index was found missing by an operation: check (and create) it again.
    pub fn index_lost(&self) {
        *self.index.lock().expect("index lock") = IndexState::Unchecked;
    }

    /// Does the index have the optional `windows` field (as of its last check)?
    pub fn windows_indexed(&self) -> bool {
        self.windows.load(std::sync::atomic::Ordering::Relaxed)
    }
}

pub struct Store {
    cfg: Arc<Config>,
    /// The key layout and the index name of single mode (in cluster mode each master's
    /// [`Site`] has its own index name).
    pub keys: Arc<Keyspace>,
    dim: usize,
    scripts: Scripts,
    /// The upstream of single mode.
    single: Arc<Site>,
    /// Cluster mode: each master's site, by `host:port`.
    sites: std::sync::Mutex<std::collections::HashMap<String, Arc<Site>>>,
    cluster: std::sync::OnceLock<Arc<crate::upstream::cluster::Cluster>>,
    /// Scope filter → (when counted, more memories than the brute-force limit): see
    /// `Store::note_scope_size`.
    scope_sizes: std::sync::Mutex<std::collections::HashMap<String, (Instant, bool)>>,
    /// The model this memproxy embeds with, checked against the index's stamp.
    model: std::sync::OnceLock<ModelStamp>,
}

/// A model's identity: its name and its embedding of [`crate::embed::PROBE`]. Two models agree when their
/// probes are within [`SAME_MODEL`] (the same graph on other hardware differs by ~1e-7; the
/// int8 export of all-MiniLM-L6-v2 differs from the fp32 one by ~1e-3).
#[derive(Debug, Clone)]
pub struct ModelStamp {
    pub name: String,
    pub probe: Vec<f32>,
}

/// Cosine distance under which two probes come from the same model.
pub const SAME_MODEL: f64 = 1e-4;

impl Store {
    pub fn new(cfg: Arc<Config>, dim: usize) -> Result<Store, String> {
        let keys = Arc::new(Keyspace::new(&cfg));
        Ok(Store {
            single: Arc::new(Site::new(keys.clone(), cfg.upstream_addr()?)),
            keys,
            dim,
            scripts: Scripts::new(),
            cfg,
            sites: std::sync::Mutex::new(std::collections::HashMap::new()),
            cluster: std::sync::OnceLock::new(),
            scope_sizes: std::sync::Mutex::new(std::collections::HashMap::new()),
            model: std::sync::OnceLock::new(),
        })
    }

    /// Cluster mode from now on (set once, at start): keys carry their user's hash tag and each
    /// master gets an index of its own.
    pub fn set_cluster(&mut self, cluster: Arc<crate::upstream::cluster::Cluster>) {
        let mut keys = Keyspace::new(&self.cfg);
        keys.tagged = true;
        self.keys = Arc::new(keys);
        let _ = self.cluster.set(cluster);
    }

    /// The cluster, in cluster mode.
    pub fn cluster(&self) -> Option<&Arc<crate::upstream::cluster::Cluster>> {
        self.cluster.get()
    }

    /// Where `link` leads: its master's site in cluster mode, else the single upstream.
    pub fn site(&self, link: &Link) -> Arc<Site> {
        match (&link.node, self.cluster.get()) {
            (Some(node), Some(_)) => self.node_site(node).unwrap_or_else(|| self.single.clone()),
            _ => self.single.clone(),
        }
    }

    /// The site of master `node`: its index is `<mem_index_name>{n}` for the smallest n whose
    /// slot `node` serves (chosen again when slots move).
    pub fn node_site(&self, node: &str) -> Option<Arc<Site>> {
        let cluster = self.cluster.get()?;
        let topology = cluster.topology();
        let serves = |name: &str| {
            topology
                .master_of(crate::upstream::cluster::slot::slot(name.as_bytes()))
                .is_some_and(|m| m == node)
        };
        let mut sites = self.sites.lock().expect("sites lock");
        if let Some(site) = sites.get(node) {
            if serves(&site.keys.index) {
                return Some(site.clone());
            }
        }
        let base = &self.cfg.mem_index_name;
        let name = (0..100_000)
            .map(|n| format!("{base}{{{n}}}"))
            .find(|name| serves(name))?;
        let mut keys = (*self.keys).clone();
        keys.index = name;
        let site = Arc::new(Site::new(Arc::new(keys), cluster.addr_of(node)));
        sites.insert(node.to_string(), site.clone());
        Some(site)
    }

    /// Where every memory is, for tools that read them all (export, the consolidator): the
    /// single upstream's key layout and address (`upstream`), or each master's, with the master
    /// to put on the link (so the verbs run there know their index).
    pub fn places(
        &self,
        upstream: &UpstreamAddr,
    ) -> Vec<(Arc<Keyspace>, UpstreamAddr, Option<String>)> {
        match self.cluster.get() {
            None => vec![(self.keys.clone(), upstream.clone(), None)],
            Some(c) => c
                .topology()
                .masters
                .iter()
                .filter_map(|m| {
                    self.node_site(m)
                        .map(|s| (s.keys.clone(), c.addr_of(m), Some(m.clone())))
                })
                .collect(),
        }
    }

    /// Every site: the single upstream, or each master of the cluster.
    pub fn all_sites(&self) -> Vec<Arc<Site>> {
        match self.cluster.get() {
            None => vec![self.single.clone()],
            Some(c) => c
                .topology()
                .masters
                .iter()
                .filter_map(|m| self.node_site(m))
                .collect(),
        }
    }

    /// Check the index's model stamp against this one from now on (set once, at start).
    pub fn set_model(&self, stamp: ModelStamp) {
        let _ = self.model.set(stamp);
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The layout of the memory index: the one read from the index by its last check (the
    /// `storage` setting before any). Cluster mode: the first master's.
    pub fn storage(&self) -> crate::config::Storage {
        self.all_sites()
            .first()
            .map(|s| s.keys.layout.get())
            .unwrap_or(self.cfg.storage)
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.cfg.op_timeout_ms)
    }

    /// Connect and check the index now, so that problems show in the log at start.
    pub async fn warm_up(&self) {
        match self.ready().await {
            Ok(_) => tracing::info!(index = %self.keys.index, "index ready"),
            Err(e) => {
                tracing::warn!(error = %e, "MEM.* not ready yet (ordinary commands are unaffected)")
            }
        }
    }

    /// Send `cmds` on memproxy's own connection (opened on demand; dropped, and the index
    /// checked again, after any failure of the connection itself).
    async fn admin(&self, site: &Site, cmds: &[Vec<Vec<u8>>]) -> MemResult<Vec<Value>> {
        let mut guard = site.conn.lock().await;
        if guard.is_none() {
            *guard = Some(site.upstream.admin(self.timeout()).await?);
        }
        let link = guard.as_mut().expect("just set");
        let out = link.call(cmds).await;
        if out.is_err() || link.broken.is_some() || link.owed > 0 {
            *guard = None;
            site.index_lost();
        }
        out
    }

    pub(crate) async fn admin1(&self, site: &Site, args: &[&str]) -> MemResult<Value> {
        self.admin_one(site, keyspace::cmd(args)).await
    }

    /// One command (from [`Keyspace`]) on memproxy's own connection to `site`.
    pub(crate) async fn admin_one(&self, site: &Site, spec: keyspace::Spec) -> MemResult<Value> {
        Ok(self.admin(site, &[spec]).await?.pop().unwrap_or_default())
    }

    /// Every site's index is usable (single mode: the one index; cluster mode: each master's).
    pub async fn ready(&self) -> MemResult<()> {
        for site in self.all_sites() {
            self.ready_at(&site).await?;
        }
        Ok(())
    }

    /// The index is known to be usable (checked, or created, on memproxy's own connection).
    ///
    /// One request checks at a time (single flight). When a check is due on an index that was
    /// usable, the first request checks and the others go on meanwhile: every MEM.* arriving
    /// while the check was in flight used to run a check of its own, one after another on the
    /// one admin connection (seconds of added latency under load, every recheck period). With
    /// no usable answer yet (first use, index lost, broken), they wait for the one check.
    pub async fn ready_at(&self, site: &Site) -> MemResult<()> {
        let recheck = Duration::from_millis(self.cfg.index_recheck_ms);
        let known = |state: &IndexState| -> Option<MemResult<()>> {
            match state {
                IndexState::Ready(at) if at.elapsed() < recheck => Some(Ok(())),
                IndexState::Broken(e, at) if at.elapsed() < Duration::from_secs(2) => {
                    Some(Err(e.clone()))
                }
                _ => None,
            }
        };
        let stale_but_usable = {
            let state = site.index.lock().expect("index lock");
            if let Some(answer) = known(&state) {
                return answer;
            }
            matches!(*state, IndexState::Ready(_))
        };
        let _gate = if stale_but_usable {
            match site.checking.try_lock() {
                Ok(gate) => gate,
                // Another request is checking it right now.
                Err(_) => return Ok(()),
            }
        } else {
            let since = Instant::now();
            let gate = site.checking.lock().await;
            // The request that held the gate may have answered for us, by a check that began
            // after we found no answer (an older one may predate a FLUSHALL or DROPINDEX).
            match &*site.index.lock().expect("index lock") {
                IndexState::Ready(at) if *at >= since => return Ok(()),
                IndexState::Broken(e, at) if *at >= since => return Err(e.clone()),
                _ => {}
            }
            gate
        };
        // States carry when their check began: what a waiter may take (see above).
        let started = Instant::now();
        let outcome = self.ensure_index(site).await;
        let mut state = site.index.lock().expect("index lock");
        match outcome {
            Ok(()) => {
                *state = IndexState::Ready(started);
                Ok(())
            }
            Err(e @ MemError::Client(_)) => {
                tracing::warn!(error = %e, "index unusable");
                *state = IndexState::Broken(e.clone(), started);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    async fn ensure_index(&self, site: &Site) -> MemResult<()> {
        let modules = crate::error::ok(self.admin_one(site, Keyspace::modules_present()).await?)?;
        let present: Vec<bool> = value::array(&modules)
            .iter()
            .map(|v| !matches!(v, Value::Nil))
            .collect();
        if present.first() != Some(&true) {
            return Err(MemError::client(
                "upstream lacks the Search module (RediSearch): MEM.* need Redis 8 or Redis Stack",
            ));
        }
        if present.get(1) != Some(&true) {
            return Err(MemError::client(
                "upstream lacks the JSON module (RedisJSON): MEM.* need Redis 8 or Redis Stack",
            ));
        }
        let (index, prefix) = (&site.keys.index, &site.keys.mem_prefix);
        let check = |v: &Value| -> MemResult<()> {
            let found = schema::check(v, index, prefix, self.dim)
                .map_err(|d| MemError::client(format!("index schema mismatch: {d}")))?;
            site.windows
                .store(found.windows, std::sync::atomic::Ordering::Relaxed);
            site.keys.layout.set(found.layout);
            Ok(())
        };
        match crate::error::ok(self.admin_one(site, Keyspace::index_info(index)).await?) {
            Ok(v) => check(&v)?,
            Err(e) if e.is_missing_index() => {
                let layout = self.cfg.storage;
                tracing::info!(%index, %prefix, dim = self.dim, storage = layout.name(), "creating the memory index");
                let create = Keyspace::index_create(index, prefix, self.dim, layout);
                match crate::error::ok(self.admin_one(site, create).await?) {
                    Ok(_) => {
                        site.windows
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        site.keys.layout.set(layout);
                    }
                    // Another proxy made it (perhaps in the other layout): read it as it is.
                    Err(e) if e.index_error() == Some(crate::error::IndexError::Exists) => {
                        let v = crate::error::ok(
                            self.admin_one(site, Keyspace::index_info(index)).await?,
                        )?;
                        check(&v)?;
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
        self.check_model(site).await
    }

    /// The index's model stamp (`<index>:model`, a hash `name, dim, probe`): refuse when it
    /// names another model; write it when there is none (an index made by the guide's code, or
    /// just created, is taken to hold this model's vectors).
    async fn check_model(&self, site: &Site) -> MemResult<()> {
        let Some(mine) = self.model.get() else {
            return Ok(());
        };
        match self.stamp_at(site).await? {
            Some(theirs) => {
                if crate::embed::cosine_distance(&theirs.probe, &mine.probe) > SAME_MODEL {
                    return Err(MemError::client(format!(
                        "the index {} holds vectors of model '{}', and this memproxy embeds with '{}': run `memproxy reembed` with this model to re-embed the stored memories, or start memproxy with the index's model",
                        site.keys.index, theirs.name, mine.name
                    )));
                }
                Ok(())
            }
            None => {
                if let Err(e) = self.write_stamp_at(site, mine).await {
                    tracing::warn!(error = %e, "could not stamp the index with the model");
                }
                Ok(())
            }
        }
    }

    /// The stamp stored with the index, if any (single mode).
    pub async fn stamp(&self) -> MemResult<Option<ModelStamp>> {
        self.stamp_at(&self.single).await
    }

    async fn stamp_at(&self, site: &Site) -> MemResult<Option<ModelStamp>> {
        let key = site.keys.model_stamp();
        let v = crate::error::ok(self.admin1(site, &["HMGET", &key, "name", "probe"]).await?)?;
        let a = value::array(&v);
        let (Some(name), Some(probe)) = (
            a.first().and_then(value::text),
            a.get(1).and_then(value::text),
        ) else {
            return Ok(None);
        };
        let probe: Vec<f32> = serde_json::from_str(&probe).unwrap_or_default();
        Ok(Some(ModelStamp { name, probe }))
    }

    /// Stamp every index with `model` (after a re-embedding: the one index, or each master's).
    pub async fn write_stamp(&self, model: &ModelStamp) -> MemResult<()> {
        for site in self.all_sites() {
            self.write_stamp_at(&site, model).await?;
        }
        Ok(())
    }

    async fn write_stamp_at(&self, site: &Site, model: &ModelStamp) -> MemResult<()> {
        let key = site.keys.model_stamp();
        let probe = serde_json::to_string(&model.probe).unwrap_or_default();
        let dim = model.probe.len().to_string();
        crate::error::ok(
            self.admin1(
                site,
                &[
                    "HSET",
                    &key,
                    "name",
                    &model.name,
                    "dim",
                    &dim,
                    "probe",
                    &probe,
                ],
            )
            .await?,
        )?;
        Ok(())
    }

    /// Is the upstream answering memproxy's own connection now? (For readiness probes.)
    pub async fn ping(&self) -> MemResult<()> {
        for site in self.all_sites() {
            crate::error::ok(self.admin1(&site, &["PING"]).await?)?;
        }
        Ok(())
    }

    /// Every index is to be checked again (after a re-embedding or a migration).
    pub fn index_lost(&self) {
        for site in self.all_sites() {
            site.index_lost();
        }
    }

    /// Before the model runs for a request: may this client run every command of `rights`?
    /// Redis answers (NOAUTH, NOPERM) on the client's own connection.
    pub async fn precheck(&self, link: &mut Link, rights: &[Spec]) -> MemResult<()> {
        if !rights.is_empty() {
            // The rights name module commands: the modules (and index) must be there first.
            self.ready_at(&self.site(link)).await?;
        }
        self.scripts
            .check
            .run(link, &[], rights, Vec::new())
            .await?;
        Ok(())
    }

    /// Cluster mode: refused with `MOVED` / `ASK` unless `user`'s slot is served here (a
    /// no-writes script that declares a key of it), before a verb reads or erases a scope by
    /// index queries that name no key. Nothing on one Redis.
    pub async fn follow_slot(&self, link: &mut Link, user: &str) -> MemResult<()> {
        if let Some(key) = self.site(link).keys.route_key(user) {
            self.scripts
                .check
                .run(link, &[key], &[], Vec::new())
                .await?;
        }
        Ok(())
    }

    /// Run the search script over `specs` of `user`'s memories (reads only; each with whether
    /// its rows need their TTLs); one result per spec. In cluster mode the script declares a key
    /// of the user's slot, so a read follows the slot after a resharding (`MOVED`) like a write.
    async fn search(
        &self,
        link: &mut Link,
        user: &str,
        specs: &[(&Spec, bool)],
    ) -> MemResult<Vec<Value>> {
        let mut args = vec![specs.len().to_string().into_bytes()];
        for (s, ttl) in specs {
            push_search(&mut args, s, *ttl);
        }
        let site = self.site(link);
        let route: Vec<String> = site.keys.route_key(user).into_iter().collect();
        let v = self
            .scripts
            .search
            .run(link, &route, &site.keys.rights_read(), args)
            .await?;
        Ok(match v {
            Value::Array(a) | Value::Set(a) => a,
            _ => Vec::new(),
        })
    }
}

/// Now as float epoch seconds (millisecond precision), as the guide stores timestamps.
pub fn now_ts() -> f64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_millis() as f64) / 1000.0
}

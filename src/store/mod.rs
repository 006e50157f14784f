//! Everything that touches memproxy's data in Redis.
//!
//! - [`keyspace`]: key names, query strings, escaping, the rights each operation needs (the only
//!   place that builds them);
//! - [`schema`]: the index, created when missing and checked when present;
//! - [`scripts`]: the Lua scripts that make every MEM.* write atomic and all-or-nothing;
//! - [`memory`]: long-term memory (remember, recall, forget, list);
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
    ($store:expr, $op:expr) => {{
        $store.ready().await?;
        match $op {
            Err(e) if e.is_missing_index() => {
                tracing::info!(index = %$store.keys.index, "the index is gone; creating it again");
                $store.index_lost();
                $store.ready().await?;
                $op
            }
            other => other,
        }
    }};
}

pub mod consolidate;
pub mod keyspace;
pub mod memory;
pub mod schema;
pub mod scripts;
pub mod session;
pub mod value;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::config::Config;
use crate::error::{MemError, MemResult};
use crate::upstream::{Link, UpstreamAddr};
use keyspace::{Keyspace, Spec};
use scripts::{push_spec, Scripts};

pub use keyspace::{Kind, Scope};

enum IndexState {
    Unchecked,
    Ready,
    /// Checked and unusable; checked again after a while (an operator may fix it).
    Broken(MemError, Instant),
}

pub struct Store {
    cfg: Arc<Config>,
    pub keys: Keyspace,
    dim: usize,
    scripts: Scripts,
    upstream: UpstreamAddr,
    /// memproxy's own connection, for index management only.
    conn: tokio::sync::Mutex<Option<Link>>,
    index: std::sync::Mutex<IndexState>,
}

impl Store {
    pub fn new(cfg: Arc<Config>, dim: usize) -> Result<Store, String> {
        Ok(Store {
            keys: Keyspace::new(&cfg),
            dim,
            scripts: Scripts::new(),
            upstream: UpstreamAddr::from_config(&cfg)?,
            cfg,
            conn: tokio::sync::Mutex::new(None),
            index: std::sync::Mutex::new(IndexState::Unchecked),
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
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
    async fn admin(&self, cmds: &[Vec<Vec<u8>>]) -> MemResult<Vec<Value>> {
        let mut guard = self.conn.lock().await;
        if guard.is_none() {
            *guard = Some(self.upstream.admin(self.timeout()).await?);
        }
        let link = guard.as_mut().expect("just set");
        let out = link.call(cmds).await;
        if out.is_err() || link.broken.is_some() || link.owed > 0 {
            *guard = None;
            self.index_lost();
        }
        out
    }

    async fn admin1(&self, args: &[&str]) -> MemResult<Value> {
        Ok(self
            .admin(&[keyspace::cmd(args)])
            .await?
            .pop()
            .unwrap_or_default())
    }

    /// The index is known to be usable (checked, or created, on memproxy's own connection).
    pub async fn ready(&self) -> MemResult<()> {
        {
            let state = self.index.lock().expect("index lock");
            match &*state {
                IndexState::Ready => return Ok(()),
                IndexState::Broken(e, at) if at.elapsed() < Duration::from_secs(2) => {
                    return Err(e.clone())
                }
                _ => {}
            }
        }
        let outcome = self.ensure_index().await;
        let mut state = self.index.lock().expect("index lock");
        match outcome {
            Ok(()) => {
                *state = IndexState::Ready;
                Ok(())
            }
            Err(e @ MemError::Client(_)) => {
                tracing::warn!(error = %e, "index unusable");
                *state = IndexState::Broken(e.clone(), Instant::now());
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    async fn ensure_index(&self) -> MemResult<()> {
        let modules = scripts::ok(
            self.admin1(&["COMMAND", "INFO", "FT.SEARCH", "JSON.SET"])
                .await?,
        )?;
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
        let (index, prefix) = (&self.keys.index, &self.keys.mem_prefix);
        match scripts::ok(self.admin1(&["FT.INFO", index]).await?) {
            Ok(v) => schema::check(&v, index, prefix, self.dim)
                .map_err(|d| MemError::client(format!("index schema mismatch: {d}"))),
            Err(e) if e.is_missing_index() => {
                tracing::info!(%index, %prefix, dim = self.dim, "creating the memory index");
                let mut create = vec!["FT.CREATE".to_string()];
                create.extend(schema::create_args(index, prefix, self.dim));
                let create: Vec<&str> = create.iter().map(String::as_str).collect();
                match scripts::ok(self.admin1(&create).await?) {
                    Ok(_) => Ok(()),
                    Err(e) if e.to_string().to_lowercase().contains("already exists") => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Is the upstream answering memproxy's own connection now? (For readiness probes.)
    pub async fn ping(&self) -> MemResult<()> {
        scripts::ok(self.admin1(&["PING"]).await?)?;
        Ok(())
    }

    /// The index was found missing by an operation: check (and create) it again.
    pub fn index_lost(&self) {
        *self.index.lock().expect("index lock") = IndexState::Unchecked;
    }

    /// Before the model runs for a request: may this client run every command of `rights`?
    /// Redis answers (NOAUTH, NOPERM) on the client's own connection.
    pub async fn precheck(&self, link: &mut Link, rights: &[Spec]) -> MemResult<()> {
        if !rights.is_empty() {
            // The rights name module commands: the modules (and index) must be there first.
            self.ready().await?;
        }
        self.scripts
            .check
            .run(link, &[], rights, Vec::new())
            .await?;
        Ok(())
    }

    /// Run the search script over `specs` (reads only); one result per spec.
    async fn search(&self, link: &mut Link, specs: &[Spec]) -> MemResult<Vec<Value>> {
        let mut args = vec![specs.len().to_string().into_bytes()];
        for s in specs {
            push_spec(&mut args, s);
        }
        let v = self
            .scripts
            .search
            .run(link, &[], &self.keys.rights_read(), args)
            .await?;
        Ok(value::array(&v).to_vec())
    }
}

/// Now as float epoch seconds (millisecond precision), as the guide stores timestamps.
pub fn now_ts() -> f64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_millis() as f64) / 1000.0
}

//! Everything that touches memproxy's data in Redis.
//!
//! - [`keyspace`]: key names, query strings, escaping, the rights each operation needs (the only
//!   place that builds them);
//! - [`schema`]: the index, created when missing and checked when present;
//! - [`scripts`]: the Lua scripts that make every MEM.* write atomic and all-or-nothing;
//! - [`memory`]: long-term memory (remember, recall, forget, list);
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

pub mod keyspace;
pub mod memory;
pub mod schema;
pub mod scripts;
pub mod session;
pub mod value;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;

use crate::config::Config;
use crate::error::{MemError, MemResult};
use crate::upstream::Link;
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
    client: redis::Client,
    /// memproxy's own connection, for index management only.
    conn: tokio::sync::Mutex<Option<ConnectionManager>>,
    index: std::sync::Mutex<IndexState>,
}

impl Store {
    pub fn new(cfg: Arc<Config>, dim: usize) -> Result<Store, String> {
        let client = redis::Client::open(cfg.upstream.as_str()).map_err(|e| e.to_string())?;
        Ok(Store {
            keys: Keyspace::new(&cfg),
            dim,
            scripts: Scripts::new(),
            client,
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

    async fn connection(&self) -> MemResult<ConnectionManager> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout()))
            .set_response_timeout(Some(self.timeout()))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let c = tokio::time::timeout(
            self.timeout() * 2,
            ConnectionManager::new_with_config(self.client.clone(), config),
        )
        .await
        .map_err(|_| MemError::upstream("timeout while connecting"))??;
        *guard = Some(c.clone());
        Ok(c)
    }

    /// Forget what was learned about the upstream (after a connection loss).
    fn invalidate(&self) {
        self.index_lost();
    }

    /// Run one upstream operation within the budget.
    async fn timed<T>(
        &self,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> MemResult<T> {
        match tokio::time::timeout(self.timeout(), f).await {
            Err(_) => {
                self.invalidate();
                Err(MemError::upstream(format!(
                    "timeout after {} ms",
                    self.cfg.op_timeout_ms
                )))
            }
            Ok(Err(e)) => {
                if e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
                {
                    self.invalidate();
                }
                Err(e.into())
            }
            Ok(Ok(v)) => Ok(v),
        }
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
        let mut con = self.connection().await?;
        let outcome = self.ensure_index(&mut con).await;
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

    async fn ensure_index(&self, con: &mut ConnectionManager) -> MemResult<()> {
        let modules: Value = self
            .timed(
                redis::cmd("COMMAND")
                    .arg("INFO")
                    .arg("FT.SEARCH")
                    .arg("JSON.SET")
                    .query_async(con),
            )
            .await?;
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
        let info: redis::RedisResult<Value> = tokio::time::timeout(
            self.timeout(),
            redis::cmd("FT.INFO").arg(index).query_async(con),
        )
        .await
        .map_err(|_| MemError::upstream(format!("timeout after {} ms", self.cfg.op_timeout_ms)))?;
        match info {
            Ok(v) => schema::check(&v, index, prefix, self.dim)
                .map_err(|d| MemError::client(format!("index schema mismatch: {d}"))),
            Err(e) => {
                let msg = format!(
                    "{} {}",
                    e.code().unwrap_or_default(),
                    e.detail().unwrap_or_default()
                )
                .to_lowercase();
                if !(msg.contains("unknown index") || msg.contains("no such index")) {
                    return Err(e.into());
                }
                tracing::info!(%index, %prefix, dim = self.dim, "creating the memory index");
                let created: redis::RedisResult<Value> = redis::cmd("FT.CREATE")
                    .arg(schema::create_args(index, prefix, self.dim))
                    .query_async(con)
                    .await;
                match created {
                    Ok(_) => Ok(()),
                    Err(e) if e.to_string().to_lowercase().contains("already exists") => Ok(()),
                    Err(e) => Err(e.into()),
                }
            }
        }
    }

    /// Is the upstream answering memproxy's own connection now? (For readiness probes.)
    pub async fn ping(&self) -> MemResult<()> {
        let mut con = self.connection().await?;
        let _: String = self.timed(redis::cmd("PING").query_async(&mut con)).await?;
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

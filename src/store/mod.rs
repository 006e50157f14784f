//! Everything that touches memproxy's data in Redis.
//!
//! - [`keyspace`]: key names, query strings, escaping (the only place that builds them);
//! - [`schema`]: the index, created when missing and checked when present;
//! - [`scripts`]: the Lua scripts that make every MEM.* write atomic;
//! - [`memory`]: long-term memory (remember, recall, forget, list);
//! - [`session`]: working memory, agent turns and the event log.
//!
//! MEM.* run on one shared, auto-reconnecting connection (`redis` ConnectionManager) with the
//! proxy's own credentials, each operation within `op_timeout_ms`. After a lost connection the
//! index is checked again (and created if the new server has none) before the next operation.

pub mod keyspace;
pub mod memory;
pub mod schema;
pub mod scripts;
pub mod session;
pub mod value;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::Config;
use crate::error::{MemError, MemResult};
use crate::upstream::UpstreamAddr;
use keyspace::{Keyspace, Spec};
use scripts::Scripts;

pub use keyspace::{Kind, Scope};

enum IndexState {
    Unchecked,
    Ready,
    /// Checked and unusable; checked again after a while (an operator may fix it).
    Broken(MemError, Instant),
}

const AUTH_UNKNOWN: u8 = 0;
const AUTH_NOT_REQUIRED: u8 = 1;
const AUTH_REQUIRED: u8 = 2;

pub struct Store {
    cfg: Arc<Config>,
    pub keys: Keyspace,
    dim: usize,
    scripts: Scripts,
    client: redis::Client,
    upstream: UpstreamAddr,
    conn: tokio::sync::Mutex<Option<ConnectionManager>>,
    index: std::sync::Mutex<IndexState>,
    auth: AtomicU8,
}

impl Store {
    pub fn new(cfg: Arc<Config>, dim: usize) -> Result<Store, String> {
        let client = redis::Client::open(cfg.upstream.as_str()).map_err(|e| e.to_string())?;
        Ok(Store {
            keys: Keyspace::new(&cfg),
            dim,
            scripts: Scripts::new(),
            upstream: UpstreamAddr::from_url(&cfg.upstream)?,
            client,
            cfg,
            conn: tokio::sync::Mutex::new(None),
            index: std::sync::Mutex::new(IndexState::Unchecked),
            auth: AtomicU8::new(AUTH_UNKNOWN),
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
        self.upstream_requires_auth().await;
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
        *self.index.lock().expect("index lock") = IndexState::Unchecked;
        self.auth.store(AUTH_UNKNOWN, Ordering::Relaxed);
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

    /// A connection on which the index is known to be usable.
    pub async fn ready(&self) -> MemResult<ConnectionManager> {
        let mut con = self.connection().await?;
        {
            let state = self.index.lock().expect("index lock");
            match &*state {
                IndexState::Ready => return Ok(con),
                IndexState::Broken(e, at) if at.elapsed() < Duration::from_secs(2) => {
                    return Err(e.clone())
                }
                _ => {}
            }
        }
        let outcome = self.ensure_index(&mut con).await;
        let mut state = self.index.lock().expect("index lock");
        match outcome {
            Ok(()) => {
                *state = IndexState::Ready;
                Ok(con)
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

    /// Does the upstream refuse commands from unauthenticated connections? Probed on a fresh
    /// connection without credentials; cached until the shared connection is lost.
    pub async fn upstream_requires_auth(&self) -> bool {
        match self.auth.load(Ordering::Relaxed) {
            AUTH_REQUIRED => return true,
            AUTH_NOT_REQUIRED => return false,
            _ => {}
        }
        let probe = async {
            let mut s = self.upstream.connect(self.timeout()).await.ok()?;
            s.write_all(b"PING\r\n").await.ok()?;
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).await.ok()?;
            Some(buf[..n].starts_with(b"-NOAUTH"))
        };
        match tokio::time::timeout(self.timeout(), probe)
            .await
            .ok()
            .flatten()
        {
            Some(required) => {
                self.auth.store(
                    if required {
                        AUTH_REQUIRED
                    } else {
                        AUTH_NOT_REQUIRED
                    },
                    Ordering::Relaxed,
                );
                required
            }
            None => false,
        }
    }

    /// Run the search script over `specs`; one result per spec.
    async fn search(&self, specs: &[Spec]) -> MemResult<Vec<Value>> {
        let mut con = self.ready().await?;
        let mut inv = self.scripts.search.prepare_invoke();
        inv.arg(specs.len());
        for s in specs {
            push_spec(&mut inv, s);
        }
        let v: Value = self.timed(inv.invoke_async(&mut con)).await?;
        Ok(value::array(&v).to_vec())
    }
}

/// Append a search spec to a script's ARGV as `<n> <args…>`.
fn push_spec(inv: &mut redis::ScriptInvocation<'_>, spec: &Spec) {
    inv.arg(spec.len());
    for a in spec {
        inv.arg(a.as_slice());
    }
}

/// Now as float epoch seconds (millisecond precision), as the guide stores timestamps.
pub fn now_ts() -> f64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_millis() as f64) / 1000.0
}

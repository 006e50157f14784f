//! The shared state that MEM.* commands run against: settings, the embedder, the store, and what
//! the proxy knows of the upstream. One per process, shared by every connection.

use std::sync::Arc;

use crate::config::Config;
use crate::embed::Embedder;
use crate::error::MemError;
use crate::resp::Protocol;
use crate::store::Store;
use crate::upstream::UpstreamAddr;

/// What a MEM.* command may know of the connection that sent it, as established by the replies
/// to the requests before it.
#[derive(Debug, Clone, Default)]
pub struct ClientState {
    pub protocol: Protocol,
    /// AUTH or HELLO … AUTH succeeded on this connection.
    pub authenticated: bool,
    /// The ACL user it authenticated as.
    pub user: Option<String>,
    /// The database it selected.
    pub db: i64,
    /// A MEM.* on this connection already got past Redis's authentication since the last
    /// AUTH/HELLO/RESET.
    pub trusted: bool,
    /// A user this client is bound to whatever `bind_scope_to_acl_user` says (an MCP token
    /// written `token=user`).
    pub scope_user: Option<String>,
}

/// What the background consolidator ([`crate::ops::consolidator`]) has done since start.
#[derive(Debug, Default, Clone)]
pub struct ConsolidatorStats {
    pub runs: u64,
    pub groups: u64,
    pub removed: u64,
    /// Epoch seconds of the last finished run.
    pub last_run: Option<f64>,
    pub last_error: Option<String>,
}

pub struct Engine {
    cfg: Arc<Config>,
    upstream: UpstreamAddr,
    pub embedder: Embedder,
    pub store: Store,
    pub metrics: crate::metrics::Metrics,
    /// The background consolidator's record (it runs only when configured).
    pub consolidator: std::sync::Mutex<ConsolidatorStats>,
    /// The cluster behind memproxy, in cluster mode.
    pub cluster: Option<Arc<crate::upstream::cluster::Cluster>>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("upstream: {0}")]
    Upstream(String),
    #[error(transparent)]
    Embedder(#[from] crate::embed::EmbedError),
}

impl Engine {
    /// Load the model and prepare the store. The upstream need not be up yet: the store connects
    /// (and checks the index) on first use and again after every loss of the connection.
    pub async fn start(cfg: Arc<Config>) -> Result<Engine, StartError> {
        let upstream = cfg.upstream_addr().map_err(StartError::Upstream)?;
        let c = cfg.clone();
        let embedder = tokio::task::spawn_blocking(move || Embedder::start(&c))
            .await
            .map_err(|e| StartError::Upstream(e.to_string()))??;
        let mut store =
            Store::new(cfg.clone(), embedder.info().dim).map_err(StartError::Upstream)?;
        let metrics = crate::metrics::Metrics::new();
        embedder.observe_batches(metrics.batch_size.clone());
        match embedder.embed(crate::embed::PROBE).await {
            Ok(probe) => store.set_model(crate::store::ModelStamp {
                name: embedder.info().name.clone(),
                probe: probe.to_vec(),
            }),
            Err(e) => tracing::warn!(error = %e, "could not read the model's identity"),
        }
        let cluster = Self::cluster(&cfg, &upstream).await?;
        if let Some(c) = &cluster {
            store.set_cluster(c.clone());
        }
        Ok(Engine {
            cfg,
            upstream,
            embedder,
            store,
            metrics,
            consolidator: Default::default(),
            cluster,
        })
    }

    /// Cluster mode, as configured or as the upstream node says.
    async fn cluster(
        cfg: &Config,
        upstream: &UpstreamAddr,
    ) -> Result<Option<Arc<crate::upstream::cluster::Cluster>>, StartError> {
        let timeout = std::time::Duration::from_millis(cfg.op_timeout_ms);
        let on = match cfg.cluster {
            Some(on) => on,
            None => match crate::upstream::cluster::detect(upstream, timeout).await {
                Some(on) => on,
                None => {
                    tracing::warn!(
                        "upstream not reachable at start: single-Redis mode (set cluster = true for a cluster)"
                    );
                    false
                }
            },
        };
        if !on {
            return Ok(None);
        }
        if cfg.mem_index_name.contains(['{', '}']) {
            // Each master's index is `<name>{n}`: a tag of the name's own would fix every one
            // of them to one slot.
            return Err(StartError::Upstream(format!(
                "cluster: mem_index_name '{}' must not contain '{{' or '}}' (memproxy gives each master's index a hash tag of its own)",
                cfg.mem_index_name
            )));
        }
        let c = crate::upstream::cluster::Cluster::connect(upstream.clone(), timeout)
            .await
            .map_err(|e| StartError::Upstream(format!("cluster: {e}")))?;
        tracing::info!(masters = ?c.topology().masters, "Redis Cluster mode");
        Ok(Some(Arc::new(c)))
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// For what cluster mode does not cover yet: one error line saying so.
    pub fn single_only(&self, what: &str) -> Result<(), MemError> {
        match self.cluster {
            Some(_) => Err(MemError::client(format!(
                "{what} is not available in cluster mode yet (docs/PROTOCOL.md, Redis Cluster)"
            ))),
            None => Ok(()),
        }
    }

    pub fn upstream_addr(&self) -> &UpstreamAddr {
        &self.upstream
    }

    /// The user this client's scopes are bound to: its token's user, or with
    /// `bind_scope_to_acl_user` its ACL user; `None` when unbound.
    pub fn bound_user(&self, client: &ClientState) -> Option<String> {
        client.scope_user.clone().or_else(|| {
            self.cfg
                .bind_scope_to_acl_user
                .then(|| client.user.clone().unwrap_or_else(|| "default".into()))
        })
    }

    /// The user whose threads this connection may touch: '' when scopes are not bound.
    pub fn owner(&self, client: &ClientState) -> String {
        self.bound_user(client).unwrap_or_default()
    }
}

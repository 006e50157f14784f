//! The shared state that MEM.* commands run against: settings, the embedder, the store, and what
//! the proxy knows of the upstream. One per process, shared by every connection.

use std::sync::Arc;

use crate::config::Config;
use crate::embed::{Embedder, Role};
use crate::error::MemError;
use crate::mem;
use crate::resp::{Protocol, Reply};
use crate::store::Store;
use crate::upstream::{Link, UpstreamAddr};

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

pub struct Engine {
    cfg: Arc<Config>,
    upstream: UpstreamAddr,
    pub embedder: Embedder,
    pub store: Store,
    pub metrics: crate::metrics::Metrics,
    /// The background consolidator's record (it runs only when configured).
    pub consolidator: crate::consolidator::Consolidator,
    /// The cluster behind memproxy, in cluster mode.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
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
        let upstream = UpstreamAddr::from_config(&cfg).map_err(StartError::Upstream)?;
        let c = cfg.clone();
        let embedder = tokio::task::spawn_blocking(move || Embedder::start(&c))
            .await
            .map_err(|e| StartError::Upstream(e.to_string()))??;
        let mut store =
            Store::new(cfg.clone(), embedder.info().dim).map_err(StartError::Upstream)?;
        let metrics = crate::metrics::Metrics::new();
        embedder.observe_batches(metrics.batch_size.clone());
        match embedder.embed(crate::store::PROBE).await {
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
    ) -> Result<Option<Arc<crate::cluster::Cluster>>, StartError> {
        let timeout = std::time::Duration::from_millis(cfg.op_timeout_ms);
        let on = match cfg.cluster {
            Some(on) => on,
            None => match crate::cluster::detect(upstream, timeout).await {
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
        let c = crate::cluster::Cluster::connect(upstream.clone(), timeout)
            .await
            .map_err(|e| StartError::Upstream(format!("cluster: {e}")))?;
        tracing::info!(masters = ?c.topology().masters, "Redis Cluster mode");
        Ok(Some(Arc::new(c)))
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// A MEM.* request parsed once (`args[0]` is the verb): a transport that must route it
    /// first (cluster mode, by [`Engine::mem_slot`]) runs it with [`Engine::execute_parsed`].
    pub fn parse(&self, args: Vec<Vec<u8>>) -> Parsed {
        let verb = verb_label(args.first().map(Vec::as_slice).unwrap_or_default());
        Parsed {
            verb,
            cmd: mem::Command::parse(args, &self.cfg),
        }
    }

    /// In cluster mode, the slot a parsed MEM.* request's data lives in (its user's tag, or its
    /// memory id's); `None` for requests that touch no user's data (or did not parse).
    pub fn mem_slot(&self, p: &Parsed) -> Option<u16> {
        self.cluster.as_ref()?;
        let cmd = p.cmd.as_ref().ok()?;
        cmd.slot_key(&self.store.keys)
            .map(|k| crate::cluster::slot::slot(k.as_bytes()))
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

    /// A MEM.* request was queued behind others on its connection: start embedding its text now,
    /// so that requests of one pipeline are embedded as one batch. Only a cache warm-up: the
    /// command itself still runs in order, when it reaches the front.
    pub fn prefetch(&self, args: &[Vec<u8>]) {
        if let Some(text) = mem::text_to_embed(args) {
            if text.len() <= self.cfg.max_text_bytes && !text.trim().is_empty() {
                for role in prefetch_roles(args) {
                    self.embedder.prefetch_as(text.clone(), *role);
                }
            }
        }
    }

    /// Run one MEM.* request on the client's own upstream connection; every outcome is a reply
    /// (errors included).
    pub async fn execute(
        &self,
        args: Vec<Vec<u8>>,
        client: &ClientState,
        link: &mut Link,
    ) -> Reply {
        self.execute_parsed(self.parse(args), client, link).await
    }

    /// [`Engine::execute`] of a request parsed already.
    pub async fn execute_parsed(&self, p: Parsed, client: &ClientState, link: &mut Link) -> Reply {
        self.run_parsed(p, client, link)
            .await
            .unwrap_or_else(|e| Reply::Error(e.line()))
    }

    /// [`Engine::execute_parsed`] with the error kept whole (its fault side), for transports
    /// that answer errors in their own way (HTTP status codes).
    pub async fn run_parsed(
        &self,
        p: Parsed,
        client: &ClientState,
        link: &mut Link,
    ) -> Result<Reply, MemError> {
        let verb = p.verb;
        let start = std::time::Instant::now();
        let outcome = match p.cmd {
            Ok(cmd) => self.try_execute(cmd, client, link).await,
            Err(e) => Err(e),
        };
        self.metrics
            .latency
            .with_label_values(&[verb])
            .observe(start.elapsed().as_secs_f64());
        let label = match &outcome {
            Ok(_) => "ok",
            Err(e) => match e.fault() {
                crate::error::Fault::Client => "client",
                crate::error::Fault::Upstream => "upstream",
                crate::error::Fault::Embedder => "embedder",
                crate::error::Fault::Internal => "internal",
            },
        };
        self.metrics
            .requests
            .with_label_values(&[verb, label])
            .inc();
        if let Err(e) = &outcome {
            match e.fault() {
                crate::error::Fault::Internal => {
                    tracing::error!(error = %e, "MEM command failed")
                }
                crate::error::Fault::Upstream | crate::error::Fault::Embedder => {
                    tracing::debug!(error = %e, "MEM command failed")
                }
                crate::error::Fault::Client => {}
            }
        }
        outcome
    }

    async fn try_execute(
        &self,
        cmd: mem::Command,
        client: &ClientState,
        link: &mut Link,
    ) -> Result<Reply, MemError> {
        // As Redis: syntax first (parsed already), then authentication and rights (from Redis
        // itself, on the client's connection, before any model run: see mem::embed::embed).
        if !client.authenticated && !client.trusted {
            // Redis refuses long requests from unauthenticated connections as a protocol error
            // (and closes them): ask with a PING first, so NOAUTH comes as Redis's own answer.
            crate::store::scripts::ok(link.call1(vec![b"PING".to_vec()]).await?)?;
        }
        if link.node.is_none() && cmd.touches_data() {
            // In cluster mode a verb runs on a connection to its user's master.
            self.single_only("MEM.* on a connection to no particular master")?;
        }
        if client.db != 0 && cmd.touches_data() {
            return Err(MemError::client(format!(
                "memories live in database 0 (RediSearch indexes only database 0); this connection selected database {}",
                client.db
            )));
        }
        if let Some(bound) = self.bound_user(client) {
            if let Some(scope_user) = cmd.scope_user() {
                if scope_user != bound {
                    // Redis's order: an unauthenticated connection hears NOAUTH first.
                    self.store.precheck(link, &[]).await?;
                    return Err(MemError::Denied(format!(
                        "NOPERM this connection is bound to user '{bound}' and may only use USER {bound}"
                    )));
                }
            }
        }
        cmd.apply(self, client, link).await
    }
}

/// A MEM.* request parsed once, with its verb's metrics label: parse errors are answered when
/// it runs, as Redis answers a syntax error in its place.
#[derive(Clone)]
pub struct Parsed {
    verb: &'static str,
    cmd: Result<mem::Command, MemError>,
}

/// The metrics label of a verb: its name for the known ones, `other` for the rest (a client
/// cannot grow the label set).
fn verb_label(name: &[u8]) -> &'static str {
    crate::mem::catalog::find(name)
        .map(|v| v.name)
        .unwrap_or("other")
}

/// The roles a queued MEM.* request's text will be embedded in (see `mem::text_to_embed`): a
/// recall's question as a query, a turn's content as a query (its recall) and as a document (when
/// remembered), MEM.EMBED as its QUERY flag says, anything else as a document. Where the model's
/// prompts agree the two roles share one run.
fn prefetch_roles(args: &[Vec<u8>]) -> &'static [Role] {
    let verb = args
        .first()
        .map(|v| v.to_ascii_lowercase())
        .unwrap_or_default();
    match verb.as_slice() {
        b"mem.recall" => &[Role::Query],
        b"mem.turn" => &[Role::Query, Role::Document],
        b"mem.embed"
            if args
                .iter()
                .skip(2)
                .any(|a| a.eq_ignore_ascii_case(b"query")) =>
        {
            &[Role::Query]
        }
        _ => &[Role::Document],
    }
}

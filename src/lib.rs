//! memproxy: a Redis-protocol proxy that gives AI agents a memory.
//!
//! The tree is the data path:
//!
//! ```text
//! client ──RESP──▶ proxy::server (accept, limits, shutdown)
//!                    └─ proxy::core: one session code per client, classified by proxy::route;
//!                       one upstream connection (a Redis, a Sentinel's primary), or one per
//!                       master of a cluster, routed by slot
//!                         ├─ ordinary → upstream, original bytes
//!                         └─ MEM.*    → mem::dispatch (parse once, route by user) → mem::<verb>
//! mem::<verb> ──▶ embed (handle → bounded queue → model threads, batching, cache)
//!             └─▶ store (keys, schema, queries, escaping, ranking; scripts on the client's own
//!                 connection) ──▶ upstream (address, tls, link, sentinel, cluster) ──▶ resp
//! ```
//!
//! Beside the path: [`config`] settings; [`error`] errors tagged by the side at fault;
//! [`engine`] the state MEM.* share; [`http`] metrics, demo and MCP (through
//! [`mem::verbs`]); [`ops`] the operator's subcommands and the background consolidator;
//! [`metrics`] the Prometheus registry.

pub mod config;
pub mod embed;
pub mod engine;
pub mod error;
pub mod http;
pub mod mem;
pub mod metrics;
pub mod ops;
pub mod proxy;
pub mod resp;
pub mod store;
pub mod upstream;

use std::sync::Arc;

pub use config::Config;
pub use engine::Engine;
pub use proxy::server::{self, Server};

/// Why memproxy could not start serving.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Start(#[from] engine::StartError),
    #[error("cannot listen for HTTP on {addr}: {source}")]
    Http {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
}

/// Start everything and serve until `shutdown` resolves. `ready` gets the bound address.
pub async fn run(
    cfg: Config,
    shutdown: impl std::future::Future<Output = ()>,
    ready: impl FnOnce(server::Bound),
) -> Result<(), RunError> {
    let cfg = Arc::new(cfg);
    let engine = Arc::new(Engine::start(cfg.clone()).await?);
    engine.store.warm_up().await;
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let http = match &cfg.http_listen {
        Some(addr) => {
            let http_err = |source| RunError::Http {
                addr: addr.clone(),
                source,
            };
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(http_err)?;
            tracing::info!(addr = %listener.local_addr().map_err(http_err)?, "HTTP listener ready (/metrics, /healthz, /readyz)");
            Some(tokio::spawn(http::serve(
                listener,
                engine.clone(),
                async move {
                    let _ = stop_rx.wait_for(|s| *s).await;
                },
            )))
        }
        None => None,
    };
    let consolidator = (cfg.consolidate_interval_seconds > 0).then(|| {
        let e = engine.clone();
        tokio::spawn(async move { ops::consolidator::run_forever(&e).await })
    });
    let server = Server::bind(engine)
        .await
        .map_err(|source| RunError::Listen {
            addr: cfg.listen.clone(),
            source,
        })?;
    ready(server.local_addr());
    server
        .run(async {
            shutdown.await;
            let _ = stop_tx.send(true);
        })
        .await;
    if let Some(h) = http {
        let _ = h.await;
    }
    if let Some(c) = consolidator {
        c.abort();
    }
    Ok(())
}

//! The accept loop (TCP or a unix socket): connection limit, one task per client, graceful
//! shutdown.
//!
//! Over `max_clients` a new connection gets Redis's own `-ERR max number of clients reached` and is
//! closed. On shutdown the listener stops accepting, every connection stops reading new requests,
//! answers what it has in flight, and the server waits for them up to the configured grace.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::engine::Engine;
use crate::upstream::Stream;

pub struct Server {
    listener: Listener,
    engine: Arc<Engine>,
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, std::path::PathBuf),
}

/// Where the server listens.
#[derive(Debug, Clone)]
pub enum Bound {
    Tcp(SocketAddr),
    Unix(std::path::PathBuf),
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::Tcp(a) => write!(f, "{a}"),
            Bound::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl Server {
    /// `listen` is `host:port`, or a path (`/…` or `unix:/…`) for a unix socket.
    pub async fn bind(engine: Arc<Engine>) -> std::io::Result<Server> {
        let listen = engine.config().listen.clone();
        let listener = match listen
            .strip_prefix("unix:")
            .or_else(|| listen.starts_with('/').then_some(listen.as_str()))
        {
            Some(path) => {
                // A stale socket file from an earlier run would make bind fail.
                let _ = std::fs::remove_file(path);
                Listener::Unix(UnixListener::bind(path)?, path.into())
            }
            None => Listener::Tcp(TcpListener::bind(&listen).await?),
        };
        Ok(Server { listener, engine })
    }

    pub fn local_addr(&self) -> Bound {
        match &self.listener {
            Listener::Tcp(l) => Bound::Tcp(l.local_addr().expect("bound listener has an address")),
            Listener::Unix(_, p) => Bound::Unix(p.clone()),
        }
    }

    async fn accept(&self) -> std::io::Result<(Stream, String)> {
        match &self.listener {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                let _ = s.set_nodelay(true);
                Ok((Box::new(s), peer.to_string()))
            }
            Listener::Unix(l, p) => {
                let (s, _) = l.accept().await?;
                Ok((Box::new(s), format!("unix:{}", p.display())))
            }
        }
    }

    /// Serve until `shutdown` resolves, then drain connections within the grace period.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let cfg = self.engine.config();
        let limit = Arc::new(Semaphore::new(cfg.max_clients));
        let grace = Duration::from_millis(cfg.shutdown_grace_ms);
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.accept() => {
                    let (mut socket, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // EMFILE and friends: back off instead of spinning.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let Ok(permit) = limit.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, "max number of clients reached");
                        tokio::spawn(async move {
                            let _ = socket.write_all(b"-ERR max number of clients reached\r\n").await;
                            let _ = socket.shutdown().await;
                        });
                        continue;
                    };
                    let engine = self.engine.clone();
                    let stop = stop_rx.clone();
                    conns.spawn(async move {
                        let cluster = engine.cluster.clone();
                        super::core::serve(socket, engine, cluster, stop).await;
                        drop(permit);
                    });
                    // Reap finished connections so the set does not grow.
                    while conns.try_join_next().is_some() {}
                }
            }
        }
        tracing::info!(open = conns.len(), "shutting down: draining connections");
        let _ = stop_tx.send(true);
        let _ =
            tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
        conns.abort_all();
    }
}

//! The client's dedicated upstream socket.
//!
//! Each client connection gets its own TCP connection to Redis, opened at accept, so that every
//! piece of connection state (AUTH, HELLO, SELECT, MULTI, WATCH, blocking commands, subscriptions,
//! CLIENT TRACKING) lives on the upstream exactly as it would without the proxy. Nothing is sent on
//! it that the client did not send: the client authenticates itself.

use std::time::Duration;

use tokio::net::TcpStream;

/// Host and port of the upstream, from the configured URL.
#[derive(Debug, Clone)]
pub struct UpstreamAddr {
    pub host: String,
    pub port: u16,
}

impl UpstreamAddr {
    pub fn from_url(url: &str) -> Result<UpstreamAddr, String> {
        let info = redis::Client::open(url)
            .map_err(|e| e.to_string())?
            .get_connection_info()
            .clone();
        match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => Ok(UpstreamAddr {
                host: host.clone(),
                port: *port,
            }),
            other => Err(format!("only tcp upstreams are supported, got {other}")),
        }
    }

    /// Open a connection, within `timeout`.
    pub async fn connect(&self, timeout: Duration) -> Result<TcpStream, String> {
        let stream =
            tokio::time::timeout(timeout, TcpStream::connect((self.host.as_str(), self.port)))
                .await
                .map_err(|_| format!("connect to {}:{} timed out", self.host, self.port))?
                .map_err(|e| format!("{}:{}: {e}", self.host, self.port))?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

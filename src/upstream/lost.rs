//! Why a connection to Redis can no longer be used: a typed transport failure, worded once.
//!
//! Sessions and [`Link`](super::Link) report a broken connection as a [`Lost`] (which node, and
//! what failed); nothing reads the words back. The client sees it rendered once, as
//! `ERR upstream connection lost: <Lost>`, or `ERR upstream unavailable: …` for a connection that
//! was never made (the words single mode answers a client it cannot connect).

/// What failed on the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Broken {
    /// Redis closed the connection (QUIT, `CLIENT KILL`, a restart, a failover).
    #[error("closed the connection")]
    Closed,
    /// Reading from the socket failed.
    #[error("read failed: {0}")]
    Read(String),
    /// Writing to the socket failed.
    #[error("write failed: {0}")]
    Write(String),
    /// The bytes Redis sent are not RESP.
    #[error("sent an unreadable reply: {0}")]
    Unreadable(String),
    /// A connection could not be made (refused, TLS, timeout).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The client's AUTH / HELLO / SELECT replayed on a new connection did not finish in time.
    #[error("did not answer the connection's setup in time")]
    SetupTimeout,
    /// The cluster's slot map names no master.
    #[error("names no master")]
    NoMaster,
}

/// A connection to Redis broke: where (`node`: a cluster master's `host:port`; `None`: the one
/// upstream of a single or Sentinel session) and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} {broken}", node.as_deref().unwrap_or("upstream"))]
pub struct Lost {
    pub node: Option<String>,
    pub broken: Broken,
}

impl Lost {
    /// The one upstream (a Redis, or a Sentinel's primary).
    pub fn upstream(broken: Broken) -> Lost {
        Lost { node: None, broken }
    }

    /// A cluster master.
    pub fn at(node: &str, broken: Broken) -> Lost {
        Lost {
            node: Some(node.to_string()),
            broken,
        }
    }

    /// The line every request outstanding on the lost connection is answered.
    pub fn line(&self) -> String {
        match (&self.broken, &self.node) {
            // The reason names the address it could not reach.
            (Broken::Unavailable(why), _) => format!("ERR upstream unavailable: {why}"),
            (Broken::NoMaster, _) => {
                "ERR upstream unavailable: the cluster's slot map names no master".into()
            }
            _ => format!("ERR upstream connection lost: {self}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_connections_are_worded_once() {
        assert_eq!(
            Lost::upstream(Broken::Closed).line(),
            "ERR upstream connection lost: upstream closed the connection"
        );
        assert_eq!(
            Lost::at("10.0.0.1:7000", Broken::Read("reset".into())).to_string(),
            "10.0.0.1:7000 read failed: reset"
        );
        // A connection never made is worded as single mode words it for a new client.
        assert_eq!(
            Lost::at(
                "10.0.0.1:7000",
                Broken::Unavailable("10.0.0.1:7000: refused".into())
            )
            .line(),
            "ERR upstream unavailable: 10.0.0.1:7000: refused"
        );
        assert_eq!(
            Lost::upstream(Broken::NoMaster).line(),
            "ERR upstream unavailable: the cluster's slot map names no master"
        );
    }
}

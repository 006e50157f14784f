//! Errors of MEM.* commands, tagged by who was at fault.
//!
//! Every variant renders as one RESP error line: `ERR …`, or a Redis prefix the client knows
//! (`NOAUTH`, `NOPERM`, `WRONGTYPE`, …) passed through from the upstream.

use std::fmt;

/// Who caused a failure; used for logging levels and for the soak's error census.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Client,
    Upstream,
    Embedder,
    Internal,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MemError {
    /// The request is wrong: arity, option, number, kind, empty text …
    #[error("ERR {0}")]
    Client(String),
    /// The client lacks the rights (NOAUTH / NOPERM): the whole line, prefix included.
    #[error("{0}")]
    Denied(String),
    /// The upstream answered with an error or could not be reached in time.
    #[error("{0}")]
    Upstream(UpstreamError),
    /// The embedder could not serve the request.
    #[error("ERR {0}")]
    Embedder(String),
    /// A bug or an unexpected state inside memproxy.
    #[error("ERR internal error: {0}")]
    Internal(String),
}

/// An upstream failure, keeping Redis's own error code when there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamError {
    /// Redis's code (`WRONGTYPE`, `OOM`, …) when Redis answered an error.
    pub code: Option<String>,
    pub message: String,
    /// What the error says about memproxy's index, read once from Redis's words where the reply
    /// is decoded ([`MemError::from_server`]), so no caller reads the text again.
    pub index: Option<IndexError>,
}

/// RediSearch's answers about an index that memproxy acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexError {
    /// `Unknown index name` / `no such index`: FLUSHALL or FT.DROPINDEX removed it.
    Missing,
    /// `Index already exists`: another proxy created it first.
    Exists,
}

impl IndexError {
    /// The index fact a RediSearch error line states, if any.
    fn of(line: &str) -> Option<IndexError> {
        let l = line.to_ascii_lowercase();
        if l.contains("no such index") || l.contains("unknown index name") {
            Some(IndexError::Missing)
        } else if l.contains("index already exists") {
            Some(IndexError::Exists)
        } else {
            None
        }
    }
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{code} {}", self.message),
            None => write!(f, "ERR upstream {}", self.message),
        }
    }
}

impl MemError {
    pub fn client(msg: impl Into<String>) -> Self {
        MemError::Client(msg.into())
    }

    pub fn upstream(msg: impl Into<String>) -> Self {
        MemError::Upstream(UpstreamError {
            code: None,
            message: msg.into(),
            index: None,
        })
    }

    /// An error reply with Redis's `code` (an upper-case word) and the rest of its line.
    pub fn coded(code: &str, message: &str) -> Self {
        MemError::Upstream(UpstreamError {
            code: Some(code.to_string()),
            message: message.to_string(),
            index: IndexError::of(message),
        })
    }

    /// A Redis error reply (`code` is its first word): `NOAUTH`/`NOPERM` are the client's,
    /// anything else the upstream's; Redis's own words are kept.
    pub fn from_server(code: &str, details: &str) -> Self {
        let line = if details.is_empty() {
            code.to_string()
        } else {
            format!("{code} {details}")
        };
        if code == "NOAUTH" || code == "NOPERM" {
            return MemError::Denied(line);
        }
        if !code.is_empty() && code.chars().all(|c| c.is_ascii_uppercase()) {
            return MemError::coded(code, details);
        }
        // Modules sometimes answer plain sentences ("Unknown index name").
        MemError::Upstream(UpstreamError {
            code: None,
            message: format!("error: {line}"),
            index: IndexError::of(&line),
        })
    }

    /// What a Redis error says about memproxy's index (`None`: not an index error).
    pub fn index_error(&self) -> Option<IndexError> {
        match self {
            MemError::Upstream(u) => u.index,
            _ => None,
        }
    }

    /// The index is gone (FLUSHALL, FLUSHDB, FT.DROPINDEX): create it again and retry.
    pub fn is_missing_index(&self) -> bool {
        self.index_error() == Some(IndexError::Missing)
    }

    pub fn fault(&self) -> Fault {
        match self {
            MemError::Client(_) | MemError::Denied(_) => Fault::Client,
            MemError::Upstream(_) => Fault::Upstream,
            MemError::Embedder(_) => Fault::Embedder,
            MemError::Internal(_) => Fault::Internal,
        }
    }

    /// The RESP error line (without '-').
    pub fn line(&self) -> String {
        self.to_string()
    }
}

impl From<redis::RedisError> for MemError {
    fn from(e: redis::RedisError) -> Self {
        if e.is_timeout() {
            return MemError::upstream("timeout");
        }
        if let Some(code) = e.code() {
            let message = e.detail().unwrap_or_default().to_string();
            // Redis's codes are upper-case words (WRONGTYPE, NOAUTH, OOM …); modules sometimes
            // answer plain sentences ("Unknown index name"), which the crate splits at the blank.
            return MemError::from_server(code, &message);
        }
        if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
            return MemError::upstream(format!("unavailable: {e}"));
        }
        MemError::upstream(format!("error: {e}"))
    }
}

pub type MemResult<T> = Result<T, MemError>;

/// A reply, or the Redis error it is.
pub fn ok(v: redis::Value) -> MemResult<redis::Value> {
    match v {
        redis::Value::ServerError(e) => {
            Err(MemError::from_server(e.code(), e.details().unwrap_or("")))
        }
        v => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_errors_are_read_once_where_redis_answered() {
        let gone = MemError::from_server("Unknown", "Index name");
        assert!(gone.is_missing_index() && gone.fault() == Fault::Upstream);
        assert!(MemError::from_server("ERR", "no such index").is_missing_index());
        let made = MemError::from_server("Index", "already exists");
        assert_eq!(made.index_error(), Some(IndexError::Exists));
        assert_eq!(
            MemError::from_server("OOM", "command not allowed").index_error(),
            None
        );
        // Rights refused are the client's, with Redis's words kept.
        let denied = MemError::from_server("NOPERM", "User u has no permissions");
        assert_eq!(denied.fault(), Fault::Client);
        assert_eq!(denied.line(), "NOPERM User u has no permissions");
    }
}

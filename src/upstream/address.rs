//! Where the upstream is and how to reach it: `redis://`, `rediss://`, `unix://` or the primary
//! a Sentinel majority names at connect time; [`UpstreamAddr::admin`] opens memproxy's own
//! connection with the URL's credentials.

use std::path::PathBuf;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};

use super::link::{Cmd, Link};
use super::tls::tls_connector;
use crate::error::{MemError, MemResult};

/// A byte stream to or from a client or the upstream: TCP, a unix socket, or TLS over TCP.
pub trait AsyncStream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> AsyncStream for T {}
pub type Stream = Box<dyn AsyncStream>;

/// Why a connection to the upstream could not be opened: the upstream's side of a failure,
/// worded for the client's one error line (`ERR upstream unavailable: …`).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connect to {0} timed out")]
    Timeout(String),
    #[error("{addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{addr}: TLS: {source}")]
    Tls {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// No sentinel named a primary (their answers, or why none answered).
    #[error("{0}")]
    NoPrimary(String),
}

#[derive(Debug, Clone)]
enum Target {
    Tcp(String, u16),
    Unix(PathBuf),
    /// Whichever primary the sentinels name at connect time.
    Sentinel(crate::upstream::sentinel::Sentinels),
}

/// Where the upstream is and how to reach it, from the configured URL: `redis://`, `rediss://`
/// (TLS, with `tls_ca_file`, `tls_cert_file` / `tls_key_file`, `tls_insecure`) or
/// `unix:///path/redis.sock`. User, password and database in the URL are memproxy's own, used
/// only on its own connection (index management); clients authenticate themselves.
#[derive(Clone)]
pub struct UpstreamAddr {
    target: Target,
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
    user: Option<String>,
    password: Option<String>,
    db: i64,
}

impl std::fmt::Debug for UpstreamAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.describe())
    }
}

/// What an [`UpstreamAddr`] is built from: the `upstream` URL and the settings that say how to
/// reach it (`Config::upstream_settings` gathers them).
#[derive(Debug, Clone, Default)]
pub struct UpstreamSettings {
    /// `redis://`, `rediss://`, `unix://` or `redis+sentinel://` (`rediss+sentinel://`).
    pub url: String,
    pub sentinel_user: Option<String>,
    pub sentinel_password: Option<String>,
    pub tls_insecure: bool,
    pub tls_ca_file: Option<PathBuf>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
}

impl UpstreamAddr {
    /// The ACL user of the URL, if it names one.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    pub fn new(cfg: &UpstreamSettings) -> Result<UpstreamAddr, String> {
        let tls_sentinel = cfg.url.starts_with("rediss+sentinel://");
        if tls_sentinel || cfg.url.starts_with("redis+sentinel://") {
            let url = cfg
                .url
                .replacen("rediss+sentinel://", "redis+sentinel://", 1);
            let (mut s, user, password) = crate::upstream::sentinel::Sentinels::parse(&url)?;
            s.auth = match (&cfg.sentinel_user, &cfg.sentinel_password) {
                (u, Some(p)) => Some((u.clone(), p.clone())),
                (Some(_), None) => return Err("sentinel_user needs sentinel_password".to_string()),
                (None, None) => None,
            };
            // rediss+sentinel: TLS to the sentinels and to the primary they name, each checked
            // against its own host name (or IP address).
            let tls = if tls_sentinel {
                let host = s.addrs[0].0.clone();
                let (connector, name) = tls_connector(cfg, &host)?;
                s.tls = Some(connector.clone());
                Some((connector, name))
            } else {
                None
            };
            return Ok(UpstreamAddr {
                target: Target::Sentinel(s),
                tls,
                user,
                password,
                db: 0,
            });
        }
        let u = url::Url::parse(&cfg.url).map_err(|e| format!("{}: {e}", cfg.url))?;
        let decode = |s: &str| {
            url::form_urlencoded::parse(format!("x={s}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        let user = (!u.username().is_empty()).then(|| decode(u.username()));
        let password = u.password().map(decode);
        let db_of = |s: &str| s.trim_matches('/').parse::<i64>().ok();
        let (target, tls, db) = match u.scheme() {
            "redis" | "rediss" => {
                let host = u
                    .host_str()
                    .ok_or_else(|| format!("{}: no host", cfg.url))?
                    .trim_matches(['[', ']'])
                    .to_string();
                let port = u.port().unwrap_or(6379);
                let db = db_of(u.path()).unwrap_or(0);
                let tls = if u.scheme() == "rediss" {
                    Some(tls_connector(cfg, &host)?)
                } else {
                    None
                };
                (Target::Tcp(host, port), tls, db)
            }
            "unix" | "redis+unix" => {
                let db = u
                    .query_pairs()
                    .find(|(k, _)| k == "db")
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                (Target::Unix(PathBuf::from(u.path())), None, db)
            }
            other => {
                return Err(format!(
                    "unsupported upstream scheme {other}:// (redis, rediss, unix, redis+sentinel)"
                ))
            }
        };
        Ok(UpstreamAddr {
            target,
            tls,
            user,
            password,
            db,
        })
    }

    /// The host of a TCP upstream.
    pub fn host(&self) -> Option<String> {
        match &self.target {
            Target::Tcp(h, _) => Some(h.clone()),
            _ => None,
        }
    }

    /// The same settings (TLS, credentials) for another node, `host:port` (a cluster's master).
    pub fn at(&self, host: &str, port: u16) -> UpstreamAddr {
        let mut a = self.clone();
        a.target = Target::Tcp(host.to_string(), port);
        if let Some((_, name)) = &mut a.tls {
            if let Ok(n) = rustls::pki_types::ServerName::try_from(host.to_string()) {
                *name = n;
            }
        }
        a.db = 0;
        a
    }

    /// `host:port` (with `tls`) or the socket path, for MEM.INFO and logs.
    pub fn describe(&self) -> String {
        let t = if self.tls.is_some() { " (tls)" } else { "" };
        match &self.target {
            Target::Tcp(h, p) => format!("{h}:{p}{t}"),
            Target::Unix(p) => format!("unix:{}", p.display()),
            Target::Sentinel(s) => format!("{}{t}", s.describe()),
        }
    }

    /// Open a connection, within `timeout`.
    pub async fn connect(&self, timeout: Duration) -> Result<Stream, ConnectError> {
        tokio::time::timeout(timeout, self.open())
            .await
            .map_err(|_| ConnectError::Timeout(self.describe()))?
    }

    async fn open(&self) -> Result<Stream, ConnectError> {
        let io = |addr: String| move |source| ConnectError::Io { addr, source };
        match &self.target {
            Target::Unix(p) => Ok(Box::new(
                tokio::net::UnixStream::connect(p)
                    .await
                    .map_err(io(self.describe()))?,
            )),
            Target::Sentinel(s) => {
                let (h, p) = s
                    .primary(Duration::from_secs(2))
                    .await
                    .map_err(ConnectError::NoPrimary)?;
                let addr = format!("{h}:{p} (the primary of '{}')", s.master);
                let tcp = tokio::net::TcpStream::connect((h.as_str(), p))
                    .await
                    .map_err(io(addr.clone()))?;
                let _ = tcp.set_nodelay(true);
                match &self.tls {
                    None => Ok(Box::new(tcp)),
                    Some((connector, _)) => {
                        let name =
                            rustls::pki_types::ServerName::try_from(h.clone()).map_err(|e| {
                                ConnectError::Tls {
                                    addr: addr.clone(),
                                    source: std::io::Error::new(
                                        std::io::ErrorKind::InvalidInput,
                                        e,
                                    ),
                                }
                            })?;
                        Ok(Box::new(
                            connector
                                .connect(name, tcp)
                                .await
                                .map_err(|source| ConnectError::Tls { addr, source })?,
                        ))
                    }
                }
            }
            Target::Tcp(h, p) => {
                let tcp = tokio::net::TcpStream::connect((h.as_str(), *p))
                    .await
                    .map_err(io(self.describe()))?;
                let _ = tcp.set_nodelay(true);
                match &self.tls {
                    None => Ok(Box::new(tcp)),
                    Some((connector, name)) => Ok(Box::new(
                        connector
                            .connect(name.clone(), tcp)
                            .await
                            .map_err(|source| ConnectError::Tls {
                                addr: self.describe(),
                                source,
                            })?,
                    )),
                }
            }
        }
    }

    /// memproxy's own connection: connected, authenticated with the URL's credentials, on the
    /// URL's database. Used for index management only.
    pub async fn admin(&self, timeout: Duration) -> MemResult<Link> {
        let stream = self
            .connect(timeout)
            .await
            .map_err(|e| MemError::upstream(format!("unavailable: {e}")))?;
        let mut link = Link::new(stream, BytesMut::new(), timeout);
        let mut setup: Vec<Cmd> = Vec::new();
        if let Some(p) = &self.password {
            let mut auth = vec![b"AUTH".to_vec()];
            if let Some(u) = &self.user {
                auth.push(u.clone().into_bytes());
            }
            auth.push(p.clone().into_bytes());
            setup.push(auth);
        }
        if self.db != 0 {
            setup.push(vec![b"SELECT".to_vec(), self.db.to_string().into_bytes()]);
        }
        if !setup.is_empty() {
            for v in link.call(&setup).await? {
                crate::error::ok(v)?;
            }
        }
        Ok(link)
    }
}

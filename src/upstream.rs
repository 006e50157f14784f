//! The client's dedicated upstream socket, and [`Link`]: that socket lent to one MEM.* command.
//!
//! Each client connection gets its own TCP connection to Redis, opened at accept, so that every
//! piece of connection state (AUTH, HELLO, SELECT, MULTI, WATCH, blocking commands, subscriptions,
//! CLIENT TRACKING) lives on the upstream exactly as it would without the proxy.
//!
//! MEM.* run **on that same connection**, in the request's reply slot: when a MEM.* request
//! reaches the front of its connection's queue (every earlier reply is in, nothing later has been
//! sent), the session lends its upstream socket to the command as a [`Link`]. Every command the
//! verb sends then runs with the client's own ACL user, database, protocol and CLIENT REPLY mode,
//! so Redis itself answers `NOAUTH`, `NOPERM`, `OOM`, `READONLY` … exactly as it would to the
//! client. Push frames (RESP3 invalidations) that arrive meanwhile are kept and forwarded after.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use redis::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::config::Config;
use crate::error::{MemError, MemResult};
use crate::resp::Scanner;

/// A byte stream to or from a client or the upstream: TCP, a unix socket, or TLS over TCP.
pub trait AsyncStream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> AsyncStream for T {}
pub type Stream = Box<dyn AsyncStream>;

#[derive(Debug, Clone)]
enum Target {
    Tcp(String, u16),
    Unix(PathBuf),
    /// Whichever primary the sentinels name at connect time.
    Sentinel(crate::sentinel::Sentinels),
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

impl UpstreamAddr {
    /// The ACL user of the URL, if it names one.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    pub fn from_config(cfg: &Config) -> Result<UpstreamAddr, String> {
        let tls_sentinel = cfg.upstream.starts_with("rediss+sentinel://");
        if tls_sentinel || cfg.upstream.starts_with("redis+sentinel://") {
            let url = cfg
                .upstream
                .replacen("rediss+sentinel://", "redis+sentinel://", 1);
            let (mut s, user, password) = crate::sentinel::Sentinels::parse(&url)?;
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
        let u = url::Url::parse(&cfg.upstream).map_err(|e| format!("{}: {e}", cfg.upstream))?;
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
                    .ok_or_else(|| format!("{}: no host", cfg.upstream))?
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
    pub async fn connect(&self, timeout: Duration) -> Result<Stream, String> {
        tokio::time::timeout(timeout, self.open())
            .await
            .map_err(|_| format!("connect to {} timed out", self.describe()))?
    }

    async fn open(&self) -> Result<Stream, String> {
        let err = |e: std::io::Error| format!("{}: {e}", self.describe());
        match &self.target {
            Target::Unix(p) => Ok(Box::new(
                tokio::net::UnixStream::connect(p).await.map_err(err)?,
            )),
            Target::Sentinel(s) => {
                let (h, p) = s.primary(Duration::from_secs(2)).await?;
                let tcp = tokio::net::TcpStream::connect((h.as_str(), p))
                    .await
                    .map_err(|e| format!("{h}:{p} (the primary of '{}'): {e}", s.master))?;
                let _ = tcp.set_nodelay(true);
                match &self.tls {
                    None => Ok(Box::new(tcp)),
                    Some((connector, _)) => {
                        let name = rustls::pki_types::ServerName::try_from(h.clone())
                            .map_err(|e| format!("{h}: {e}"))?;
                        Ok(Box::new(connector.connect(name, tcp).await.map_err(
                            |e| format!("{h}:{p} (the primary of '{}'): TLS: {e}", s.master),
                        )?))
                    }
                }
            }
            Target::Tcp(h, p) => {
                let tcp = tokio::net::TcpStream::connect((h.as_str(), *p))
                    .await
                    .map_err(err)?;
                let _ = tcp.set_nodelay(true);
                match &self.tls {
                    None => Ok(Box::new(tcp)),
                    Some((connector, name)) => Ok(Box::new(
                        connector
                            .connect(name.clone(), tcp)
                            .await
                            .map_err(|e| format!("{}: TLS: {e}", self.describe()))?,
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
        let mut link = Link::new(stream, BytesMut::new(), ReplyMode::On, timeout);
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
                crate::store::scripts::ok(v)?;
            }
        }
        Ok(link)
    }
}

/// The TLS client configuration: roots from `tls_ca_file` (else the system's), a client
/// certificate when `tls_cert_file` and `tls_key_file` are set, no verification with
/// `tls_insecure` (development only).
fn tls_connector(
    cfg: &Config,
    host: &str,
) -> Result<
    (
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    ),
    String,
> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let read_certs = |path: &std::path::Path| -> Result<Vec<CertificateDer<'static>>, String> {
        let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        rustls_pemfile::certs(&mut data.as_slice())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{}: {e}", path.display()))
    };
    let builder = if cfg.tls_insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &cfg.tls_ca_file {
            Some(ca) => {
                for c in read_certs(ca)? {
                    roots.add(c).map_err(|e| format!("{}: {e}", ca.display()))?;
                }
            }
            None => {
                for c in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(c);
                }
            }
        }
        builder.with_root_certificates(roots)
    };
    let config = match (&cfg.tls_cert_file, &cfg.tls_key_file) {
        (Some(cert), Some(key)) => {
            let data = std::fs::read(key).map_err(|e| format!("{}: {e}", key.display()))?;
            let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut data.as_slice())
                .map_err(|e| format!("{}: {e}", key.display()))?
                .ok_or_else(|| format!("{}: no private key", key.display()))?;
            builder
                .with_client_auth_cert(read_certs(cert)?, key)
                .map_err(|e| format!("TLS client certificate: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("tls_cert_file and tls_key_file go together".into()),
    };
    let name = ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
    Ok((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
}

/// `tls_insecure`: accept any server certificate (signatures are still checked).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The connection's `CLIENT REPLY` mode when the MEM.* command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplyMode {
    #[default]
    On,
    /// `CLIENT REPLY OFF`: the command's own calls are wrapped in `CLIENT REPLY ON` … `OFF`.
    Off,
    /// `CLIENT REPLY SKIP` applies to this command: its calls turn replies on (the skip is spent).
    Skip,
}

/// `CLIENT REPLY OFF`, sent after a command that ran under OFF to put the mode back.
pub const REPLY_OFF: &[u8] = b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$3\r\nOFF\r\n";
const REPLY_ON: &[u8] = b"*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$2\r\nON\r\n";

/// One command: its arguments.
pub type Cmd = Vec<Vec<u8>>;

/// The client's upstream socket, lent to one MEM.* command.
pub struct Link {
    pub stream: Stream,
    /// Upstream bytes read and not yet consumed (handed back to the session afterwards).
    pub buf: BytesMut,
    /// Push frames that arrived meanwhile, in order: the session forwards them to the client.
    pub pushes: BytesMut,
    /// The connection can no longer be trusted (I/O error, timeout mid-reply): the session
    /// answers an error and closes the client, as for any upstream loss.
    pub broken: Option<String>,
    /// The mode the command runs under; after the first call under OFF/SKIP replies are on.
    pub mode: ReplyMode,
    /// Replies still owed by the upstream after a timeout: the session discards them when they
    /// come, so the connection stays in step and the client keeps it.
    pub owed: usize,
    /// Some call got replies and none was NOAUTH: the connection is known to be let in.
    pub admitted: bool,
    /// In cluster mode, the master this connection is to (`host:port`).
    pub node: Option<String>,
    /// In cluster mode, after `ASK`: every call is sent after `ASKING` (the slot is being
    /// imported here).
    pub asking: bool,
    turned_on: bool,
    timeout: Duration,
}

impl Link {
    pub fn new(stream: Stream, buf: BytesMut, mode: ReplyMode, timeout: Duration) -> Link {
        Link {
            stream,
            buf,
            pushes: BytesMut::new(),
            broken: None,
            mode,
            owed: 0,
            admitted: false,
            node: None,
            asking: false,
            turned_on: false,
            timeout,
        }
    }

    /// After the command: what to send upstream to restore the client's reply mode.
    pub fn restore(&self) -> &'static [u8] {
        if self.mode == ReplyMode::Off && self.turned_on {
            REPLY_OFF
        } else {
            b""
        }
    }

    /// Send `cmds` as one pipeline and read one reply each (Redis errors are `Value::ServerError`).
    pub async fn call(&mut self, cmds: &[Cmd]) -> MemResult<Vec<Value>> {
        if let Some(reason) = &self.broken {
            return Err(MemError::upstream(format!("connection lost: {reason}")));
        }
        if self.owed > 0 {
            return Err(MemError::upstream("busy with a request that timed out"));
        }
        match tokio::time::timeout(self.timeout, self.exchange(cmds)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(reason)) => {
                self.broken = Some(reason.clone());
                Err(MemError::upstream(format!("connection lost: {reason}")))
            }
            Err(_) => Err(MemError::upstream(format!(
                "timeout after {} ms",
                self.timeout.as_millis()
            ))),
        }
    }

    /// One command, one reply.
    pub async fn call1(&mut self, cmd: Cmd) -> MemResult<Value> {
        let mut v = self.call(std::slice::from_ref(&cmd)).await?;
        Ok(v.pop().unwrap_or(Value::Nil))
    }

    async fn exchange(&mut self, cmds: &[Cmd]) -> Result<Vec<Value>, String> {
        let mut out = Vec::new();
        let wrap = self.mode != ReplyMode::On && !self.turned_on;
        if wrap {
            out.extend_from_slice(REPLY_ON);
        }
        for c in cmds {
            if self.asking {
                out.extend_from_slice(b"*1\r\n$6\r\nASKING\r\n");
            }
            encode(c, &mut out);
        }
        let asked = if self.asking { cmds.len() } else { 0 };
        // Counted before the write: if the exchange is cut short, what is owed is known.
        self.owed = cmds.len() + usize::from(wrap) + asked;
        self.stream
            .write_all(&out)
            .await
            .map_err(|e| format!("write: {e}"))?;
        if wrap {
            self.turned_on = true;
            self.read_reply().await?;
            self.owed -= 1;
        }
        let mut replies = Vec::with_capacity(cmds.len());
        for _ in cmds {
            if asked > 0 {
                self.read_reply().await?;
                self.owed -= 1;
            }
            replies.push(self.read_reply().await?);
            self.owed -= 1;
        }
        self.admitted |= !replies
            .iter()
            .any(|r| matches!(r, Value::ServerError(e) if e.code() == "NOAUTH"));
        Ok(replies)
    }

    /// The next reply that is not a push.
    async fn read_reply(&mut self) -> Result<Value, String> {
        let mut scanner = Scanner::default();
        loop {
            match scanner.scan(&self.buf).map_err(|e| e.to_string())? {
                Some((len, true)) => {
                    let push = self.buf.split_to(len);
                    self.pushes.extend_from_slice(&push);
                }
                Some((len, false)) => {
                    let frame = &self.buf[..len];
                    let v = match crate::resp::value::decode(frame) {
                        Some(v) => v,
                        None => redis::parse_redis_value(frame)
                            .map_err(|e| format!("unreadable reply: {e}"))?,
                    };
                    self.buf.advance(len);
                    return Ok(normalize(v));
                }
                None => {
                    let n = self
                        .stream
                        .read_buf(&mut self.buf)
                        .await
                        .map_err(|e| format!("read: {e}"))?;
                    if n == 0 {
                        return Err("upstream closed the connection".into());
                    }
                }
            }
        }
    }
}

/// RESP3 shapes as the RESP2 ones the store reads: Lua `false` arrives as a boolean under RESP3.
fn normalize(v: Value) -> Value {
    match v {
        Value::Boolean(false) => Value::Nil,
        Value::Boolean(true) => Value::Int(1),
        Value::Array(a) => Value::Array(a.into_iter().map(normalize).collect()),
        Value::Attribute { data, .. } => normalize(*data),
        other => other,
    }
}

/// A command as a RESP multibulk.
pub fn encode(args: &[Vec<u8>], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

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

use std::time::Duration;

use bytes::{Buf, BytesMut};
use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{MemError, MemResult};
use crate::resp::Scanner;

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
    pub stream: TcpStream,
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
    turned_on: bool,
    timeout: Duration,
}

impl Link {
    pub fn new(stream: TcpStream, buf: BytesMut, mode: ReplyMode, timeout: Duration) -> Link {
        Link {
            stream,
            buf,
            pushes: BytesMut::new(),
            broken: None,
            mode,
            owed: 0,
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
            encode(c, &mut out);
        }
        // Counted before the write: if the exchange is cut short, what is owed is known.
        self.owed = cmds.len() + usize::from(wrap);
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
            replies.push(self.read_reply().await?);
            self.owed -= 1;
        }
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
                    let v = redis::parse_redis_value(&self.buf[..len])
                        .map_err(|e| format!("unreadable reply: {e}"))?;
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

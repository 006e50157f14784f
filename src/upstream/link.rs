//! [`Link`]: the client's upstream socket lent to one MEM.* command — pipelined calls, push
//! frames set aside for the session, replies owed after a timeout counted so the connection
//! stays in step. (CLIENT REPLY is the session's: the connection always answers.)

use std::time::Duration;

use bytes::{Buf, BytesMut};
use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::address::Stream;
use super::lost::{Broken, Lost};
use crate::error::{MemError, MemResult};
use crate::resp::Scanner;

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
    pub broken: Option<Lost>,
    /// Replies still owed by the upstream after a timeout: the session discards them when they
    /// come, so the connection stays in step and the client keeps it.
    pub owed: usize,
    /// Some call got replies and none was NOAUTH: the connection is known to be let in.
    pub admitted: bool,
    /// Some call was answered NOAUTH or NOPERM: Redis refused this connection something.
    pub refused: bool,
    /// In cluster mode, the master this connection is to (`host:port`).
    pub node: Option<String>,
    /// In cluster mode, after `ASK`: every call is sent after `ASKING` (the slot is being
    /// imported here).
    pub asking: bool,
    timeout: Duration,
}

impl Link {
    pub fn new(stream: Stream, buf: BytesMut, timeout: Duration) -> Link {
        Link {
            stream,
            buf,
            pushes: BytesMut::new(),
            broken: None,
            owed: 0,
            admitted: false,
            refused: false,
            node: None,
            asking: false,
            timeout,
        }
    }

    /// Send `cmds` as one pipeline and read one reply each (Redis errors are `Value::ServerError`).
    pub async fn call(&mut self, cmds: &[Cmd]) -> MemResult<Vec<Value>> {
        if let Some(lost) = &self.broken {
            return Err(MemError::upstream(format!("connection lost: {lost}")));
        }
        if self.owed > 0 {
            return Err(MemError::upstream("busy with a request that timed out"));
        }
        match tokio::time::timeout(self.timeout, self.exchange(cmds)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(broken)) => {
                let lost = Lost {
                    node: self.node.clone(),
                    broken,
                };
                let e = MemError::upstream(format!("connection lost: {lost}"));
                self.broken = Some(lost);
                Err(e)
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

    async fn exchange(&mut self, cmds: &[Cmd]) -> Result<Vec<Value>, Broken> {
        let mut out = Vec::new();
        for c in cmds {
            if self.asking {
                out.extend_from_slice(b"*1\r\n$6\r\nASKING\r\n");
            }
            encode(c, &mut out);
        }
        let asked = if self.asking { cmds.len() } else { 0 };
        // Counted before the write: if the exchange is cut short, what is owed is known.
        self.owed = cmds.len() + asked;
        self.stream
            .write_all(&out)
            .await
            .map_err(|e| Broken::Write(e.to_string()))?;
        let mut replies = Vec::with_capacity(cmds.len());
        for _ in cmds {
            if asked > 0 {
                self.read_reply().await?;
                self.owed -= 1;
            }
            replies.push(self.read_reply().await?);
            self.owed -= 1;
        }
        let code = |c: &str| {
            replies
                .iter()
                .any(|r| matches!(r, Value::ServerError(e) if e.code() == c))
        };
        let noauth = code("NOAUTH");
        self.admitted |= !noauth;
        self.refused |= noauth || code("NOPERM");
        Ok(replies)
    }

    /// What this command showed of the connection's standing, for the next MEM.* on it:
    /// `Some(false)` Redis refused it something (check its rights again), `Some(true)` Redis let
    /// it in (no probe needed), `None` nothing reached Redis.
    pub fn vouches(&self) -> Option<bool> {
        if self.refused {
            Some(false)
        } else {
            self.admitted.then_some(true)
        }
    }

    /// The next reply that is not a push.
    async fn read_reply(&mut self) -> Result<Value, Broken> {
        let mut scanner = Scanner::default();
        loop {
            match scanner
                .scan(&self.buf)
                .map_err(|e| Broken::Unreadable(e.to_string()))?
            {
                Some((len, true)) => {
                    let push = self.buf.split_to(len);
                    self.pushes.extend_from_slice(&push);
                }
                Some((len, false)) => {
                    let frame = &self.buf[..len];
                    let v = match crate::resp::value::decode(frame) {
                        Some(v) => v,
                        None => redis::parse_redis_value(frame)
                            .map_err(|e| Broken::Unreadable(e.to_string()))?,
                    };
                    self.buf.advance(len);
                    return Ok(normalize(v));
                }
                None => {
                    let n = self
                        .stream
                        .read_buf(&mut self.buf)
                        .await
                        .map_err(|e| Broken::Read(e.to_string()))?;
                    if n == 0 {
                        return Err(Broken::Closed);
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

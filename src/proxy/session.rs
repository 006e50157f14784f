//! What every client session shares, whichever upstream it fronts (one Redis, a Sentinel's
//! primary, a cluster's masters): the bounds on what a client may send and the framing of its
//! bytes against them ([`Intake`]), why a session ends ([`End`]), and what is counted and logged
//! about it ([`Tally`]), and the byte tunnel a session becomes ([`splice`]). The command table is
//! [`route`](super::route); how a request changes the connection's state is [`state`](super::state).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::config::Config;
use crate::engine::Engine;
use crate::resp::{Framer, Parsed, Request};
use crate::upstream::Lost;

/// Header bytes a request may take beyond `max_request_bytes` of payload.
const HEADER_SLACK: usize = 64 * 1024;

/// The bounds on one client (from the `[limits]` settings).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest request (payload bytes).
    pub request_bytes: usize,
    /// The most arguments a request may announce.
    pub request_args: i64,
    /// Bytes the proxy buffers for a client in each direction before it stops reading.
    pub buffer: usize,
}

impl Limits {
    pub fn of(cfg: &Config) -> Limits {
        Limits {
            request_bytes: cfg.max_request_bytes,
            request_args: i64::try_from(cfg.max_request_args).unwrap_or(i64::MAX),
            buffer: cfg.client_buffer_bytes,
        }
    }
}

/// The next thing at the front of the client's bytes.
#[derive(Debug)]
pub enum Next {
    /// A complete request (its bytes are the front `len`).
    Request(Request),
    /// Bytes Redis consumes without a reply (an empty inline line, `*0`).
    Skip(usize),
    /// Not complete yet, and within the bounds: read more.
    Wait,
    /// The request being received breaks a bound: this error line, then the client is closed.
    OverLimit(String),
    /// Not RESP: Redis answers its own protocol error for these bytes and closes the connection.
    Invalid(String),
}

/// Framing of a client's bytes against its [`Limits`]: the same requests, the same refusals and
/// the same words in every session.
pub struct Intake {
    framer: Framer,
    /// Bytes the front must hold before framing is worth trying again.
    need: usize,
    pub limits: Limits,
}

impl Intake {
    pub fn new(limits: Limits) -> Intake {
        Intake {
            framer: Framer::default(),
            need: 1,
            limits,
        }
    }

    /// What is at the front of `buf` (the same front, grown, until a request, a skip or an
    /// error is returned). A request over a bound is refused as soon as its header says so,
    /// before its payload comes.
    pub fn next(&mut self, buf: &[u8]) -> Next {
        if buf.len() < self.need {
            return self.wait();
        }
        match self.framer.parse(buf) {
            Parsed::Request(req) => {
                self.need = 1;
                Next::Request(req)
            }
            Parsed::Skip(n) => {
                self.need = 1;
                Next::Skip(n)
            }
            Parsed::Incomplete(n) => {
                self.need = n;
                self.wait()
            }
            Parsed::Invalid(reason) => Next::Invalid(reason),
        }
    }

    fn wait(&self) -> Next {
        let args = self.framer.announced_args();
        if args > self.limits.request_args {
            return Next::OverLimit(format!(
                "ERR Protocol error: request has {args} arguments, over the proxy's limit of {} (max_request_args)",
                self.limits.request_args
            ));
        }
        if self.need > self.limits.request_bytes.saturating_add(HEADER_SLACK) {
            return Next::OverLimit(format!(
                "ERR Protocol error: request of more than {} bytes (max_request_bytes)",
                self.limits.request_bytes
            ));
        }
        Next::Wait
    }
}

/// Why a client's session ended; the side at fault is the variant.
#[derive(Debug)]
pub enum End {
    /// The client closed its connection, or could no longer be written to.
    ClientGone,
    /// The client broke a bound; the error line was its last reply.
    OverLimit(String),
    /// The server shut down: the requests in flight were answered (within the grace period).
    Drained,
    /// The connection had become a byte tunnel (SUBSCRIBE, MONITOR, a protocol error) and one
    /// side closed it.
    Tunneled,
    /// A connection to Redis broke with this many requests outstanding, each answered
    /// [`Lost::line`] (0: an idle connection Redis closed, as after QUIT).
    UpstreamLost(Lost, usize),
    /// No upstream could be reached for the new client (it got one `ERR upstream unavailable`).
    Unavailable(String),
}

/// A client in the server's counts: counted in when its session starts, out when the tally is
/// dropped; [`Tally::end`] logs why the session ended and counts a lost upstream.
pub struct Tally(Arc<Engine>);

impl Tally {
    pub fn start(engine: &Arc<Engine>) -> Tally {
        engine.metrics.clients.inc();
        Tally(engine.clone())
    }

    pub fn end(&self, end: &End) {
        match end {
            End::UpstreamLost(lost, outstanding) if *outstanding > 0 => {
                tracing::warn!(%lost, outstanding, "upstream lost for a client; closing it");
                self.0.metrics.upstream_lost.inc();
            }
            End::UpstreamLost(lost, _) => {
                tracing::debug!(%lost, "upstream closed an idle client connection")
            }
            End::OverLimit(line) => tracing::warn!(%line, "closing a client over a limit"),
            End::Unavailable(reason) => {
                tracing::warn!(%reason, "upstream unavailable for a new client")
            }
            End::ClientGone | End::Drained | End::Tunneled => {
                tracing::trace!(?end, "client session ended")
            }
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.0.metrics.clients.dec();
    }
}

/// Bytes both ways between a client and an upstream connection (a subscribed client, MONITOR,
/// a request Redis refuses as a protocol error) until either side is done. When the client's side
/// ends first — it closed, or the upstream stopped reading after a protocol error and the
/// client's bytes can no longer be written — the upstream is told (its write side shut) and what
/// it still sends, its error line first, goes down for at most `linger`: Redis's own suite reads
/// that line after its writes fail ("Protocol desync regression test").
pub async fn splice<C, U>(client: &mut C, upstream: &mut U, linger: Duration)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (mut crd, mut cwr) = tokio::io::split(client);
    let (mut urd, mut uwr) = tokio::io::split(upstream);
    let mut down = std::pin::pin!(tokio::io::copy(&mut urd, &mut cwr));
    tokio::select! {
        _ = tokio::io::copy(&mut crd, &mut uwr) => {}
        _ = &mut down => return,
    }
    let _ = uwr.shutdown().await;
    let _ = tokio::time::timeout(linger, down).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intake() -> Intake {
        Intake::new(Limits {
            request_bytes: 1000,
            request_args: 10,
            buffer: 1 << 20,
        })
    }

    #[test]
    fn bounds_are_checked_from_the_header() {
        let mut i = intake();
        assert!(matches!(i.next(b"*2\r\n$4\r\nPING"), Next::Wait));
        assert!(
            matches!(i.next(b"*2\r\n$4\r\nPING\r\n$1\r\nx\r\n"), Next::Request(r) if r.len == 21)
        );
        let mut i = intake();
        match i.next(b"*11\r\n$3\r\nDEL\r\n") {
            Next::OverLimit(line) => assert!(line.contains("max_request_args"), "{line}"),
            other => panic!("{other:?}"),
        }
        let mut i = intake();
        match i.next(b"*2\r\n$3\r\nSET\r\n$9000000\r\nxx") {
            Next::OverLimit(line) => assert!(line.contains("max_request_bytes"), "{line}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(intake().next(b"*1\r\nx\r\n"), Next::Invalid(_)));
        assert!(matches!(intake().next(b"*0\r\n"), Next::Skip(4)));
    }
}

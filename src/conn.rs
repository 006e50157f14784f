//! One client session: requests in, replies out, in order.
//!
//! One task per client selects over three sources: bytes from the client, bytes from the client's
//! own upstream socket, and the MEM.* command at the front of the reply queue. Requests are framed
//! as they arrive; ordinary ones are forwarded as their original bytes (one write per read burst)
//! and each request that Redis answers gets a reply *slot*. Upstream replies fill upstream slots in
//! order; a MEM.* slot runs its command when it reaches the front, so it sees exactly the protocol
//! and authentication that the requests before it established. (A single task matters: on small
//! VMs a cross-thread wakeup per request costs more than the proxying itself.)
//!
//! Invariants:
//! - every request that Redis would answer gets exactly one reply, in request order;
//! - a MEM.* reply fills the slot of its request, also inside a pipeline of ordinary commands;
//! - ordinary requests and their replies are forwarded byte for byte; RESP3 pushes are forwarded as
//!   they arrive, taking no slot;
//! - after (P|S)SUBSCRIBE, MONITOR, SYNC/PSYNC or a protocol error the connection is a raw tunnel;
//! - if the upstream breaks, every outstanding request gets an error and the client is closed;
//! - a client that does not read its replies stops the proxy reading from its upstream (and from
//!   it), so what the proxy buffers for one client stays bounded.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::engine::{ClientState, Engine};
use crate::resp::{parse_request, Parsed, Protocol, Reply, Request, Scanner};

/// What the proxy needs to know of a reply to keep its view of the connection right.
#[derive(Debug)]
enum Track {
    None,
    /// HELLO: on success the protocol (if given) and the user (if AUTH was given) change.
    Hello(Option<Protocol>, Option<String>),
    /// AUTH: on success the connection is authenticated as this user.
    Auth(String),
    /// RESET: back to RESP2 and the default user.
    Reset,
}

/// One reply slot, in request order.
#[derive(Debug)]
enum Slot {
    /// The reply comes from the upstream.
    Upstream(Track),
    /// A MEM.* request, run when it reaches the front; `silent` under CLIENT REPLY OFF/SKIP.
    Local { args: Vec<Vec<u8>>, silent: bool },
    /// A reply known at parse time.
    Ready(Reply),
    /// From here on the connection is a byte tunnel.
    Tunnel,
}

/// Requests queued without a reply yet, beyond which the proxy stops reading from the client.
const MAX_PENDING: usize = 100_000;

type LocalReply = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// Serve one accepted client until it or its upstream goes away.
pub async fn serve(client: TcpStream, engine: Arc<Engine>, shutdown: watch::Receiver<bool>) {
    let _ = client.set_nodelay(true);
    let cfg = engine.config();
    let mut client = client;
    let upstream = match engine
        .upstream_addr()
        .connect(Duration::from_millis(cfg.op_timeout_ms))
        .await
    {
        Ok(up) => up,
        Err(reason) => {
            tracing::warn!(%reason, "upstream unavailable for a new client");
            let line = format!(
                "-ERR upstream unavailable: {}\r\n",
                reason.replace(['\r', '\n'], " ")
            );
            let _ = client.write_all(line.as_bytes()).await;
            let _ = client.shutdown().await;
            return;
        }
    };
    let grace = Duration::from_millis(cfg.shutdown_grace_ms);
    Session {
        client,
        upstream,
        engine,
        shutdown,
        cbuf: BytesMut::with_capacity(16 * 1024),
        ubuf: BytesMut::with_capacity(16 * 1024),
        out: BytesMut::with_capacity(16 * 1024),
        fwd: Vec::with_capacity(16 * 1024),
        need: 1,
        reader: ReaderState::default(),
        slots: VecDeque::new(),
        scanner: Scanner::default(),
        state: ClientState::default(),
        local: None,
        tunnel_requested: false,
        grace,
    }
    .run()
    .await;
}

/// Per-connection view kept by the reader (optimistic: it runs ahead of the replies).
#[derive(Default)]
struct ReaderState {
    in_multi: bool,
    reply_off: bool,
    skip_next: bool,
}

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

fn is_mem(name: &[u8]) -> bool {
    name.len() > 4 && name[..4].eq_ignore_ascii_case(b"mem.")
}

/// Decide what slot a request takes. Returns `None` when Redis sends no reply.
fn classify(req: &Request, buf: &[u8], st: &mut ReaderState) -> Option<Slot> {
    let name = req.arg(buf, 0).unwrap_or_default();
    let arg = |i| req.arg(buf, i).unwrap_or_default();
    let silent = st.reply_off || std::mem::take(&mut st.skip_next);
    if is_mem(name) {
        if st.in_multi {
            let r = Reply::Error(format!(
                "ERR {} cannot run inside MULTI (the transaction is unaffected)",
                String::from_utf8_lossy(name).to_uppercase()
            ));
            return (!silent).then_some(Slot::Ready(r));
        }
        return Some(Slot::Local {
            args: req.owned_args(buf),
            silent,
        });
    }
    let mut track = Track::None;
    if eq(name, "client") && req.argc() == 3 && eq(arg(1), "reply") {
        if eq(arg(2), "off") {
            st.reply_off = true;
            return None;
        } else if eq(arg(2), "skip") {
            if !st.reply_off {
                st.skip_next = true;
            }
            return None;
        } else if eq(arg(2), "on") {
            st.reply_off = false;
            return Some(Slot::Upstream(Track::None));
        }
    } else if eq(name, "multi") {
        st.in_multi = true;
    } else if eq(name, "exec") || eq(name, "discard") {
        st.in_multi = false;
    } else if eq(name, "reset") {
        *st = ReaderState::default();
        track = Track::Reset;
    } else if eq(name, "hello") && !st.in_multi {
        let proto = match arg(1) {
            b"2" => Some(Protocol::Resp2),
            b"3" => Some(Protocol::Resp3),
            _ => None,
        };
        let mut user = None;
        let mut i = 2;
        while i < req.argc() {
            if eq(arg(i), "auth") && i + 2 < req.argc() {
                user = Some(String::from_utf8_lossy(arg(i + 1)).into_owned());
                i += 3;
            } else {
                i += 1;
            }
        }
        track = Track::Hello(proto, user);
    } else if eq(name, "auth") && !st.in_multi {
        let user = if req.argc() >= 3 {
            String::from_utf8_lossy(arg(1)).into_owned()
        } else {
            "default".into()
        };
        track = Track::Auth(user);
    } else if !st.in_multi
        && [
            "subscribe",
            "psubscribe",
            "ssubscribe",
            "monitor",
            "sync",
            "psync",
        ]
        .iter()
        .any(|c| eq(name, c))
    {
        return Some(Slot::Tunnel);
    }
    if silent {
        return None;
    }
    Some(Slot::Upstream(track))
}

struct Session {
    client: TcpStream,
    upstream: TcpStream,
    engine: Arc<Engine>,
    shutdown: watch::Receiver<bool>,
    /// Client bytes not yet framed.
    cbuf: BytesMut,
    /// Upstream bytes not yet forwarded.
    ubuf: BytesMut,
    /// Client bytes not yet written.
    out: BytesMut,
    /// Request bytes to forward upstream.
    fwd: Vec<u8>,
    /// Bytes `cbuf` must hold before framing is worth trying again.
    need: usize,
    reader: ReaderState,
    slots: VecDeque<Slot>,
    scanner: Scanner,
    state: ClientState,
    /// The MEM.* command at the front, running.
    local: Option<(LocalReply, bool)>,
    /// A tunnel-switching request was seen: client bytes now go upstream unparsed.
    tunnel_requested: bool,
    grace: Duration,
}

enum Event {
    Client(std::io::Result<usize>),
    Upstream(std::io::Result<usize>),
    Local(Reply),
    Shutdown,
    GraceOver,
}

impl Session {
    async fn run(mut self) {
        let mut client_open = true;
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            if let Err(reason) = self.serve_front() {
                return self.upstream_lost(&reason).await;
            }
            if matches!(self.slots.front(), Some(Slot::Tunnel)) && self.local.is_none() {
                return self.tunnel().await;
            }
            if !self.out.is_empty() {
                if self.client.write_all(&self.out).await.is_err() {
                    return;
                }
                self.out.clear();
            }
            if !client_open && self.slots.is_empty() {
                return;
            }
            let read_client = client_open && self.slots.len() < MAX_PENDING;
            let grace = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let event = tokio::select! {
                r = self.client.read_buf(&mut self.cbuf), if read_client => Event::Client(r),
                r = self.upstream.read_buf(&mut self.ubuf) => Event::Upstream(r),
                reply = async { self.local.as_mut().expect("guarded").0.as_mut().await }, if self.local.is_some() => Event::Local(reply),
                _ = self.shutdown.wait_for(|s| *s), if client_open => Event::Shutdown,
                _ = grace => Event::GraceOver,
            };
            match event {
                Event::Client(Ok(n)) if n > 0 => {
                    if let Err(e) = self.take_requests().await {
                        return self
                            .upstream_lost(&format!("upstream write failed: {e}"))
                            .await;
                    }
                }
                Event::Client(_) | Event::Shutdown => {
                    // Answer what is queued (bounded), then close.
                    client_open = false;
                    deadline = Some(tokio::time::Instant::now() + self.grace);
                }
                Event::Upstream(Ok(n)) if n > 0 => {}
                Event::Upstream(Ok(_)) => {
                    return self.upstream_lost("upstream closed the connection").await
                }
                Event::Upstream(Err(e)) => {
                    return self
                        .upstream_lost(&format!("upstream connection lost: {e}"))
                        .await
                }
                Event::Local(reply) => {
                    let (_, silent) = self.local.take().expect("local was running");
                    self.slots.pop_front();
                    if !silent {
                        reply.encode(self.state.protocol, &mut self.out);
                    }
                }
                Event::GraceOver => return,
            }
        }
    }

    /// Frame what the client sent, queue slots, forward ordinary requests upstream in one write.
    async fn take_requests(&mut self) -> std::io::Result<()> {
        if self.tunnel_requested {
            self.upstream.write_all(&self.cbuf).await?;
            self.cbuf.clear();
            return Ok(());
        }
        if self.cbuf.len() < self.need {
            return Ok(());
        }
        self.fwd.clear();
        let mut consumed = 0;
        loop {
            match parse_request(&self.cbuf[consumed..]) {
                Parsed::Request(req) => {
                    let at = consumed;
                    let slot = classify(&req, &self.cbuf[at..], &mut self.reader);
                    consumed += req.len;
                    match slot {
                        Some(Slot::Local { ref args, .. }) => {
                            if !self.slots.is_empty() {
                                self.engine.prefetch(args);
                            }
                            self.slots.extend(slot);
                        }
                        Some(Slot::Ready(_)) => self.slots.extend(slot),
                        Some(Slot::Tunnel) => {
                            self.fwd.extend_from_slice(&self.cbuf[at..]);
                            consumed = self.cbuf.len();
                            self.slots.push_back(Slot::Tunnel);
                            self.tunnel_requested = true;
                            break;
                        }
                        other => {
                            self.fwd.extend_from_slice(&self.cbuf[at..consumed]);
                            self.slots.extend(other);
                        }
                    }
                }
                Parsed::Skip(n) => consumed += n,
                Parsed::Incomplete(n) => {
                    self.need = n;
                    break;
                }
                Parsed::Invalid(reason) => {
                    // Redis answers its own protocol error for these bytes; relay it, then tunnel.
                    tracing::debug!(%reason, "protocol error from client; handing it to the upstream");
                    self.fwd.extend_from_slice(&self.cbuf[consumed..]);
                    consumed = self.cbuf.len();
                    self.slots.push_back(Slot::Tunnel);
                    self.tunnel_requested = true;
                    break;
                }
            }
        }
        self.cbuf.advance(consumed);
        if self.cbuf.is_empty() {
            self.need = 1;
        }
        if !self.fwd.is_empty() {
            self.upstream.write_all(&self.fwd).await?;
        }
        Ok(())
    }

    /// Fill front slots from what is at hand; start the front MEM.* command if there is one.
    fn serve_front(&mut self) -> Result<(), String> {
        loop {
            // Pushes are forwarded as they come, whatever the front slot is.
            let frame = loop {
                match self.scanner.scan(&self.ubuf).map_err(|e| e.to_string())? {
                    Some((len, true)) => {
                        let push = self.ubuf.split_to(len);
                        self.out.extend_from_slice(&push);
                    }
                    Some((len, false)) => break Some(len),
                    None => break None,
                }
            };
            match self.slots.front() {
                Some(Slot::Upstream(_)) => {
                    let Some(len) = frame else { return Ok(()) };
                    let frame = self.ubuf.split_to(len);
                    let Some(Slot::Upstream(track)) = self.slots.pop_front() else {
                        unreachable!()
                    };
                    self.track(track, &frame);
                    self.out.extend_from_slice(&frame);
                }
                Some(Slot::Ready(_)) => {
                    let Some(Slot::Ready(reply)) = self.slots.pop_front() else {
                        unreachable!()
                    };
                    reply.encode(self.state.protocol, &mut self.out);
                }
                Some(Slot::Local { .. }) => {
                    if self.local.is_none() {
                        let Some(Slot::Local { args, silent }) = self.slots.front_mut() else {
                            unreachable!()
                        };
                        let (args, silent) = (std::mem::take(args), *silent);
                        let engine = self.engine.clone();
                        let state = self.state.clone();
                        self.local = Some((
                            Box::pin(async move { engine.execute(args, &state).await }),
                            silent,
                        ));
                    }
                    return Ok(());
                }
                Some(Slot::Tunnel) | None => return Ok(()),
            }
        }
    }

    /// From the tunnel slot on: the rest of the upstream's bytes go to the client raw, and the
    /// client's to the upstream.
    async fn tunnel(mut self) {
        self.out.extend_from_slice(&self.ubuf);
        if self.client.write_all(&self.out).await.is_err() {
            return;
        }
        if !self.cbuf.is_empty() && self.upstream.write_all(&self.cbuf).await.is_err() {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut self.client, &mut self.upstream).await;
    }

    fn track(&mut self, track: Track, frame: &[u8]) {
        let ok = frame.first() != Some(&b'-') && frame.first() != Some(&b'!');
        match track {
            Track::None => {}
            Track::Hello(proto, user) if ok => {
                if let Some(p) = proto {
                    self.state.protocol = p;
                }
                if let Some(u) = user {
                    self.state.authenticated = true;
                    self.state.user = Some(u);
                }
            }
            Track::Auth(user) if ok => {
                self.state.authenticated = true;
                self.state.user = Some(user);
            }
            Track::Reset => self.state = ClientState::default(),
            _ => {}
        }
    }

    /// The upstream is gone: every outstanding request gets an error, then the client is closed.
    async fn upstream_lost(mut self, reason: &str) {
        if self.slots.is_empty() {
            // Nothing outstanding: QUIT, or Redis closing an idle client.
            tracing::debug!(%reason, "upstream closed an idle client connection");
        } else {
            tracing::warn!(%reason, outstanding = self.slots.len(), "upstream lost for a client; closing it");
        }
        let line = Reply::Error(format!("ERR upstream connection lost: {reason}"));
        while let Some(slot) = self.slots.pop_front() {
            if !matches!(slot, Slot::Local { silent: true, .. }) {
                line.encode(self.state.protocol, &mut self.out);
            }
        }
        let _ = self.client.write_all(&self.out).await;
        let _ = self.client.shutdown().await;
    }
}

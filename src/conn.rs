//! One client session: requests in, replies out, in order.
//!
//! Two tasks per client. The **reader** frames requests, forwards ordinary ones to the client's own
//! upstream socket as their original bytes (one write per read burst), and queues one reply *slot*
//! per request. The **writer** fills the slots in order: an upstream slot takes the next non-push
//! upstream reply, a MEM.* slot runs the command when it reaches the front (so it sees exactly the
//! protocol and authentication that the requests before it established) and encodes its reply.
//!
//! Invariants:
//! - every request that Redis would answer gets exactly one reply, in request order;
//! - a MEM.* reply fills the slot of its request, also inside a pipeline of ordinary commands;
//! - ordinary requests and their replies are forwarded byte for byte; RESP3 pushes are forwarded as
//!   they arrive, taking no slot;
//! - after (P|S)SUBSCRIBE, MONITOR, SYNC/PSYNC or a protocol error the connection is a raw tunnel;
//! - if the upstream breaks, every outstanding request gets an error and the client is closed.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

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

enum Msg {
    Slots(Vec<Slot>),
    /// The client closed its side (or the proxy is shutting down): answer what is queued, then stop.
    /// Carries the upstream write half so that the upstream is not half-closed early.
    ClientGone(OwnedWriteHalf),
}

/// Serve one accepted client until it or its upstream goes away.
pub async fn serve(client: TcpStream, engine: Arc<Engine>, shutdown: watch::Receiver<bool>) {
    let _ = client.set_nodelay(true);
    let cfg = engine.config();
    let up = match engine
        .upstream_addr()
        .connect(Duration::from_millis(cfg.op_timeout_ms))
        .await
    {
        Ok(up) => up,
        Err(reason) => {
            tracing::warn!(%reason, "upstream unavailable for a new client");
            let mut client = client;
            let line = format!(
                "-ERR upstream unavailable: {}\r\n",
                reason.replace(['\r', '\n'], " ")
            );
            let _ = client.write_all(line.as_bytes()).await;
            let _ = client.shutdown().await;
            return;
        }
    };
    let (cr, cw) = client.into_split();
    let (ur, uw) = up.into_split();
    let (tx, rx) = mpsc::channel(256);
    let reader = tokio::spawn(read_requests(cr, uw, tx, shutdown));
    let grace = Duration::from_millis(cfg.shutdown_grace_ms);
    Writer {
        ur,
        cw,
        rx,
        engine,
        ubuf: BytesMut::with_capacity(16 * 1024),
        out: BytesMut::new(),
        slots: VecDeque::new(),
        scanner: Scanner::default(),
        state: ClientState::default(),
        grace,
    }
    .run()
    .await;
    reader.abort();
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

async fn read_requests(
    mut cr: OwnedReadHalf,
    mut uw: OwnedWriteHalf,
    tx: mpsc::Sender<Msg>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut st = ReaderState::default();
    let mut need = 1usize;
    let mut out = Vec::with_capacity(16 * 1024);
    'read: loop {
        let n = tokio::select! {
            r = cr.read_buf(&mut buf) => r.unwrap_or(0),
            _ = shutdown.wait_for(|s| *s) => 0,
        };
        if n == 0 {
            break;
        }
        if buf.len() < need {
            continue;
        }
        let mut slots = Vec::new();
        let mut consumed = 0;
        let mut tunnel = false;
        out.clear();
        loop {
            match parse_request(&buf[consumed..]) {
                Parsed::Request(req) => {
                    let bytes = consumed..consumed + req.len;
                    let slot = classify(&req, &buf[consumed..], &mut st);
                    consumed += req.len;
                    match slot {
                        Some(Slot::Local { .. }) | Some(Slot::Ready(_)) => slots.extend(slot),
                        Some(Slot::Tunnel) => {
                            out.extend_from_slice(&buf[bytes.start..]);
                            consumed = buf.len();
                            slots.push(Slot::Tunnel);
                            tunnel = true;
                            break;
                        }
                        other => {
                            out.extend_from_slice(&buf[bytes]);
                            slots.extend(other);
                        }
                    }
                }
                Parsed::Skip(n) => consumed += n,
                Parsed::Incomplete(n) => {
                    need = n;
                    break;
                }
                Parsed::Invalid(reason) => {
                    // Redis answers its own protocol error for these bytes; relay it, then tunnel.
                    tracing::debug!(%reason, "protocol error from client; handing it to the upstream");
                    out.extend_from_slice(&buf[consumed..]);
                    consumed = buf.len();
                    slots.push(Slot::Tunnel);
                    tunnel = true;
                    break;
                }
            }
        }
        buf.advance(consumed);
        if !slots.is_empty() && tx.send(Msg::Slots(slots)).await.is_err() {
            return;
        }
        if !out.is_empty() && uw.write_all(&out).await.is_err() {
            break 'read;
        }
        if tunnel {
            let _ = tokio::io::copy(&mut cr, &mut uw).await;
            return;
        }
    }
    let _ = tx.send(Msg::ClientGone(uw)).await;
}

struct Writer {
    ur: OwnedReadHalf,
    cw: OwnedWriteHalf,
    rx: mpsc::Receiver<Msg>,
    engine: Arc<Engine>,
    /// Upstream bytes not yet forwarded.
    ubuf: BytesMut,
    /// Client bytes not yet written.
    out: BytesMut,
    slots: VecDeque<Slot>,
    scanner: Scanner,
    state: ClientState,
    grace: Duration,
}

enum Next {
    Continue,
    Stop,
}

impl Writer {
    async fn run(mut self) {
        let mut client_gone: Option<OwnedWriteHalf> = None;
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            match self.serve_front().await {
                Ok(Next::Continue) => {}
                Ok(Next::Stop) => return,
                Err(reason) => return self.upstream_lost(&reason).await,
            }
            if !self.out.is_empty() {
                if self.cw.write_all(&self.out).await.is_err() {
                    return;
                }
                self.out.clear();
            }
            if client_gone.is_some() && self.slots.is_empty() {
                return;
            }
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                msg = self.rx.recv(), if client_gone.is_none() => match msg {
                    Some(Msg::Slots(s)) => self.slots.extend(s),
                    Some(Msg::ClientGone(uw)) => {
                        client_gone = Some(uw);
                        deadline = Some(tokio::time::Instant::now() + self.grace);
                    }
                    None => return,
                },
                r = self.ur.read_buf(&mut self.ubuf) => match r {
                    Ok(0) => return self.upstream_lost("upstream closed the connection").await,
                    Ok(_) => {}
                    Err(e) => return self.upstream_lost(&format!("upstream connection lost: {e}")).await,
                },
                _ = sleep => return,
            }
        }
    }

    /// Take the next complete upstream frame, forwarding any pushes in front of it.
    fn next_reply(&mut self) -> Result<Option<bytes::Bytes>, String> {
        loop {
            match self.scanner.scan(&self.ubuf).map_err(|e| e.to_string())? {
                None => return Ok(None),
                Some((len, true)) => {
                    let push = self.ubuf.split_to(len);
                    self.out.extend_from_slice(&push);
                }
                Some((len, false)) => return Ok(Some(self.ubuf.split_to(len).freeze())),
            }
        }
    }

    /// Fill as many front slots as the data at hand allows.
    async fn serve_front(&mut self) -> Result<Next, String> {
        loop {
            match self.slots.front() {
                None => {
                    // Pushes (client tracking) may arrive with no request outstanding.
                    while let Some((len, true)) =
                        self.scanner.scan(&self.ubuf).map_err(|e| e.to_string())?
                    {
                        let push = self.ubuf.split_to(len);
                        self.out.extend_from_slice(&push);
                    }
                    return Ok(Next::Continue);
                }
                Some(Slot::Upstream(_)) => {
                    let Some(frame) = self.next_reply()? else {
                        return Ok(Next::Continue);
                    };
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
                    let Some(Slot::Local { args, silent }) = self.slots.pop_front() else {
                        unreachable!()
                    };
                    let reply = self.run_local(args).await?;
                    if !silent {
                        reply.encode(self.state.protocol, &mut self.out);
                    }
                }
                Some(Slot::Tunnel) => {
                    self.out.extend_from_slice(&self.ubuf);
                    self.ubuf.clear();
                    if self.cw.write_all(&self.out).await.is_err() {
                        return Ok(Next::Stop);
                    }
                    self.out.clear();
                    let _ = tokio::io::copy(&mut self.ur, &mut self.cw).await;
                    let _ = self.cw.shutdown().await;
                    return Ok(Next::Stop);
                }
            }
        }
    }

    /// Run a MEM.* command, forwarding pushes that arrive meanwhile.
    async fn run_local(&mut self, args: Vec<Vec<u8>>) -> Result<Reply, String> {
        if !self.out.is_empty() {
            // Replies before this one should not wait for it.
            let _ = self.cw.write_all(&self.out).await;
            self.out.clear();
        }
        let engine = self.engine.clone();
        let state = self.state.clone();
        let fut = async move { engine.execute(args, &state).await };
        tokio::pin!(fut);
        loop {
            tokio::select! {
                reply = &mut fut => return Ok(reply),
                r = self.ur.read_buf(&mut self.ubuf) => match r {
                    Ok(0) => return Err("upstream closed the connection".into()),
                    Err(e) => return Err(format!("upstream connection lost: {e}")),
                    Ok(_) => {
                        while let Some((len, true)) = self.scanner.scan(&self.ubuf).map_err(|e| e.to_string())? {
                            let push = self.ubuf.split_to(len);
                            let _ = self.cw.write_all(&push).await;
                        }
                    }
                },
            }
        }
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
        tracing::warn!(%reason, outstanding = self.slots.len(), "upstream lost for a client; closing it");
        let line = Reply::Error(format!("ERR upstream connection lost: {reason}"));
        while let Some(slot) = self.slots.pop_front() {
            if !matches!(slot, Slot::Local { silent: true, .. }) {
                line.encode(self.state.protocol, &mut self.out);
            }
        }
        // Requests the reader queued but the writer had not taken yet.
        self.rx.close();
        while let Ok(Msg::Slots(s)) = self.rx.try_recv() {
            for _ in s {
                line.encode(self.state.protocol, &mut self.out);
            }
        }
        let _ = self.cw.write_all(&self.out).await;
        let _ = self.cw.shutdown().await;
    }
}

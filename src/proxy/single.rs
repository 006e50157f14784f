//! One client session: requests in, replies out, in order.
//!
//! One task per client selects over the client socket, the client's own upstream socket, and the
//! MEM.* command at the front of the reply queue. Requests are framed as they arrive; ordinary
//! ones are forwarded as their original bytes and each request that Redis answers gets a reply
//! *slot*. Upstream replies fill upstream slots in order.
//!
//! A MEM.* request is a **barrier**: requests after it are held back (not sent upstream) until it
//! is done. When it reaches the front — every earlier reply in, nothing later sent — the session
//! lends its upstream socket to the command ([`Link`]), which runs its scripts on it as the
//! client: same ACL user, database, protocol and `CLIENT REPLY` mode. Then the socket comes back,
//! the reply fills the slot, and the held requests go upstream.
//!
//! Invariants:
//! - every request that Redis would answer gets exactly one reply, in request order;
//! - a MEM.* reply fills the slot of its request, also inside a pipeline of ordinary commands;
//! - ordinary requests and their replies are forwarded byte for byte; RESP3 pushes are forwarded as
//!   they arrive, taking no slot;
//! - after (P|S)(UN)SUBSCRIBE, MONITOR, SYNC/PSYNC or a protocol error the connection is a raw
//!   tunnel;
//! - if the upstream breaks, every outstanding request gets an error and the client is closed;
//! - when the client goes away its upstream connection is closed at once, whatever is pending on
//!   it (as Redis frees a client that closed): nothing stays blocked in Redis on its behalf;
//! - the proxy never blocks on one direction: it keeps reading a client that does not read its
//!   replies (the replies wait in Redis's own output buffer once `client_buffer_bytes` are
//!   buffered here), so a client that writes a whole pipeline before reading is served;
//! - per client the proxy buffers at most about one request (`max_request_bytes`) plus
//!   `client_buffer_bytes` in each direction; a request over the limits gets a protocol error.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use super::route::{self, Kind};
use super::session::{End, Intake, Limits, Next, Tally};
use super::state::{self, Change, Replies};
use crate::engine::{ClientState, Engine};
use crate::mem::catalog::CommandQuery;
use crate::resp::{is_unsubscribe_push, Protocol, Reply, Request, Scanner};
use crate::upstream::{Broken, Link, Lost, ReplyMode, Stream, REPLY_OFF, REPLY_ON};

/// What the proxy needs to know of a reply to keep its view of the connection right.
#[derive(Debug)]
enum Track {
    /// HELLO, AUTH, SELECT, RESET: applied when Redis's reply is not an error.
    Change(Change),
    /// EXEC of a transaction that queued SELECT, HELLO or AUTH: each applied by its element of
    /// the reply ([`state::apply_exec`]).
    Exec(Vec<(usize, Change)>),
    /// COMMAND …: the MEM.* entries are merged into Redis's reply.
    Command(CommandQuery),
    /// The MULTI that opened transaction `n` (the reader's count): refused (NOAUTH, NOPERM),
    /// the connection is not in a transaction after all.
    Multi(u64),
}

/// One reply slot, in request order.
#[derive(Debug)]
enum Slot {
    /// This many replies from the upstream that need no tracking (run-length: a long pipeline of
    /// ordinary commands costs one entry).
    Plain(u64),
    /// One reply from the upstream that changes the proxy's view of the connection.
    Tracked(Track),
    /// A MEM.* request, run when it reaches the front; `silent` under CLIENT REPLY OFF/SKIP.
    Local {
        args: Vec<Vec<u8>>,
        mode: ReplyMode,
        silent: bool,
    },
    /// A reply known at parse time.
    Ready(Reply),
    /// Answered by the proxy and silenced (CLIENT REPLY OFF/SKIP): not sent upstream, no slot.
    Dropped,
    /// A change Redis makes without answering (RESET under CLIENT REPLY SKIP): applied once
    /// every earlier reply is in.
    Quiet(Change),
    /// (P|S)UNSUBSCRIBE outside subscribed mode: Redis answers once per channel (once with none
    /// named) and the connection stays as it was. Under RESP2 these are this many plain replies,
    /// under RESP3 pushes (forwarded as they come, no slot): the protocol in force when the slot
    /// reaches the front decides. They come even under CLIENT REPLY OFF (Redis sends them as pushes).
    Unsubscribed(u64),
    /// Replies owed to a MEM.* command that gave up waiting (timeout): dropped when they come.
    Discard(usize),
    /// From here on the connection is a byte tunnel.
    Tunnel,
    /// HELLO, AUTH or SELECT under CLIENT REPLY OFF|SKIP, which Redis runs without a word: it is
    /// sent between a `CLIENT REPLY ON` and (under OFF) a `CLIENT REPLY OFF` of the proxy's own, so
    /// that its answer says whether the change took effect; neither reaches the client. Queued as
    /// a [`Slot::Discard`] (the ON's `+OK`) and a [`Slot::Silent`].
    Unheard(Change, ReplyMode),
    /// The reply to a [`Slot::Unheard`] change: applied unless an error, not passed on.
    Silent(Change),
    /// `CLIENT REPLY OFF|SKIP`, which Redis answers only when it refuses it (NOAUTH, NOPERM): a
    /// `CLIENT REPLY ON` of the proxy's own goes just before it, and its answer says which.
    /// Nothing behind it is framed until then (their replies depend on it).
    Probe(ReplyMode),
}

/// The probe sent before a client's `CLIENT REPLY OFF|SKIP` (ON changes nothing when the client's
/// replies are on, and is refused exactly when OFF and SKIP are); also what asks a
/// [`Slot::Unheard`] change with replies on (`REPLY_OFF` after it under OFF).
const PROBE: &[u8] = REPLY_ON;

/// Slots queued without a reply yet, beyond which the proxy stops reading from the client.
const MAX_PENDING: usize = 100_000;

type LocalRun = Pin<Box<dyn Future<Output = (Reply, Link)> + Send>>;

/// Serve one accepted client until it or its upstream goes away.
pub async fn serve(client: Stream, engine: Arc<Engine>, shutdown: watch::Receiver<bool>) {
    let tally = Tally::start(&engine);
    let end = session(client, engine, shutdown).await;
    tally.end(&end);
}

async fn session(mut client: Stream, engine: Arc<Engine>, shutdown: watch::Receiver<bool>) -> End {
    let cfg = engine.config();
    let upstream = match engine
        .upstream_addr()
        .connect(Duration::from_millis(cfg.op_timeout_ms))
        .await
    {
        Ok(up) => up,
        Err(reason) => {
            let reason = reason.to_string().replace(['\r', '\n'], " ");
            let line = format!("-ERR upstream unavailable: {reason}\r\n");
            let _ = client.write_all(line.as_bytes()).await;
            let _ = client.shutdown().await;
            return End::Unavailable(reason);
        }
    };
    Session {
        client,
        upstream: Some(upstream),
        engine: engine.clone(),
        shutdown,
        cbuf: BytesMut::with_capacity(16 * 1024),
        ubuf: BytesMut::with_capacity(16 * 1024),
        out: BytesMut::with_capacity(16 * 1024),
        fwd: BytesMut::with_capacity(16 * 1024),
        held: VecDeque::new(),
        intake: Intake::new(Limits::of(cfg)),
        reader: ReaderState::default(),
        slots: VecDeque::new(),
        pending: 0,
        scanner: Scanner::default(),
        state: ClientState::default(),
        local: None,
        tunnel_requested: false,
        resume: false,
        grace: Duration::from_millis(cfg.shutdown_grace_ms),
    }
    .run()
    .await
}

/// Per-connection view kept by the reader (optimistic: it runs ahead of the replies).
#[derive(Default)]
struct ReaderState {
    in_multi: bool,
    replies: Replies,
    /// Inside MULTI: the commands Redis queued so far, and the connection changes among them
    /// (SELECT, HELLO, AUTH), each at its place in EXEC's reply.
    multi_queued: usize,
    multi_changes: Vec<(usize, Change)>,
    /// MULTI, EXEC and DISCARD seen so far: which transaction a MULTI's reply is about.
    multi_seq: u64,
    /// A [`Slot::Probe`] is queued: framing waits for its answer.
    probing: bool,
    /// The MULTI that opened transaction `n` is not answered yet (Redis may refuse it).
    multi_unanswered: Option<u64>,
    /// Framing waits for that answer: the next request is read differently inside a
    /// transaction (a MEM.*, CLIENT REPLY, SELECT, …), and Redis has not said yet whether there
    /// is one.
    multi_wait: bool,
}

impl ReaderState {
    /// Framing waits for an answer from Redis (a probe's, or a MULTI's).
    fn paused(&self) -> bool {
        self.probing || self.multi_wait
    }

    /// Whether `kind` must wait for the open transaction's MULTI to be answered before it is
    /// classified: inside a transaction memproxy answers it, or tracks it, differently. Plain
    /// commands, EXEC and DISCARD are read alike either way (Redis queues or runs them).
    fn waits_for_multi(&self, kind: Kind) -> bool {
        self.in_multi
            && self.multi_unanswered == Some(self.multi_seq)
            && !matches!(
                kind,
                Kind::Plain
                    | Kind::Split(_)
                    | Kind::Every(_)
                    | Kind::Scan
                    | Kind::Config
                    | Kind::Watch
                    | Kind::Unwatch
                    | Kind::Exec
                    | Kind::Discard
                    | Kind::ClientId
                    | Kind::ClientUnblock
            )
    }
}

/// Decide what slot a request takes, by the command table ([`route::kind`]). Returns `None`
/// when Redis sends no reply.
fn classify(req: &Request, buf: &[u8], st: &mut ReaderState) -> Option<Slot> {
    let name = req.arg(buf, 0).unwrap_or_default();
    let arg = |i| req.arg(buf, i).unwrap_or_default();
    let kind = route::kind(&[name, arg(1)]);
    let mode = st.replies.take_mode();
    let silent = mode != ReplyMode::On;
    let mut track = None;
    if st.in_multi {
        if let Some(line) = state::refused_in_multi(kind, name, arg(2), st.replies.is_off()) {
            return Some(if silent {
                Slot::Dropped
            } else {
                Slot::Ready(Reply::Error(line))
            });
        }
        if state::queued_in_multi(kind, name) {
            if let Kind::State(_) = kind {
                let args: Vec<&[u8]> = (0..req.argc()).map(arg).collect();
                if let Some(change) = Change::of(kind, &args) {
                    st.multi_changes.push((st.multi_queued, change));
                }
            }
            st.multi_queued += 1;
        }
    }
    match kind {
        Kind::Mem => {
            return Some(Slot::Local {
                args: req.owned_args(buf),
                mode,
                silent,
            });
        }
        // Inside MULTI, ON is queued as any command (OFF and SKIP were refused above).
        Kind::ClientReply if req.argc() == 3 && !st.in_multi => {
            if let Some(m) = Replies::parse(arg(2)) {
                if m != ReplyMode::On && !silent {
                    st.probing = true;
                    return Some(Slot::Probe(m));
                }
                return st.replies.set(m).then_some(Slot::Plain(1));
            }
        }
        // Assumed to open the transaction (the requests behind it are framed before its
        // reply); corrected when Redis refuses it. A nested MULTI changes nothing.
        Kind::Multi if !st.in_multi => {
            st.in_multi = true;
            st.multi_seq += 1;
            if !silent {
                st.multi_unanswered = Some(st.multi_seq);
            }
            track = Some(Track::Multi(st.multi_seq));
        }
        Kind::Exec | Kind::Discard => {
            let exec = kind == Kind::Exec && st.in_multi;
            st.in_multi = false;
            st.multi_seq += 1;
            st.multi_queued = 0;
            let changes = std::mem::take(&mut st.multi_changes);
            if exec && !changes.is_empty() {
                track = Some(Track::Exec(changes));
            }
        }
        Kind::Command if !st.in_multi => {
            let rest: Vec<&[u8]> = (1..req.argc()).map(arg).collect();
            track = CommandQuery::of(&rest).map(Track::Command);
        }
        Kind::Reset => {
            *st = ReaderState::default();
            return Some(if st.replies.reset(mode) {
                Slot::Tracked(Track::Change(Change::Reset))
            } else {
                // Under SKIP Redis resets without a word: applied when the slot is reached.
                Slot::Quiet(Change::Reset)
            });
        }
        Kind::State(_) if !st.in_multi => {
            let args: Vec<&[u8]> = (0..req.argc()).map(arg).collect();
            match Change::of(kind, &args) {
                // Redis would not say whether it took effect: asked with replies on, the
                // answer read and dropped. Not a change of user under OFF: the OFF that follows
                // would run as the new user, who may not be allowed it (left untracked).
                Some(change) if silent && (mode == ReplyMode::Skip || !change.changes_user()) => {
                    return Some(Slot::Unheard(change, mode));
                }
                change => track = change.map(Track::Change),
            }
        }
        // Subscribed connections are tunnels, so this connection is not subscribed.
        Kind::Unsubscribe if !st.in_multi => {
            return Some(Slot::Unsubscribed(
                req.argc().saturating_sub(1).max(1) as u64
            ));
        }
        Kind::Tunnel if !st.in_multi => return Some(Slot::Tunnel),
        _ => {}
    }
    if silent {
        return None;
    }
    Some(track.map_or(Slot::Plain(1), Slot::Tracked))
}

struct Session {
    client: Stream,
    /// The client's upstream socket; `None` while lent to the running MEM.* command.
    upstream: Option<Stream>,
    engine: Arc<Engine>,
    shutdown: watch::Receiver<bool>,
    /// Client bytes not yet framed.
    cbuf: BytesMut,
    /// Upstream bytes not yet forwarded.
    ubuf: BytesMut,
    /// Client bytes not yet written.
    out: BytesMut,
    /// Request bytes to write upstream now.
    fwd: BytesMut,
    /// Request bytes held behind each queued MEM.* (one segment per barrier, in order).
    held: VecDeque<BytesMut>,
    /// Framing of `cbuf` against the client's bounds.
    intake: Intake,
    reader: ReaderState,
    slots: VecDeque<Slot>,
    /// Replies outstanding (the sum over slots).
    pending: usize,
    scanner: Scanner,
    state: ClientState,
    /// The MEM.* command at the front, running, and whether its reply is silent.
    local: Option<(LocalRun, bool)>,
    /// A tunnel-switching request was seen: client bytes now go upstream unparsed.
    tunnel_requested: bool,
    /// A probe was answered: frame what the client sent meanwhile.
    resume: bool,
    grace: Duration,
}

enum Event {
    ClientRead(std::io::Result<usize>),
    ClientWrote(std::io::Result<usize>),
    UpstreamRead(std::io::Result<usize>),
    UpstreamWrote(std::io::Result<usize>),
    Local(Reply, Box<Link>),
    Shutdown,
    GraceOver,
}

impl Session {
    async fn run(mut self) -> End {
        let mut draining = false;
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            if let Err(lost) = self.serve_front() {
                return self.upstream_lost(lost).await;
            }
            if std::mem::take(&mut self.resume) {
                if let Err(line) = self.take_requests() {
                    return self.refuse(line).await;
                }
                continue;
            }
            if matches!(self.slots.front(), Some(Slot::Tunnel)) && self.local.is_none() {
                return self.tunnel().await;
            }
            if draining && self.slots.is_empty() && self.out.is_empty() {
                return End::Drained;
            }
            let buffered = self.fwd.len() + self.held.iter().map(|h| h.len()).sum::<usize>();
            let read_client = !draining
                && !self.reader.paused()
                && self.slots.len() < MAX_PENDING
                && buffered < self.intake.limits.buffer;
            let lent = self.upstream.is_none();
            let read_up = !lent && self.out.len() < self.intake.limits.buffer;
            let write_up = !lent && !self.fwd.is_empty();
            let write_client = !self.out.is_empty();
            let grace = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let Session {
                client,
                upstream,
                cbuf,
                ubuf,
                out,
                fwd,
                local,
                shutdown,
                ..
            } = &mut self;
            let event = tokio::select! {
                done = Step { stream: client, rbuf: cbuf, wbuf: out, read: read_client }, if read_client || write_client => match done {
                    Done::Read(r) => Event::ClientRead(r),
                    Done::Wrote(r) => Event::ClientWrote(r),
                },
                done = async { Step { stream: upstream.as_mut().expect("guarded"), rbuf: ubuf, wbuf: fwd, read: read_up }.await }, if read_up || write_up => match done {
                    Done::Read(r) => Event::UpstreamRead(r),
                    Done::Wrote(r) => Event::UpstreamWrote(r),
                },
                (reply, link) = async { local.as_mut().expect("guarded").0.as_mut().await }, if local.is_some() => Event::Local(reply, Box::new(link)),
                _ = shutdown.wait_for(|s| *s), if !draining => Event::Shutdown,
                _ = grace => Event::GraceOver,
            };
            match event {
                Event::ClientRead(Ok(n)) if n > 0 => {
                    if let Err(line) = self.take_requests() {
                        return self.refuse(line).await;
                    }
                }
                // The client went away: so does everything pending for it (Redis frees a
                // client that closed, replies and blocked commands included).
                Event::ClientRead(_) | Event::ClientWrote(Err(_)) => return End::ClientGone,
                Event::ClientWrote(Ok(n)) => self.out.advance(n),
                Event::Shutdown => {
                    // Answer what is queued (bounded by the grace), then close.
                    draining = true;
                    deadline = Some(tokio::time::Instant::now() + self.grace);
                }
                Event::UpstreamRead(Ok(n)) if n > 0 => {}
                Event::UpstreamRead(Ok(_)) => {
                    return self.upstream_lost(Lost::upstream(Broken::Closed)).await
                }
                Event::UpstreamRead(Err(e)) => {
                    return self
                        .upstream_lost(Lost::upstream(Broken::Read(e.to_string())))
                        .await
                }
                Event::UpstreamWrote(Ok(n)) => self.fwd.advance(n),
                Event::UpstreamWrote(Err(e)) => {
                    return self
                        .upstream_lost(Lost::upstream(Broken::Write(e.to_string())))
                        .await
                }
                Event::Local(reply, link) => {
                    if let Err(lost) = self.local_done(reply, *link) {
                        return self.upstream_lost(lost).await;
                    }
                }
                Event::GraceOver => return End::Drained,
            }
        }
    }

    /// Where the bytes of a newly framed request go: behind the last queued MEM.*, or out now.
    fn target(&mut self) -> &mut BytesMut {
        match self.held.back_mut() {
            Some(h) => h,
            None => &mut self.fwd,
        }
    }

    fn push_slot(&mut self, slot: Slot) {
        self.pending += match slot {
            Slot::Unsubscribed(n) => n as usize,
            _ => 1,
        };
        if let (Slot::Plain(n), Some(Slot::Plain(last))) = (&slot, self.slots.back_mut()) {
            *last += n;
            return;
        }
        self.slots.push_back(slot);
    }

    /// Frame what the client sent and queue slots; ordinary requests are queued for the upstream
    /// (now, or behind the MEM.* before them). `Err` is a protocol error line for the client.
    fn take_requests(&mut self) -> Result<(), String> {
        if self.reader.paused() {
            return Ok(());
        }
        if self.tunnel_requested {
            let bytes = self.cbuf.split();
            self.target().extend_from_slice(&bytes);
            return Ok(());
        }
        loop {
            match self.intake.next(&self.cbuf) {
                Next::Request(req) => {
                    let len = req.len;
                    if self.reader.in_multi {
                        let name = req.arg(&self.cbuf, 0).unwrap_or_default();
                        let arg1 = req.arg(&self.cbuf, 1).unwrap_or_default();
                        if self.reader.waits_for_multi(route::kind(&[name, arg1])) {
                            self.reader.multi_wait = true;
                            return Ok(());
                        }
                    }
                    let slot = classify(&req, &self.cbuf, &mut self.reader);
                    let bytes = self.cbuf.split_to(len);
                    match slot {
                        Some(Slot::Local {
                            ref args,
                            mode: _,
                            silent: _,
                        }) => {
                            // Only once a MEM.* passed Redis's auth and rights checks since the
                            // last AUTH are queued ones embedded ahead of their turn.
                            if !self.slots.is_empty() && self.state.trusted {
                                self.engine.prefetch(args);
                            }
                            self.push_slot(slot.expect("matched"));
                            self.held.push_back(BytesMut::new());
                        }
                        Some(Slot::Ready(_)) => self.push_slot(slot.expect("matched")),
                        Some(Slot::Unheard(change, mode)) => {
                            let t = self.target();
                            t.extend_from_slice(PROBE);
                            t.extend_from_slice(&bytes);
                            if mode == ReplyMode::Off {
                                t.extend_from_slice(REPLY_OFF);
                            }
                            // The ON's +OK is dropped (owed no error if the upstream breaks).
                            self.slots.push_back(Slot::Discard(1));
                            self.push_slot(Slot::Silent(change));
                        }
                        Some(Slot::Dropped) => {}
                        Some(Slot::Probe(m)) => {
                            let t = self.target();
                            t.extend_from_slice(PROBE);
                            t.extend_from_slice(&bytes);
                            self.push_slot(Slot::Probe(m));
                            return Ok(());
                        }
                        Some(Slot::Tunnel) => {
                            let rest = self.cbuf.split();
                            let t = self.target();
                            t.extend_from_slice(&bytes);
                            t.extend_from_slice(&rest);
                            self.push_slot(Slot::Tunnel);
                            self.tunnel_requested = true;
                            break;
                        }
                        other => {
                            self.target().extend_from_slice(&bytes);
                            if let Some(s) = other {
                                self.push_slot(s);
                            }
                        }
                    }
                }
                Next::Skip(n) => self.cbuf.advance(n),
                Next::Wait => return Ok(()),
                Next::OverLimit(line) => return Err(line),
                Next::Invalid(reason) => {
                    // Redis answers its own protocol error for these bytes; relay it, then tunnel.
                    tracing::debug!(%reason, "protocol error from client; handing it to the upstream");
                    let rest = self.cbuf.split();
                    self.target().extend_from_slice(&rest);
                    self.push_slot(Slot::Tunnel);
                    self.tunnel_requested = true;
                    break;
                }
            }
        }
        Ok(())
    }

    /// Fill front slots from what is at hand; start the front MEM.* command if there is one.
    fn serve_front(&mut self) -> Result<(), Lost> {
        loop {
            // Pushes are forwarded as they come, whatever the front slot is.
            let frame = loop {
                match self
                    .scanner
                    .scan(&self.ubuf)
                    .map_err(|e| Lost::upstream(Broken::Unreadable(e.to_string())))?
                {
                    Some((len, true)) => {
                        let push = self.ubuf.split_to(len);
                        if let Some(Slot::Unsubscribed(n)) = self.slots.front_mut() {
                            if is_unsubscribe_push(&push) {
                                *n -= 1;
                                self.pending -= 1;
                                if *n == 0 {
                                    self.slots.pop_front();
                                }
                            }
                        }
                        self.out.extend_from_slice(&push);
                    }
                    Some((len, false)) => break Some(len),
                    None => break None,
                }
            };
            match self.slots.front_mut() {
                Some(Slot::Plain(n)) => {
                    let Some(len) = frame else { return Ok(()) };
                    let frame = self.ubuf.split_to(len);
                    self.out.extend_from_slice(&frame);
                    self.pending -= 1;
                    *n -= 1;
                    if *n == 0 {
                        self.slots.pop_front();
                    }
                }
                Some(Slot::Tracked(_)) => {
                    let Some(len) = frame else { return Ok(()) };
                    let frame = self.ubuf.split_to(len);
                    let Some(Slot::Tracked(track)) = self.slots.pop_front() else {
                        unreachable!()
                    };
                    self.pending -= 1;
                    if let Track::Command(query) = &track {
                        match query.merge(&frame, self.state.protocol) {
                            Some(merged) => self.out.extend_from_slice(&merged),
                            None => self.out.extend_from_slice(&frame),
                        }
                        continue;
                    }
                    self.track(track, &frame);
                    self.out.extend_from_slice(&frame);
                }
                Some(Slot::Silent(_)) => {
                    let Some(len) = frame else { return Ok(()) };
                    let frame = self.ubuf.split_to(len);
                    let Some(Slot::Silent(change)) = self.slots.pop_front() else {
                        unreachable!()
                    };
                    self.pending -= 1;
                    change.apply(&frame, &mut self.state);
                }
                Some(Slot::Probe(_)) => {
                    let Some(len) = frame else { return Ok(()) };
                    let refused = self.ubuf[0] == b'-';
                    self.ubuf.advance(len);
                    let Some(Slot::Probe(mode)) = self.slots.pop_front() else {
                        unreachable!()
                    };
                    if refused {
                        // The client's own CLIENT REPLY gets the same refusal, as its reply.
                        self.slots.push_front(Slot::Plain(1));
                    } else {
                        self.pending -= 1;
                        self.reader.replies.set(mode);
                    }
                    self.reader.probing = false;
                    self.resume = true;
                }
                Some(Slot::Discard(n)) => {
                    let Some(len) = frame else { return Ok(()) };
                    self.ubuf.advance(len);
                    *n -= 1;
                    if *n == 0 {
                        self.slots.pop_front();
                    }
                }
                Some(Slot::Unsubscribed(n)) => {
                    // RESP2: one array a channel; an error (ACL) answers for all of them. RESP3:
                    // the replies are pushes (counted above), so a reply here is that error.
                    let Some(len) = frame else { return Ok(()) };
                    let frame = self.ubuf.split_to(len);
                    let refused = frame.first() == Some(&b'-');
                    let done = if refused || self.state.protocol == Protocol::Resp3 {
                        *n
                    } else {
                        1
                    };
                    *n -= done;
                    self.pending -= done as usize;
                    if *n == 0 {
                        self.slots.pop_front();
                    }
                    self.out.extend_from_slice(&frame);
                }
                Some(Slot::Quiet(_)) => {
                    let Some(Slot::Quiet(change)) = self.slots.pop_front() else {
                        unreachable!()
                    };
                    self.pending -= 1;
                    change.apply(b"+", &mut self.state);
                }
                Some(Slot::Ready(_)) => {
                    let Some(Slot::Ready(reply)) = self.slots.pop_front() else {
                        unreachable!()
                    };
                    self.pending -= 1;
                    reply.encode(self.state.protocol, &mut self.out);
                }
                Some(Slot::Local { args, mode, silent }) => {
                    // Start it once every byte before it is upstream.
                    if self.local.is_none() && self.fwd.is_empty() {
                        let (args, mode, silent) = (std::mem::take(args), *mode, *silent);
                        let stream = self.upstream.take().expect("upstream is home");
                        let timeout = Duration::from_millis(self.engine.config().op_timeout_ms);
                        let mut link = Link::new(stream, self.ubuf.split(), mode, timeout);
                        let engine = self.engine.clone();
                        let state = self.state.clone();
                        self.local = Some((
                            Box::pin(async move {
                                let reply = engine.execute(args, &state, &mut link).await;
                                (reply, link)
                            }),
                            silent,
                        ));
                    }
                    return Ok(());
                }
                // Never queued (Dropped and Unheard are consumed by take_requests).
                Some(Slot::Tunnel | Slot::Dropped | Slot::Unheard(..)) | None => return Ok(()),
            }
        }
    }

    /// The front MEM.* finished: take the socket back, answer, release the requests held behind.
    fn local_done(&mut self, reply: Reply, link: Link) -> Result<(), Lost> {
        let (_, silent) = self.local.take().expect("local was running");
        self.slots.pop_front();
        self.out.extend_from_slice(&link.pushes);
        if let Some(lost) = link.broken {
            // The command's own answer (the upstream's error) comes first, then every request
            // behind it gets the same; it counts as outstanding when the upstream went.
            if !silent {
                reply.encode(self.state.protocol, &mut self.out);
            }
            return Err(lost);
        }
        self.pending -= 1;
        // Trusted (no PING probe, prefetching) only once Redis has let this connection in; a
        // MEM.* refused before reaching Redis (a syntax error) proves nothing.
        if let Some(trusted) = link.vouches() {
            self.state.trusted = trusted;
        }
        if !silent {
            reply.encode(self.state.protocol, &mut self.out);
        }
        let (restore, restore_owes) = link.restore();
        self.fwd.extend_from_slice(restore);
        self.ubuf = link.buf;
        self.upstream = Some(link.stream);
        if link.owed + restore_owes > 0 {
            self.slots
                .push_front(Slot::Discard(link.owed + restore_owes));
        }
        if let Some(held) = self.held.pop_front() {
            self.fwd.extend_from_slice(&held);
        }
        Ok(())
    }

    /// From the tunnel slot on: the rest of the upstream's bytes go to the client raw, and the
    /// client's to the upstream.
    async fn tunnel(mut self) -> End {
        let Some(mut upstream) = self.upstream.take() else {
            return End::Tunneled;
        };
        self.out.extend_from_slice(&self.ubuf);
        if self.client.write_all(&self.out).await.is_err() {
            return End::ClientGone;
        }
        for held in std::iter::once(self.fwd.split()).chain(self.held.drain(..)) {
            if upstream.write_all(&held).await.is_err() {
                return End::Tunneled;
            }
        }
        if !self.cbuf.is_empty() && upstream.write_all(&self.cbuf).await.is_err() {
            return End::Tunneled;
        }
        super::session::splice(&mut self.client, &mut upstream, self.grace).await;
        End::Tunneled
    }

    fn track(&mut self, track: Track, frame: &[u8]) {
        match track {
            Track::Change(change) => {
                change.apply(frame, &mut self.state);
            }
            Track::Exec(changes) => {
                state::apply_exec(changes, frame, &mut self.state);
            }
            Track::Multi(n) => {
                if self.reader.multi_unanswered == Some(n) {
                    self.reader.multi_unanswered = None;
                }
                if frame.starts_with(b"-") && self.reader.multi_seq == n {
                    let replies = std::mem::take(&mut self.reader.replies);
                    self.reader = ReaderState {
                        replies,
                        multi_seq: n,
                        probing: self.reader.probing,
                        multi_wait: self.reader.multi_wait,
                        ..ReaderState::default()
                    };
                }
                if std::mem::take(&mut self.reader.multi_wait) {
                    self.resume = true;
                }
            }
            Track::Command(_) => {}
        }
    }

    /// The client broke a limit: answer the error line, then close (nothing more is read).
    async fn refuse(mut self, line: String) -> End {
        Reply::Error(line.clone()).encode(self.state.protocol, &mut self.out);
        let _ = tokio::time::timeout(self.grace, self.client.write_all(&self.out)).await;
        let _ = self.client.shutdown().await;
        End::OverLimit(line)
    }

    /// The upstream is gone: every outstanding request gets an error, then the client is closed.
    /// (Nothing outstanding: QUIT, or Redis closing an idle client.)
    async fn upstream_lost(mut self, lost: Lost) -> End {
        // Requests behind an unanswered CLIENT REPLY OFF|SKIP were not framed yet: they are
        // counted as if it had taken effect (as cluster mode counts them).
        // So are requests waiting for a MULTI's answer (as if it had opened the transaction).
        let mut paused = false;
        if let Some(Slot::Probe(mode)) = self.slots.back() {
            let mode = *mode;
            self.reader.replies.set(mode);
            self.reader.probing = false;
            paused = true;
        }
        if std::mem::take(&mut self.reader.multi_wait) {
            self.reader.multi_unanswered = None;
            paused = true;
        }
        if paused {
            let _ = self.take_requests();
        }
        let line = Reply::Error(lost.line());
        while let Some(slot) = self.slots.pop_front() {
            let n = match slot {
                Slot::Local { silent: true, .. }
                | Slot::Discard(_)
                | Slot::Probe(_)
                | Slot::Silent(_) => 0,
                Slot::Plain(n) | Slot::Unsubscribed(n) => n,
                _ => 1,
            };
            for _ in 0..n {
                line.encode(self.state.protocol, &mut self.out);
            }
        }
        let _ = tokio::time::timeout(self.grace, self.client.write_all(&self.out)).await;
        let _ = self.client.shutdown().await;
        End::UpstreamLost(lost, self.pending)
    }
}

/// One I/O step on a stream: write from `wbuf` (when not empty) or read into `rbuf` (when
/// `read`), whichever the stream is ready for first. One future per stream, so any stream type
/// (TCP, unix, TLS) works without splitting it.
struct Step<'a> {
    stream: &'a mut Stream,
    rbuf: &'a mut BytesMut,
    wbuf: &'a [u8],
    read: bool,
}

enum Done {
    Read(std::io::Result<usize>),
    Wrote(std::io::Result<usize>),
}

impl Future for Step<'_> {
    type Output = Done;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Done> {
        use std::task::Poll;
        let this = self.get_mut();
        if !this.wbuf.is_empty() {
            if let Poll::Ready(r) =
                tokio::io::AsyncWrite::poll_write(Pin::new(&mut **this.stream), cx, this.wbuf)
            {
                return Poll::Ready(Done::Wrote(r));
            }
        }
        if this.read {
            if this.rbuf.capacity() - this.rbuf.len() < 4096 {
                this.rbuf.reserve(16 * 1024);
            }
            if let Poll::Ready(r) =
                tokio_util::io::poll_read_buf(Pin::new(&mut **this.stream), cx, this.rbuf)
            {
                return Poll::Ready(Done::Read(r));
            }
        }
        Poll::Pending
    }
}

//! The session core: one client session, whatever the upstream — one Redis, the primary a
//! Sentinel names, or a Redis Cluster's masters. Single and cluster sessions are this one code;
//! they differ only in where a request goes ([`Upstreams`]): to the one upstream connection, or
//! by slot to the connection to its master (opened when first needed, with the client's AUTH /
//! HELLO / CLIENT SETNAME replayed on it), as [`route`] says.
//!
//! Invariants:
//! - every request that Redis would answer gets exactly one reply, in request order; requests
//!   framed together are sent together (one write per connection) and their replies taken in
//!   order;
//! - ordinary requests and replies are forwarded byte for byte, except where a reply is merged
//!   from several masters (split MGET/DEL/…, KEYS, DBSIZE, SCAN's cursor: cluster only);
//! - CLIENT REPLY is kept by the session: the upstream always answers, and the session passes on
//!   what the client asked for (so a silenced HELLO, AUTH or SELECT is still followed);
//! - a MEM.* request runs when its turn comes, on the client's own connection (to its user's
//!   master in cluster mode), lent to the verb as a [`Link`]: same ACL user, database, protocol;
//! - in cluster mode `MOVED` is followed (and the slot map read again), `ASK` is followed with
//!   `ASKING`, up to [`MAX_REDIRECTS`] times; the client never sees either (a single session
//!   passes them on: its upstream is not a cluster as far as it knows);
//! - while a reply is awaited the client is still read: a client that leaves closes every
//!   upstream connection at once (nothing stays blocked in Redis on its behalf); pushes are
//!   passed on as they come;
//! - after (P|S)SUBSCRIBE, MONITOR, SYNC/PSYNC or a protocol error the connection is a byte
//!   tunnel to one node;
//! - an upstream connection that breaks answers an error to every request of the batch not
//!   answered yet (none under CLIENT REPLY OFF), and the client is closed.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::watch;

use super::clients;
use super::route::{self, Kind, Merge, Target, CROSSSLOT};
use super::session::{End, Intake, Limits, Next, Tally};
use super::state::{self, Change, Replies, ReplyMode};
use crate::engine::{ClientState, Engine};
use crate::mem::catalog::CommandQuery;
use crate::resp::{elements, is_unsubscribe_push, Protocol, Reply, Request, Scanner};
use crate::upstream::cluster::topology::Cluster;
use crate::upstream::{encode, Broken, Cmd, Link, Lost, Stream};

/// Redirections followed for one request before its last reply is passed on.
pub const MAX_REDIRECTS: usize = 5;

/// Runs of one MEM.* verb while its slot moves (redirections and TRYAGAIN pauses of 50 ms).
const MEM_RETRIES: usize = 20;

/// SCAN cursors carry the master's position in their low bits: cursor = node cursor × this + i.
const SCAN_NODES: u64 = 1024;

/// A slot no master serves, as Redis Cluster words it.
const CLUSTERDOWN: &str = "CLUSTERDOWN Hash slot not served";

/// Where requests go: the one upstream (a Redis, or a Sentinel's primary) or a cluster.
type Upstreams = Option<Arc<Cluster>>;

/// The name the one upstream connection of a single session goes by among [`Nodes`].
const ONE: &str = "";

/// A client's connection to one master (or to the one upstream).
struct Node {
    stream: Stream,
    buf: BytesMut,
    scanner: Scanner,
    /// This connection's `CLIENT ID` on its master, asked before its first blocking command.
    id: Option<i64>,
    /// Replies still owed to a MEM.* that gave up waiting (its timeout): dropped when they
    /// come, so the connection stays in step and the client keeps it.
    owed: usize,
}

impl Node {
    /// A connection as opened (or handed back by a MEM.* that left `owed` replies behind).
    fn new(stream: Stream, buf: BytesMut, id: Option<i64>, owed: usize) -> Node {
        Node {
            stream,
            buf,
            scanner: Scanner::default(),
            id,
            owed,
        }
    }
}

/// The client's connections, by master (a handful: looked up by name, in order).
#[derive(Default)]
struct Nodes(Vec<(String, Node)>);

impl Nodes {
    fn contains_key(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut Node> {
        self.0
            .iter_mut()
            .find(|(n, _)| n == name)
            .map(|(_, node)| node)
    }

    fn remove(&mut self, name: &str) -> Option<Node> {
        let i = self.0.iter().position(|(n, _)| n == name)?;
        Some(self.0.swap_remove(i).1)
    }

    fn insert(&mut self, name: String, node: Node) {
        self.remove(&name);
        self.0.push((name, node));
    }

    fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(n, _)| n)
    }

    fn clear(&mut self) {
        self.0.clear();
    }

    /// The first read any connection finishes (pending while there are none): which one, and
    /// what it read into its buffer.
    async fn read_any(&mut self) -> (String, std::io::Result<usize>) {
        let (i, r) = read_any(&mut self.0, &mut []).await;
        (self.0[i].0.clone(), r)
    }
}

/// The first read any connection of `a` then `b` finishes (pending while there are none): its
/// place among them, and what it read into its buffer.
async fn read_any(
    a: &mut [(String, Node)],
    b: &mut [(String, Node)],
) -> (usize, std::io::Result<usize>) {
    std::future::poll_fn(|cx| {
        for (i, (_, node)) in a.iter_mut().chain(b.iter_mut()).enumerate() {
            if node.buf.capacity() - node.buf.len() < READ_ROOM / 4 {
                node.buf.reserve(READ_ROOM);
            }
            let stream = std::pin::Pin::new(&mut node.stream);
            if let std::task::Poll::Ready(r) =
                tokio_util::io::poll_read_buf(stream, cx, &mut node.buf)
            {
                return std::task::Poll::Ready((i, r));
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Requests of one master each, waiting to go out together: where each one's bytes are in the
/// batch, which master it goes to (or the error line that answers it), whether its reply is
/// passed on, and whether it may block (the replies before it are then passed on before its
/// own is awaited, as one Redis sends them).
#[derive(Default)]
struct Run {
    masters: Vec<String>,
    writes: Vec<Vec<u8>>,
    reqs: Vec<(Range<usize>, Result<usize, &'static str>, bool)>,
    blocking: Vec<usize>,
}

impl Run {
    fn push(&mut self, raw: Range<usize>, dest: Result<&str, &'static str>, silent: bool) {
        let dest = dest.map(|m| match self.masters.iter().position(|x| x == m) {
            Some(i) => i,
            None => {
                self.masters.push(m.to_string());
                self.masters.len() - 1
            }
        });
        self.reqs.push((raw, dest, silent));
    }

    /// The request pushed last may block.
    fn may_block(&mut self) {
        self.blocking.push(self.reqs.len() - 1);
    }
}

/// The arguments as owned vectors (the requests the session handles itself).
fn owned(view: &[&[u8]]) -> Cmd {
    view.iter().map(|a| a.to_vec()).collect()
}

/// How much room a read from a master has (at least a quarter of it).
const READ_ROOM: usize = 16 * 1024;

/// A master broke while a request awaited it: the session ends. The count of requests owed the
/// error (1 here) is set by [`Session::run`], which knows how much of the batch was answered.
fn lost(node: &str, broken: Broken) -> End {
    End::UpstreamLost(lost_at(node, broken), 1)
}

/// Why the connection to `node` broke: a master's, or the one upstream's ([`ONE`]).
fn lost_at(node: &str, broken: Broken) -> Lost {
    match node {
        ONE => Lost::upstream(broken),
        _ => Lost::at(node, broken),
    }
}

/// A MULTI, open on one master as the client sends it: Redis queues every command itself and
/// answers it (`+QUEUED`, or the error it gives at queue time). It opens on the watching master,
/// else the client's first; the first command with keys moves it to its slot's master if that is
/// another (DISCARD there, MULTI on the new one, the commands so far queued again).
struct Tx {
    /// The master the transaction is open on.
    node: String,
    /// The commands queued before one named a slot (queued again if the transaction moves).
    before_slot: Vec<Cmd>,
    /// The slot of the first queued command with keys.
    slot: Option<u16>,
    /// memproxy refused a command while queueing (Redis never saw it): EXEC is answered
    /// EXECABORT by memproxy, after a DISCARD. A command Redis refused flags Redis's own
    /// transaction, and EXEC gets Redis's answer in its words (`EXECABORT … BUSY …` included).
    failed: bool,
    /// Bytes of `before_slot` (bounded by `max_request_bytes`).
    bytes: usize,
    /// The commands the master queued so far, and the connection-state ones among them (HELLO,
    /// AUTH, CLIENT SETNAME …) at their place in EXEC's reply: each that succeeds there is then
    /// sent to the client's other connections, as outside a transaction.
    queued: usize,
    states: Vec<(usize, Kind, Cmd)>,
}

struct Session {
    engine: Arc<Engine>,
    /// `None` in front of one Redis: every request goes to [`ONE`].
    cluster: Upstreams,
    rd: ReadHalf<Stream>,
    wr: WriteHalf<Stream>,
    cbuf: BytesMut,
    /// Framing of `cbuf` against the client's bounds.
    intake: Intake,
    nodes: Nodes,
    /// Plain requests waiting to go out (kept between batches for its buffers).
    run: Run,
    /// The master keyless commands go to: the first the client used.
    home: Option<String>,
    /// Connection-state commands that succeeded, replayed on every connection opened later.
    setup: Vec<Cmd>,
    state: ClientState,
    tx: Option<Tx>,
    /// The master a WATCH went to: the transaction must run there.
    watched: Option<String>,
    /// CLIENT REPLY: the masters always answer; the session passes on what the client asked for.
    replies: Replies,
    out: BytesMut,
    /// Requests of the current batch answered so far (or silenced): the rest are owed an error
    /// if a master breaks.
    answered: usize,
    timeout: Duration,
    /// memproxy's id for this client (`CLIENT ID`), and whether [`clients`] holds its ids on
    /// the masters it blocked on.
    id: u64,
    registered: bool,
    /// Set when memproxy shuts down: nothing more is read from the client, what was read is
    /// answered.
    shutdown: watch::Receiver<bool>,
    /// A silenced request (CLIENT REPLY OFF|SKIP) is being served: what it adds to `out` is cut
    /// back afterwards ([`Session::silence`]), so pushes are not written out early meanwhile.
    quiet: bool,
}

/// Serve one accepted client until it or its upstream goes away: in front of `cluster`'s
/// masters, or (`None`) of the one upstream, connected to at once (a client that cannot be
/// served is told so before it asks anything).
pub async fn serve(
    mut client: Stream,
    engine: Arc<Engine>,
    cluster: Upstreams,
    shutdown: watch::Receiver<bool>,
) {
    let cfg = engine.config();
    let tally = Tally::start(&engine);
    let mut nodes = Nodes::default();
    if cluster.is_none() {
        match engine
            .upstream_addr()
            .connect(Duration::from_millis(cfg.op_timeout_ms))
            .await
        {
            Ok(stream) => {
                nodes.insert(ONE.to_string(), Node::new(stream, BytesMut::new(), None, 0))
            }
            Err(reason) => {
                let reason = reason.to_string().replace(['\r', '\n'], " ");
                let line = format!("-ERR upstream unavailable: {reason}\r\n");
                let _ = client.write_all(line.as_bytes()).await;
                let _ = client.shutdown().await;
                tally.end(&End::Unavailable(reason));
                return;
            }
        }
    }
    let (rd, wr) = tokio::io::split(client);
    let mut s = Session {
        timeout: Duration::from_millis(cfg.op_timeout_ms),
        engine: engine.clone(),
        cluster,
        rd,
        wr,
        cbuf: BytesMut::with_capacity(16 * 1024),
        intake: Intake::new(Limits::of(cfg)),
        home: (!nodes.0.is_empty()).then(|| ONE.to_string()),
        nodes,
        run: Run::default(),
        setup: Vec::new(),
        state: ClientState::default(),
        tx: None,
        watched: None,
        replies: Replies::default(),
        out: BytesMut::new(),
        answered: 0,
        id: clients::next_id(),
        registered: false,
        shutdown,
        quiet: false,
    };
    let end = s.run().await;
    if s.registered {
        clients::forget(s.id);
    }
    if let End::UpstreamLost(lost, owed) = &end {
        // Every request of the batch not answered yet gets the error.
        if let Some(c) = &s.cluster {
            let _ = c.refresh().await;
        }
        for _ in 0..*owed {
            s.error(&lost.line());
        }
        let _ = s.wr.write_all(&s.out).await;
    }
    let _ = s.wr.shutdown().await;
    tally.end(&end);
}

/// The error lines owed when a master breaks while a batch is served: one for each request from
/// `answered` on that Redis would have answered — none under CLIENT REPLY OFF or SKIP, one a
/// channel for UNSUBSCRIBE (answered even under OFF).
/// `before`: the client's reply mode and whether a transaction was open when the batch began
/// (the batch's CLIENT REPLY, MULTI, EXEC and RESET are replayed over it).
fn owed(
    before: (Replies, bool),
    bytes: &[u8],
    reqs: &[(Range<usize>, Request)],
    answered: usize,
) -> usize {
    let (mut replies, mut tx) = before;
    let mut owed = 0;
    for (i, (raw, req)) in reqs.iter().enumerate() {
        let this = &bytes[raw.clone()];
        let args: Vec<&[u8]> = (0..req.argc()).filter_map(|k| req.arg(this, k)).collect();
        let kind = route::kind(&args);
        let parsed = args.get(2).and_then(|a| Replies::parse(a));
        let lines = match kind {
            Kind::ClientReply if !tx && args.len() == 3 && parsed.is_some() => {
                usize::from(replies.set(parsed.expect("matched")))
            }
            _ => {
                let mode = replies.take_mode();
                match kind {
                    Kind::Unsubscribe if !tx => args.len().saturating_sub(1).max(1),
                    Kind::Reset if !tx => usize::from(replies.reset(mode)),
                    Kind::Multi => {
                        tx = true;
                        usize::from(mode == ReplyMode::On)
                    }
                    Kind::Exec | Kind::Discard => {
                        tx = false;
                        usize::from(mode == ReplyMode::On)
                    }
                    _ => usize::from(mode == ReplyMode::On),
                }
            }
        };
        if i >= answered {
            owed += lines;
        }
    }
    owed
}

impl Session {
    async fn run(&mut self) -> End {
        loop {
            // Every complete request in the buffer, in order, each as the bytes the client sent.
            let mut reqs: Vec<(Range<usize>, Request)> = Vec::with_capacity(32);
            let mut end = 0;
            let mut stop = None;
            loop {
                match self.intake.next(&self.cbuf[end..]) {
                    Next::Request(req) => {
                        let len = req.len;
                        reqs.push((end..end + len, req));
                        end += len;
                    }
                    Next::Skip(n) => end += n,
                    Next::Wait => break,
                    Next::OverLimit(line) => {
                        stop = Some(Err(line));
                        break;
                    }
                    // The bytes go to Redis, which answers its own error
                    // and closes the connection.
                    Next::Invalid(_) => {
                        stop = Some(Ok(()));
                        break;
                    }
                }
                if reqs.len() >= 1024 {
                    break;
                }
            }
            if end > 0 {
                let bytes = self.cbuf.split_to(end).freeze();
                let before = (self.replies, self.tx.is_some());
                self.answered = 0;
                match self.batch(bytes.clone(), &reqs).await {
                    Ok(()) => {}
                    // Every request of the batch not answered yet that Redis would have
                    // answered is owed the error.
                    Err(End::UpstreamLost(lost, _)) => {
                        let owed = owed(before, &bytes, &reqs, self.answered);
                        return End::UpstreamLost(lost, owed);
                    }
                    Err(end) => return end,
                }
                if let Err(e) = self.flush().await {
                    return e;
                }
            }
            match stop {
                Some(Err(line)) => return self.refuse(line).await,
                Some(Ok(())) => return self.tunnel_invalid().await,
                None if end > 0 => continue,
                None => {}
            }
            if *self.shutdown.borrow() {
                // Every request read was answered: nothing is in flight.
                return End::Drained;
            }
            // Idle: the client is read, and so are its masters, whose pushes (CLIENT TRACKING's
            // invalidations) go to it as they come. Pushes that
            // came behind the last reply are passed on first.
            for i in 0..self.nodes.0.len() {
                if self.nodes.0[i].1.buf.is_empty() {
                    continue;
                }
                let node = self.nodes.0[i].0.clone();
                if let Err(end) = self.idle_read(&node, Ok(1)).await {
                    return end;
                }
            }
            let Session {
                rd,
                cbuf,
                nodes,
                shutdown,
                ..
            } = self;
            let idle = tokio::select! {
                r = rd.read_buf(cbuf) => match r {
                    Ok(0) | Err(_) => return End::ClientGone,
                    Ok(_) => None,
                },
                _ = shutdown.changed() => None,
                read = nodes.read_any() => Some(read),
            };
            if let Some((node, read)) = idle {
                if let Err(end) = self.idle_read(&node, read).await {
                    return end;
                }
            }
        }
    }

    /// Bytes came from `node` while nothing was asked of it (`read`, into its buffer): pushes,
    /// passed on, and replies owed to a timed-out MEM.* dropped. Anything else (EOF: Redis
    /// closed the idle connection) ends the session.
    async fn idle_read(&mut self, node: &str, read: std::io::Result<usize>) -> Result<(), End> {
        match read {
            Ok(0) => return Err(End::UpstreamLost(lost_at(node, Broken::Closed), 0)),
            Err(e) => {
                return Err(End::UpstreamLost(
                    lost_at(node, Broken::Read(e.to_string())),
                    0,
                ))
            }
            Ok(_) => {}
        }
        let n = self.nodes.get_mut(node).expect("read from it");
        loop {
            match n.scanner.scan(&n.buf) {
                Ok(Some((len, true))) => {
                    let f = n.buf.split_to(len);
                    self.out.extend_from_slice(&f);
                }
                Ok(Some((len, false))) if n.owed > 0 => {
                    n.buf.advance(len);
                    n.owed -= 1;
                }
                Ok(Some(_)) => {
                    let why = "a reply to no request".to_string();
                    return Err(End::UpstreamLost(lost_at(node, Broken::Unreadable(why)), 0));
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(End::UpstreamLost(
                        lost_at(node, Broken::Unreadable(e.to_string())),
                        0,
                    ))
                }
            }
        }
        self.flush().await
    }

    /// Write what is waiting for the client, reading the client meanwhile (within its bounds,
    /// and not once memproxy shuts down): a client that writes a whole pipeline before it reads
    /// is never left waiting on the proxy while the proxy waits on it.
    async fn flush(&mut self) -> Result<(), End> {
        let bound = match *self.shutdown.borrow() {
            true => 0,
            false => self.intake.limits.buffer + self.intake.limits.request_bytes,
        };
        let Session {
            rd, wr, cbuf, out, ..
        } = self;
        while !out.is_empty() {
            let room = cbuf.len() < bound;
            tokio::select! {
                biased;
                w = wr.write(out) => match w {
                    Ok(0) | Err(_) => return Err(End::ClientGone),
                    Ok(n) => out.advance(n),
                },
                r = rd.read_buf(cbuf), if room => {
                    if matches!(r, Ok(0) | Err(_)) {
                        return Err(End::ClientGone);
                    }
                }
            }
        }
        Ok(())
    }

    async fn refuse(&mut self, line: String) -> End {
        self.error(&line);
        let _ = self.flush().await;
        End::OverLimit(line)
    }

    /// A silenced request's reply (CLIENT REPLY OFF|SKIP) is taken out of what goes to the
    /// client from `mark` on; the pushes that came meanwhile (invalidations) stay.
    fn silence(&mut self, mark: usize) {
        let tail = self.out.split_off(mark);
        let mut at = 0;
        while let Ok(Some((len, push))) = crate::resp::scan_reply(&tail[at..]) {
            if push {
                self.out.extend_from_slice(&tail[at..at + len]);
            }
            at += len;
        }
    }

    fn error(&mut self, line: &str) {
        Reply::Error(line.to_string()).encode(self.state.protocol, &mut self.out);
    }

    /// Serve a batch in order: runs of requests to one master each go out together, as the
    /// client's bytes.
    async fn batch(&mut self, bytes: Bytes, reqs: &[(Range<usize>, Request)]) -> Result<(), End> {
        // Reused from batch to batch (its masters stay known, its buffers keep their room).
        let mut run = std::mem::take(&mut self.run);
        let mut topo = self.cluster.as_ref().map(|c| c.topology());
        let mut view: Vec<&[u8]> = Vec::with_capacity(8);
        // The run's length when the previous request's turn began: a request that did not join
        // the run was answered where it was handled (one that joined is, when passed on).
        let mut began: Option<usize> = None;
        // Requests after this index had their MEM.* texts handed to the model ahead of their turn.
        let mut prefetched = 0;
        for (i, (raw, req)) in reqs.iter().enumerate() {
            self.quiet = false;
            if began.take().is_some_and(|n| run.reqs.len() <= n) {
                self.answered += 1;
            }
            began = Some(run.reqs.len());
            let this = &bytes[raw.clone()];
            view.clear();
            view.extend((0..req.argc()).filter_map(|k| req.arg(this, k)));
            let kind = match self.cluster {
                Some(_) => route::kind(&view),
                None => route::kind_single(&view),
            };
            if kind == Kind::ClientReply && self.tx.is_none() {
                self.plain_run(&bytes, &mut run).await?;
                self.client_reply(&view).await?;
                continue;
            }
            // CLIENT REPLY OFF / SKIP: the request runs, its reply is not passed on.
            let mode = self.replies.take_mode();
            let silent = mode != ReplyMode::On;
            // RESET runs at once inside a transaction too (it discards it), as in Redis.
            if self.tx.is_some()
                && !matches!(
                    kind,
                    Kind::Exec | Kind::Discard | Kind::Multi | Kind::Watch | Kind::Reset
                )
            {
                self.plain_run(&bytes, &mut run).await?;
                let mark = self.out.len();
                self.quiet = silent;
                self.queue(owned(&view), kind).await?;
                self.quiet = false;
                if silent {
                    self.silence(mark);
                }
                continue;
            }
            if kind == Kind::Plain && self.cluster.is_none() {
                if !self.nodes.contains_key(ONE) {
                    self.home().await?;
                }
                run.push(raw.clone(), Ok(ONE), silent);
                if route::blocks(view[0]) {
                    run.may_block();
                }
                continue;
            }
            if let (Some(cluster), Kind::Plain | Kind::Split(_)) = (self.cluster.as_ref(), kind) {
                if run.reqs.is_empty() {
                    // The map as it is now (a redirection in the last run may have changed it).
                    topo = Some(cluster.topology());
                }
                // Asked before its first blocking command on a master: the client's id there.
                let blocks = route::blocks(view[0]);
                // A split command whose keys share a slot is a plain request.
                let target = route::target(cluster, &view).await;
                match target {
                    Target::Cross if kind != Kind::Plain => {}
                    Target::Cross => {
                        run.push(raw.clone(), Err(CROSSSLOT), silent);
                        continue;
                    }
                    Target::Any => {
                        let home = self.home().await?;
                        if blocks {
                            self.learn_id(&home).await?;
                        }
                        run.push(raw.clone(), Ok(&home), silent);
                        if blocks {
                            run.may_block();
                        }
                        continue;
                    }
                    Target::Slot(s) if blocks => {
                        let m = self.master_of(s).await;
                        if let Some(m) = &m {
                            self.learn_id(m).await?;
                        }
                        run.push(raw.clone(), m.as_deref().ok_or(CLUSTERDOWN), silent);
                        run.may_block();
                        continue;
                    }
                    Target::Slot(s) => {
                        match topo.as_ref().and_then(|t| t.master_of(s)) {
                            Some(m) => run.push(raw.clone(), Ok(m), silent),
                            None => {
                                let m = self.master_of(s).await;
                                run.push(raw.clone(), m.as_deref().ok_or(CLUSTERDOWN), silent);
                            }
                        }
                        continue;
                    }
                }
            }
            self.plain_run(&bytes, &mut run).await?;
            if kind == Kind::Unsubscribe {
                // Answered even under CLIENT REPLY OFF, as Redis sends these as pushes.
                self.unsubscribe(owned(&view)).await?;
                continue;
            }
            if kind == Kind::Tunnel {
                let tail = bytes.slice(raw.start..);
                return self.tunnel(owned(&view), &tail).await;
            }
            let args = owned(&view);
            let mark = self.out.len();
            self.quiet = silent;
            match kind {
                // Plain requests join the run, CLIENT REPLY is kept above (and refused in MULTI).
                Kind::Plain | Kind::ClientReply | Kind::Unsubscribe | Kind::Tunnel => {
                    unreachable!("handled above")
                }
                Kind::ClientId => self
                    .out
                    .extend_from_slice(format!(":{}\r\n", self.id).as_bytes()),
                Kind::ClientUnblock => self.unblock(args).await?,
                Kind::State(_) => {
                    match route::tracking_refused(&args).filter(|_| self.cluster.is_some()) {
                        Some(line) => self.error(line),
                        None => self.state_cmd(kind, args).await?,
                    }
                }
                Kind::Command => self.command(args).await?,
                Kind::Reset => {
                    let f = self.everywhere(args).await?;
                    self.setup.clear();
                    Change::Reset.apply(&f, &mut self.state);
                    self.tx = None;
                    self.watched = None;
                    if self.replies.reset(mode) {
                        // Answered under OFF too: RESET turns replies on before it answers.
                        continue;
                    }
                }
                Kind::Multi => {
                    if self.tx.is_some() {
                        self.error("ERR MULTI calls can not be nested");
                    } else {
                        self.multi(args).await?;
                    }
                }
                Kind::Exec => self.exec(args).await?,
                Kind::Discard => self.discard(args).await?,
                Kind::Watch => self.watch(args).await?,
                Kind::Unwatch => match self.watched.take() {
                    Some(node) => {
                        let f = self.one(&node, &args).await?;
                        self.out.extend_from_slice(&f);
                    }
                    None => self.out.extend_from_slice(b"+OK\r\n"),
                },
                Kind::Split(merge) => self.split(args, merge).await?,
                Kind::Every(merge) => self.every(args, merge).await?,
                Kind::Config => self.every(args, Merge::First).await?,
                Kind::Scan => self.scan(args).await?,
                Kind::Mem => {
                    // Once a MEM.* got past Redis's authentication and rights
                    // checks, the MEM.* framed behind it are embedded ahead of their turn (the
                    // model batches them while this one runs).
                    if self.state.trusted && prefetched <= i {
                        prefetched = reqs.len();
                        self.prefetch(&bytes, &reqs[i + 1..]);
                    }
                    self.mem(args).await?
                }
                Kind::Refused(line) => self.error(line),
            }
            if silent {
                self.silence(mark);
            }
        }
        self.quiet = false;
        if began.is_some_and(|n| run.reqs.len() <= n) {
            self.answered += 1;
        }
        self.plain_run(&bytes, &mut run).await?;
        self.run = run;
        Ok(())
    }

    /// The texts of the MEM.* among `reqs` (ranges of `bytes`) to the model's cache.
    fn prefetch(&self, bytes: &[u8], reqs: &[(Range<usize>, Request)]) {
        for (raw, req) in reqs {
            let this = &bytes[raw.clone()];
            let name = req.arg(this, 0).unwrap_or_default();
            if route::kind(&[name, req.arg(this, 1).unwrap_or_default()]) == Kind::Mem {
                self.engine.prefetch(&req.owned_args(this));
            }
        }
    }

    /// CLIENT REPLY ON (answered `+OK`), OFF, SKIP (not answered), as Redis keeps it. Redis
    /// checks it first on the client's first master (NOAUTH, NOPERM, a malformed form, in its
    /// own words): a CLIENT REPLY ON there changes nothing (the masters always answer) and is
    /// refused exactly when the client's request would be.
    async fn client_reply(&mut self, args: &[&[u8]]) -> Result<(), End> {
        let home = self.home().await?;
        let asked = args.get(2).and_then(|a| Replies::parse(a));
        let check: Cmd = match asked {
            Some(_) if args.len() == 3 => {
                vec![b"CLIENT".to_vec(), b"REPLY".to_vec(), b"ON".to_vec()]
            }
            _ => owned(args),
        };
        let f = self.one(&home, &check).await?;
        match asked {
            Some(m) if args.len() == 3 && f.first() != Some(&b'-') => {
                if self.replies.set(m) {
                    self.out.extend_from_slice(b"+OK\r\n");
                }
            }
            _ => {
                if self.replies.take_mode() == ReplyMode::On {
                    self.out.extend_from_slice(&f);
                }
            }
        }
        Ok(())
    }

    /// The master of `slot` (the map read again once if no master serves it).
    async fn master_of(&self, slot: u16) -> Option<String> {
        let Some(cluster) = &self.cluster else {
            return Some(ONE.to_string());
        };
        if let Some(m) = cluster.topology().master_of(slot) {
            return Some(m.clone());
        }
        let _ = cluster.refresh().await;
        cluster.topology().master_of(slot).cloned()
    }

    /// Every master (the one upstream in a single session).
    fn masters(&self) -> Vec<String> {
        match &self.cluster {
            Some(c) => c.topology().masters.clone(),
            None => vec![ONE.to_string()],
        }
    }

    /// The client's first master (opened now if need be).
    async fn home(&mut self) -> Result<String, End> {
        if let Some(h) = &self.home {
            if self.nodes.contains_key(h) {
                return Ok(h.clone());
            }
        }
        let first = self
            .masters()
            .first()
            .cloned()
            .ok_or_else(|| End::UpstreamLost(Lost::upstream(Broken::NoMaster), 1))?;
        self.open(&first).await?;
        self.home = Some(first.clone());
        Ok(first)
    }

    /// A connection to `node`, opened and set up as the client's other connections are.
    async fn open(&mut self, node: &str) -> Result<(), End> {
        if self.nodes.contains_key(node) {
            return Ok(());
        }
        let addr = match &self.cluster {
            Some(c) => c.addr_of(node),
            None => self.engine.upstream_addr().clone(),
        };
        let stream = addr
            .connect(self.timeout)
            .await
            .map_err(|e| lost(node, Broken::Unavailable(e.to_string())))?;
        let mut n = Node::new(stream, BytesMut::new(), None, 0);
        if !self.setup.is_empty() {
            let mut w = Vec::new();
            for c in &self.setup {
                encode(c, &mut w);
            }
            let setup = async {
                n.stream
                    .write_all(&w)
                    .await
                    .map_err(|e| Broken::Write(e.to_string()))?;
                let mut left = self.setup.len();
                while left > 0 {
                    match n.scanner.scan(&n.buf) {
                        Ok(Some((len, push))) => {
                            n.buf.advance(len);
                            if !push {
                                left -= 1;
                            }
                        }
                        Ok(None) => match n.stream.read_buf(&mut n.buf).await {
                            Ok(0) => return Err(Broken::Closed),
                            Ok(_) => {}
                            Err(e) => return Err(Broken::Read(e.to_string())),
                        },
                        Err(e) => return Err(Broken::Unreadable(e.to_string())),
                    }
                }
                Ok(())
            };
            tokio::time::timeout(self.timeout, setup)
                .await
                .map_err(|_| lost(node, Broken::SetupTimeout))?
                .map_err(|b| lost(node, b))?;
        }
        if self.home.is_none() {
            self.home = Some(node.to_string());
        }
        self.nodes.insert(node.to_string(), n);
        Ok(())
    }

    async fn send(&mut self, node: &str, bytes: &[u8]) -> Result<(), End> {
        self.open(node).await?;
        let n = self.nodes.get_mut(node).expect("opened");
        if let Err(e) = n.stream.write_all(bytes).await {
            self.nodes.remove(node);
            return Err(lost(node, Broken::Write(e.to_string())));
        }
        Ok(())
    }

    /// (P|S)UNSUBSCRIBE, not subscribed: Redis answers once a channel named (once with none),
    /// as arrays under RESP2 and as pushes under RESP3; an error (ACL, CROSSSLOT) answers for all.
    async fn unsubscribe(&mut self, args: Cmd) -> Result<(), End> {
        let target = match &self.cluster {
            Some(c) => route::target(c, &args).await,
            None => Target::Any,
        };
        let node = match target {
            Target::Cross => Err(CROSSSLOT),
            Target::Any => Ok(self.home().await?),
            Target::Slot(s) => self.master_of(s).await.ok_or(CLUSTERDOWN),
        };
        let node = match node {
            Ok(n) => n,
            Err(line) => {
                self.error(line);
                return Ok(());
            }
        };
        let mut w = Vec::new();
        encode(&args, &mut w);
        self.send(&node, &w).await?;
        let resp3 = self.state.protocol == Protocol::Resp3;
        for _ in 0..args.len().saturating_sub(1).max(1) {
            let f = self
                .frame_or(&node, |push| resp3 && is_unsubscribe_push(push))
                .await?;
            self.out.extend_from_slice(&f);
            if f.first() == Some(&b'-') {
                break;
            }
        }
        Ok(())
    }

    /// The next reply from `node` (pushes go to the client as they come), reading the client
    /// meanwhile so that its going away is seen at once.
    async fn frame(&mut self, node: &str) -> Result<BytesMut, End> {
        self.frame_or(node, |_| false).await
    }

    /// Read `node` until the replies owed to a MEM.* that timed out on it are in (and dropped).
    async fn settle(&mut self, node: &str) -> Result<(), End> {
        self.await_reply(node, |_| false, true).await.map(|_| ())
    }

    /// [`Session::frame`], or the first push for which `wanted` is true (not forwarded).
    async fn frame_or(
        &mut self,
        node: &str,
        wanted: impl Fn(&[u8]) -> bool,
    ) -> Result<BytesMut, End> {
        self.await_reply(node, wanted, false).await
    }

    /// The next reply from `node` (replies owed to a timed-out MEM.* are dropped first; with
    /// `settle`, an empty frame once they are), or the first push for which `wanted` is true.
    /// Meanwhile the client's other masters are read too: pushes from any master (CLIENT
    /// TRACKING's invalidations) go to the client as they come — at once, unless the request
    /// being served is silenced (`quiet`: they then go with the next reply) — also while a
    /// blocking command waits; replies that come early from another master wait in its buffer.
    async fn await_reply(
        &mut self,
        node: &str,
        wanted: impl Fn(&[u8]) -> bool,
        settle: bool,
    ) -> Result<BytesMut, End> {
        let Session {
            nodes,
            rd,
            wr,
            cbuf,
            out,
            intake,
            shutdown,
            quiet,
            state,
            ..
        } = self;
        let i = nodes
            .0
            .iter()
            .position(|(n, _)| n == node)
            .ok_or_else(|| lost(node, Broken::Closed))?;
        // Once memproxy shuts down the client is no longer read (polled only while waiting).
        let mut stopping = *shutdown.borrow();
        let mut stop = std::pin::pin!(shutdown.changed());
        let resp3 = state.protocol == Protocol::Resp3;
        loop {
            let mut pushed = false;
            let n = &mut nodes.0[i].1;
            loop {
                if settle && n.owed == 0 {
                    return Ok(BytesMut::new());
                }
                match n.scanner.scan(&n.buf) {
                    Ok(Some((len, push))) => {
                        let f = n.buf.split_to(len);
                        if push && !wanted(&f) {
                            out.extend_from_slice(&f);
                            pushed = true;
                            continue;
                        }
                        if !push && n.owed > 0 {
                            n.owed -= 1;
                            continue;
                        }
                        return Ok(f);
                    }
                    Ok(None) => break,
                    Err(e) => return Err(lost(node, Broken::Unreadable(e.to_string()))),
                }
            }
            if pushed && !*quiet {
                wr.write_all(out).await.map_err(|_| End::ClientGone)?;
                out.clear();
            }
            let room = !stopping && cbuf.len() < intake.limits.buffer + intake.limits.request_bytes;
            let (before, rest) = nodes.0.split_at_mut(i);
            let (this, after) = rest.split_first_mut().expect("found above");
            let n = &mut this.1;
            if n.buf.capacity() - n.buf.len() < READ_ROOM / 4 {
                // Read in large pieces: an empty BytesMut would be read 64 bytes at a time,
                // and the room left after frames are split off shrinks to a few bytes.
                n.buf.reserve(READ_ROOM);
            }
            let other = tokio::select! {
                r = n.stream.read_buf(&mut n.buf) => match r {
                    Ok(0) => return Err(lost(node, Broken::Closed)),
                    Err(e) => return Err(lost(node, Broken::Read(e.to_string()))),
                    Ok(_) => None,
                },
                r = rd.read_buf(cbuf), if room => match r {
                    Ok(0) | Err(_) => return Err(End::ClientGone),
                    Ok(_) => None,
                },
                _ = &mut stop, if !stopping => {
                    stopping = true;
                    None
                }
                // Pushes exist under RESP3 only (a subscribed client is a tunnel).
                read = read_any(before, after), if resp3 => Some(read),
            };
            if let Some((j, read)) = other {
                // `j` counts the other connections: past `i`, one more.
                let j = if j < i { j } else { j + 1 };
                let (name, n) = &mut nodes.0[j];
                match read {
                    Ok(0) => return Err(lost(name, Broken::Closed)),
                    Err(e) => return Err(lost(name, Broken::Read(e.to_string()))),
                    Ok(_) => {}
                }
                // Its leading pushes go out; a reply (to a request of this run) waits.
                let mut moved = false;
                while let Ok(Some((len, true))) = n.scanner.scan(&n.buf) {
                    out.extend_from_slice(&n.buf.split_to(len));
                    moved = true;
                }
                if moved && !*quiet {
                    wr.write_all(out).await.map_err(|_| End::ClientGone)?;
                    out.clear();
                }
            }
        }
    }

    /// One command to `node`, its reply (redirections followed).
    async fn one(&mut self, node: &str, args: &[Vec<u8>]) -> Result<BytesMut, End> {
        let mut w = Vec::new();
        encode(args, &mut w);
        self.send(node, &w).await?;
        let f = self.frame(node).await?;
        self.follow(&w, f).await
    }

    /// The requests of `run` (ranges of `bytes`), sent together (one write per master), replies
    /// taken in order; `run` is left empty.
    async fn plain_run(&mut self, bytes: &[u8], run: &mut Run) -> Result<(), End> {
        if run.reqs.is_empty() {
            return Ok(());
        }
        run.writes.resize_with(run.masters.len(), Vec::new);
        for (raw, dest, _) in &run.reqs {
            if let Ok(m) = dest {
                run.writes[*m].extend_from_slice(&bytes[raw.clone()]);
            }
        }
        for (m, w) in run.masters.iter().zip(run.writes.iter_mut()) {
            if !w.is_empty() {
                self.send(m, w).await?;
                w.clear();
            }
        }
        let reqs = std::mem::take(&mut run.reqs);
        let blocking = std::mem::take(&mut run.blocking);
        // Replies in request order, passed on as they come (the client is written to once
        // `client_buffer_bytes` are waiting, so a client that does not read holds the rest in
        // Redis, not here). At the first redirection every later reply is read first, so that
        // the connections are idle when the redirected requests are sent again.
        let mut held: Vec<Result<BytesMut, &'static str>> = Vec::new();
        for (i, (raw, dest, silent)) in reqs.iter().enumerate() {
            if held.is_empty() && blocking.contains(&i) {
                // What came before it reaches the client before it may block.
                self.flush().await?;
            }
            let reply = match dest {
                Ok(m) => Ok(self.frame(&run.masters[*m]).await?),
                Err(line) => Err(*line),
            };
            let redirected =
                self.cluster.is_some() && matches!(&reply, Ok(f) if redirect(f).is_some());
            if redirected || !held.is_empty() {
                held.push(reply);
                continue;
            }
            self.pass_on(&bytes[raw.clone()], reply, *silent).await?;
            if self.out.len() >= self.intake.limits.buffer {
                self.flush().await?;
            }
        }
        let done = reqs.len() - held.len();
        for ((raw, _, silent), reply) in reqs.iter().skip(done).zip(held) {
            self.pass_on(&bytes[raw.clone()], reply, *silent).await?;
        }
        run.reqs = reqs;
        run.reqs.clear();
        run.blocking = blocking;
        run.blocking.clear();
        Ok(())
    }

    /// One plain request's reply to the client (redirections followed first), unless silenced.
    async fn pass_on(
        &mut self,
        raw: &[u8],
        reply: Result<BytesMut, &'static str>,
        silent: bool,
    ) -> Result<(), End> {
        match reply {
            Ok(f) => {
                let f = self.follow(raw, f).await?;
                if !silent {
                    self.out.extend_from_slice(&f);
                }
            }
            Err(line) => {
                if !silent {
                    self.error(line)
                }
            }
        }
        self.answered += 1;
        Ok(())
    }

    /// Follow `MOVED` / `ASK` for the request `raw` (as sent) until a real reply (or
    /// [`MAX_REDIRECTS`]).
    async fn follow(&mut self, raw: &[u8], mut f: BytesMut) -> Result<BytesMut, End> {
        if redirect(&f).is_none() {
            return Ok(f);
        }
        let Some(cluster) = self.cluster.clone() else {
            return Ok(f);
        };
        for _ in 0..MAX_REDIRECTS {
            let Some((ask, node)) = redirect(&f) else {
                return Ok(f);
            };
            let mut w = Vec::with_capacity(raw.len() + 16);
            if ask {
                w.extend_from_slice(b"*1\r\n$6\r\nASKING\r\n");
            } else {
                let _ = cluster.refresh().await;
            }
            w.extend_from_slice(raw);
            self.send(&node, &w).await?;
            if ask {
                let _ = self.frame(&node).await?;
            }
            f = self.frame(&node).await?;
        }
        Ok(f)
    }

    /// AUTH, HELLO, SELECT, CLIENT SETNAME …: on every open connection; the home connection's
    /// reply is the client's; kept for later connections when it succeeded.
    /// CLIENT TRACKING … BCAST first opens a connection to every master: a broadcast covers keys
    /// the client never read, on masters it may not use yet.
    async fn state_cmd(&mut self, kind: Kind, args: Cmd) -> Result<(), End> {
        let home = self.home().await?;
        if route::tracking_option(&args, "bcast") {
            for m in self.masters() {
                self.open(&m).await?;
            }
        }
        let f = self.one(&home, &args).await?;
        let others: Vec<String> = self.nodes.keys().filter(|n| **n != home).cloned().collect();
        for n in others {
            let _ = self.one(&n, &args).await?;
        }
        let ok = !matches!(f.first(), Some(b'-') | Some(b'!'));
        if ok {
            if let Some(change) = Change::of(kind, &args) {
                change.apply(&f, &mut self.state);
            }
            self.setup.push(args);
        }
        self.out.extend_from_slice(&f);
        Ok(())
    }

    /// COMMAND …: the home master's reply with the MEM.* entries merged in.
    async fn command(&mut self, args: Cmd) -> Result<(), End> {
        let home = self.home().await?;
        let f = self.one(&home, &args).await?;
        let rest: Vec<&[u8]> = args[1..].iter().map(Vec::as_slice).collect();
        match CommandQuery::of(&rest).and_then(|q| q.merge(&f, self.state.protocol)) {
            Some(merged) => self.out.extend_from_slice(&merged),
            None => self.out.extend_from_slice(&f),
        }
        Ok(())
    }

    /// RESET on every open connection (the home one's reply to the client).
    async fn everywhere(&mut self, args: Cmd) -> Result<BytesMut, End> {
        let home = self.home().await?;
        let f = self.one(&home, &args).await?;
        let others: Vec<String> = self.nodes.keys().filter(|n| **n != home).cloned().collect();
        for n in others {
            let _ = self.one(&n, &args).await?;
        }
        self.out.extend_from_slice(&f);
        Ok(f)
    }

    /// One command to `node` and its reply, redirections not followed (inside a transaction a
    /// command must not run elsewhere).
    async fn one_here(&mut self, node: &str, args: &[Vec<u8>]) -> Result<BytesMut, End> {
        let mut w = Vec::new();
        encode(args, &mut w);
        self.send(node, &w).await?;
        self.frame(node).await
    }

    /// This client's `CLIENT ID` on `node`, asked once a connection (the connection is idle:
    /// the run before was answered, this one not sent yet) and kept in [`clients`]. A master
    /// that refuses it (an ACL without CLIENT) leaves the client unreachable by CLIENT UNBLOCK.
    async fn learn_id(&mut self, node: &str) -> Result<(), End> {
        self.open(node).await?;
        if self.nodes.get_mut(node).is_some_and(|n| n.id.is_some()) {
            return Ok(());
        }
        let f = self
            .one_here(node, &[b"CLIENT".to_vec(), b"ID".to_vec()])
            .await?;
        let there = f
            .strip_prefix(b":")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.trim_end().parse::<i64>().ok());
        if let Some(there) = there {
            if let Some(n) = self.nodes.get_mut(node) {
                n.id = Some(there);
            }
            clients::record(self.id, node, there);
            self.registered = true;
        }
        Ok(())
    }

    /// `CLIENT UNBLOCK id [TIMEOUT|ERROR]`: to each master the client `id` blocked on, under its
    /// id there, until one unblocks it (`:1`); `:0` if none does. An id memproxy does not know
    /// goes to the client's first master as 0 (no client has it), so that Redis still checks
    /// the caller's permission and the reason's spelling.
    async fn unblock(&mut self, mut args: Cmd) -> Result<(), End> {
        let id: u64 = std::str::from_utf8(&args[2])
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut reply: Option<BytesMut> = None;
        let masters = self.masters();
        for (node, there) in clients::on_masters(id) {
            if !masters.contains(&node) {
                continue;
            }
            args[2] = there.to_string().into_bytes();
            let f = self.one_here(&node, &args).await?;
            let unblocked = f.as_ref() == b":1\r\n";
            if unblocked || reply.is_none() || f.first() == Some(&b'-') {
                reply = Some(f);
            }
            if unblocked {
                break;
            }
        }
        let f = match reply {
            Some(f) => f,
            None => {
                args[2] = b"0".to_vec();
                let home = self.home().await?;
                self.one_here(&home, &args).await?
            }
        };
        self.out.extend_from_slice(&f);
        Ok(())
    }

    /// MULTI, opened on the watching master or the client's first.
    async fn multi(&mut self, args: Cmd) -> Result<(), End> {
        let node = match &self.watched {
            Some(w) => w.clone(),
            None => self.home().await?,
        };
        let f = self.one_here(&node, &args).await?;
        if f.first() != Some(&b'-') {
            self.tx = Some(Tx {
                node,
                before_slot: Vec::new(),
                slot: None,
                failed: false,
                bytes: 0,
                queued: 0,
                states: Vec::new(),
            });
        }
        self.out.extend_from_slice(&f);
        Ok(())
    }

    /// A command inside MULTI: checked for its slot, then queued by the transaction's master,
    /// which answers it.
    async fn queue(&mut self, args: Cmd, kind: Kind) -> Result<(), End> {
        // Refused (the transaction goes on without them).
        let arg2 = args.get(2).map_or(&[][..], |a| &a[..]);
        if let Some(line) = state::refused_in_multi(kind, &args[0], arg2, self.replies.is_off()) {
            self.error(&line);
            return Ok(());
        }
        if self.queue_in_cluster(&args, kind).await? {
            return Ok(());
        }
        let node = self.tx.as_ref().expect("in MULTI").node.clone();
        let f = self.one_here(&node, &args).await?;
        let tx = self.tx.as_mut().expect("in MULTI");
        if f.first() != Some(&b'-') {
            if let Kind::State(_) = kind {
                tx.states.push((tx.queued, kind, args));
            }
            tx.queued += 1;
        }
        self.out.extend_from_slice(&f);
        Ok(())
    }

    /// A command inside MULTI in cluster mode: refused (`true`, the error line given) if it
    /// cannot run in one master's transaction, else its slot checked against the transaction's
    /// and the transaction moved to that slot's master if need be. Nothing in a single session.
    async fn queue_in_cluster(&mut self, args: &Cmd, kind: Kind) -> Result<bool, End> {
        let Some(cluster) = self.cluster.clone() else {
            return Ok(false);
        };
        let line = match kind {
            // INFO and RANDOMKEY inside a transaction are the transaction master's (queued
            // there, as Redis does).
            Kind::Every(Merge::Info | Merge::Random) => None,
            Kind::Tunnel | Kind::Every(_) | Kind::Scan => Some(format!(
                "ERR {} inside MULTI is not supported by memproxy in cluster mode",
                String::from_utf8_lossy(&args[0]).to_uppercase()
            )),
            Kind::Refused(l) => Some(l.to_string()),
            Kind::State(_) => route::tracking_refused(args).map(str::to_string),
            Kind::ClientId | Kind::ClientUnblock => Some(format!(
                "ERR CLIENT {} inside MULTI is not supported by memproxy in cluster mode",
                String::from_utf8_lossy(&args[1]).to_uppercase()
            )),
            _ => None,
        };
        if let Some(line) = line {
            self.error(&line);
            self.tx.as_mut().expect("in MULTI").failed = true;
            return Ok(true);
        }
        let target = route::target(&cluster, args).await;
        let slot = match target {
            Target::Cross => Err(CROSSSLOT),
            Target::Slot(s) => match self.tx.as_ref().expect("in MULTI").slot {
                Some(t) if t != s => Err(CROSSSLOT),
                Some(_) => Ok(None),
                None => Ok(Some(s)),
            },
            Target::Any => Ok(None),
        };
        let first_slot = match slot {
            Err(line) => {
                self.tx.as_mut().expect("in MULTI").failed = true;
                self.error(line);
                return Ok(true);
            }
            Ok(s) => s,
        };
        if let Some(s) = first_slot {
            let Some(master) = self.master_of(s).await else {
                self.tx.as_mut().expect("in MULTI").failed = true;
                self.error(CLUSTERDOWN);
                return Ok(true);
            };
            if master != self.tx.as_ref().expect("in MULTI").node {
                if self.watched.is_some() {
                    // WATCH is kept by the watching master: EXEC must run there.
                    self.tx.as_mut().expect("in MULTI").failed = true;
                    self.error(CROSSSLOT);
                    return Ok(true);
                }
                self.move_tx(&master).await?;
            }
            let tx = self.tx.as_mut().expect("in MULTI");
            tx.slot = Some(s);
            tx.before_slot.clear();
        } else if self.tx.as_ref().expect("in MULTI").slot.is_none() {
            let size: usize = args.iter().map(Vec::len).sum();
            let tx = self.tx.as_mut().expect("in MULTI");
            if tx.bytes + size > self.intake.limits.request_bytes {
                // Kept until a key names the master: at most one request's worth.
                tx.failed = true;
                self.error("ERR the commands before the first key of a transaction are larger than max_request_bytes (memproxy keeps them until a key names the master in cluster mode)");
                return Ok(true);
            }
            tx.bytes += size;
            tx.before_slot.push(args.clone());
        }
        Ok(false)
    }

    /// Move the open transaction to `master`: DISCARD where it is, MULTI there, the commands
    /// queued so far (keyless ones) queued again (their answers were given already).
    async fn move_tx(&mut self, master: &str) -> Result<(), End> {
        let (old, cmds) = {
            let tx = self.tx.as_mut().expect("in MULTI");
            (tx.node.clone(), std::mem::take(&mut tx.before_slot))
        };
        let _ = self.one_here(&old, &[b"DISCARD".to_vec()]).await?;
        let f = self.one_here(master, &[b"MULTI".to_vec()]).await?;
        let mut failed = f.first() == Some(&b'-');
        for c in &cmds {
            let f = self.one_here(master, c).await?;
            failed |= f.first() == Some(&b'-');
        }
        let tx = self.tx.as_mut().expect("in MULTI");
        tx.node = master.to_string();
        tx.failed |= failed;
        Ok(())
    }

    /// EXEC or DISCARD: the open transaction, taken (every WATCH ends with it); without one the
    /// request goes to the client's first master as it is, and Redis answers it (`None`).
    async fn close_tx(&mut self, args: &Cmd) -> Result<Option<Tx>, End> {
        let Some(tx) = self.tx.take() else {
            let home = self.home().await?;
            let f = self.one(&home, args).await?;
            self.out.extend_from_slice(&f);
            return Ok(None);
        };
        self.watched = None;
        Ok(Some(tx))
    }

    async fn exec(&mut self, args: Cmd) -> Result<(), End> {
        let Some(tx) = self.close_tx(&args).await? else {
            return Ok(());
        };
        if tx.failed {
            let _ = self.one_here(&tx.node, &[b"DISCARD".to_vec()]).await?;
            self.error("EXECABORT Transaction discarded because of previous errors.");
            return Ok(());
        }
        let f = self.one_here(&tx.node, &args).await?;
        self.out.extend_from_slice(&f);
        if tx.states.is_empty() {
            return Ok(());
        }
        // The connection changes EXEC ran on the transaction's master: the same on the others.
        let ran = state::ran_in_exec(&f).unwrap_or_default();
        let others: Vec<String> = self
            .nodes
            .keys()
            .filter(|n| **n != tx.node)
            .cloned()
            .collect();
        for (at, kind, args) in tx.states {
            if ran.get(at) != Some(&true) {
                continue;
            }
            if let Some(change) = Change::of(kind, &args) {
                change.apply(b"+", &mut self.state);
            }
            for n in &others {
                let _ = self.one(n, &args).await?;
            }
            self.setup.push(args);
        }
        Ok(())
    }

    async fn discard(&mut self, args: Cmd) -> Result<(), End> {
        let Some(tx) = self.close_tx(&args).await? else {
            return Ok(());
        };
        let f = self.one_here(&tx.node, &args).await?;
        self.out.extend_from_slice(&f);
        Ok(())
    }

    async fn watch(&mut self, args: Cmd) -> Result<(), End> {
        if self.tx.is_some() {
            self.error("ERR WATCH inside MULTI is not allowed");
            return Ok(());
        }
        let target = match self.cluster {
            Some(_) => route::target_of(&args[1..]),
            None => Target::Any,
        };
        let node = match target {
            Target::Slot(s) => self.master_of(s).await,
            Target::Any => Some(self.home().await?),
            Target::Cross => None,
        };
        match node {
            Some(n) if self.watched.as_ref().is_none_or(|w| *w == n) => {
                let f = self.one(&n, &args).await?;
                if f.first() != Some(&b'-') {
                    self.watched = Some(n);
                }
                self.out.extend_from_slice(&f);
            }
            _ => self.error(CROSSSLOT),
        }
        Ok(())
    }

    /// MGET, MSET, DEL, UNLINK, EXISTS, TOUCH over several slots: one command per slot, replies
    /// merged.
    async fn split(&mut self, args: Cmd, merge: Merge) -> Result<(), End> {
        let step = route::split_step(&args);
        let items: Vec<&[Vec<u8>]> = args[1..].chunks(step).collect();
        if items.is_empty() || items.iter().any(|c| c.len() != step) {
            // Arity errors come from Redis itself.
            let home = self.home().await?;
            let f = self.one(&home, &args).await?;
            self.out.extend_from_slice(&f);
            return Ok(());
        }
        // Groups by slot, in order of first appearance; each item's group and place in it.
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let s = crate::upstream::cluster::slot::slot(&item[0]);
            match groups.iter_mut().find(|(g, _)| *g == s) {
                Some((_, v)) => v.push(i),
                None => groups.push((s, vec![i])),
            }
        }
        if groups.len() == 1 {
            // One slot after all (the map changed under the request): one command.
            let Some(node) = self.master_of(groups[0].0).await else {
                self.error(CLUSTERDOWN);
                return Ok(());
            };
            let f = self.one(&node, &args).await?;
            self.out.extend_from_slice(&f);
            return Ok(());
        }
        let mut replies = Vec::with_capacity(groups.len());
        for (s, members) in &groups {
            let mut cmd = vec![args[0].clone()];
            for &i in members {
                cmd.extend(items[i].iter().cloned());
            }
            let Some(node) = self.master_of(*s).await else {
                self.error(CLUSTERDOWN);
                return Ok(());
            };
            replies.push(self.one(&node, &cmd).await?);
        }
        // MGET: each group's values back in the request's key order.
        self.merge(&replies, merge, |out| {
            let mut placed: Vec<&[u8]> = vec![b"$-1\r\n"; items.len()];
            for ((_, members), f) in groups.iter().zip(&replies) {
                for (&i, e) in members.iter().zip(elements(f)?) {
                    placed[i] = e;
                }
            }
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            placed.iter().for_each(|e| out.extend_from_slice(e));
            Some(())
        });
        Ok(())
    }

    /// Replies of several masters as one: the first error, else summed (`Sum`), the first
    /// (`First`), or as `concat` writes them (`Concat`; a reply that is not an array passes on
    /// as it is).
    fn merge(
        &mut self,
        replies: &[BytesMut],
        merge: Merge,
        concat: impl FnOnce(&mut BytesMut) -> Option<()>,
    ) {
        if let Some(e) = replies.iter().find(|f| f.first() == Some(&b'-')) {
            self.out.extend_from_slice(e);
            return;
        }
        match merge {
            Merge::Sum => {
                let total: i64 = replies.iter().filter_map(|f| int_of(f)).sum();
                Reply::Int(total).encode(self.state.protocol, &mut self.out);
            }
            Merge::First => self.out.extend_from_slice(&replies[0]),
            Merge::Random => {
                let found: Vec<&BytesMut> = replies
                    .iter()
                    .filter(|f| !matches!(&f[..], b"$-1\r\n" | b"_\r\n"))
                    .collect();
                let pick = match found.len() {
                    0 => &replies[0],
                    n => found[rand::random::<u64>() as usize % n],
                };
                self.out.extend_from_slice(pick);
            }
            Merge::Info => {
                let frames: Vec<&[u8]> = replies.iter().map(|f| &f[..]).collect();
                match super::info::merge(&frames) {
                    Some(merged) => self.out.extend_from_slice(&merged),
                    None => self.out.extend_from_slice(&replies[0]),
                }
            }
            Merge::Concat => {
                let mut out = BytesMut::new();
                match concat(&mut out) {
                    Some(()) => self.out.extend_from_slice(&out),
                    None => {
                        let odd = replies.iter().find(|f| elements(f).is_none());
                        self.out.extend_from_slice(odd.unwrap_or(&replies[0]));
                    }
                }
            }
        }
    }

    /// KEYS, DBSIZE, FLUSHALL, FLUSHDB, SCRIPT LOAD|FLUSH, FUNCTION …: every master.
    async fn every(&mut self, args: Cmd, merge: Merge) -> Result<(), End> {
        let masters = self.masters();
        let mut replies = Vec::with_capacity(masters.len());
        for m in &masters {
            replies.push(self.one(m, &args).await?);
        }
        // KEYS: every master's keys, one array.
        self.merge(&replies, merge, |out| {
            let all = replies
                .iter()
                .map(|f| elements(f))
                .collect::<Option<Vec<_>>>()?
                .concat();
            out.extend_from_slice(format!("*{}\r\n", all.len()).as_bytes());
            all.iter().for_each(|e| out.extend_from_slice(e));
            Some(())
        });
        Ok(())
    }

    /// SCAN: one master after another; the cursor says which (low bits) and where in it.
    async fn scan(&mut self, mut args: Cmd) -> Result<(), End> {
        let masters = self.masters();
        let cursor: Option<u64> = args
            .get(1)
            .and_then(|c| std::str::from_utf8(c).ok())
            .and_then(|c| c.parse().ok());
        let Some(cursor) = cursor else {
            self.error("ERR invalid cursor");
            return Ok(());
        };
        let (node_cursor, i) = (cursor / SCAN_NODES, (cursor % SCAN_NODES) as usize);
        let Some(node) = masters.get(i).cloned() else {
            self.error("ERR invalid cursor");
            return Ok(());
        };
        args[1] = node_cursor.to_string().into_bytes();
        let f = self.one(&node, &args).await?;
        let Some(elems) = elements(&f).filter(|e| e.len() == 2) else {
            self.out.extend_from_slice(&f);
            return Ok(());
        };
        let next: u64 = bulk_of(elems[0])
            .and_then(|c| std::str::from_utf8(c).ok()?.parse().ok())
            .unwrap_or(0);
        let out_cursor = if next != 0 {
            next * SCAN_NODES + i as u64
        } else if i + 1 < masters.len() {
            (i + 1) as u64
        } else {
            0
        };
        let c = out_cursor.to_string();
        self.out.extend_from_slice(b"*2\r\n");
        self.out
            .extend_from_slice(format!("${}\r\n{c}\r\n", c.len()).as_bytes());
        self.out.extend_from_slice(elems[1]);
        Ok(())
    }

    /// SUBSCRIBE, PSUBSCRIBE, MONITOR (on the home master), SSUBSCRIBE (on its channel's
    /// master): from here on the client talks to that one node, byte for byte. `tail` is this
    /// request and every later one of its batch, as the client sent them.
    async fn tunnel(&mut self, args: Cmd, tail: &[u8]) -> Result<(), End> {
        let sharded = args[0].eq_ignore_ascii_case(b"ssubscribe");
        let node = match (sharded, args.get(1)) {
            (true, Some(ch)) => match self
                .master_of(crate::upstream::cluster::slot::slot(ch))
                .await
            {
                Some(n) => n,
                None => self.home().await?,
            },
            _ => self.home().await?,
        };
        self.tunnel_to(node, tail).await
    }

    /// A request Redis would refuse as a protocol error: it and what follows go to the home
    /// master, whose error the client gets (and which closes the connection).
    async fn tunnel_invalid(&mut self) -> End {
        let node = match self.home().await {
            Ok(n) => n,
            Err(end) => return end,
        };
        match self.tunnel_to(node, &[]).await {
            Ok(()) => End::Tunneled,
            Err(end) => end,
        }
    }

    /// `tail`, then the unread client bytes, to `node`; then bytes both ways until either side
    /// closes.
    async fn tunnel_to(&mut self, node: String, tail: &[u8]) -> Result<(), End> {
        let mut w = Vec::with_capacity(tail.len() + self.cbuf.len());
        w.extend_from_slice(tail);
        w.extend_from_slice(&self.cbuf);
        self.cbuf.clear();
        self.send(&node, &w).await?;
        self.flush().await?;
        let mut n = self.nodes.remove(&node).expect("opened");
        self.nodes.clear();
        if !n.buf.is_empty() {
            self.wr
                .write_all(&n.buf)
                .await
                .map_err(|_| End::ClientGone)?;
        }
        let mut client = tokio::io::join(&mut self.rd, &mut self.wr);
        super::session::splice(&mut client, &mut n.stream, self.timeout).await;
        Err(End::Tunneled)
    }

    /// A MEM.* verb, on the connection to the master of its user's slot. A verb whose script
    /// was refused with `MOVED` / `ASK` (its slot moving: refused at dispatch, before it ran) runs
    /// again where Redis says; `TRYAGAIN` (some of its keys moved, some not yet) after a pause.
    async fn mem(&mut self, args: Cmd) -> Result<(), End> {
        let parsed = self.engine.parse(args);
        let Some(cluster) = self.cluster.clone() else {
            let home = self.home().await?;
            let reply = self.mem_on(&home, parsed, false).await?;
            reply.encode(self.state.protocol, &mut self.out);
            return Ok(());
        };
        let mut node = match self.engine.mem_slot(&parsed) {
            Some(s) => match self.master_of(s).await {
                Some(n) => n,
                None => {
                    self.error(CLUSTERDOWN);
                    return Ok(());
                }
            },
            None => self.home().await?,
        };
        let mut asking = false;
        let mut tries = 0;
        loop {
            let reply = self.mem_on(&node, parsed.clone(), asking).await?;
            tries += 1;
            let line = match &reply {
                Reply::Error(line) if tries < MEM_RETRIES => line.clone(),
                _ => {
                    reply.encode(self.state.protocol, &mut self.out);
                    return Ok(());
                }
            };
            if line.starts_with("TRYAGAIN") {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            match redirect(format!("-{line}\r\n").as_bytes()) {
                Some((ask, target)) => {
                    if !ask {
                        let _ = cluster.refresh().await;
                    }
                    node = target;
                    asking = ask;
                }
                None => {
                    reply.encode(self.state.protocol, &mut self.out);
                    return Ok(());
                }
            }
        }
    }

    /// One run of a MEM.* verb on `node`'s connection, lent as a [`Link`].
    async fn mem_on(
        &mut self,
        node: &str,
        parsed: crate::mem::Parsed,
        asking: bool,
    ) -> Result<Reply, End> {
        let node = node.to_string();
        self.open(&node).await?;
        if self.nodes.get_mut(&node).is_some_and(|n| n.owed > 0) {
            self.settle(&node).await?;
        }
        let n = self.nodes.remove(&node).expect("opened");
        let id = n.id;
        let mut link = Link::new(n.stream, n.buf, self.timeout);
        if self.cluster.is_some() {
            link.node = Some(node.clone());
        }
        link.asking = asking;
        let reply = self
            .engine
            .execute_parsed(parsed, &self.state, &mut link)
            .await;
        if !link.pushes.is_empty() {
            self.out.extend_from_slice(&link.pushes);
        }
        if let Some(lost) = link.broken.take() {
            // As when a plain request's connection breaks: this verb's answer (the
            // connection's error), then every request behind it gets the error, and the
            // client is closed.
            if !self.quiet {
                reply.encode(self.state.protocol, &mut self.out);
            }
            self.answered += 1;
            return Err(End::UpstreamLost(lost, 1));
        }
        if let Some(trusted) = link.vouches() {
            self.state.trusted = trusted;
        }
        self.nodes
            .insert(node, Node::new(link.stream, link.buf, id, link.owed));
        Ok(reply)
    }
}

/// `-MOVED <slot> <host:port>` or `-ASK <slot> <host:port>`: (is ASK, node). An empty host means
/// the node that answered, which memproxy does not track per reply: such replies pass on as is.
fn redirect(f: &[u8]) -> Option<(bool, String)> {
    let ask = f.starts_with(b"-ASK ");
    if !ask && !f.starts_with(b"-MOVED ") {
        return None;
    }
    let line = std::str::from_utf8(f).ok()?.trim_end();
    let node = line.split(' ').nth(2)?;
    if node.starts_with(':') {
        return None;
    }
    Some((ask, node.to_string()))
}

/// The integer of a `:n` reply.
fn int_of(f: &[u8]) -> Option<i64> {
    if f.first() != Some(&b':') {
        return None;
    }
    std::str::from_utf8(&f[1..]).ok()?.trim_end().parse().ok()
}

/// The payload of a `$n` bulk reply.
fn bulk_of(f: &[u8]) -> Option<&[u8]> {
    if f.first() != Some(&b'$') {
        return None;
    }
    let eol = f.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&f[1..eol]).ok()?.parse().ok()?;
    f.get(eol + 2..eol + 2 + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read() {
        assert_eq!(
            redirect(b"-MOVED 3999 127.0.0.1:6381\r\n"),
            Some((false, "127.0.0.1:6381".into()))
        );
        assert_eq!(
            redirect(b"-ASK 3999 10.0.0.1:7000\r\n"),
            Some((true, "10.0.0.1:7000".into()))
        );
        assert_eq!(redirect(b"-ERR MOVED\r\n"), None);
        assert_eq!(int_of(b":42\r\n"), Some(42));
        assert_eq!(bulk_of(b"$3\r\nabc\r\n"), Some(b"abc".as_slice()));
        let e = elements(b"*3\r\n$1\r\na\r\n$-1\r\n*1\r\n:1\r\n").unwrap();
        assert_eq!(
            e,
            vec![b"$1\r\na\r\n".as_slice(), b"$-1\r\n", b"*1\r\n:1\r\n"]
        );
    }
}

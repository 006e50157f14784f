//! How a MEM.* request reaches its verb, whatever sent it (a Redis client's session in single or
//! cluster mode, the HTTP routes, MCP, `import`): parsed once ([`Parsed`]), routed in cluster mode
//! by [`Engine::mem_slot`], then run on a [`Link`] by [`Engine::run_parsed`] — authentication,
//! the database and the bound user checked first, then [`Command::apply`], with its latency and
//! outcome counted in the metrics.

use crate::embed::Role;
use crate::engine::{ClientState, Engine};
use crate::error::MemError;
use crate::resp::Reply;
use crate::upstream::Link;

use super::Command;

impl Engine {
    /// A MEM.* request parsed once (`args[0]` is the verb): a transport that must route it
    /// first (cluster mode, by [`Engine::mem_slot`]) runs it with [`Engine::execute_parsed`].
    pub fn parse(&self, args: Vec<Vec<u8>>) -> Parsed {
        let verb = verb_label(args.first().map(Vec::as_slice).unwrap_or_default());
        Parsed {
            verb,
            cmd: Command::parse(args, self.config()),
        }
    }

    /// In cluster mode, the slot a parsed MEM.* request's data lives in (its user's tag, or its
    /// memory id's); `None` for requests that touch no user's data (or did not parse).
    pub fn mem_slot(&self, p: &Parsed) -> Option<u16> {
        self.cluster.as_ref()?;
        let cmd = p.cmd.as_ref().ok()?;
        cmd.slot_key(&self.store.keys)
            .map(|k| crate::upstream::cluster::slot::slot(k.as_bytes()))
    }

    /// A MEM.* request was queued behind others on its connection: start embedding its text now,
    /// so that requests of one pipeline are embedded as one batch. Only a cache warm-up: the
    /// command itself still runs in order, when it reaches the front.
    pub fn prefetch(&self, args: &[Vec<u8>]) {
        if let Some(text) = super::text_to_embed(args) {
            if text.len() <= self.config().max_text_bytes && !text.trim().is_empty() {
                for role in prefetch_roles(args) {
                    self.embedder.prefetch_as(text.clone(), *role);
                }
            }
        }
    }

    /// Run one MEM.* request on the client's own upstream connection; every outcome is a reply
    /// (errors included).
    pub async fn execute(
        &self,
        args: Vec<Vec<u8>>,
        client: &ClientState,
        link: &mut Link,
    ) -> Reply {
        self.execute_parsed(self.parse(args), client, link).await
    }

    /// [`Engine::execute`] of a request parsed already.
    pub async fn execute_parsed(&self, p: Parsed, client: &ClientState, link: &mut Link) -> Reply {
        self.run_parsed(p, client, link)
            .await
            .unwrap_or_else(|e| Reply::Error(e.line()))
    }

    /// [`Engine::execute_parsed`] with the error kept whole (its fault side), for transports
    /// that answer errors in their own way (HTTP status codes).
    pub async fn run_parsed(
        &self,
        p: Parsed,
        client: &ClientState,
        link: &mut Link,
    ) -> Result<Reply, MemError> {
        let verb = p.verb;
        let start = std::time::Instant::now();
        let outcome = match p.cmd {
            Ok(cmd) => self.try_execute(cmd, client, link).await,
            Err(e) => Err(e),
        };
        self.metrics
            .latency
            .with_label_values(&[verb])
            .observe(start.elapsed().as_secs_f64());
        let label = match &outcome {
            Ok(_) => "ok",
            Err(e) => match e.fault() {
                crate::error::Fault::Client => "client",
                crate::error::Fault::Upstream => "upstream",
                crate::error::Fault::Embedder => "embedder",
                crate::error::Fault::Internal => "internal",
            },
        };
        self.metrics
            .requests
            .with_label_values(&[verb, label])
            .inc();
        if let Err(e) = &outcome {
            match e.fault() {
                crate::error::Fault::Internal => {
                    tracing::error!(error = %e, "MEM command failed")
                }
                crate::error::Fault::Upstream | crate::error::Fault::Embedder => {
                    tracing::debug!(error = %e, "MEM command failed")
                }
                crate::error::Fault::Client => {}
            }
        }
        outcome
    }

    async fn try_execute(
        &self,
        cmd: Command,
        client: &ClientState,
        link: &mut Link,
    ) -> Result<Reply, MemError> {
        // As Redis: syntax first (parsed already), then authentication and rights (from Redis
        // itself, on the client's connection, before any model run: see mem::embed::embed).
        if !client.authenticated && !client.trusted {
            // Redis refuses long requests from unauthenticated connections as a protocol error
            // (and closes them): ask with a PING first, so NOAUTH comes as Redis's own answer.
            crate::error::ok(link.call1(vec![b"PING".to_vec()]).await?)?;
        }
        if link.node.is_none() && cmd.touches_data() {
            // In cluster mode a verb runs on a connection to its user's master.
            self.single_only("MEM.* on a connection to no particular master")?;
        }
        if client.db != 0 && cmd.touches_data() {
            return Err(MemError::client(format!(
                "memories live in database 0 (RediSearch indexes only database 0); this connection selected database {}",
                client.db
            )));
        }
        if let Some(bound) = self.bound_user(client) {
            if let Some(scope_user) = cmd.scope_user() {
                if scope_user != bound {
                    // Redis's order: an unauthenticated connection hears NOAUTH first.
                    self.store.precheck(link, &[]).await?;
                    return Err(MemError::Denied(format!(
                        "NOPERM this connection is bound to user '{bound}' and may only use USER {bound}"
                    )));
                }
            }
        }
        cmd.apply(self, client, link).await
    }
}

/// A MEM.* request parsed once, with its verb's metrics label: parse errors are answered when
/// it runs, as Redis answers a syntax error in its place.
#[derive(Clone)]
pub struct Parsed {
    verb: &'static str,
    cmd: Result<Command, MemError>,
}

/// The metrics label of a verb: its name for the known ones, `other` for the rest (a client
/// cannot grow the label set).
fn verb_label(name: &[u8]) -> &'static str {
    super::catalog::find(name)
        .map(|v| v.name)
        .unwrap_or("other")
}

/// The roles a queued MEM.* request's text will be embedded in (see `mem::text_to_embed`): a
/// recall's question as a query, a turn's content as a query (its recall) and as a document (when
/// remembered), MEM.EMBED as its QUERY flag says, anything else as a document. Where the model's
/// prompts agree the two roles share one run.
fn prefetch_roles(args: &[Vec<u8>]) -> &'static [Role] {
    let verb = args
        .first()
        .map(|v| v.to_ascii_lowercase())
        .unwrap_or_default();
    match verb.as_slice() {
        b"mem.recall" => &[Role::Query],
        b"mem.turn" => &[Role::Query, Role::Document],
        b"mem.embed"
            if args
                .iter()
                .skip(2)
                .any(|a| a.eq_ignore_ascii_case(b"query")) =>
        {
            &[Role::Query]
        }
        _ => &[Role::Document],
    }
}

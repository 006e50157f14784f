//! How callers inside the process (the HTTP demo routes, MCP, the `import` subcommand) run MEM.*
//! verbs: as MEM.* argument lists through [`Engine::run_parsed`], the entry point a Redis client's
//! MEM.* reaches, on one upstream connection of memproxy's own per [`Verbs`] (the `--upstream`
//! URL's user and database). Nothing here remembers, recalls or dedups by itself; it only turns
//! replies into JSON.
//!
//! In cluster mode each call goes to the master of its user's slot, on a connection of
//! memproxy's own to that master (one per master, opened when first needed), as a client
//! session would send it.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::engine::{ClientState, Engine};
use crate::error::Fault;
use crate::resp::{Protocol, Reply};
use crate::upstream::Link;

/// A verb's failure: its one-line error text and whose fault it was.
#[derive(Debug, Clone)]
pub struct VerbError {
    pub line: String,
    pub fault: Fault,
}

impl From<crate::error::MemError> for VerbError {
    fn from(e: crate::error::MemError) -> VerbError {
        VerbError {
            line: e.line(),
            fault: e.fault(),
        }
    }
}

/// A caller's MEM.* calls (one HTTP request's, one import's), on one upstream connection.
pub struct Verbs<'e> {
    engine: &'e Engine,
    link: Link,
    client: ClientState,
    /// Cluster mode: a connection per master, by `host:port`.
    nodes: std::collections::HashMap<String, Link>,
}

impl<'e> Verbs<'e> {
    /// Connect; `bound`: the user every call is bound to (an MCP token's), as
    /// `bind_scope_to_acl_user` binds a Redis connection.
    pub async fn open(engine: &'e Engine, bound: Option<String>) -> Result<Verbs<'e>, VerbError> {
        let timeout = Duration::from_millis(engine.config().op_timeout_ms);
        let link = engine.upstream_addr().admin(timeout).await?;
        let client = ClientState {
            protocol: Protocol::Resp3,
            authenticated: true,
            user: engine.upstream_addr().user().map(str::to_string),
            db: 0,
            trusted: true,
            scope_user: bound,
        };
        Ok(Verbs {
            engine,
            link,
            client,
            nodes: std::collections::HashMap::new(),
        })
    }

    /// Run one MEM.* request (`args[0]` is the verb) and give its reply as JSON.
    pub async fn run(&mut self, args: Vec<String>) -> Result<Value, VerbError> {
        let args: Vec<Vec<u8>> = args.into_iter().map(String::into_bytes).collect();
        let parsed = self.engine.parse(args);
        let link = match &self.engine.cluster {
            None => &mut self.link,
            Some(cluster) => {
                let topology = cluster.topology();
                let node = self
                    .engine
                    .mem_slot(&parsed)
                    .and_then(|s| topology.master_of(s))
                    .or_else(|| topology.masters.first())
                    .cloned()
                    .ok_or_else(|| VerbError {
                        line: "ERR upstream: the cluster serves no slot".into(),
                        fault: Fault::Upstream,
                    })?;
                if !self.nodes.contains_key(&node) {
                    let timeout = Duration::from_millis(self.engine.config().op_timeout_ms);
                    let mut link = cluster.addr_of(&node).admin(timeout).await?;
                    link.node = Some(node.clone());
                    self.nodes.insert(node.clone(), link);
                }
                self.nodes.get_mut(&node).expect("just opened")
            }
        };
        Ok(to_json(
            self.engine.run_parsed(parsed, &self.client, link).await?,
        ))
    }
}

/// A reply as JSON: maps become objects, bulk strings strings, doubles and integers numbers.
pub fn to_json(reply: Reply) -> Value {
    match reply {
        Reply::Error(line) => json!({ "error": line }),
        Reply::Status(s) => json!(s),
        Reply::Int(i) => json!(i),
        Reply::Bulk(b) => json!(String::from_utf8_lossy(&b)),
        Reply::Double(d) => json!(d),
        Reply::Nil => Value::Null,
        Reply::Array(items) => Value::Array(items.into_iter().map(to_json).collect()),
        Reply::Map(fields) => {
            let mut m = Map::new();
            for (k, v) in fields {
                m.insert(k.to_string(), to_json(v));
            }
            Value::Object(m)
        }
    }
}

//! How callers inside the process (the HTTP demo routes, MCP, the `import` subcommand) run MEM.*
//! verbs: as MEM.* argument lists through [`Engine::run`], the entry point a Redis client's
//! MEM.* reaches, on one upstream connection of memproxy's own per [`Verbs`] (the `--upstream`
//! URL's user and database). Nothing here remembers, recalls or dedups by itself; it only turns
//! replies into JSON.

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

/// A caller's MEM.* calls (one HTTP request's, one import's), on one upstream connection.
pub struct Verbs<'e> {
    engine: &'e Engine,
    link: Link,
    client: ClientState,
}

impl<'e> Verbs<'e> {
    /// Connect; `bound`: the user every call is bound to (an MCP token's), as
    /// `bind_scope_to_acl_user` binds a Redis connection.
    pub async fn open(engine: &'e Engine, bound: Option<String>) -> Result<Verbs<'e>, VerbError> {
        let timeout = Duration::from_millis(engine.config().op_timeout_ms);
        let link = engine
            .upstream_addr()
            .admin(timeout)
            .await
            .map_err(|e| VerbError {
                line: e.line(),
                fault: e.fault(),
            })?;
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
        })
    }

    /// The upstream connection, for plain commands as this caller.
    pub fn link(&mut self) -> &mut Link {
        &mut self.link
    }

    /// Run one MEM.* request (`args[0]` is the verb) and give its reply as JSON.
    pub async fn run(&mut self, args: Vec<String>) -> Result<Value, VerbError> {
        let args = args.into_iter().map(String::into_bytes).collect();
        match self.engine.run(args, &self.client, &mut self.link).await {
            Ok(reply) => Ok(to_json(reply)),
            Err(e) => Err(VerbError {
                line: e.line(),
                fault: e.fault(),
            }),
        }
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

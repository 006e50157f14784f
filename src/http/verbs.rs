//! How the HTTP transports (the demo routes and MCP) run MEM.* verbs: as MEM.* argument lists
//! through [`Engine::execute`], the very entry point a Redis client's MEM.* reaches, on an
//! upstream connection of memproxy's own (the `--upstream` URL's user and database). Nothing here
//! remembers, recalls or dedups by itself; it only turns replies into JSON.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::engine::{ClientState, Engine};
use crate::resp::{Protocol, Reply};

/// A verb's failure as one line: Redis's or memproxy's own error text.
#[derive(Debug, Clone)]
pub struct VerbError(pub String);

impl std::fmt::Display for VerbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Run one MEM.* request (`args[0]` is the verb) and give its reply as JSON.
pub async fn run(engine: &Engine, args: Vec<String>) -> Result<Value, VerbError> {
    let timeout = Duration::from_millis(engine.config().op_timeout_ms);
    let mut link = engine
        .upstream_addr()
        .admin(timeout)
        .await
        .map_err(|e| VerbError(e.line()))?;
    let client = ClientState {
        protocol: Protocol::Resp3,
        authenticated: true,
        user: engine.upstream_addr().user().map(str::to_string),
        db: 0,
        trusted: true,
    };
    let args = args.into_iter().map(String::into_bytes).collect();
    let reply = engine.execute(args, &client, &mut link).await;
    to_json(reply)
}

/// A reply as JSON: maps become objects, bulk strings strings, doubles and integers numbers.
pub fn to_json(reply: Reply) -> Result<Value, VerbError> {
    Ok(match reply {
        Reply::Error(line) => return Err(VerbError(line)),
        Reply::Status(s) => json!(s),
        Reply::Int(i) => json!(i),
        Reply::Bulk(b) => json!(String::from_utf8_lossy(&b)),
        Reply::Double(d) => json!(d),
        Reply::Nil => Value::Null,
        Reply::Array(items) => Value::Array(
            items
                .into_iter()
                .map(to_json)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Reply::Map(fields) => {
            let mut m = Map::new();
            for (k, v) in fields {
                m.insert(k.to_string(), to_json(v)?);
            }
            Value::Object(m)
        }
    })
}

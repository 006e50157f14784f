//! MCP (Model Context Protocol) at `/mcp`, streamable HTTP transport (the official Rust SDK,
//! `rmcp`): tools `remember`, `recall`, `forget`, `turn` and `session`. Each call becomes the
//! matching MEM.* argument list and runs through [`crate::mem::verbs::Verbs`], so its limits, errors
//! and results are the verbs' own.
//!
//! Who may call: when `mcp_tokens` is set, a request needs `Authorization: Bearer <token>`
//! (checked by `bearer` in the parent module before the SDK sees it). A token written
//! `token=user` is bound to that user as `bind_scope_to_acl_user` binds a Redis connection: its
//! calls act as that user, and another user's scope, memory or thread is refused.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{json, Value};

use crate::engine::Engine;

/// The user a bearer token is bound to (`None`: any), put in the request by `bearer`.
#[derive(Debug, Clone)]
pub struct Principal(pub Option<String>);

#[derive(Clone)]
pub struct MemTools {
    pub engine: Arc<Engine>,
}

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => unreachable!("tool schemas are objects"),
    }
}

fn scope_props() -> Value {
    json!({
        "user": {"type": "string", "description": "whose memories (default: `default`, or the token's user)"},
        "namespace": {"type": "string", "description": "namespace (default: `default`)"},
    })
}

fn props(extra: Value) -> Value {
    let mut p = scope_props();
    if let (Value::Object(p), Value::Object(e)) = (&mut p, extra) {
        p.extend(e);
    }
    p
}

/// The tools as JSON (`name`, `description`, `input_schema`), the catalog `memproxy tools` prints
/// and the SDKs turn into function-calling definitions.
pub fn catalog() -> Value {
    Value::Array(
        tools()
            .into_iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": Value::Object((*t.input_schema).clone()),
                })
            })
            .collect(),
    )
}

/// The tools with their argument schemas.
pub fn tools() -> Vec<Tool> {
    let mode = json!({
        "type": "string",
        "enum": ["auto", "rank", "vector", "keyword", "hybrid"],
        "description": "auto (default): a gate, then a ranking — nothing when the query touches none of the memories; rank: the k best-ranked memories, always (search); vector: the guide's KNN; keyword: BM25; hybrid: both fused",
    });
    vec![
        Tool::new(
            "remember",
            "Store a memory (deduplicated against the nearest memory of the same user, namespace and kind). Same as MEM.REMEMBER.",
            schema(json!({
                "type": "object",
                "properties": props(json!({
                    "text": {"type": "string"},
                    "kind": {"type": "string", "enum": ["episodic", "semantic"]},
                    "ttl": {"type": "integer", "minimum": 1, "description": "seconds"},
                })),
                "required": ["text"],
            })),
        ),
        Tool::new(
            "recall",
            "Memories relevant to a query, best first. It gates by default: empty when nothing is relevant (mode auto); mode rank always returns the k best-ranked. Same as MEM.RECALL.",
            schema(json!({
                "type": "object",
                "properties": props(json!({
                    "query": {"type": "string"},
                    "kind": {"type": "string", "enum": ["episodic", "semantic"]},
                    "k": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "threshold": {"type": "number", "minimum": 0, "maximum": 2},
                    "mode": mode,
                })),
                "required": ["query"],
            })),
        ),
        Tool::new(
            "forget",
            "Delete one memory by id, or every memory of the user (and namespace, kind). Same as MEM.FORGET.",
            schema(json!({
                "type": "object",
                "properties": props(json!({
                    "id": {"type": "string"},
                    "kind": {"type": "string", "enum": ["episodic", "semantic"]},
                })),
            })),
        ),
        Tool::new(
            "turn",
            "One agent turn: recall for the content, remember it, append it to the thread's session, log an event. Same as MEM.TURN.",
            schema(json!({
                "type": "object",
                "properties": props(json!({
                    "thread": {"type": "string"},
                    "role": {"type": "string", "description": "user, assistant, …"},
                    "content": {"type": "string"},
                    "remember": {"type": "string", "enum": ["episodic", "semantic", "skip"]},
                    "k": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "mode": mode,
                })),
                "required": ["thread", "role", "content"],
            })),
        ),
        Tool::new(
            "session",
            "Working memory of a thread: new (a fresh thread id), get, goal, scratchpad, end. Same as MEM.SESSION.",
            schema(json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["new", "get", "goal", "scratchpad", "end"]},
                    "thread": {"type": "string"},
                    "user": {"type": "string"},
                    "text": {"type": "string", "description": "the goal or scratchpad text"},
                },
                "required": ["action"],
            })),
        ),
    ]
}

/// Tool arguments, read as the verbs' argument strings.
struct Call<'a> {
    args: &'a JsonObject,
}

impl Call<'_> {
    fn str(&self, name: &str) -> Result<Option<String>, ErrorData> {
        match self.args.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(ErrorData::invalid_params(
                format!("argument '{name}' must be a string or a number"),
                None,
            )),
        }
    }

    fn need(&self, name: &str) -> Result<String, ErrorData> {
        self.str(name)?.ok_or_else(|| {
            ErrorData::invalid_params(format!("argument '{name}' is required"), None)
        })
    }

    /// `TOKEN value` when the argument is there.
    fn opt(&self, out: &mut Vec<String>, name: &str, token: &str) -> Result<(), ErrorData> {
        if let Some(v) = self.str(name)? {
            out.push(token.into());
            out.push(v);
        }
        Ok(())
    }
}

/// The user a call acts as: the token's, or the argument (refused when it names another).
fn user_for(call: &Call<'_>, principal: &Principal) -> Result<Option<String>, ErrorData> {
    let asked = call.str("user")?;
    match (&principal.0, asked) {
        (Some(bound), Some(a)) if &a != bound => Err(ErrorData::invalid_params(
            format!("this token is bound to user '{bound}' and may not use user '{a}'"),
            None,
        )),
        (Some(bound), _) => Ok(Some(bound.clone())),
        (None, a) => Ok(a),
    }
}

/// A tool call as a MEM.* argument list.
fn to_args(name: &str, call: &Call<'_>, principal: &Principal) -> Result<Vec<String>, ErrorData> {
    let user = user_for(call, principal)?;
    let mut a: Vec<String> = Vec::new();
    let scope = |a: &mut Vec<String>| -> Result<(), ErrorData> {
        if let Some(u) = &user {
            a.extend(["USER".into(), u.clone()]);
        }
        call.opt(a, "namespace", "NS")
    };
    match name {
        "remember" => {
            a.extend(["MEM.REMEMBER".into(), call.need("text")?]);
            scope(&mut a)?;
            call.opt(&mut a, "kind", "KIND")?;
            call.opt(&mut a, "ttl", "TTL")?;
        }
        "recall" => {
            a.extend(["MEM.RECALL".into(), call.need("query")?]);
            scope(&mut a)?;
            call.opt(&mut a, "kind", "KIND")?;
            call.opt(&mut a, "k", "K")?;
            call.opt(&mut a, "threshold", "THRESHOLD")?;
            call.opt(&mut a, "mode", "MODE")?;
        }
        "forget" => match call.str("id")? {
            // The verb itself refuses another user's memory to a bound token.
            Some(id) => a.extend(["MEM.FORGET".into(), id]),
            None => {
                let Some(u) = &user else {
                    return Err(ErrorData::invalid_params(
                        "forget needs an 'id', or a 'user' whose memories to delete",
                        None,
                    ));
                };
                a.extend(["MEM.FORGET".into(), "USER".into(), u.clone()]);
                call.opt(&mut a, "namespace", "NS")?;
                call.opt(&mut a, "kind", "KIND")?;
            }
        },
        "turn" => {
            a.extend([
                "MEM.TURN".into(),
                call.need("thread")?,
                call.need("role")?,
                call.need("content")?,
            ]);
            scope(&mut a)?;
            call.opt(&mut a, "remember", "REMEMBER")?;
            call.opt(&mut a, "k", "K")?;
            call.opt(&mut a, "mode", "MODE")?;
        }
        "session" => {
            let action = call.need("action")?.to_ascii_lowercase();
            a.push("MEM.SESSION".into());
            match action.as_str() {
                "new" => {
                    a.push("NEW".into());
                    if let Some(u) = &user {
                        a.extend(["USER".into(), u.clone()]);
                    }
                }
                "get" | "end" | "goal" | "scratchpad" => {
                    a.extend([action.to_ascii_uppercase(), call.need("thread")?]);
                    if action == "goal" || action == "scratchpad" {
                        a.push(call.need("text")?);
                    }
                    // The thread's user: checked against the session's, and how a cluster
                    // finds the thread.
                    if let Some(u) = &user {
                        a.extend(["USER".into(), u.clone()]);
                    }
                }
                other => {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "unknown session action '{other}' (new, get, goal, scratchpad, end)"
                        ),
                        None,
                    ))
                }
            }
        }
        other => {
            return Err(ErrorData::invalid_params(
                format!("unknown tool '{other}'"),
                None,
            ))
        }
    }
    Ok(a)
}

impl ServerHandler for MemTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let principal = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Principal>().cloned())
            .unwrap_or(Principal(None));
        let empty = JsonObject::new();
        let call = Call {
            args: request.arguments.as_ref().unwrap_or(&empty),
        };
        let args = to_args(&request.name, &call, &principal)?;
        // Bound to the token's user as a Redis connection is by `bind_scope_to_acl_user`: the
        // verbs refuse its sessions, threads and memories to any other user.
        let outcome = match crate::mem::verbs::Verbs::open(&self.engine, principal.0).await {
            Ok(mut verbs) => verbs.run(args).await,
            Err(e) => Err(e),
        };
        let result = match outcome {
            Ok(v) => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(v.to_string())]);
                r.structured_content = Some(json!({ "result": v }));
                r
            }
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e.line)]),
        };
        Ok(result.into())
    }
}

//! MEM.SESSION: working memory of one thread (a hash with a TTL refreshed by every write).

/// How a MEM.SESSION SET/APPEND on a thread that is not there begins (after `ERR `): a
/// documented error callers may match, as the demo does to start the thread.
pub const NO_SESSION: &str = "MEM.SESSION: no session";

use super::args::{Args, Opt};
use crate::engine::Engine;
use crate::error::MemResult;
use crate::resp::Reply;
use crate::upstream::Link;

/// # Format
/// `MEM.SESSION START thread [USER u] [AGENT a] [GOAL g] [TTL s]` → map `thread, created, event`
/// (TTL: this session's own TTL, refreshed by each of its writes; default `session_ttl_seconds`);
/// `MEM.SESSION NEW [USER u] [AGENT a] [GOAL g]` → the same, for a fresh thread id;
/// `MEM.SESSION GET thread [USER u]` → the session's fields, `recent_turns` (array of maps) and
/// `ttl`, or nil;
/// `MEM.SESSION SCRATCHPAD thread text [USER u]` / `GOAL thread text [USER u]` → OK (error when
/// there is no session);
/// `MEM.SESSION END thread [USER u]` → 1 if the session existed (its event stream goes too), else 0.
///
/// USER names the thread's user: a session of another user is refused. In cluster mode it is
/// required (a thread's keys carry its user's hash tag).
#[derive(Clone)]
pub enum SessionCmd {
    Start {
        thread: String,
        user: String,
        agent: String,
        goal: String,
        ttl: Option<u64>,
    },
    Get(String, Option<String>),
    Set {
        thread: String,
        field: &'static str,
        value: String,
        user: Option<String>,
    },
    End(String, Option<String>),
}

impl SessionCmd {
    pub fn parse(a: &mut Args) -> MemResult<SessionCmd> {
        let sub = a.peek_keyword().ok_or_else(|| a.arity())?;
        a.rest_skip(1);
        let start_opts = [
            Opt("USER", 1),
            Opt("AGENT", 1),
            Opt("GOAL", 1),
            Opt("TTL", 1),
        ];
        Ok(match sub.as_str() {
            "START" | "NEW" => {
                let thread = if sub == "START" {
                    a.name("thread")?
                } else {
                    format!("{:016x}", rand::random::<u64>())
                };
                let o = a.options(&start_opts)?;
                SessionCmd::Start {
                    thread,
                    user: o.str("USER").unwrap_or("default").into(),
                    agent: o.str("AGENT").unwrap_or("default").into(),
                    goal: o.str("GOAL").unwrap_or("").into(),
                    ttl: o.int(a, "TTL", 1..=i64::from(i32::MAX))?.map(|t| t as u64),
                }
            }
            "GET" | "END" => {
                let thread = a.name("thread")?;
                let user = a.options(&[Opt("USER", 1)])?.str("USER").map(String::from);
                if sub == "GET" {
                    SessionCmd::Get(thread, user)
                } else {
                    SessionCmd::End(thread, user)
                }
            }
            "SCRATCHPAD" | "GOAL" => {
                let thread = a.name("thread")?;
                let value = a.text(&sub.to_lowercase())?;
                let user = a.options(&[Opt("USER", 1)])?.str("USER").map(String::from);
                SessionCmd::Set {
                    thread,
                    field: if sub == "GOAL" { "goal" } else { "scratchpad" },
                    value,
                    user,
                }
            }
            other => {
                return Err(a.err(format!(
                    "unknown subcommand '{other}' (START, NEW, GET, SCRATCHPAD, GOAL, END)"
                )))
            }
        })
    }

    pub fn user(&self) -> Option<&str> {
        match self {
            SessionCmd::Start { user, .. } => Some(user),
            SessionCmd::Get(_, user) | SessionCmd::End(_, user) | SessionCmd::Set { user, .. } => {
                user.as_deref()
            }
        }
    }

    /// `owner`: the ACL user the thread must belong to ('' when unbound).
    pub async fn apply(self, engine: &Engine, link: &mut Link, owner: &str) -> MemResult<Reply> {
        let store = &engine.store;
        let named = self.user().unwrap_or_default().to_string();
        let owner = match &self {
            // A START that names its user may create the thread or update that user's own; a
            // thread of another user is refused, not taken over.
            SessionCmd::Start { .. } if owner.is_empty() => named.clone(),
            SessionCmd::Start { .. } => owner.to_string(),
            _ => thread_owner(engine, owner, self.user())?,
        };
        let owner = owner.as_str();
        let user = named.as_str();
        match self {
            SessionCmd::Start {
                thread,
                user,
                agent,
                goal,
                ttl,
            } => {
                let (created, event) = store
                    .session_start(link, &thread, &user, &agent, &goal, ttl, owner)
                    .await?;
                Ok(Reply::Map(vec![
                    ("thread", Reply::text(thread)),
                    ("created", Reply::Int(created as i64)),
                    ("event", Reply::text(event)),
                ]))
            }
            SessionCmd::Get(thread, _) => {
                let Some(s) = store.session_get(link, user, &thread, owner).await? else {
                    return Ok(Reply::Nil);
                };
                let mut fields: Vec<(&'static str, Reply)> = Vec::new();
                for name in [
                    "thread_id",
                    "user",
                    "agent",
                    "goal",
                    "scratchpad",
                    "turn_count",
                    "created_ts",
                    "last_active_ts",
                ] {
                    let v = s
                        .fields
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.clone());
                    let reply = match name {
                        "turn_count" => v
                            .and_then(|v| v.parse().ok())
                            .map(Reply::Int)
                            .unwrap_or(Reply::Int(0)),
                        "created_ts" | "last_active_ts" => {
                            Reply::opt_double(v.and_then(|v| v.parse().ok()))
                        }
                        _ => Reply::opt_text(v),
                    };
                    fields.push((name, reply));
                }
                let turns = s
                    .recent_turns
                    .iter()
                    .map(|t| {
                        Reply::Map(vec![
                            ("role", Reply::text(&t.role)),
                            ("content", Reply::text(&t.content)),
                            ("ts", Reply::opt_double(t.ts)),
                        ])
                    })
                    .collect();
                fields.push(("recent_turns", Reply::Array(turns)));
                fields.push(("ttl", Reply::Int(s.ttl)));
                Ok(Reply::Map(fields))
            }
            SessionCmd::Set {
                thread,
                field,
                value,
                ..
            } => {
                let action = if field == "goal" {
                    "goal_set"
                } else {
                    "scratchpad_set"
                };
                match store
                    .session_set(link, user, &thread, field, &value, action, owner)
                    .await?
                {
                    Some(_) => Ok(Reply::Status("OK")),
                    None => Err(crate::error::MemError::client(format!(
                        "{NO_SESSION} '{thread}' (START it first)"
                    ))),
                }
            }
            SessionCmd::End(thread, _) => Ok(Reply::Int(
                store.session_end(link, user, &thread, owner).await? as i64,
            )),
        }
    }
}

/// The user a thread must belong to: the connection's bound user, else the verb's USER (a START
/// names the user it creates for, so it checks nothing here). In cluster mode a verb on an
/// existing thread must name its user.
pub fn thread_owner(engine: &Engine, owner: &str, named: Option<&str>) -> MemResult<String> {
    if engine.store.cluster().is_some() && named.is_none() {
        return Err(crate::error::MemError::client(
            "in cluster mode a thread is found by its user: add USER u (its keys carry the user's hash tag)",
        ));
    }
    Ok(if owner.is_empty() {
        named.unwrap_or_default().to_string()
    } else {
        owner.to_string()
    })
}

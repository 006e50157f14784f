//! Working memory (session hashes), agent turns, and the event log (streams).

use redis::Value;

use super::keyspace::Spec;
use super::memory::{Hit, NewMemory, Recall, Remembered};
use super::value::{array, int, text, ttl_from_pttl};
use super::{now_ts, push_spec, Store};
use crate::error::{MemError, MemResult};

/// A session as MEM.SESSION GET returns it.
#[derive(Debug, Clone)]
pub struct SessionView {
    /// Hash fields in the order Redis returned them, `recent_turns` parsed separately.
    pub fields: Vec<(String, String)>,
    pub recent_turns: Vec<Turn>,
    pub ttl: i64,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct Turn {
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub ts: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct Event {
    pub id: String,
    pub action: String,
    pub detail: String,
    pub ts: Option<f64>,
}

/// One agent turn to record.
pub struct TurnInput<'a> {
    pub thread: &'a str,
    pub role: &'a str,
    pub agent: &'a str,
    pub recall: Recall<'a>,
    /// `None`: REMEMBER SKIP.
    pub remember: Option<NewMemory<'a>>,
    /// The ACL user an existing session must belong to ('' when scopes are not bound).
    pub owner: &'a str,
}

#[derive(Debug, Clone)]
pub struct TurnOutcome {
    pub turn_count: i64,
    pub recalled: Vec<Hit>,
    pub remembered: Option<Remembered>,
    pub event: String,
}

fn not_yours() -> MemError {
    MemError::Denied("NOPERM this thread belongs to another user".into())
}

impl Store {
    fn session_args(&self) -> (String, u64, usize) {
        let c = self.config();
        (
            format!("{:.3}", now_ts()),
            c.session_ttl_seconds,
            c.events_max_len,
        )
    }

    /// Run session.lua: `op` with the arguments every op takes (now, ttl, max len, owner), then
    /// the op's own.
    async fn session_script(
        &self,
        thread: &str,
        op: &str,
        owner: &str,
        rest: &[&str],
    ) -> MemResult<Value> {
        let mut con = self.connection().await?;
        let (now, ttl, maxlen) = self.session_args();
        let mut inv = self.scripts.session.key(self.keys.session(thread));
        inv.key(self.keys.events(thread))
            .arg(op)
            .arg(&now)
            .arg(ttl)
            .arg(maxlen)
            .arg(owner);
        for a in rest {
            inv.arg(*a);
        }
        self.timed(inv.invoke_async(&mut con)).await
    }

    /// Create (or update) a session; `own_ttl` becomes its TTL for every later refresh. Returns
    /// (created, event id).
    pub async fn session_start(
        &self,
        thread: &str,
        user: &str,
        agent: &str,
        goal: &str,
        own_ttl: Option<u64>,
        owner: &str,
    ) -> MemResult<(bool, String)> {
        let own_ttl = own_ttl.unwrap_or(0).to_string();
        let v = self
            .session_script(
                thread,
                "start",
                owner,
                &[thread, user, agent, goal, &own_ttl],
            )
            .await?;
        let a = array(&v);
        Ok((
            a.first().and_then(int) == Some(1),
            a.get(1).and_then(text).unwrap_or_default(),
        ))
    }

    /// Set one field (goal, scratchpad) of an existing session and log `action`; `None` if there
    /// is no such session.
    pub async fn session_set(
        &self,
        thread: &str,
        field: &str,
        value: &str,
        action: &str,
        owner: &str,
    ) -> MemResult<Option<String>> {
        let v = self
            .session_script(thread, "set", owner, &[field, value, action])
            .await?;
        Ok(array(&v).get(1).and_then(text))
    }

    /// The session, or `None`; with an `owner`, a session of another user is refused.
    pub async fn session_get(&self, thread: &str, owner: &str) -> MemResult<Option<SessionView>> {
        let mut con = self.connection().await?;
        let key = self.keys.session(thread);
        let (all, pttl): (Value, i64) = self
            .timed(
                redis::pipe()
                    .cmd("HGETALL")
                    .arg(&key)
                    .cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut con),
            )
            .await?;
        let flat = match &all {
            Value::Map(m) => m.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect(),
            other => array(other).to_vec(),
        };
        if flat.is_empty() {
            return Ok(None);
        }
        let mut fields = Vec::new();
        let mut recent_turns = Vec::new();
        for pair in flat.chunks(2) {
            let (k, v) = (
                text(&pair[0]).unwrap_or_default(),
                pair.get(1).and_then(text).unwrap_or_default(),
            );
            if k == "recent_turns" {
                recent_turns = serde_json::from_str(&v).unwrap_or_default();
            } else {
                if k == "user" && !owner.is_empty() && v != owner {
                    return Err(not_yours());
                }
                fields.push((k, v));
            }
        }
        Ok(Some(SessionView {
            fields,
            recent_turns,
            ttl: ttl_from_pttl(pttl),
        }))
    }

    /// Delete a session and its event stream; returns whether the session existed.
    pub async fn session_end(&self, thread: &str, owner: &str) -> MemResult<bool> {
        let v = self.session_script(thread, "end", owner, &[]).await?;
        Ok(int(&v).unwrap_or(0) > 0)
    }

    /// The newest `count` events of a thread, newest first. With an `owner`, the thread's session
    /// must exist and be theirs.
    pub async fn events(&self, thread: &str, count: usize, owner: &str) -> MemResult<Vec<Event>> {
        let mut con = self.connection().await?;
        let (user, v): (Option<String>, Value) = self
            .timed(
                redis::pipe()
                    .cmd("HGET")
                    .arg(self.keys.session(thread))
                    .arg("user")
                    .cmd("XREVRANGE")
                    .arg(self.keys.events(thread))
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(count)
                    .query_async(&mut con),
            )
            .await?;
        if !owner.is_empty() {
            match user {
                Some(u) if u == owner => {}
                Some(_) => return Err(not_yours()),
                None => return Ok(Vec::new()),
            }
        }
        Ok(array(&v)
            .iter()
            .map(|entry| {
                let e = array(entry);
                let fields = e.get(1).map(array).unwrap_or_default();
                let get = |n: &str| super::value::field(fields, n).and_then(text);
                Event {
                    id: e.first().and_then(text).unwrap_or_default(),
                    action: get("action").unwrap_or_default(),
                    detail: get("detail").unwrap_or_default(),
                    ts: get("ts").and_then(|s| s.parse().ok()),
                }
            })
            .collect())
    }

    /// One turn in one script: recall, remember, append, log.
    pub async fn turn(&self, t: &TurnInput<'_>) -> MemResult<TurnOutcome> {
        let mut con = self.ready().await?;
        let (now, ttl, maxlen) = self.session_args();
        let c = self.config();
        let id = super::keyspace::new_id();
        let specs = self.recall_specs(&t.recall);
        let mut inv = self.scripts.turn.key(self.keys.session(t.thread));
        inv.key(self.keys.events(t.thread))
            .key(self.keys.memory(&id));
        inv.arg(t.thread)
            .arg(t.role)
            .arg(t.recall.text)
            .arg(&now)
            .arg(ttl)
            .arg(c.max_turns)
            .arg(maxlen);
        inv.arg(&t.recall.scope.user).arg(t.agent);
        match &t.remember {
            Some(m) => {
                inv.arg(m.kind.as_str())
                    .arg(self.memory_doc(&id, m, t.recall.vector))
                    .arg(m.ttl.unwrap_or(0))
                    .arg(m.dedup.unwrap_or(-1.0));
            }
            None => {
                inv.arg("").arg("").arg(0).arg(-1.0);
            }
        }
        inv.arg(&self.keys.mem_prefix).arg(t.owner).arg(specs.len());
        for (_, s) in &specs {
            push_spec(&mut inv, s);
        }
        if let Some(m) = &t.remember {
            if m.dedup.is_some() {
                let spec: Spec = self.dedup_spec(m, t.recall.vector);
                push_spec(&mut inv, &spec);
            }
        }
        let v: Value = self.timed(inv.invoke_async(&mut con)).await?;
        let a = array(&v);
        if a.len() != 4 {
            return Err(MemError::Internal(format!("turn script replied {v:?}")));
        }
        let recalled = if specs.is_empty() {
            Vec::new()
        } else {
            self.fuse(&t.recall, &specs, array(&a[1]))?
        };
        let remembered = match &a[2] {
            Value::Nil => None,
            other => Some(self.parse_remembered(other)?),
        };
        Ok(TurnOutcome {
            turn_count: int(&a[0]).unwrap_or(0),
            recalled,
            remembered,
            event: text(&a[3]).unwrap_or_default(),
        })
    }
}

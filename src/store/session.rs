//! Working memory (session hashes), agent turns, and the event log (streams).

use redis::Value;

use super::keyspace::{cmd, Spec};
use super::memory::{Hit, NewMemory, Recall, Remembered, ID_TRIES};
use super::scripts::{push_search, push_spec};
use super::{now_ts, Store};
use crate::error::ok;
use crate::error::{MemError, MemResult};
use crate::resp::read::{array, flat, int, text, ttl_from_pttl};
use crate::upstream::Link;

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
    /// The recall, with the content embedded as a query.
    pub recall: Recall<'a>,
    /// `None`: REMEMBER SKIP.
    pub remember: Option<NewMemory<'a>>,
    /// The content embedded as a document: what is stored and deduped (the recall's vector when
    /// the model's query and document prompts agree).
    pub document: &'a [f32],
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
        link: &mut Link,
        user: &str,
        thread: &str,
        op: &str,
        owner: &str,
        rest: &[&str],
    ) -> MemResult<Value> {
        let (now, ttl, maxlen) = self.session_args();
        let keys = [
            self.keys.session(user, thread),
            self.keys.events(user, thread),
        ];
        let (ttl, maxlen) = (ttl.to_string(), maxlen.to_string());
        let args = [op, &now, &ttl, &maxlen, owner]
            .iter()
            .chain(rest)
            .map(|a| a.as_bytes().to_vec())
            .collect();
        self.scripts
            .session
            .run(link, &keys, &self.keys.rights_session(user, thread), args)
            .await
    }

    /// Create (or update) a session; `own_ttl` becomes its TTL for every later refresh. Returns
    /// (created, event id).
    #[allow(clippy::too_many_arguments)]
    pub async fn session_start(
        &self,
        link: &mut Link,
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
                link,
                user,
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
    #[allow(clippy::too_many_arguments)]
    pub async fn session_set(
        &self,
        link: &mut Link,
        user: &str,
        thread: &str,
        field: &str,
        value: &str,
        action: &str,
        owner: &str,
    ) -> MemResult<Option<String>> {
        let v = self
            .session_script(link, user, thread, "set", owner, &[field, value, action])
            .await?;
        Ok(array(&v).get(1).and_then(text))
    }

    /// The session, or `None`; with an `owner`, a session of another user is refused.
    pub async fn session_get(
        &self,
        link: &mut Link,
        user: &str,
        thread: &str,
        owner: &str,
    ) -> MemResult<Option<SessionView>> {
        let key = self.keys.session(user, thread).into_bytes();
        let mut r = link
            .call(&[
                vec![b"HGETALL".to_vec(), key.clone()],
                vec![b"PTTL".to_vec(), key],
            ])
            .await?
            .into_iter();
        let all = ok(r.next().unwrap_or_default())?;
        let pttl = int(&ok(r.next().unwrap_or_default())?).unwrap_or(-2);
        let flat = flat(&all);
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
    pub async fn session_end(
        &self,
        link: &mut Link,
        user: &str,
        thread: &str,
        owner: &str,
    ) -> MemResult<bool> {
        let v = self
            .session_script(link, user, thread, "end", owner, &[])
            .await?;
        Ok(int(&v).unwrap_or(0) > 0)
    }

    /// The newest `count` events of a thread, newest first. With an `owner`, the thread's session
    /// must exist and be theirs.
    pub async fn events(
        &self,
        link: &mut Link,
        user: &str,
        thread: &str,
        count: usize,
        owner: &str,
    ) -> MemResult<Vec<Event>> {
        let mut r = link
            .call(&[
                vec![
                    b"HGET".to_vec(),
                    self.keys.session(user, thread).into_bytes(),
                    b"user".to_vec(),
                ],
                [
                    b"XREVRANGE".as_slice(),
                    self.keys.events(user, thread).as_bytes(),
                    b"+",
                    b"-",
                    b"COUNT",
                    count.to_string().as_bytes(),
                ]
                .iter()
                .map(|a| a.to_vec())
                .collect(),
            ])
            .await?
            .into_iter();
        let user = text(&ok(r.next().unwrap_or_default())?);
        let v = ok(r.next().unwrap_or_default())?;
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
                let get = |n: &str| crate::resp::read::field(fields, n).and_then(text);
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
    pub async fn turn(&self, link: &mut Link, t: &TurnInput<'_>) -> MemResult<TurnOutcome> {
        let site = self.site(link);
        // The index's layout decides the query vector's encoding: checked first.
        self.ready_at(&site).await?;
        let specs = self.recall_specs(&site, &t.recall);
        indexed!(self, link, self.turn_tries(link, t, &specs).await)
    }

    async fn turn_tries(
        &self,
        link: &mut Link,
        t: &TurnInput<'_>,
        specs: &[(super::memory::Retrieval, Spec)],
    ) -> MemResult<TurnOutcome> {
        for _ in 0..ID_TRIES {
            if let Some(out) = self.turn_once(link, t, specs).await? {
                return Ok(out);
            }
        }
        Err(MemError::Internal("no free memory id after 5 tries".into()))
    }

    /// `None` when the new memory's id collided (nothing was written).
    async fn turn_once(
        &self,
        link: &mut Link,
        t: &TurnInput<'_>,
        specs: &[(super::memory::Retrieval, Spec)],
    ) -> MemResult<Option<TurnOutcome>> {
        let (now, ttl, maxlen) = self.session_args();
        let c = self.config();
        let site = self.site(link);
        let user = t.recall.scope.user.as_str();
        let id = self.keys.new_memory_id(user);
        let mem_key = self.keys.memory(&id);
        let keys = [
            self.keys.session(user, t.thread),
            self.keys.events(user, t.thread),
            mem_key.clone(),
        ];
        let mut args: Vec<Vec<u8>> = cmd(&[
            t.thread,
            t.role,
            t.recall.text,
            &now,
            &ttl.to_string(),
            &c.max_turns.to_string(),
            &maxlen.to_string(),
            &t.recall.scope.user,
            t.agent,
        ]);
        let (kind, doc, mem_ttl, threshold) = match &t.remember {
            Some(m) => (
                m.kind.as_str(),
                self.memory_doc(&site.keys, &id, m, t.document),
                m.ttl.unwrap_or(0),
                m.dedup.unwrap_or(-1.0),
            ),
            None => ("", Vec::new(), 0, -1.0),
        };
        args.push(kind.as_bytes().to_vec());
        args.push(doc);
        for a in [
            mem_ttl.to_string(),
            threshold.to_string(),
            self.keys.mem_prefix.clone(),
            t.owner.to_string(),
            t.recall.scope.namespace.clone(),
            specs.len().to_string(),
        ] {
            args.push(a.into_bytes());
        }
        for (_, s) in specs {
            push_search(&mut args, s, true);
        }
        if let Some(m) = &t.remember {
            if m.dedup.is_some() {
                push_spec(&mut args, &self.dedup_spec(&site.keys, m, t.document));
            }
        }
        let rights = site.keys.rights_turn(user, t.thread, &mem_key);
        let v = self.scripts.turn.run(link, &keys, &rights, args).await?;
        let a = array(&v);
        if a.first().and_then(text).as_deref() == Some("collision") {
            return Ok(None);
        }
        if a.len() != 4 {
            return Err(MemError::Internal(format!("turn script replied {v:?}")));
        }
        let recalled = if specs.is_empty() {
            Vec::new()
        } else {
            self.fuse(&self.site(link), &t.recall, specs, array(&a[1]))?
        };
        let remembered = match &a[2] {
            Value::Nil => None,
            other => self.parse_remembered(other)?,
        };
        Ok(Some(TurnOutcome {
            turn_count: int(&a[0]).unwrap_or(0),
            recalled,
            remembered,
            event: text(&a[3]).unwrap_or_default(),
        }))
    }
}

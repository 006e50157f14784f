//! MEM.EVENTS: a thread's event log, newest first.

use super::args::{Args, Opt};
use crate::engine::Engine;
use crate::error::MemResult;
use crate::resp::Reply;
use crate::upstream::Link;

/// # Format
/// `MEM.EVENTS thread [COUNT n] [USER u]` → array of maps `id, action, detail, ts` (default
/// COUNT 20). USER: as for MEM.SESSION (the thread's user; required in cluster mode).
#[derive(Clone)]
pub struct Events {
    pub thread: String,
    pub count: usize,
    pub user: Option<String>,
}

impl Events {
    pub fn parse(a: &mut Args) -> MemResult<Events> {
        let thread = a.name("thread")?;
        let o = a.options(&[Opt("COUNT", 1), Opt("USER", 1)])?;
        Ok(Events {
            thread,
            count: o.int(a, "COUNT", 1..=10_000)?.unwrap_or(20) as usize,
            user: o.str("USER").map(String::from),
        })
    }

    /// `owner`: the ACL user the thread must belong to ('' when unbound).
    pub async fn apply(self, engine: &Engine, link: &mut Link, owner: &str) -> MemResult<Reply> {
        let owner = super::session::thread_owner(engine, owner, self.user.as_deref())?;
        let user = self.user.as_deref().unwrap_or_default();
        let events = engine
            .store
            .events(link, user, &self.thread, self.count, &owner)
            .await?;
        Ok(Reply::Array(
            events
                .iter()
                .map(|e| {
                    Reply::Map(vec![
                        ("id", Reply::text(&e.id)),
                        ("action", Reply::text(&e.action)),
                        ("detail", Reply::text(&e.detail)),
                        ("ts", Reply::opt_double(e.ts)),
                    ])
                })
                .collect(),
        ))
    }
}

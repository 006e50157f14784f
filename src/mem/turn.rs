//! MEM.TURN: one agent step — record the turn, recall what matters, remember what was said.

use super::args::{Args, Opt};
use super::durability::{self, DURABILITY_OPTS};
use super::embed::{embed, embed_as, windows, Precheck};
use super::hit;
use super::recall::{RecallOpts, RECALL_OPTS};
use super::remember::kind_ttl;
use crate::config::Config;
use crate::embed::Role;
use crate::engine::Engine;
use crate::error::MemResult;
use crate::resp::Reply;
use crate::store::durable::{self, Durability};
use crate::store::memory::NewMemory;
use crate::store::session::TurnInput;
use crate::store::{Kind, Scope};
use crate::upstream::Link;

/// # Format
/// `MEM.TURN thread role content [USER u] [NS ns] [AGENT a] [REMEMBER episodic|semantic|SKIP] [K n]
/// [THRESHOLD d] [MODE m] [REPLICAS n] [FSYNC]` → map `thread, turn_count, recalled, remembered,
/// event`. REPLICAS and FSYNC as for MEM.REMEMBER.
///
/// The content is embedded once. Recall, remember (with dedup), the append to the session and the
/// event run in one script: one upstream round trip, and the turn is not recalled to itself.
#[derive(Clone)]
pub struct TurnCmd {
    pub thread: String,
    pub role: String,
    pub content: String,
    pub scope: Scope,
    pub agent: String,
    pub remember: Option<Kind>,
    pub opts: RecallOpts,
    pub durability: Durability,
}

impl TurnCmd {
    pub fn parse(a: &mut Args, cfg: &Config) -> MemResult<TurnCmd> {
        let thread = a.name("thread")?;
        let role = a.name("role")?;
        let content = a.text("content")?;
        let mut allowed = vec![
            Opt("USER", 1),
            Opt("NS", 1),
            Opt("AGENT", 1),
            Opt("REMEMBER", 1),
        ];
        allowed.extend(RECALL_OPTS);
        allowed.extend(DURABILITY_OPTS);
        let o = a.options(&allowed)?;
        let remember = match o.str("REMEMBER").map(str::to_ascii_lowercase).as_deref() {
            None => Some(Kind::Episodic),
            Some("skip") => None,
            Some(k) => Some(Kind::parse(k).ok_or_else(|| {
                a.err(format!(
                    "unknown REMEMBER '{k}' (episodic, semantic or SKIP)"
                ))
            })?),
        };
        Ok(TurnCmd {
            scope: o.scope(a)?,
            agent: o.str("AGENT").unwrap_or("default").to_string(),
            opts: RecallOpts::from(&o, a, cfg)?,
            durability: durability::parse(&o, a, cfg)?,
            thread,
            role,
            content,
            remember,
        })
    }

    /// `owner`: the ACL user an existing session must belong to ('' when unbound).
    pub async fn apply(self, engine: &Engine, link: &mut Link, owner: &str) -> MemResult<Reply> {
        let cfg = engine.config();
        let keys = &engine.store.keys;
        let user = &self.scope.user;
        let rights = engine.store.site(link).keys.rights_turn(
            user,
            &self.thread,
            &keys.memory(&keys.new_memory_id(user)),
        );
        // The recall's question is embedded as a query, what is remembered as a document: one
        // model run when the model's prompts for the two agree (all-MiniLM-L6-v2 has none).
        let vector = embed_as(
            engine,
            link,
            &self.content,
            Role::Query,
            Precheck::Rights(&rights),
        )
        .await?;
        let document = match (&self.remember, engine.embedder.prompts_agree()) {
            (Some(_), false) => {
                embed(engine, link, &self.content, Precheck::Rights(&rights)).await?
            }
            _ => vector.clone(),
        };
        let windows = match self.remember {
            Some(_) => windows(engine, &self.content).await?,
            None => Vec::new(),
        };
        // The turn's memory is written with its thread as source; recall looks across threads.
        let write_scope = Scope {
            thread: Some(self.thread.clone()),
            kind: None,
            ..self.scope.clone()
        };
        let input = TurnInput {
            thread: &self.thread,
            role: &self.role,
            agent: &self.agent,
            recall: self.opts.recall(&self.scope, &self.content, &vector),
            document: &document,
            remember: self.remember.map(|kind| NewMemory {
                text: &self.content,
                scope: &write_scope,
                kind,
                ttl: kind_ttl(kind, cfg.episodic_ttl_seconds),
                dedup: Some(cfg.dedup_threshold),
                created_ts: None,
                hits: None,
                windows: &windows,
            }),
            owner,
        };
        let out = engine.store.turn(link, &input).await?;
        let what = format!(
            "MEM.TURN appended turn {} of {}",
            out.turn_count, self.thread
        );
        durable::wait(link, self.durability, cfg.write_wait(), &what).await?;
        Ok(Reply::Map(vec![
            ("thread", Reply::text(&self.thread)),
            ("turn_count", Reply::Int(out.turn_count)),
            (
                "recalled",
                Reply::Array(out.recalled.iter().map(hit::recalled).collect()),
            ),
            (
                "remembered",
                out.remembered
                    .as_ref()
                    .map(hit::remembered)
                    .unwrap_or(Reply::Nil),
            ),
            ("event", Reply::text(&out.event)),
        ]))
    }
}

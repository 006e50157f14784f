//! The MEM.* verbs, one file each: a typed command with a `# Format` doc, `parse`, `apply`.
//!
//! [`Command::parse`] turns the request's arguments into a typed command or a client error; an
//! unknown verb is a value ([`Command::Unknown`]) answered with Redis's own wording.
//! [`Command::apply`] runs it against the [`Engine`] and builds the reply.

pub mod args;
pub mod catalog;
pub mod consolidate;
pub mod dispatch;
pub mod durability;
pub mod embed;
pub mod events;
pub mod forget;
pub mod hit;
pub mod info;
pub mod list;
pub mod recall;
pub mod remember;
pub mod session;
pub mod turn;
pub mod verbs;

pub use dispatch::Parsed;

use crate::config::Config;
use crate::engine::{ClientState, Engine};
use crate::error::MemResult;
use crate::resp::Reply;
use crate::upstream::Link;
use args::Args;

/// The text a MEM.* request will embed, if any (for prefetching; no validation beyond UTF-8).
pub fn text_to_embed(args: &[Vec<u8>]) -> Option<String> {
    let verb = String::from_utf8_lossy(args.first()?).to_ascii_lowercase();
    let at = match verb.as_str() {
        "mem.embed" | "mem.remember" => 1,
        "mem.recall" => {
            let keyword = args.windows(2).any(|w| {
                w[0].eq_ignore_ascii_case(b"mode") && w[1].eq_ignore_ascii_case(b"keyword")
            });
            if keyword {
                return None;
            }
            1
        }
        "mem.turn" => 3,
        _ => return None,
    };
    String::from_utf8(args.get(at)?.clone()).ok()
}

#[derive(Clone)]
pub enum Command {
    Ping,
    Help,
    Embed(embed::Embed),
    Remember(remember::Remember),
    Recall(recall::RecallCmd),
    Forget(forget::Forget),
    Consolidate(consolidate::Consolidate),
    List(list::List),
    Info,
    Turn(turn::TurnCmd),
    Session(session::SessionCmd),
    Events(events::Events),
    Unknown(String, Vec<Vec<u8>>),
}

impl Command {
    /// `args[0]` is the verb (`MEM.…`, any case).
    pub fn parse(mut args: Vec<Vec<u8>>, cfg: &Config) -> MemResult<Command> {
        let verb = args.remove(0);
        let mut a = Args::new(&verb, args, cfg);
        let cmd = match a.verb.as_str() {
            "mem.ping" => {
                a.at_end()?;
                Command::Ping
            }
            "mem.help" => {
                a.at_end()?;
                Command::Help
            }
            "mem.embed" => Command::Embed(embed::Embed::parse(&mut a)?),
            "mem.remember" => Command::Remember(remember::Remember::parse(&mut a, cfg)?),
            "mem.recall" => Command::Recall(recall::RecallCmd::parse(&mut a, cfg)?),
            "mem.forget" => Command::Forget(forget::Forget::parse(&mut a)?),
            "mem.consolidate" => {
                Command::Consolidate(consolidate::Consolidate::parse(&mut a, cfg)?)
            }
            "mem.list" => Command::List(list::List::parse(&mut a)?),
            "mem.info" => {
                a.at_end()?;
                Command::Info
            }
            "mem.turn" => Command::Turn(turn::TurnCmd::parse(&mut a, cfg)?),
            "mem.session" => Command::Session(session::SessionCmd::parse(&mut a)?),
            "mem.events" => Command::Events(events::Events::parse(&mut a)?),
            _ => Command::Unknown(String::from_utf8_lossy(&verb).into_owned(), a.rest()),
        };
        Ok(cmd)
    }

    /// The USER a command acts for, when it has a user scope.
    pub fn scope_user(&self) -> Option<&str> {
        match self {
            Command::Remember(c) => Some(&c.scope.user),
            Command::Recall(c) => Some(&c.scope.user),
            Command::Turn(c) => Some(&c.scope.user),
            Command::List(c) => Some(&c.scope.user),
            Command::Forget(forget::Forget::Scope(s)) => Some(&s.user),
            Command::Consolidate(c) => Some(&c.scope.user),
            Command::Session(c) => c.user(),
            Command::Events(c) => c.user.as_deref(),
            _ => None,
        }
    }

    /// In cluster mode, a key in the slot of the data the command touches: its user's tag, or
    /// the memory id it names (ids carry their user's tag there).
    pub fn slot_key(&self, keys: &crate::store::keyspace::Keyspace) -> Option<String> {
        match self {
            Command::Forget(forget::Forget::Id(id)) => Some(keys.memory(id)),
            _ => self
                .scope_user()
                .map(|u| format!("{{{}}}", crate::upstream::cluster::slot::user_tag(u))),
        }
    }

    /// Whether the command reads or writes memproxy's data (and so needs database 0).
    pub fn touches_data(&self) -> bool {
        !matches!(
            self,
            Command::Ping | Command::Help | Command::Embed(_) | Command::Unknown(..)
        )
    }

    /// Run on the client's own upstream connection (`link`).
    pub async fn apply(
        self,
        engine: &Engine,
        client: &ClientState,
        link: &mut Link,
    ) -> MemResult<Reply> {
        match self {
            Command::Ping => {
                // Through to Redis, as the client: NOAUTH and friends come from there.
                crate::error::ok(link.call1(vec![b"PING".to_vec()]).await?)?;
                Ok(Reply::Status("PONG"))
            }
            Command::Help => Ok(catalog::help()),
            Command::Embed(c) => c.apply(engine, link, client.trusted).await,
            Command::Remember(c) => c.apply(engine, link).await,
            Command::Recall(c) => c.apply(engine, link, client.trusted).await,
            Command::Forget(c) => c.apply(engine, link, client).await,
            Command::Consolidate(c) => c.apply(engine, link).await,
            Command::List(c) => c.apply(engine, link).await,
            Command::Info => info::apply(engine, link).await,
            Command::Turn(c) => c.apply(engine, link, &engine.owner(client)).await,
            Command::Session(c) => c.apply(engine, link, &engine.owner(client)).await,
            Command::Events(c) => c.apply(engine, link, &engine.owner(client)).await,
            Command::Unknown(name, rest) => {
                // Redis's wording: each argument quoted and followed by a space, cut at 128 bytes.
                let shown: String = rest
                    .iter()
                    .map(|a| format!("'{}' ", String::from_utf8_lossy(&a[..a.len().min(128)])))
                    .collect();
                Ok(Reply::Error(format!(
                    "ERR unknown command '{name}', with args beginning with: {shown}"
                )))
            }
        }
    }
}

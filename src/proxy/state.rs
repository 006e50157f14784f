//! The proxy's view of a client connection's state (protocol, user, database, CLIENT REPLY), and
//! how a request changes it — written once for every upstream (single and cluster).
//!
//! Sessions classify a request with [`route::kind`](super::route::kind), take its [`Change`] with
//! [`Change::of`] before sending it, and [`Change::apply`] it when Redis's reply is not an error.

use super::route::{Conn, Kind};
use crate::engine::ClientState;
use crate::resp::Protocol;

/// The `CLIENT REPLY` mode a request runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplyMode {
    #[default]
    On,
    /// `CLIENT REPLY OFF`: nothing is answered until ON.
    Off,
    /// `CLIENT REPLY SKIP`: the next request is not answered.
    Skip,
}

/// `CLIENT REPLY` as Redis keeps it for a connection: OFF until ON, SKIP for the next request.
#[derive(Debug, Default, Clone, Copy)]
pub struct Replies {
    off: bool,
    skip_next: bool,
}

impl Replies {
    /// The mode the next request runs under (a pending SKIP is spent on it). Its reply reaches
    /// the client only under `On` — except RESET's under OFF ([`Replies::reset`]).
    pub fn take_mode(&mut self) -> ReplyMode {
        let skip = std::mem::take(&mut self.skip_next);
        if self.off {
            ReplyMode::Off
        } else if skip {
            ReplyMode::Skip
        } else {
            ReplyMode::On
        }
    }

    /// `CLIENT REPLY ON|OFF|SKIP` took effect; returns whether Redis answers it (only ON does).
    pub fn set(&mut self, mode: ReplyMode) -> bool {
        match mode {
            ReplyMode::On => {
                *self = Replies::default();
                true
            }
            ReplyMode::Off => {
                self.off = true;
                false
            }
            ReplyMode::Skip => {
                self.skip_next = !self.off;
                false
            }
        }
    }

    /// RESET, run under `mode` (from [`Replies::take_mode`]): replies are on again, and Redis answers
    /// it unless it was SKIPped — under OFF too, as RESET turns replies on before it answers.
    pub fn reset(&mut self, mode: ReplyMode) -> bool {
        *self = Replies::default();
        mode != ReplyMode::Skip
    }

    /// CLIENT REPLY OFF is in force (nothing is answered until ON).
    pub fn is_off(&self) -> bool {
        self.off
    }

    /// The mode `CLIENT REPLY <arg>` asks for.
    pub fn parse(arg: &[u8]) -> Option<ReplyMode> {
        if arg.eq_ignore_ascii_case(b"on") {
            Some(ReplyMode::On)
        } else if arg.eq_ignore_ascii_case(b"off") {
            Some(ReplyMode::Off)
        } else if arg.eq_ignore_ascii_case(b"skip") {
            Some(ReplyMode::Skip)
        } else {
            None
        }
    }
}

/// The error line a request answers inside MULTI when memproxy does not queue it, in both
/// sessions (the transaction goes on without it): a MEM.* (it runs only outside a transaction),
/// `CLIENT REPLY OFF|SKIP` (with which Redis itself cuts EXEC's reply short) and the (un)subscribe
/// commands (whose replies Redis sends beside EXEC's reply: one
/// frame a channel, and a SUBSCRIBE leaves the connection subscribed). `CLIENT REPLY ON` is queued
/// as any command while replies are on (it changes nothing), and refused while they are off (EXEC
/// would turn them on halfway through its own reply, which Redis then sends in part: no array
/// header, the elements after it). `arg2`: the third argument; `replies_off`: CLIENT REPLY OFF is in
/// force.
pub fn refused_in_multi(kind: Kind, name: &[u8], arg2: &[u8], replies_off: bool) -> Option<String> {
    let upper = |b: &[u8]| String::from_utf8_lossy(b).to_uppercase();
    let subscribe = name.len() >= 9 && name[name.len() - 9..].eq_ignore_ascii_case(b"subscribe");
    let what = match kind {
        Kind::Mem => {
            return Some(format!(
                "ERR {} cannot run inside MULTI (the transaction is unaffected)",
                upper(name)
            ))
        }
        Kind::ClientReply
            if matches!(Replies::parse(arg2), Some(ReplyMode::Off | ReplyMode::Skip))
                || (replies_off && Replies::parse(arg2) == Some(ReplyMode::On)) =>
        {
            format!("CLIENT REPLY {}", upper(arg2))
        }
        Kind::Unsubscribe => upper(name),
        Kind::Tunnel if subscribe => upper(name),
        _ => return None,
    };
    Some(format!(
        "ERR {what} inside MULTI is not supported by memproxy (the transaction is unaffected)"
    ))
}

/// Whether Redis queues a request of `kind` (named `name`) inside MULTI — it runs MULTI, WATCH,
/// EXEC, DISCARD, RESET and QUIT at once — so that its reply is one element of EXEC's.
pub fn queued_in_multi(kind: Kind, name: &[u8]) -> bool {
    !matches!(
        kind,
        Kind::Multi | Kind::Watch | Kind::Exec | Kind::Discard | Kind::Reset
    ) && !name.eq_ignore_ascii_case(b"quit")
}

/// Which of the commands EXEC ran succeeded, in order: `None` when the transaction did not run
/// (EXECABORT, or a null for a touched WATCH).
pub fn ran_in_exec(exec: &[u8]) -> Option<Vec<bool>> {
    let elements = crate::resp::elements(exec)?;
    Some(
        elements
            .iter()
            .map(|e| !matches!(e.first(), Some(b'-') | Some(b'!')))
            .collect(),
    )
}

/// Apply the connection changes queued inside a transaction (each with its place among the
/// queued commands) by EXEC's reply: each one whose element is not an error.
pub fn apply_exec(changes: Vec<(usize, Change)>, exec: &[u8], state: &mut ClientState) {
    let ran = ran_in_exec(exec).unwrap_or_default();
    for (at, change) in changes {
        if ran.get(at) == Some(&true) {
            change.apply(b"+", state);
        }
    }
}

/// How a successful reply to a request changes the connection's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// HELLO: the protocol (if given) and the user (if AUTH was given).
    Hello(Option<Protocol>, Option<String>),
    /// AUTH: authenticated as this user.
    Auth(String),
    /// SELECT: this database.
    Select(i64),
    /// RESET: back to RESP2, the default user, database 0.
    Reset,
}

impl Change {
    /// The change `args` make when they succeed, for a request of `kind` (outside MULTI; a
    /// queued request changes nothing until EXEC).
    pub fn of<A: AsRef<[u8]>>(kind: Kind, args: &[A]) -> Option<Change> {
        let arg = |i: usize| args.get(i).map(A::as_ref).unwrap_or_default();
        let text = |i: usize| String::from_utf8_lossy(arg(i)).into_owned();
        match kind {
            Kind::Reset => Some(Change::Reset),
            Kind::State(Conn::Select) if args.len() == 2 => std::str::from_utf8(arg(1))
                .ok()?
                .parse()
                .ok()
                .map(Change::Select),
            Kind::State(Conn::Auth) => Some(Change::Auth(if args.len() >= 3 {
                text(1)
            } else {
                "default".into()
            })),
            Kind::State(Conn::Hello) => {
                let proto = match arg(1) {
                    b"2" => Some(Protocol::Resp2),
                    b"3" => Some(Protocol::Resp3),
                    _ => None,
                };
                let mut user = None;
                let mut i = 2;
                while i < args.len() {
                    if arg(i).eq_ignore_ascii_case(b"auth") && i + 2 < args.len() {
                        user = Some(text(i + 1));
                        i += 3;
                    } else {
                        i += 1;
                    }
                }
                Some(Change::Hello(proto, user))
            }
            _ => None,
        }
    }

    /// AUTH, or HELLO … AUTH: the connection's user changes.
    pub fn changes_user(&self) -> bool {
        matches!(self, Change::Auth(_) | Change::Hello(_, Some(_)))
    }

    /// Apply the change after Redis answered `reply` (nothing changes on an error reply). A new
    /// identity clears `state.trusted`: a MEM.* that got past authentication before no longer
    /// vouches for the connection.
    pub fn apply(self, reply: &[u8], state: &mut ClientState) {
        if matches!(reply.first(), Some(b'-') | Some(b'!')) {
            return;
        }
        match self {
            Change::Hello(proto, user) => {
                if let Some(p) = proto {
                    state.protocol = p;
                }
                if let Some(u) = user {
                    state.authenticated = true;
                    state.user = Some(u);
                    state.trusted = false;
                }
            }
            Change::Auth(user) => {
                state.authenticated = true;
                state.user = Some(user);
                state.trusted = false;
            }
            Change::Select(db) => state.db = db,
            Change::Reset => {
                let scope_user = state.scope_user.take();
                *state = ClientState {
                    scope_user,
                    ..ClientState::default()
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::route::kind;

    fn change(args: &[&str]) -> Option<Change> {
        Change::of(kind(args), args)
    }

    #[test]
    fn changes_of_requests() {
        assert_eq!(
            change(&["hello", "3", "AUTH", "u", "p", "SETNAME", "x"]),
            Some(Change::Hello(Some(Protocol::Resp3), Some("u".into())))
        );
        assert_eq!(
            change(&["AUTH", "pw"]),
            Some(Change::Auth("default".into()))
        );
        assert_eq!(change(&["auth", "u", "pw"]), Some(Change::Auth("u".into())));
        assert_eq!(change(&["select", "2"]), Some(Change::Select(2)));
        assert_eq!(change(&["select", "x"]), None);
        assert_eq!(change(&["get", "k"]), None);
        let mut st = ClientState {
            trusted: true,
            ..ClientState::default()
        };
        change(&["auth", "u", "pw"])
            .unwrap()
            .apply(b"-WRONGPASS\r\n", &mut st);
        assert!(st.trusted && st.user.is_none() && !st.authenticated);
        change(&["auth", "u", "pw"])
            .unwrap()
            .apply(b"+OK\r\n", &mut st);
        assert!(!st.trusted && st.user.as_deref() == Some("u") && st.authenticated);
        // SELECT keeps the trust; RESET drops everything but a bound scope user.
        st.trusted = true;
        st.scope_user = Some("bound".into());
        change(&["select", "3"]).unwrap().apply(b"+OK\r\n", &mut st);
        assert!(st.trusted && st.db == 3);
        Change::Reset.apply(b"+RESET\r\n", &mut st);
        assert!(!st.trusted && st.db == 0 && st.user.is_none());
        assert_eq!(st.scope_user.as_deref(), Some("bound"));
    }
}

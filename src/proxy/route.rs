//! The command table: how every command is classified ([`kind`]) — for both sessions: what
//! changes the connection's state, what starts a transaction or a tunnel, what memproxy answers
//! itself — and, in cluster mode, where it goes: to the master of its keys' slot, split by slot
//! and merged, to every master, or handled by the session itself. A single session treats the
//! cluster-only kinds (split, every master, SCAN, refused) as plain requests. PROTOCOL.md §6 is
//! the cluster part of this table in prose.

use crate::upstream::cluster::slot::slot;
use crate::upstream::cluster::topology::{Cluster, KeySpec};

/// What the session does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// To one master, chosen by [`target`]; one reply.
    Plain,
    /// Connection state (AUTH, HELLO, SELECT, CLIENT SETNAME …): to every connection the client
    /// has, and to each one it opens later.
    State(Conn),
    /// COMMAND …: Redis's reply with the MEM.* entries merged in.
    Command,
    /// RESET: every connection, and the recorded state forgotten.
    Reset,
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
    /// Multi-key commands split by slot, replies merged in request order.
    Split(Merge),
    /// To every master, replies merged.
    Every(Merge),
    /// SCAN over every master in turn.
    Scan,
    /// CONFIG SET / RESETSTAT and DEBUG's server knobs: the client sees one Redis, so a setting
    /// it changes holds wherever its keys live — every master (first error, else the first
    /// reply); inside a transaction, queued like a plain request for the transaction's master.
    Config,
    /// SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, MONITOR: the connection becomes a tunnel to one node.
    Tunnel,
    /// (P|S)UNSUBSCRIBE outside subscribed mode (a subscribed connection is a tunnel): to one
    /// master like a plain request, one reply a channel (pushes under RESP3).
    Unsubscribe,
    /// A MEM.* verb.
    Mem,
    /// CLIENT REPLY ON|OFF|SKIP: kept by the session (which drops the replies it should not
    /// pass on); the masters always answer.
    ClientReply,
    /// `CLIENT ID`: memproxy's own id for the client, one across the masters
    /// ([`super::clients`]).
    ClientId,
    /// `CLIENT UNBLOCK id [TIMEOUT|ERROR]` (an integer id): to the master where that client is
    /// blocked, under its id there.
    ClientUnblock,
    /// Not available through memproxy in cluster mode (one error line).
    Refused(&'static str),
}

/// CLIENT TRACKING's options that cannot hold over a connection per master: REDIRECT names a
/// client id (memproxy's own is no master's), and OPTIN / OPTOUT take effect through CLIENT
/// CACHING on whichever master the next command reaches. The error line, in cluster mode.
pub fn tracking_refused<A: AsRef<[u8]>>(args: &[A]) -> Option<&'static str> {
    ["redirect", "optin", "optout"]
        .iter()
        .any(|o| tracking_option(args, o))
        .then_some("ERR CLIENT TRACKING REDIRECT, OPTIN and OPTOUT are not supported by memproxy in cluster mode (ON, BCAST, PREFIX and NOLOOP are)")
}

/// `CLIENT TRACKING …` naming `option` (BCAST, REDIRECT …) among its arguments.
pub fn tracking_option<A: AsRef<[u8]>>(args: &[A], option: &str) -> bool {
    args.len() > 2
        && eq(args[0].as_ref(), "client")
        && eq(args[1].as_ref(), "tracking")
        && args[2..].iter().any(|a| eq(a.as_ref(), option))
}

/// Which connection-state command a [`Kind::State`] is (the proxy tracks the first three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conn {
    Auth,
    Hello,
    Select,
    /// READONLY, READWRITE, CLIENT SETNAME / SETINFO / NO-EVICT / NO-TOUCH.
    Other,
}

/// How replies of several masters become one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Integers added (DEL, UNLINK, EXISTS, TOUCH, DBSIZE).
    Sum,
    /// Arrays concatenated (KEYS) or, for a split MGET, put back in the request's key order.
    Concat,
    /// Every reply `+OK` (MSET, FLUSHALL, SCRIPT FLUSH …): the first error, else the first reply.
    First,
    /// INFO: the first master's text with the additive counters and keyspaces summed
    /// ([`super::info`]).
    Info,
    /// RANDOMKEY: the key of a master picked at random among those that have one.
    Random,
}

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// `name` lower-cased into `buf` (command names are short ASCII; a longer or odd one is
/// nothing this table knows).
fn lower<'a>(name: &[u8], buf: &'a mut [u8; 32]) -> &'a str {
    if name.len() > buf.len() {
        return "";
    }
    let out = &mut buf[..name.len()];
    out.copy_from_slice(name);
    out.make_ascii_lowercase();
    std::str::from_utf8(out).unwrap_or("")
}

/// The commands that can block a client (the ones `CLIENT UNBLOCK` ends). Every request passes
/// here in cluster mode: most are ruled out by their first letter.
pub fn blocks(name: &[u8]) -> bool {
    const BLOCKING: &[&str] = &[
        "blpop",
        "brpop",
        "brpoplpush",
        "blmove",
        "blmpop",
        "bzpopmin",
        "bzpopmax",
        "bzmpop",
        "xread",
        "xreadgroup",
        "wait",
        "waitaof",
    ];
    matches!(name.first(), Some(b'b' | b'B' | b'x' | b'X' | b'w' | b'W'))
        && BLOCKING
            .iter()
            .any(|b| name.eq_ignore_ascii_case(b.as_bytes()))
}

/// What the session does with `args`.
pub fn kind<A: AsRef<[u8]>>(args: &[A]) -> Kind {
    let name = args.first().map(A::as_ref).unwrap_or_default();
    let sub = args.get(1).map(A::as_ref).unwrap_or_default();
    if name.len() > 4 && name[..4].eq_ignore_ascii_case(b"mem.") {
        return Kind::Mem;
    }
    let mut buf = [0u8; 32];
    match lower(name, &mut buf) {
        "auth" => Kind::State(Conn::Auth),
        "hello" => Kind::State(Conn::Hello),
        "select" => Kind::State(Conn::Select),
        "readonly" | "readwrite" => Kind::State(Conn::Other),
        "command" => Kind::Command,
        // CLIENT TRACKING too: each master tracks what the client read there, and sends its
        // invalidations on the client's connection to it (RESP3).
        "client"
            if eq(sub, "setname")
                || eq(sub, "setinfo")
                || eq(sub, "no-evict")
                || eq(sub, "no-touch")
                || eq(sub, "tracking") =>
        {
            Kind::State(Conn::Other)
        }
        "client" if eq(sub, "reply") => Kind::ClientReply,
        "client" if eq(sub, "id") && args.len() == 2 => Kind::ClientId,
        "client"
            if eq(sub, "unblock")
                && (3..=4).contains(&args.len())
                && std::str::from_utf8(args[2].as_ref())
                    .is_ok_and(|id| id.parse::<i64>().is_ok()) =>
        {
            Kind::ClientUnblock
        }
        "reset" => Kind::Reset,
        "multi" => Kind::Multi,
        "exec" => Kind::Exec,
        "discard" => Kind::Discard,
        "watch" => Kind::Watch,
        "unwatch" => Kind::Unwatch,
        "mget" => Kind::Split(Merge::Concat),
        "mset" => Kind::Split(Merge::First),
        "del" | "unlink" | "exists" | "touch" => Kind::Split(Merge::Sum),
        "keys" => Kind::Every(Merge::Concat),
        "dbsize" => Kind::Every(Merge::Sum),
        "info" => Kind::Every(Merge::Info),
        "randomkey" => Kind::Every(Merge::Random),
        // Server knobs: as CONFIG SET, on every master.
        "debug"
            if eq(sub, "set-active-expire")
                || eq(sub, "set-skip-checksum-validation")
                || eq(sub, "quicklist-packed-threshold")
                || eq(sub, "set-disable-deny-scripts") =>
        {
            Kind::Config
        }
        "flushall" | "flushdb" => Kind::Every(Merge::First),
        "script" if eq(sub, "load") || eq(sub, "flush") => Kind::Every(Merge::First),
        "config" if eq(sub, "set") || eq(sub, "resetstat") => Kind::Config,
        "function"
            if !eq(sub, "list") && !eq(sub, "dump") && !eq(sub, "stats") && !eq(sub, "help") =>
        {
            Kind::Every(Merge::First)
        }
        "scan" => Kind::Scan,
        "subscribe" | "psubscribe" | "ssubscribe" | "monitor" | "sync" | "psync" => Kind::Tunnel,
        "unsubscribe" | "punsubscribe" | "sunsubscribe" => Kind::Unsubscribe,
        _ => Kind::Plain,
    }
}

/// [`kind`] for a single session: the cluster-only kinds (split by slot, every master, SCAN,
/// CONFIG SET, memproxy's own CLIENT ID and UNBLOCK, refused) are plain requests there.
pub fn kind_single<A: AsRef<[u8]>>(args: &[A]) -> Kind {
    match kind(args) {
        Kind::Split(_)
        | Kind::Every(_)
        | Kind::Scan
        | Kind::Config
        | Kind::ClientId
        | Kind::ClientUnblock
        | Kind::Refused(_) => Kind::Plain,
        k => k,
    }
}

/// Where a command's keys hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// No key: the client's first master.
    Any,
    Slot(u16),
    /// Keys in more than one slot.
    Cross,
}

/// The keys of `args` by `spec` (positions as `COMMAND` gives them).
pub fn keys_by_spec<A: AsRef<[u8]>>(spec: KeySpec, args: &[A]) -> impl Iterator<Item = &[u8]> {
    let argc = args.len() as i64;
    let last = if spec.last < 0 {
        argc + spec.last
    } else {
        spec.last
    };
    let end = if spec.first <= 0 {
        0
    } else {
        (last + 1).clamp(0, argc)
    };
    let start = spec.first.clamp(0, end);
    (start..end)
        .step_by(spec.step.max(1) as usize)
        .map(move |i| args[i as usize].as_ref())
}

/// The command-table entry for `args`: `name|sub` when Redis lists the subcommand.
pub fn spec_of<A: AsRef<[u8]>>(cluster: &Cluster, args: &[A]) -> Option<KeySpec> {
    let mut buf = [0u8; 32];
    let name = lower(args.first()?.as_ref(), &mut buf);
    let spec = cluster.key_spec(name);
    // A container command (OBJECT, XINFO, MEMORY …) lists its keys per subcommand.
    if spec.is_some_and(|s| s.first > 0 || s.movable) {
        return spec;
    }
    if let Some(sub) = args.get(1) {
        let full = format!(
            "{name}|{}",
            String::from_utf8_lossy(sub.as_ref()).to_ascii_lowercase()
        );
        if let Some(s) = cluster.key_spec(&full) {
            return Some(s);
        }
    }
    spec
}

/// The slot all `keys` share.
pub fn target_of<K: AsRef<[u8]>>(keys: impl IntoIterator<Item = K>) -> Target {
    let mut t = Target::Any;
    for k in keys {
        let s = slot(k.as_ref());
        match t {
            Target::Any => t = Target::Slot(s),
            Target::Slot(x) if x != s => return Target::Cross,
            _ => {}
        }
    }
    t
}

/// Where a plain command goes; its keys come from the command table, or from the server for
/// commands with movable keys.
pub async fn target<A: AsRef<[u8]>>(cluster: &Cluster, args: &[A]) -> Target {
    // DEBUG OBJECT / DIGEST-VALUE name keys that the command table does not list.
    if let [name, sub, keys @ ..] = args {
        if eq(name.as_ref(), "debug")
            && (eq(sub.as_ref(), "object") || eq(sub.as_ref(), "digest-value"))
        {
            return target_of(keys.iter().map(A::as_ref));
        }
    }
    match spec_of(cluster, args) {
        Some(spec) if spec.movable => match cluster.get_keys(args).await {
            Ok(keys) => target_of(&keys),
            Err(_) => Target::Any,
        },
        Some(spec) => target_of(keys_by_spec(spec, args)),
        None => Target::Any,
    }
}

/// The keys and the key step of a command [`Kind::Split`] splits: `MSET k v k v` has step 2.
pub fn split_step<A: AsRef<[u8]>>(args: &[A]) -> usize {
    if args.first().is_some_and(|n| eq(n.as_ref(), "mset")) {
        2
    } else {
        1
    }
}

/// The CROSSSLOT error, as Redis Cluster words it.
pub const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &[&str]) -> Vec<Vec<u8>> {
        s.iter().map(|x| x.as_bytes().to_vec()).collect()
    }

    #[test]
    fn keys_by_position() {
        let mset = KeySpec {
            first: 1,
            last: -1,
            step: 2,
            movable: false,
        };
        assert_eq!(
            keys_by_spec(mset, &a(&["MSET", "a", "1", "b", "2"])).collect::<Vec<_>>(),
            vec![b"a".as_slice(), b"b".as_slice()]
        );
        let get = KeySpec {
            first: 1,
            last: 1,
            step: 1,
            movable: false,
        };
        assert_eq!(keys_by_spec(get, &a(&["GET"])).count(), 0);
        let zero = KeySpec { first: 0, ..get };
        assert_eq!(keys_by_spec(zero, &a(&["PING", "x"])).count(), 0);
        assert_eq!(target_of([b"{u}1", b"{u}2"]), Target::Slot(slot(b"u")));
        assert_eq!(target_of([b"a", b"b"]), Target::Cross);
        assert_eq!(target_of(Vec::<&[u8]>::new()), Target::Any);
        assert_eq!(kind(&a(&["mem.recall", "x"])), Kind::Mem);
        assert_eq!(
            kind(&a(&["client", "SETNAME", "x"])),
            Kind::State(Conn::Other)
        );
        assert_eq!(kind(&a(&["Del", "x"])), Kind::Split(Merge::Sum));
        assert_eq!(kind(&a(&["config", "SET", "x", "1"])), Kind::Config);
        assert_eq!(kind(&a(&["config", "get", "x"])), Kind::Plain);
        assert_eq!(kind(&a(&["client", "id"])), Kind::ClientId);
        assert_eq!(
            kind(&a(&["CLIENT", "UNBLOCK", "12", "ERROR"])),
            Kind::ClientUnblock
        );
        // Malformed: Redis's own error, from a master.
        assert_eq!(kind(&a(&["client", "id", "x"])), Kind::Plain);
        assert_eq!(kind(&a(&["client", "unblock", "x"])), Kind::Plain);
        assert_eq!(kind(&a(&["client", "unblock"])), Kind::Plain);
    }

    #[test]
    fn blocking_commands_are_known_in_any_case() {
        assert!(blocks(b"BLPOP") && blocks(b"xReadGroup") && blocks(b"wait"));
        assert!(!blocks(b"LPOP") && !blocks(b"GET") && !blocks(b"") && !blocks(b"bitcount"));
    }
}

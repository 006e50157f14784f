//! The Lua scripts, run with EVALSHA on the client's own connection (EVAL once on NOSCRIPT, so a
//! `SCRIPT FLUSH` or a restarted upstream costs one round trip, not an error).
//!
//! Every MEM.* write is one script, so it is atomic on the server: a memory never exists without
//! its TTL, a dedup check and the write it decides cannot interleave with another writer (also
//! across several proxies), and a turn is never lost to a read-modify-write race. Every script
//! first checks the client's ACL rights for each command it will run (`redis.acl_check_cmd`), the
//! types of the keys it will write and its arguments, and writes nothing unless all pass. Read
//! scripts are flagged `no-writes`, so they run at `maxmemory` and on replicas; write scripts
//! are checked for OOM by Redis before they start.

use redis::Value;

use crate::error::{ok, MemResult};
use crate::upstream::{Cmd, Link};

const PRELUDE: &str = include_str!("lua/prelude.lua");

pub struct Script {
    body: String,
    sha: String,
    /// Flagged `no-writes`: with keys declared it runs as EVALSHA_RO, which needs only read
    /// access to them (a read-only ACL user's `%R~…` pattern).
    read_only: bool,
}

impl Script {
    fn new(flags: &str, body: &str) -> Script {
        let body = format!("#!lua{flags}\n{PRELUDE}\n{body}");
        let sha = redis::Script::new(&body).get_hash().to_string();
        Script {
            read_only: flags.contains("no-writes"),
            body,
            sha,
        }
    }

    /// Run with `keys`; ARGV is the rights block (`rights`), then `args`. A Redis error reply
    /// becomes an error. In cluster mode the keys route it: Redis answers `MOVED` / `ASK` when
    /// their slot is served elsewhere, before the script runs.
    pub async fn run(
        &self,
        link: &mut Link,
        keys: &[String],
        rights: &[Cmd],
        args: Vec<Vec<u8>>,
    ) -> MemResult<Value> {
        let mut tail: Vec<Vec<u8>> = Vec::with_capacity(2 + keys.len() + args.len() + 8);
        tail.push(keys.len().to_string().into_bytes());
        tail.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
        tail.push(rights.len().to_string().into_bytes());
        for r in rights {
            push_spec(&mut tail, r);
        }
        tail.extend(args);
        let ro = self.read_only && !keys.is_empty();
        let mut cmd: Cmd = Vec::with_capacity(tail.len() + 2);
        cmd.push(if ro { &b"EVALSHA_RO"[..] } else { b"EVALSHA" }.to_vec());
        cmd.push(self.sha.as_bytes().to_vec());
        cmd.extend_from_slice(&tail);
        let v = link.call1(cmd).await?;
        if let Value::ServerError(e) = &v {
            if e.code() == "NOSCRIPT" {
                let mut cmd: Cmd = Vec::with_capacity(tail.len() + 2);
                cmd.push(if ro { &b"EVAL_RO"[..] } else { b"EVAL" }.to_vec());
                cmd.push(self.body.as_bytes().to_vec());
                cmd.extend(tail);
                return ok(link.call1(cmd).await?);
            }
        }
        ok(v)
    }
}

/// Append FT.SEARCH arguments for the prelude's `search()`: as [`push_spec`] when each row
/// needs its key's TTL, else as `-<n> <args…>` (no PTTL per row: consolidation's neighbours
/// only compare distances).
pub fn push_search(out: &mut Vec<Vec<u8>>, spec: &[Vec<u8>], ttl: bool) {
    let n = spec.len().to_string();
    out.push(if ttl { n } else { format!("-{n}") }.into_bytes());
    out.extend(spec.iter().cloned());
}

/// Append a spec (a command or FT.SEARCH arguments) as `<n> <args…>`.
pub fn push_spec(out: &mut Vec<Vec<u8>>, spec: &[Vec<u8>]) {
    out.push(spec.len().to_string().into_bytes());
    out.extend(spec.iter().cloned());
}

pub struct Scripts {
    pub check: Script,
    pub search: Script,
    pub remember: Script,
    pub forget: Script,
    pub session: Script,
    pub turn: Script,
    pub consolidate: Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        // allow-cross-slot-keys: in cluster mode a script touches its user's keys (one slot) and
        // its master's index, whose name hashes to another slot of the same master.
        const RO: &str = " flags=no-writes,allow-cross-slot-keys";
        const RW: &str = " flags=allow-cross-slot-keys";
        Scripts {
            check: Script::new(RO, include_str!("lua/check.lua")),
            search: Script::new(RO, include_str!("lua/search.lua")),
            remember: Script::new(RW, include_str!("lua/remember.lua")),
            forget: Script::new(RW, include_str!("lua/forget.lua")),
            session: Script::new(RW, include_str!("lua/session.lua")),
            turn: Script::new(RW, include_str!("lua/turn.lua")),
            consolidate: Script::new(RW, include_str!("lua/consolidate.lua")),
        }
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}

//! The Lua scripts, each run with EVALSHA (loaded again on NOSCRIPT by `redis::Script`).
//!
//! Every MEM.* write is one script, so it is atomic on the server: a memory never exists without
//! its TTL, a dedup check and the write it decides cannot interleave with another writer (also
//! across several proxies), and a turn is never lost to a read-modify-write race. Every script
//! checks the types of the keys it will write before writing anything.

use redis::Script;

const PRELUDE: &str = include_str!("lua/prelude.lua");

fn with_prelude(body: &str) -> Script {
    // The shebang makes Redis check OOM before the script runs, not halfway through it.
    Script::new(&format!("#!lua\n{PRELUDE}\n{body}"))
}

pub struct Scripts {
    pub search: Script,
    pub remember: Script,
    pub forget: Script,
    pub session: Script,
    pub turn: Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        Scripts {
            search: with_prelude(include_str!("lua/search.lua")),
            remember: with_prelude(include_str!("lua/remember.lua")),
            forget: with_prelude(include_str!("lua/forget.lua")),
            session: with_prelude(include_str!("lua/session.lua")),
            turn: with_prelude(include_str!("lua/turn.lua")),
        }
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}

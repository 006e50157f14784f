//! What "acknowledged" means for a MEM.* write: after its script, optionally `WAIT` for replicas
//! and `WAITAOF` for the AOF, on the client's own connection, within a bounded time.

use super::keyspace::cmd;
use crate::error::ok;
use crate::error::{MemError, MemResult};
use crate::resp::read::{array, int};
use crate::upstream::Link;

/// The guarantee a write asks for: `replicas` replicas have it, and with `fsync` the primary's
/// AOF (and, with replicas, theirs) has it on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Durability {
    pub replicas: u32,
    pub fsync: bool,
}

impl Durability {
    pub fn none(&self) -> bool {
        self.replicas == 0 && !self.fsync
    }
}

/// Wait for `d` after a write of `what` (e.g. "MEM.REMEMBER wrote memory 1a2b…"). A guarantee not
/// met within `wait_ms` is a `NOREPLICAS` error that says the write happened and how many
/// acknowledged it (Redis's own word for too few replicas).
pub async fn wait(link: &mut Link, d: Durability, wait_ms: u64, what: &str) -> MemResult<()> {
    if d.none() {
        return Ok(());
    }
    let ms = wait_ms.to_string();
    let replicas = d.replicas.to_string();
    if d.fsync {
        let v = ok(link.call1(cmd(&["WAITAOF", "1", &replicas, &ms])).await?)
            .map_err(|e| not_kept(format!("{what}, but WAITAOF failed: {e}")))?;
        let a = array(&v);
        let (local, acked) = (
            a.first().and_then(int).unwrap_or(0),
            a.get(1).and_then(int).unwrap_or(0),
        );
        if local < 1 || acked < i64::from(d.replicas) {
            return Err(not_kept(format!(
                "{what}, but within {wait_ms} ms the primary's AOF {} and {acked} of {} replicas' AOF have it",
                if local < 1 { "does not" } else { "does" },
                d.replicas
            )));
        }
        return Ok(());
    }
    let v = ok(link.call1(cmd(&["WAIT", &replicas, &ms])).await?)
        .map_err(|e| not_kept(format!("{what}, but WAIT failed: {e}")))?;
    let acked = int(&v).unwrap_or(0);
    if acked < i64::from(d.replicas) {
        return Err(not_kept(format!(
            "{what}, but only {acked} of {} replicas acknowledged it within {wait_ms} ms",
            d.replicas
        )));
    }
    Ok(())
}

fn not_kept(message: String) -> MemError {
    MemError::coded("NOREPLICAS", &message)
}

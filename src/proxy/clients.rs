//! Client ids in cluster mode. A client there talks to several masters, and each numbers its
//! connection differently, so memproxy gives every client one id of its own (`CLIENT ID`) and
//! remembers, for a client that sends a blocking command, its connection's id on that master:
//! `CLIENT UNBLOCK id` from any client finds it there. A client that never blocks costs one
//! counter increment; one that blocks costs one `CLIENT ID` round trip per master it blocks on,
//! before its first blocking command there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

static NEXT: AtomicU64 = AtomicU64::new(1);

/// Client id → (master, that client's connection id there).
type Table = HashMap<u64, Vec<(String, i64)>>;

static ON_MASTERS: LazyLock<Mutex<Table>> = LazyLock::new(Default::default);

fn table() -> MutexGuard<'static, Table> {
    // Nothing holding the lock can panic half-way; a poisoned table is still whole.
    ON_MASTERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new client's id (unique in this process, from 1).
pub fn next_id() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Client `id`'s connection to `node` is `there` on that master (a reopened connection
/// replaces the one before).
pub fn record(id: u64, node: &str, there: i64) {
    let mut t = table();
    let nodes = t.entry(id).or_default();
    nodes.retain(|(n, _)| n != node);
    nodes.push((node.to_string(), there));
}

/// The masters client `id` has blocked on, with its connection's id on each.
pub fn on_masters(id: u64) -> Vec<(String, i64)> {
    table().get(&id).cloned().unwrap_or_default()
}

/// Client `id` is gone.
pub fn forget(id: u64) {
    table().remove(&id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_masters_are_remembered_until_forgotten() {
        let (a, b) = (next_id(), next_id());
        assert_ne!(a, b);
        record(a, "n1", 7);
        record(a, "n2", 9);
        record(a, "n1", 11); // reopened
        let mut m = on_masters(a);
        m.sort();
        assert_eq!(m, vec![("n1".to_string(), 11), ("n2".to_string(), 9)]);
        assert!(on_masters(b).is_empty());
        forget(a);
        assert!(on_masters(a).is_empty());
    }
}

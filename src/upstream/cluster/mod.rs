//! The Redis Cluster behind memproxy: what is known of it, not how a session uses it
//! ([`crate::proxy::core`] and [`crate::proxy::route`] do that).
//!
//! - [`slot`]: hash slots and hash tags (and the tag memproxy gives a user's keys);
//! - [`topology`]: the slot map and the command table, learnt from the nodes and refreshed on
//!   `MOVED`.
//!
//! Cluster mode is chosen at start: `cluster = true` forces it, `false` rules it out, and by
//! default the upstream node is asked (`INFO cluster`). In front of one Redis the session core
//! ([`crate::proxy::core`]) holds no cluster and routes nothing.

pub mod slot;
pub mod topology;

pub use topology::Cluster;

use std::time::Duration;

use crate::upstream::UpstreamAddr;

/// Is the upstream a cluster node? `None` when it cannot be asked now.
pub async fn detect(addr: &UpstreamAddr, timeout: Duration) -> Option<bool> {
    let mut link = addr.admin(timeout).await.ok()?;
    let v = link
        .call1(vec![b"INFO".to_vec(), b"cluster".to_vec()])
        .await
        .ok()?;
    let text = crate::resp::read::text(&v)?;
    Some(text.contains("cluster_enabled:1"))
}

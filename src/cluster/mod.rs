//! Redis Cluster mode: memproxy in front of a cluster presents one plain Redis.
//!
//! - [`slot`]: hash slots and hash tags (and the tag memproxy gives a user's keys);
//! - [`topology`]: the slot map and the command table, learnt from the nodes and refreshed on
//!   `MOVED`;
//! - [`route`]: where each command goes (one master, split by slot, every master, or handled
//!   here);
//! - [`session`]: a client's session, with one connection per master it uses.
//!
//! Cluster mode is chosen at start: `cluster = true` forces it, `false` rules it out, and by
//! default the upstream node is asked (`INFO cluster`). Single-Redis mode ([`crate::conn`]) is
//! untouched by it.

pub mod route;
pub mod session;
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
    let text = crate::store::value::text(&v)?;
    Some(text.contains("cluster_enabled:1"))
}

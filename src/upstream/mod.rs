//! The client's dedicated upstream socket, and [`Link`]: that socket lent to one MEM.* command.
//!
//! Each client connection gets its own TCP connection to Redis, opened at accept, so that every
//! piece of connection state (AUTH, HELLO, SELECT, MULTI, WATCH, blocking commands, subscriptions,
//! CLIENT TRACKING) lives on the upstream exactly as it would without the proxy.
//!
//! MEM.* run **on that same connection**, in the request's reply slot: when a MEM.* request
//! reaches the front of its connection's queue (every earlier reply is in, nothing later has been
//! sent), the session lends its upstream socket to the command as a [`Link`]. Every command the
//! verb sends then runs with the client's own ACL user, database, protocol and CLIENT REPLY mode,
//! so Redis itself answers `NOAUTH`, `NOPERM`, `OOM`, `READONLY` … exactly as it would to the
//! client. Push frames (RESP3 invalidations) that arrive meanwhile are kept and forwarded after.
//!
//! The parts, in the order a connection is made: [`address`] (where the upstream is: URL,
//! unix socket or the primary the [`sentinel`]s name; connect), [`tls`] (the rustls client
//! configuration), [`link`] (the socket lent to a MEM.*: pipelined calls, CLIENT REPLY, pushes),
//! and [`cluster`] (a Redis Cluster's slot map and command table).

pub mod address;
pub mod cluster;
pub mod link;
pub mod lost;
pub mod sentinel;
pub mod tls;

pub use address::{AsyncStream, ConnectError, Stream, UpstreamAddr, UpstreamSettings};
pub use link::{encode, Cmd, Link};
pub use lost::{Broken, Lost};

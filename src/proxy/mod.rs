//! The Redis-facing side: accept clients and run their sessions.
//!
//! - [`server`]: the accept loop (TCP or unix), max clients, graceful shutdown; it starts a
//!   session for each client;
//! - [`core`]: a client's session, one code in front of one Redis, a Sentinel-monitored primary
//!   or a Redis Cluster: in front of one Redis the client has one upstream connection, in front
//!   of a cluster one connection per master it uses, requests routed by [`route`]; original
//!   bytes both ways, MEM.* run on the client's own connection in the request's turn;
//! - [`clients`]: client ids in cluster mode (CLIENT ID, CLIENT UNBLOCK across masters);
//! - [`info`]: INFO over a cluster's masters read as one Redis (counters and keyspaces summed);
//! - [`route`]: the command table — how each command is classified and, in cluster mode, routed
//!   (one master, split by slot, every master, or handled here);
//! - [`state`]: how a request changes the connection's state (HELLO, AUTH, SELECT, RESET),
//!   tracked the same way by both sessions;
//! - [`session`]: what both sessions share besides: the client's bounds and the framing of its
//!   bytes against them, why a session ends, and what is counted and logged when it does.
//!
//! MEM.* go from both sessions to the same verb code ([`crate::mem`]).

pub mod clients;
pub mod core;
pub mod info;
pub mod route;
pub mod server;
pub mod session;
pub mod state;

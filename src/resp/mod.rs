//! RESP on the wire, as much as a proxy needs and no more.
//!
//! - [`request`]: request framing (multibulk and inline) that finds frame boundaries and argument
//!   offsets without copying, so ordinary requests are forwarded as their original bytes.
//! - [`scan`]: reply scanning (RESP2 and RESP3) that finds where each upstream reply ends and whether
//!   it is a push; forwarded replies are never decoded.
//! - [`value`]: decoding one complete reply that memproxy reads itself (its scripts' results);
//!   [`read`]: the accessors the store reads those values with.
//! - [`reply`]: the values MEM.* answer with, encoded in the protocol the connection negotiated.
//!
//! `redis-protocol` 6 is not used for framing: its RESP3 decoder reads RESP2 nulls as streamed
//! frames, neither decoder takes inline commands, and a partial frame is re-parsed from the start
//! without length limits (see ARCHITECTURE.md). Its RESP3 map type is a hash map, so it cannot keep
//! the field order of MEM.* replies either; [`reply`] encodes those itself.

pub mod read;
pub mod reply;
pub mod request;
pub mod scan;
pub mod value;

pub use reply::{Protocol, Reply};
pub use request::{parse_request, Framer, Parsed, Request};
pub use scan::{elements, is_unsubscribe_push, scan_reply, ScanError, Scanner};

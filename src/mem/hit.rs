//! How memories are shown in replies (MEM.RECALL, MEM.LIST, MEM.TURN).

use crate::resp::Reply;
use crate::store::memory::{Hit, Remembered};

/// A recalled memory with every field of the SPEC.
pub fn recalled(h: &Hit) -> Reply {
    let mut m = listed(h);
    if let Reply::Map(fields) = &mut m {
        fields.push(("distance", Reply::opt_double(h.distance)));
        fields.push(("score", Reply::opt_double(h.score)));
        fields.push(("retrieval", Reply::text(h.retrieval.as_str())));
    }
    m
}

/// A stored memory (no distance, score or embedding).
pub fn listed(h: &Hit) -> Reply {
    Reply::Map(vec![
        ("id", Reply::text(&h.id)),
        ("text", Reply::text(&h.text)),
        ("kind", Reply::text(&h.kind)),
        ("user", Reply::text(&h.user)),
        ("namespace", Reply::text(&h.namespace)),
        ("source_thread", Reply::opt_text(h.source_thread.as_deref())),
        ("created_ts", Reply::opt_double(h.created_ts)),
        (
            "hit_count",
            h.hit_count.map(Reply::Int).unwrap_or(Reply::Nil),
        ),
        ("ttl", Reply::Int(h.ttl)),
    ])
}

pub fn remembered(r: &Remembered) -> Reply {
    Reply::Map(vec![
        ("id", Reply::text(&r.id)),
        ("deduped", Reply::Int(r.deduped as i64)),
        ("distance", Reply::opt_double(r.distance)),
        ("ttl", Reply::Int(r.ttl)),
    ])
}

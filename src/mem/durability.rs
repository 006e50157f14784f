//! The write verbs' `REPLICAS n` and `FSYNC` options: what their acknowledgement waits for
//! (`store::durable`), defaulting to `write_replicas` / `write_fsync`.

use super::args::{Args, Opt, Options};
use crate::config::Config;
use crate::error::MemResult;
use crate::store::durable::Durability;

/// The options, for a verb's option list.
pub const DURABILITY_OPTS: [Opt; 2] = [Opt("REPLICAS", 1), Opt("FSYNC", 0)];

/// The guarantee a write asks for: the request's options over the config's defaults.
pub fn parse(o: &Options, a: &Args, cfg: &Config) -> MemResult<Durability> {
    Ok(Durability {
        replicas: o
            .int(a, "REPLICAS", 0..=100)?
            .map_or(cfg.write_replicas, |n| n as u32),
        fsync: cfg.write_fsync || o.has("FSYNC"),
    })
}

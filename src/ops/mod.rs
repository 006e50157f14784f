//! The operator's side: subcommands run by hand (`export`, `import`, `migrate`, `reembed`) and the
//! background consolidator. Each works on connections of memproxy's own (the `--upstream` URL's
//! user) and reaches memories through the same verb and store code as clients do.

pub mod consolidator;
pub mod export;
pub mod migrate;
pub mod reembed;

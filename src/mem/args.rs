//! Argument parsing shared by every MEM.* verb.
//!
//! Options are case-insensitive keywords in any order; each may appear once; unknown options,
//! missing values, bad numbers and empty or non-UTF-8 text are errors that name the command.

use std::collections::VecDeque;

use crate::config::Config;
use crate::error::{MemError, MemResult};
use crate::store::{Kind, Scope};

/// The arguments of one MEM.* request after its name.
pub struct Args {
    /// The verb as the client spelled it, lowercased (`mem.recall`), for error messages.
    pub verb: String,
    items: VecDeque<Vec<u8>>,
    max_text: usize,
}

/// An option a verb takes: its keyword and how many values follow it.
pub struct Opt(pub &'static str, pub usize);

/// Options as given: keyword → values.
#[derive(Default)]
pub struct Options {
    given: Vec<(&'static str, Vec<String>)>,
}

impl Args {
    pub fn new(verb: &[u8], items: Vec<Vec<u8>>, cfg: &Config) -> Args {
        Args {
            verb: String::from_utf8_lossy(verb).to_lowercase(),
            items: items.into(),
            max_text: cfg.max_text_bytes,
        }
    }

    pub fn err(&self, msg: impl std::fmt::Display) -> MemError {
        MemError::client(format!("{}: {msg}", self.verb.to_uppercase()))
    }

    pub fn arity(&self) -> MemError {
        MemError::client(format!(
            "wrong number of arguments for '{}' command",
            self.verb
        ))
    }

    /// Drop the next `n` arguments (a subcommand already looked at).
    pub fn rest_skip(&mut self, n: usize) {
        for _ in 0..n {
            self.items.pop_front();
        }
    }

    /// Everything left, consumed.
    pub fn rest(&mut self) -> Vec<Vec<u8>> {
        self.items.drain(..).collect()
    }

    /// The next argument as a keyword (uppercased), without consuming it.
    pub fn peek_keyword(&self) -> Option<String> {
        self.items
            .front()
            .map(|b| String::from_utf8_lossy(b).to_uppercase())
    }

    fn next_raw(&mut self) -> MemResult<Vec<u8>> {
        self.items.pop_front().ok_or_else(|| self.arity())
    }

    /// A required text argument: UTF-8, not blank, within the size limit.
    pub fn text(&mut self, what: &str) -> MemResult<String> {
        let raw = self.next_raw()?;
        self.check_text(raw, what)
    }

    fn check_text(&self, raw: Vec<u8>, what: &str) -> MemResult<String> {
        if raw.len() > self.max_text {
            return Err(self.err(format!(
                "{what} is {} bytes, over the limit of {} bytes",
                raw.len(),
                self.max_text
            )));
        }
        let s =
            String::from_utf8(raw).map_err(|_| self.err(format!("{what} is not valid UTF-8")))?;
        if s.trim().is_empty() {
            return Err(self.err(format!("{what} is empty")));
        }
        Ok(s)
    }

    /// A required short value (thread id, role, …): UTF-8, not blank, at most 512 bytes.
    pub fn name(&mut self, what: &str) -> MemResult<String> {
        let raw = self.next_raw()?;
        self.check_name(raw, what)
    }

    fn check_name(&self, raw: Vec<u8>, what: &str) -> MemResult<String> {
        if raw.len() > 512 {
            return Err(self.err(format!("{what} is longer than 512 bytes")));
        }
        let s =
            String::from_utf8(raw).map_err(|_| self.err(format!("{what} is not valid UTF-8")))?;
        if s.trim().is_empty() {
            return Err(self.err(format!("{what} must not be empty")));
        }
        Ok(s)
    }

    /// Parse the rest as options from `allowed`; nothing may be left over.
    pub fn options(&mut self, allowed: &[Opt]) -> MemResult<Options> {
        let mut opts = Options::default();
        while let Some(raw) = self.items.pop_front() {
            let word = String::from_utf8_lossy(&raw).to_uppercase();
            let Some(Opt(name, n)) = allowed.iter().find(|o| o.0 == word) else {
                return Err(self.err(format!(
                    "unknown option '{}'",
                    String::from_utf8_lossy(&raw)
                )));
            };
            if opts.given.iter().any(|(g, _)| g == name) {
                return Err(self.err(format!("option {name} given more than once")));
            }
            if self.items.len() < *n {
                return Err(self.err(format!(
                    "option {name} needs {n} value{}",
                    if *n == 1 { "" } else { "s" }
                )));
            }
            let mut values = Vec::with_capacity(*n);
            for _ in 0..*n {
                let v = self.items.pop_front().unwrap_or_default();
                values.push(self.check_name(v, name)?);
            }
            opts.given.push((name, values));
        }
        Ok(opts)
    }

    pub fn at_end(&self) -> MemResult<()> {
        if self.items.is_empty() {
            Ok(())
        } else {
            Err(self.arity())
        }
    }
}

impl Options {
    pub fn has(&self, name: &str) -> bool {
        self.given.iter().any(|(g, _)| *g == name)
    }

    pub fn values(&self, name: &str) -> Option<&[String]> {
        self.given
            .iter()
            .find(|(g, _)| *g == name)
            .map(|(_, v)| v.as_slice())
    }

    pub fn str(&self, name: &str) -> Option<&str> {
        self.values(name)
            .and_then(|v| v.first())
            .map(String::as_str)
    }

    /// An integer option within `range`.
    pub fn int(
        &self,
        a: &Args,
        name: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> MemResult<Option<i64>> {
        self.str(name)
            .map(|s| parse_int(a, name, s, &range))
            .transpose()
    }

    /// A float option within `range`.
    pub fn float(
        &self,
        a: &Args,
        name: &str,
        range: std::ops::RangeInclusive<f64>,
    ) -> MemResult<Option<f64>> {
        self.str(name)
            .map(|s| parse_float(a, name, s, &range))
            .transpose()
    }

    /// Options that exclude each other.
    pub fn exclusive(&self, a: &Args, x: &str, y: &str) -> MemResult<()> {
        if self.has(x) && self.has(y) {
            return Err(a.err(format!("{x} and {y} cannot be combined")));
        }
        Ok(())
    }

    pub fn kind(&self, a: &Args) -> MemResult<Option<Kind>> {
        self.str("KIND")
            .map(|k| {
                Kind::parse(k)
                    .ok_or_else(|| a.err(format!("unknown KIND '{k}' (episodic or semantic)")))
            })
            .transpose()
    }

    /// USER / NS / KIND / THREAD as a scope (defaults `default`).
    pub fn scope(&self, a: &Args) -> MemResult<Scope> {
        for name in ["USER", "NS", "THREAD"] {
            if let Some(v) = self.str(name) {
                if v.trim().is_empty() {
                    return Err(a.err(format!("{name} must not be empty")));
                }
                if v.len() > 512 {
                    return Err(a.err(format!("{name} is longer than 512 bytes")));
                }
            }
        }
        Ok(Scope {
            user: self.str("USER").unwrap_or("default").to_string(),
            namespace: self.str("NS").unwrap_or("default").to_string(),
            kind: self.kind(a)?,
            thread: self.str("THREAD").map(str::to_string),
        })
    }
}

pub fn parse_int(
    a: &Args,
    name: &str,
    s: &str,
    range: &std::ops::RangeInclusive<i64>,
) -> MemResult<i64> {
    match s.parse::<i64>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(a.err(format!(
            "{name} must be an integer from {} to {}, got '{s}'",
            range.start(),
            range.end()
        ))),
    }
}

pub fn parse_float(
    a: &Args,
    name: &str,
    s: &str,
    range: &std::ops::RangeInclusive<f64>,
) -> MemResult<f64> {
    match s.parse::<f64>() {
        Ok(n) if n.is_finite() && range.contains(&n) => Ok(n),
        _ => Err(a.err(format!(
            "{name} must be a number from {} to {}, got '{s}'",
            range.start(),
            range.end()
        ))),
    }
}

/// Scope options most verbs take.
pub const SCOPE: [Opt; 2] = [Opt("USER", 1), Opt("NS", 1)];

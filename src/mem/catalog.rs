//! The MEM.* verbs as Redis describes commands, so clients that read the command table know them:
//! entries for `COMMAND`, `COMMAND COUNT`, `COMMAND INFO`, `COMMAND DOCS` and `COMMAND LIST`
//! (merged into Redis's own replies by the connection), and the text of `MEM.HELP`.
//!
//! One table, [`VERBS`], is the source of all of them.

use crate::resp::Reply;

/// One argument as `COMMAND DOCS` describes it.
pub struct Arg {
    pub name: &'static str,
    /// `string`, `integer`, `double`, `key`, `pure-token`, `oneof` or `block`.
    pub kind: &'static str,
    pub token: Option<&'static str>,
    pub optional: bool,
    pub multiple: bool,
    pub sub: &'static [Arg],
}

const fn arg(name: &'static str, kind: &'static str) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
        sub: &[],
    }
}

/// `[TOKEN value]`
const fn opt(token: &'static str, name: &'static str, kind: &'static str) -> Arg {
    Arg {
        name,
        kind,
        token: Some(token),
        optional: true,
        multiple: false,
        sub: &[],
    }
}

const fn token(t: &'static str) -> Arg {
    Arg {
        name: t,
        kind: "pure-token",
        token: Some(t),
        optional: false,
        multiple: false,
        sub: &[],
    }
}

const fn oneof(name: &'static str, optional: bool, sub: &'static [Arg]) -> Arg {
    Arg {
        name,
        kind: "oneof",
        token: None,
        optional,
        multiple: false,
        sub,
    }
}

const fn block(
    name: &'static str,
    tok: Option<&'static str>,
    optional: bool,
    sub: &'static [Arg],
) -> Arg {
    Arg {
        name,
        kind: "block",
        token: tok,
        optional,
        multiple: false,
        sub,
    }
}

/// One MEM.* verb.
pub struct Verb {
    pub name: &'static str,
    /// Redis's arity: positive exact, negative "at least".
    pub arity: i64,
    pub flags: &'static [&'static str],
    pub summary: &'static str,
    pub complexity: &'static str,
    pub args: &'static [Arg],
}

const KINDS: &[Arg] = &[token("EPISODIC"), token("SEMANTIC")];
const MODES: &[Arg] = &[
    token("AUTO"),
    token("RANK"),
    token("VECTOR"),
    token("KEYWORD"),
    token("HYBRID"),
];

const SCOPE_USER: Arg = opt("USER", "user", "string");
const SCOPE_NS: Arg = opt("NS", "namespace", "string");
const SCOPE_KIND: Arg = Arg {
    token: Some("KIND"),
    ..oneof("kind", true, KINDS)
};
const SCOPE_THREAD: Arg = opt("THREAD", "thread", "string");
const K: Arg = opt("K", "k", "integer");
const THRESHOLD: Arg = opt("THRESHOLD", "distance", "double");
const MODE: Arg = Arg {
    token: Some("MODE"),
    ..oneof("mode", true, MODES)
};
const AT: Arg = opt("AT", "unix-seconds", "double");
const REPLICAS: Arg = opt("REPLICAS", "n", "integer");
const FSYNC: Arg = Arg {
    optional: true,
    ..token("FSYNC")
};

pub const VERBS: &[Verb] = &[
    Verb {
        name: "mem.remember",
        arity: -2,
        flags: &["write", "denyoom"],
        summary: "Embeds a text and stores it as a memory of a scope, or bumps the near-identical memory already there.",
        complexity: "One model run and one KNN search.",
        args: &[
            arg("text", "string"),
            SCOPE_USER,
            SCOPE_NS,
            SCOPE_KIND,
            SCOPE_THREAD,
            oneof("expiration", true, &[opt("TTL", "seconds", "integer"), token("PERSIST")]),
            oneof("dedup", true, &[opt("DEDUP", "distance", "double"), token("NODEDUP")]),
            opt("CREATED", "unix-seconds", "double"),
            opt("HITS", "n", "integer"),
            REPLICAS,
            FSYNC,
        ],
    },
    Verb {
        name: "mem.recall",
        arity: -2,
        flags: &["readonly"],
        summary: "Returns the memories of a scope that best match a query, by meaning, by keyword, or both fused.",
        complexity: "One model run (vector and hybrid modes) and one or two searches.",
        args: &[
            arg("query", "string"),
            SCOPE_USER,
            SCOPE_NS,
            SCOPE_KIND,
            SCOPE_THREAD,
            K,
            THRESHOLD,
            MODE,
            block(
                "weights",
                Some("WEIGHTS"),
                true,
                &[arg("keyword", "double"), arg("vector", "double")],
            ),
            AT,
        ],
    },
    Verb {
        name: "mem.turn",
        arity: -4,
        flags: &["write", "denyoom"],
        summary: "Records one agent turn: recalls what matters, remembers what was said, appends it to the session and logs an event, atomically.",
        complexity: "One model run and one script.",
        args: &[
            arg("thread", "string"),
            arg("role", "string"),
            arg("content", "string"),
            SCOPE_USER,
            SCOPE_NS,
            opt("AGENT", "agent", "string"),
            Arg {
                token: Some("REMEMBER"),
                ..oneof("remember", true, &[token("EPISODIC"), token("SEMANTIC"), token("SKIP")])
            },
            K,
            THRESHOLD,
            MODE,
            AT,
            REPLICAS,
            FSYNC,
        ],
    },
    Verb {
        name: "mem.session",
        arity: -2,
        flags: &["write", "denyoom"],
        summary: "Starts, reads, updates or ends the working memory of a thread.",
        complexity: "O(1)",
        args: &[oneof(
            "subcommand",
            false,
            &[
                block(
                    "start",
                    Some("START"),
                    false,
                    &[
                        arg("thread", "string"),
                        SCOPE_USER,
                        opt("AGENT", "agent", "string"),
                        opt("GOAL", "goal", "string"),
                        opt("TTL", "seconds", "integer"),
                    ],
                ),
                block(
                    "new",
                    Some("NEW"),
                    false,
                    &[
                        SCOPE_USER,
                        opt("AGENT", "agent", "string"),
                        opt("GOAL", "goal", "string"),
                    ],
                ),
                block(
                    "get",
                    Some("GET"),
                    false,
                    &[arg("thread", "string"), SCOPE_USER],
                ),
                block(
                    "scratchpad",
                    Some("SCRATCHPAD"),
                    false,
                    &[arg("thread", "string"), arg("text", "string"), SCOPE_USER],
                ),
                block(
                    "goal",
                    Some("GOAL"),
                    false,
                    &[arg("thread", "string"), arg("text", "string"), SCOPE_USER],
                ),
                block(
                    "end",
                    Some("END"),
                    false,
                    &[arg("thread", "string"), SCOPE_USER],
                ),
            ],
        )],
    },
    Verb {
        name: "mem.events",
        arity: -2,
        flags: &["readonly"],
        summary: "Returns a thread's event log, newest first.",
        complexity: "O(N) with N the number of events returned.",
        args: &[
            arg("thread", "string"),
            opt("COUNT", "count", "integer"),
            SCOPE_USER,
        ],
    },
    Verb {
        name: "mem.forget",
        arity: -2,
        flags: &["write"],
        summary: "Deletes one memory by id, or every memory of a scope (in bounded batches).",
        complexity: "O(1) for an id; O(N) in batches of 200 for a scope.",
        args: &[oneof(
            "target",
            false,
            &[
                arg("id", "string"),
                block(
                    "scope",
                    None,
                    false,
                    &[
                        Arg {
                            optional: false,
                            ..SCOPE_USER
                        },
                        SCOPE_NS,
                        SCOPE_KIND,
                    ],
                ),
            ],
        )],
    },
    Verb {
        name: "mem.consolidate",
        arity: -1,
        flags: &["write"],
        summary: "Merges near-duplicate memories of one exact scope into their oldest member (hit counts summed, longest TTL kept).",
        complexity: "O(N) KNN searches for N memories, a few per script call; one script per group merged.",
        args: &[
            SCOPE_USER,
            SCOPE_NS,
            SCOPE_KIND,
            THRESHOLD,
            Arg {
                optional: true,
                ..token("DRYRUN")
            },
        ],
    },
    Verb {
        name: "mem.list",
        arity: -1,
        flags: &["readonly"],
        summary: "Returns a page of a scope's memories, newest first, without embeddings.",
        complexity: "O(N) with N the page size.",
        args: &[
            SCOPE_USER,
            SCOPE_NS,
            SCOPE_KIND,
            block(
                "limit",
                Some("LIMIT"),
                true,
                &[arg("offset", "integer"), arg("count", "integer")],
            ),
        ],
    },
    Verb {
        name: "mem.info",
        arity: 1,
        flags: &["readonly"],
        summary: "Returns the index, model, thresholds, TTLs, key prefixes and counters of memproxy.",
        complexity: "O(1)",
        args: &[],
    },
    Verb {
        name: "mem.embed",
        arity: -2,
        flags: &["readonly"],
        summary: "Returns the embedding of a text as stored (the model's dimension), or with QUERY as a recall's question is embedded (the model's query prompt before it).",
        complexity: "One model run.",
        args: &[
            arg("text", "string"),
            Arg {
                optional: true,
                ..token("QUERY")
            },
        ],
    },
    Verb {
        name: "mem.ping",
        arity: 1,
        flags: &["fast"],
        summary: "Answers PONG after a PING through to Redis as the client.",
        complexity: "O(1)",
        args: &[],
    },
    Verb {
        name: "mem.help",
        arity: 1,
        flags: &["loading", "stale"],
        summary: "Lists the MEM.* commands with their syntax.",
        complexity: "O(1)",
        args: &[],
    },
];

/// The verb named `name` (any case).
pub fn find(name: &[u8]) -> Option<&'static Verb> {
    VERBS
        .iter()
        .find(|v| v.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Words as Redis sends flags and ACL categories: status replies (redis-cli asserts it).
fn statuses(items: &[&'static str]) -> Reply {
    Reply::Array(items.iter().map(|s| Reply::Status(s)).collect())
}

/// A verb's ACL categories, as COMMAND INFO shows them.
fn acl_categories(v: &Verb) -> [&'static str; 2] {
    let rw = if v.flags.contains(&"write") {
        "@write"
    } else {
        "@read"
    };
    ["@slow", rw]
}

/// Redis's glob (`*`, `?`, `[a-z]`, `[^…]`, `\x`), ignoring ASCII case, as COMMAND LIST
/// FILTERBY PATTERN matches command names.
fn glob_nocase(pattern: &[u8], name: &[u8]) -> bool {
    let eq = |a: u8, b: u8| a.eq_ignore_ascii_case(&b);
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|i| glob_nocase(rest, &name[i..])),
        Some((b'?', rest)) => !name.is_empty() && glob_nocase(rest, &name[1..]),
        Some((b'[', rest)) => {
            let Some(end) = rest.iter().position(|&c| c == b']') else {
                return !name.is_empty() && eq(b'[', name[0]) && glob_nocase(rest, &name[1..]);
            };
            let (set, after) = (&rest[..end], &rest[end + 1..]);
            let (negate, set) = match set.split_first() {
                Some((b'^', s)) => (true, s),
                _ => (false, set),
            };
            let Some(&c) = name.first() else {
                return false;
            };
            let lc = c.to_ascii_lowercase();
            let mut hit = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == b'-' {
                    let (lo, hi) = (set[i].to_ascii_lowercase(), set[i + 2].to_ascii_lowercase());
                    hit |= (lo.min(hi)..=lo.max(hi)).contains(&lc);
                    i += 3;
                } else {
                    hit |= eq(set[i], c);
                    i += 1;
                }
            }
            hit != negate && glob_nocase(after, &name[1..])
        }
        Some((b'\\', rest)) if !rest.is_empty() => {
            !name.is_empty() && eq(rest[0], name[0]) && glob_nocase(&rest[1..], &name[1..])
        }
        Some((&p, rest)) => !name.is_empty() && eq(p, name[0]) && glob_nocase(rest, &name[1..]),
    }
}

/// The `COMMAND INFO` entry: name, arity, flags, first key, last key, step, ACL categories, tips,
/// key specs, subcommands (MEM.* take no key names as arguments).
pub fn info(v: &Verb) -> Reply {
    let cats = acl_categories(v);
    Reply::Array(vec![
        Reply::text(v.name),
        Reply::Int(v.arity),
        statuses(v.flags),
        Reply::Int(0),
        Reply::Int(0),
        Reply::Int(0),
        statuses(&cats),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
        Reply::Array(vec![]),
    ])
}

fn arg_doc(a: &Arg) -> Reply {
    let mut m: Vec<(&'static str, Reply)> =
        vec![("name", Reply::text(a.name)), ("type", Reply::text(a.kind))];
    if a.kind != "pure-token" && a.kind != "oneof" && a.kind != "block" {
        m.push(("display_text", Reply::text(a.name)));
    }
    if let Some(t) = a.token {
        m.push(("token", Reply::text(t)));
    }
    let mut flags = Vec::new();
    if a.optional {
        flags.push("optional");
    }
    if a.multiple {
        flags.push("multiple");
    }
    if !flags.is_empty() {
        m.push(("flags", statuses(&flags)));
    }
    if !a.sub.is_empty() {
        m.push((
            "arguments",
            Reply::Array(a.sub.iter().map(arg_doc).collect()),
        ));
    }
    Reply::Map(m)
}

/// The `COMMAND DOCS` value of a verb (the map that follows its name).
pub fn docs(v: &Verb) -> Reply {
    let mut m = vec![
        ("summary", Reply::text(v.summary)),
        ("since", Reply::text("0.1.0")),
        ("group", Reply::text("module")),
        ("complexity", Reply::text(v.complexity)),
        ("module", Reply::text("memproxy")),
    ];
    if !v.args.is_empty() {
        m.push((
            "arguments",
            Reply::Array(v.args.iter().map(arg_doc).collect()),
        ));
    }
    Reply::Map(m)
}

fn syntax(args: &[Arg]) -> String {
    args.iter().map(arg_syntax).collect::<Vec<_>>().join(" ")
}

fn arg_syntax(a: &Arg) -> String {
    let body = match a.kind {
        "pure-token" => a.token.unwrap_or(a.name).to_string(),
        "oneof" => {
            let inner = a.sub.iter().map(arg_syntax).collect::<Vec<_>>().join(" | ");
            match a.token {
                Some(t) => format!("{t} {inner}"),
                None => inner,
            }
        }
        "block" => {
            let inner = syntax(a.sub);
            match a.token {
                Some(t) if !inner.is_empty() => format!("{t} {inner}"),
                Some(t) => t.to_string(),
                None => inner,
            }
        }
        _ => match a.token {
            Some(t) => format!("{t} {}", a.name),
            None => a.name.to_string(),
        },
    };
    if a.optional {
        format!("[{body}]")
    } else {
        body
    }
}

/// `MEM.HELP`: one line per verb, its syntax and summary.
pub fn help() -> Reply {
    let mut lines = vec![Reply::text(
        "MEM.<subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    )];
    for v in VERBS {
        let s = syntax(v.args);
        let head = if s.is_empty() {
            v.name.to_uppercase()
        } else {
            format!("{} {s}", v.name.to_uppercase())
        };
        lines.push(Reply::text(head));
        lines.push(Reply::text(format!("    {}", v.summary)));
    }
    Reply::Array(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_reads_like_the_readme() {
        let recall = find(b"MEM.RECALL").unwrap();
        assert_eq!(
            syntax(recall.args),
            "query [USER user] [NS namespace] [KIND EPISODIC | SEMANTIC] [THREAD thread] [K k] \
             [THRESHOLD distance] [MODE AUTO | RANK | VECTOR | KEYWORD | HYBRID] [WEIGHTS keyword vector] \
             [AT unix-seconds]"
        );
        assert!(find(b"mem.nope").is_none());
    }

    #[test]
    fn globs_as_redis_matches_command_names() {
        for (p, n, want) in [
            ("mem.re*", "mem.recall", true),
            ("MEM.RE*", "mem.remember", true),
            ("mem.re*", "mem.help", false),
            ("*", "mem.turn", true),
            ("mem.?urn", "mem.turn", true),
            ("mem.[a-h]*", "mem.help", true),
            ("mem.[a-h]*", "mem.turn", false),
            ("mem.[^a-h]*", "mem.turn", true),
            ("mem\\.*", "mem.info", true),
            ("mem.[", "mem.[", true),
            ("get", "mem.recall", false),
            ("", "", true),
        ] {
            assert_eq!(glob_nocase(p.as_bytes(), n.as_bytes()), want, "{p} {n}");
        }
    }

    #[test]
    fn command_list_filters() {
        let names = |args: &[&str]| -> Vec<&str> {
            let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
            match CommandQuery::of(&a) {
                Some(CommandQuery::List(w)) => w.iter().map(|i| VERBS[*i].name).collect(),
                None => Vec::new(),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(names(&["LIST"]).len(), VERBS.len());
        let re = names(&["list", "filterby", "pattern", "mem.re*"]);
        assert!(re.contains(&"mem.recall") && re.contains(&"mem.remember"));
        assert!(!re.contains(&"mem.help"));
        assert!(names(&["LIST", "FILTERBY", "PATTERN", "get*"]).is_empty());
        let w = names(&["LIST", "FILTERBY", "ACLCAT", "write"]);
        assert!(w.contains(&"mem.remember") && !w.contains(&"mem.recall"));
        assert!(names(&["LIST", "FILTERBY", "ACLCAT", "READ"]).contains(&"mem.recall"));
        assert!(names(&["LIST", "FILTERBY", "MODULE", "search"]).is_empty());
    }
}

/// A `COMMAND …` request whose reply gets the MEM.* entries merged in.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandQuery {
    /// `COMMAND`: every entry.
    All,
    /// `COMMAND COUNT`.
    Count,
    /// `COMMAND LIST [FILTERBY PATTERN p | ACLCAT c]`: the MEM.* verbs that pass the filter.
    List(Vec<usize>),
    /// `COMMAND INFO name…`: for each name, the MEM.* verb it names (its reply element is nil).
    Info(Vec<Option<usize>>),
    /// `COMMAND DOCS [name…]`: the MEM.* verbs to add.
    Docs(Vec<usize>),
}

impl CommandQuery {
    /// `args` are the request's arguments after `COMMAND`; `None` when the reply needs nothing.
    pub fn of(args: &[&[u8]]) -> Option<CommandQuery> {
        let idx = |n: &[u8]| {
            VERBS
                .iter()
                .position(|v| v.name.as_bytes().eq_ignore_ascii_case(n))
        };
        let sub = match args.first() {
            None => return Some(CommandQuery::All),
            Some(s) => s.to_ascii_uppercase(),
        };
        match (sub.as_slice(), args.len()) {
            (b"COUNT", 1) => Some(CommandQuery::Count),
            (b"LIST", 1) => Some(CommandQuery::List((0..VERBS.len()).collect())),
            (b"LIST", 4) if args[1].eq_ignore_ascii_case(b"FILTERBY") => {
                let by = args[2].to_ascii_uppercase();
                let pass = |v: &Verb| match by.as_slice() {
                    b"PATTERN" => glob_nocase(args[3], v.name.as_bytes()),
                    b"ACLCAT" => acl_categories(v)
                        .iter()
                        .any(|c| c.as_bytes()[1..].eq_ignore_ascii_case(args[3])),
                    _ => false,
                };
                let want: Vec<usize> = (0..VERBS.len()).filter(|i| pass(&VERBS[*i])).collect();
                (!want.is_empty()).then_some(CommandQuery::List(want))
            }
            (b"INFO", n) if n > 1 => {
                let names: Vec<Option<usize>> = args[1..].iter().map(|n| idx(n)).collect();
                names
                    .iter()
                    .any(Option::is_some)
                    .then_some(CommandQuery::Info(names))
            }
            (b"INFO", 1) => Some(CommandQuery::All),
            (b"DOCS", 1) => Some(CommandQuery::Docs((0..VERBS.len()).collect())),
            (b"DOCS", _) => {
                let mut want: Vec<usize> = args[1..].iter().filter_map(|n| idx(n)).collect();
                want.dedup();
                (!want.is_empty()).then_some(CommandQuery::Docs(want))
            }
            _ => None,
        }
    }

    /// Redis's reply `frame` with the MEM.* entries merged in; `None` to forward it unchanged
    /// (an error, or a shape this does not know).
    pub fn merge(&self, frame: &[u8], proto: crate::resp::Protocol) -> Option<Vec<u8>> {
        let (kind, count, header_len) = header(frame)?;
        let body = &frame[header_len..];
        let mut out = bytes::BytesMut::new();
        let mut extra = bytes::BytesMut::new();
        match self {
            CommandQuery::Count => {
                if kind != b':' {
                    return None;
                }
                return Some(format!(":{}\r\n", count + VERBS.len() as i64).into_bytes());
            }
            CommandQuery::All => {
                for v in VERBS {
                    info(v).encode(proto, &mut extra);
                }
                out.extend_from_slice(format!("*{}\r\n", count + VERBS.len() as i64).as_bytes());
                out.extend_from_slice(body);
            }
            CommandQuery::List(want) => {
                if !matches!(kind, b'*' | b'~') {
                    return None;
                }
                for i in want {
                    Reply::text(VERBS[*i].name).encode(proto, &mut extra);
                }
                let k = kind as char;
                out.extend_from_slice(format!("{k}{}\r\n", count + want.len() as i64).as_bytes());
                out.extend_from_slice(body);
            }
            CommandQuery::Info(names) => {
                if kind != b'*' || count as usize != names.len() {
                    return None;
                }
                out.extend_from_slice(&frame[..header_len]);
                let mut at = 0;
                for n in names {
                    let (len, _) = crate::resp::scan_reply(&body[at..]).ok()??;
                    match n {
                        Some(i) => info(&VERBS[*i]).encode(proto, &mut out),
                        None => out.extend_from_slice(&body[at..at + len]),
                    }
                    at += len;
                }
            }
            CommandQuery::Docs(want) => {
                for i in want {
                    Reply::text(VERBS[*i].name).encode(proto, &mut extra);
                    docs(&VERBS[*i]).encode(proto, &mut extra);
                }
                let n = want.len() as i64;
                match kind {
                    b'%' => out.extend_from_slice(format!("%{}\r\n", count + n).as_bytes()),
                    b'*' => out.extend_from_slice(format!("*{}\r\n", count + 2 * n).as_bytes()),
                    _ => return None,
                }
                out.extend_from_slice(body);
            }
        }
        out.extend_from_slice(&extra);
        Some(out.to_vec())
    }
}

/// Type byte, count and header length of an aggregate (or integer) reply.
fn header(frame: &[u8]) -> Option<(u8, i64, usize)> {
    let kind = *frame.first()?;
    if !matches!(kind, b'*' | b'%' | b'~' | b':') {
        return None;
    }
    let cr = frame.iter().position(|&b| b == b'\r')?;
    let n: i64 = std::str::from_utf8(&frame[1..cr]).ok()?.parse().ok()?;
    if n < 0 {
        return None;
    }
    Some((kind, n, cr + 2))
}

//! What users do to their Redis, and what no input may do to it (issue: keep working, never harm).
//!
//! Each test runs against a real redis-server with the modules: FLUSHALL, FLUSHDB, FT.DROPINDEX,
//! SCRIPT FLUSH and the guide's own index recreated under memproxy; a generated corpus of 10,000
//! questions (stopwords, punctuation, query syntax, unicode, long texts) in every recall mode;
//! maxmemory and read replicas; batched erasure; per-client bounds; clients that vanish while
//! blocked; all-or-nothing scripts.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

fn remember(con: &mut redis::Connection, text: &str, user: &str) -> String {
    let v = q(
        con,
        &["MEM.REMEMBER", text, "USER", user, "KIND", "semantic"],
    );
    as_str(get(&v, "id"))
}

fn recall_texts(con: &mut redis::Connection, text: &str, user: &str) -> Vec<String> {
    items(&q(con, &["MEM.RECALL", text, "USER", user]))
        .iter()
        .map(|h| as_str(get(h, "text")))
        .collect()
}

/// After each way of losing the index (or the scripts), MEM.* work again without a restart.
#[test]
fn index_and_scripts_come_back_after_what_users_do() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut con = proxy.client();
    let mut d = direct(&redis);
    let ways: [&[&str]; 6] = [
        &["FLUSHALL"],
        &["FLUSHDB"],
        &["FT.DROPINDEX", "agentmem:idx"],
        &["FT.DROPINDEX", "agentmem:idx", "DD"],
        &["SCRIPT", "FLUSH"],
        &["FLUSHALL", "ASYNC"],
    ];
    for (i, way) in ways.iter().enumerate() {
        let user = format!("life{i}");
        remember(&mut con, "The user keeps bees on the roof.", &user);
        assert_eq!(recall_texts(&mut con, "beekeeping", &user).len(), 1);
        q(&mut d, way);
        // Every verb, the first one after the loss included, works again.
        let info = q(&mut con, &["MEM.INFO"]);
        assert_eq!(as_str(get(&info, "index")), "agentmem:idx", "{way:?}");
        let id = remember(&mut con, "The user grows tomatoes.", &user);
        assert_eq!(id.len(), 12, "{way:?}");
        let hits = recall_texts(&mut con, "gardening vegetables", &user);
        assert!(
            hits.contains(&"The user grows tomatoes.".to_string()),
            "{way:?}: {hits:?}"
        );
        let kw = items(&q(
            &mut con,
            &["MEM.RECALL", "tomatoes", "USER", &user, "MODE", "keyword"],
        ))
        .len();
        assert!(kw >= 1, "{way:?}");
        let t = q(
            &mut con,
            &[
                "MEM.TURN",
                &format!("t{i}"),
                "user",
                "hello there",
                "USER",
                &user,
            ],
        );
        assert_eq!(as_i64(get(&t, "turn_count")), 1, "{way:?}");
    }
    // The guide's demo drops the index and creates its own (no CASESENSITIVE): memproxy uses it
    // and never drops or alters it.
    q(&mut d, &["FT.DROPINDEX", "agentmem:idx"]);
    let mut create = vec!["FT.CREATE".to_string()];
    create.extend(guide_index("agentmem:idx", "agent:mem:"));
    q(
        &mut d,
        &create.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    remember(&mut con, "The user sails on weekends.", "guide");
    assert_eq!(
        recall_texts(&mut con, "Does the user go sailing?", "guide").len(),
        1
    );
    // The guide's index has no `windows` field: a long text is remembered and recall degrades
    // to first windows instead of failing.
    let long = format!(
        "{} The user keeps a kayak at the lake.",
        "Some notes about the weather and the garden. ".repeat(40)
    );
    remember(&mut con, &long, "guide");
    for _ in 0..2 {
        let hits = recall_texts(&mut con, "Does the user sail?", "guide");
        assert!(
            hits.contains(&"The user sails on weekends.".to_string()),
            "{hits:?}"
        );
    }
    let info = format!("{:?}", q(&mut d, &["FT.INFO", "agentmem:idx"]));
    assert!(
        !info.contains("CASESENSITIVE"),
        "the guide's index was left as it was"
    );
}

/// Generated questions: natural, all-stopword, single words, punctuation, digits, unicode,
/// every query-syntax character, very long. `n` of them, deterministic.
fn corpus(n: usize) -> Vec<String> {
    const STOP: [&str; 33] = [
        "a", "is", "the", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in",
        "into", "it", "no", "not", "of", "on", "or", "such", "that", "their", "then", "there",
        "these", "they", "this", "to", "was", "will", "with",
    ];
    const WORDS: [&str; 16] = [
        "pets", "any", "user", "allergic", "peanuts", "where", "live", "does", "what", "cook",
        "weather", "mars", "prefers", "concise", "answers", "dog",
    ];
    const SYNTAX: &str = "@{}[]()|-~*%:;$^\"'\\/,.<>=!?&#+`";
    const UNI: [&str; 8] = [
        "日本語",
        "über",
        "ñandú",
        "🙂",
        "Ελληνικά",
        "ß",
        "\u{200b}",
        "עברית",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut out = vec![
        "are there any pets?".to_string(),
        "Are there any?".to_string(),
        "is it a the and or".to_string(),
        "????".to_string(),
        "-".to_string(),
        "*".to_string(),
        "@text:(are|there|any)".to_string(),
        "\\".to_string(),
        "x".repeat(60_000),
    ];
    while out.len() < n {
        let kind = next() % 7;
        let len = 1 + (next() % 12) as usize;
        let mut parts = Vec::new();
        for _ in 0..len {
            let r = next() as usize;
            parts.push(match kind {
                0 => STOP[r % STOP.len()].to_string(),
                1 => WORDS[r % WORDS.len()].to_string(),
                2 => SYNTAX.chars().nth(r % SYNTAX.len()).unwrap().to_string(),
                3 => (r % 100_000).to_string(),
                4 => UNI[r % UNI.len()].to_string(),
                5 => format!(
                    "{}{}{}",
                    STOP[r % STOP.len()],
                    SYNTAX.chars().nth(r % SYNTAX.len()).unwrap(),
                    WORDS[(r / 7) % WORDS.len()]
                ),
                _ => {
                    if r.is_multiple_of(2) {
                        STOP[r % STOP.len()].to_string()
                    } else {
                        WORDS[r % WORDS.len()].to_string()
                    }
                }
            });
        }
        let sep = if next() % 3 == 0 { "|" } else { " " };
        let mut q = parts.join(sep);
        if next() % 4 == 0 {
            q.push('?');
        }
        out.push(q);
    }
    out
}

/// No question can hurt the upstream: 10,000 generated questions in keyword and hybrid mode
/// (the modes that reach RediSearch's query parser) and 2,000 in vector mode; every answer is a
/// reply or a one-line error, and the server is alive afterwards.
#[test]
fn no_question_harms_the_upstream() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut con = proxy.client();
    for t in [
        "The user has a dog named Rex.",
        "There are no pets at the office.",
        "Are there any allergies? The user is allergic to peanuts.",
    ] {
        remember(&mut con, t, "fuzz");
    }
    // scripts/fuzz.sh runs the same corpus much longer (MEMPROXY_FUZZ_QUESTIONS).
    let n = std::env::var("MEMPROXY_FUZZ_QUESTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let questions = corpus(n);
    let run = |mode: &str, qs: &[String]| {
        let mut raw = proxy.raw();
        for chunk in qs.chunks(64) {
            let mut bytes = Vec::new();
            for q in chunk {
                bytes.extend(encode(&[
                    b"MEM.RECALL",
                    q.as_bytes(),
                    b"USER",
                    b"fuzz",
                    b"MODE",
                    mode.as_bytes(),
                ]));
            }
            raw.send(&bytes);
            for q in chunk {
                let r = raw.read();
                match r[0] {
                    b'*' => {}
                    b'-' => assert_eq!(
                        r.iter().filter(|&&b| b == b'\n').count(),
                        1,
                        "one-line error for {q:?}"
                    ),
                    _ => panic!("unexpected reply to {q:?}: {}", String::from_utf8_lossy(&r)),
                }
            }
        }
    };
    run("keyword", &questions);
    run("hybrid", &questions);
    run("vector", &questions[..2_000.min(questions.len())]);
    let mut d = direct(&redis);
    assert_eq!(q(&mut d, &["PING"]), Value::SimpleString("PONG".into()));
    let info: String = redis::cmd("INFO").arg("server").query(&mut d).unwrap();
    let uptime: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(uptime >= 1, "the same server, never restarted");
    // The crash the issue reported is answered, not fatal.
    let hits = items(&q(
        &mut con,
        &[
            "MEM.RECALL",
            "are there any pets?",
            "USER",
            "fuzz",
            "MODE",
            "keyword",
        ],
    ))
    .len();
    assert!(hits >= 1, "'any pets' still finds by its non-stopwords");
}

/// Read verbs work at maxmemory with noeviction; writes answer Redis's OOM in one line.
#[test]
fn reads_at_maxmemory_writes_answer_oom() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut con = proxy.client();
    remember(&mut con, "The user drinks green tea.", "oom");
    q(&mut con, &["MEM.SESSION", "START", "oom-t", "USER", "oom"]);
    let mut d = direct(&redis);
    q(&mut d, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    q(&mut d, &["CONFIG", "SET", "maxmemory", "1"]);
    assert_eq!(recall_texts(&mut con, "tea", "oom").len(), 1);
    assert_eq!(items(&q(&mut con, &["MEM.LIST", "USER", "oom"])).len(), 1);
    assert!(q(&mut con, &["MEM.SESSION", "GET", "oom-t"]) != Value::Nil);
    assert_eq!(items(&q(&mut con, &["MEM.EVENTS", "oom-t"])).len(), 1);
    let e = err(
        &mut con,
        &["MEM.REMEMBER", "The user likes coffee.", "USER", "oom"],
    );
    assert!(e.starts_with("OOM"), "{e}");
    let e = err(
        &mut con,
        &["MEM.TURN", "oom-t", "user", "hello", "USER", "oom"],
    );
    assert!(e.starts_with("OOM"), "{e}");
    q(&mut d, &["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(
        as_i64(get(
            &q(&mut con, &["MEM.SESSION", "GET", "oom-t"]),
            "turn_count"
        )),
        0,
        "the refused turn wrote nothing"
    );
}

/// Against a read replica: reads work, writes answer READONLY.
#[test]
fn reads_on_a_replica_writes_answer_readonly() {
    let primary = Redis::start(&[]);
    let primary_proxy = Proxy::start(&primary.url(), |_| {});
    let mut p = primary_proxy.client();
    remember(&mut p, "The user plays the cello.", "rep");
    let replica = Redis::start(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    let mut rd = direct(&replica);
    eventually("the replica has the memory", || {
        let n: i64 = redis::cmd("DBSIZE").query(&mut rd).unwrap_or(0);
        let info: Value = redis::cmd("FT._LIST").query(&mut rd).unwrap_or(Value::Nil);
        n >= 1 && format!("{info:?}").contains("agentmem")
    });
    let proxy = Proxy::start(&replica.url(), |_| {});
    let mut con = proxy.client();
    eventually("the replica indexed it", || {
        recall_texts(&mut con, "music instrument", "rep").len() == 1
    });
    let e = err(
        &mut con,
        &["MEM.REMEMBER", "The user plays piano.", "USER", "rep"],
    );
    assert!(e.starts_with("READONLY"), "{e}");
}

/// Scope erasure runs in time-bounded steps (a cursor over the scope, a script of at most a few
/// ms per step) and reports the full count.
#[test]
fn large_erasure_in_batches_reports_the_full_count() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut d = direct(&redis);
    let mut con = proxy.client();
    remember(&mut con, "seed so the index exists", "someone-else");
    // 1,050 memories written directly (more than two cursor pages), plus a case variant that the
    // TAG query matches and exact erasure must keep.
    let vec_json = format!("[{}]", vec!["0.05"; 384].join(","));
    let mut pipe = redis::pipe();
    for i in 0..1_050 {
        pipe.cmd("JSON.SET")
            .arg(format!("agent:mem:er{i:010}"))
            .arg("$")
            .arg(format!(
                r#"{{"id":"er{i:010}","user":"eraser","namespace":"default","kind":"episodic","source_thread":"","text":"fact {i}","embedding":{vec_json},"created_ts":1.0,"hit_count":0}}"#
            ))
            .ignore();
    }
    pipe.cmd("JSON.SET")
        .arg("agent:mem:erCASE000000")
        .arg("$")
        .arg(format!(
            r#"{{"id":"erCASE000000","user":"ERASER","namespace":"default","kind":"episodic","source_thread":"","text":"other","embedding":{vec_json},"created_ts":1.0,"hit_count":0}}"#
        ))
        .ignore();
    pipe.query::<()>(&mut d).unwrap();
    // RESP3 replies have another shape; erasure reads them too.
    for t in ["one", "two", "three"] {
        q(
            &mut con,
            &[
                "MEM.REMEMBER",
                &format!("resp3 fact {t}"),
                "USER",
                "eraser3",
                "NODEDUP",
            ],
        );
    }
    let mut r3 = proxy.raw();
    r3.cmd(&[b"HELLO", b"3"]);
    r3.read();
    r3.cmd(&[b"MEM.FORGET", b"USER", b"eraser3"]);
    assert_eq!(r3.read_str(), ":3\r\n");
    let n = as_i64(&q(&mut con, &["MEM.FORGET", "USER", "eraser"]));
    assert_eq!(n, 1_050);
    assert_eq!(
        as_i64(&q(&mut con, &["MEM.FORGET", "USER", "eraser"])),
        0,
        "repeatable"
    );
    let left: i64 = redis::cmd("EXISTS")
        .arg("agent:mem:erCASE000000")
        .query(&mut d)
        .unwrap();
    assert_eq!(left, 1, "another user's memory (a case variant) stays");
}

/// A request over the byte or argument bound is refused and its client closed; others go on.
#[test]
fn per_client_bounds() {
    let redis = Redis::start(&[]);
    bounds_refuse_one_client(&Proxy::start(&redis.url(), bounded));
}

/// A client that writes a whole large pipeline before reading anything is served (no deadlock),
/// and the proxy does not hold the backlog.
#[test]
fn whole_pipeline_written_before_reading_is_served() {
    let s = shared();
    let key = unique("pipe");
    let n = 400_000usize;
    let mut req = Vec::with_capacity(n * 40);
    for _ in 0..n {
        req.extend_from_slice(&encode(&[b"INCR", key.as_bytes()]));
    }
    let mut sock = std::net::TcpStream::connect(s.proxy.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    sock.write_all(&req).unwrap();
    let mut got = Vec::new();
    let expected_tail = format!(":{n}\r\n");
    let mut buf = vec![0u8; 1 << 16];
    while !got.ends_with(expected_tail.as_bytes()) {
        let k = sock.read(&mut buf).unwrap();
        assert!(k > 0, "closed early");
        got.extend_from_slice(&buf[..k]);
    }
    assert_eq!(got.iter().filter(|&&b| b == b'\n').count(), n);
}

/// Replies before a blocking command in one pipeline arrive before it blocks (the behaviour
/// suite's part, run against a cluster too).
#[test]
fn replies_before_a_blocking_command_in_a_pipeline_arrive_first() {
    let s = shared();
    replies_before_a_blocking_command_arrive_first(&s.proxy, |_| direct(&s.redis));
}

/// A client that goes away while blocked takes its upstream connection with it at once: Redis
/// keeps no connection for it, and the next pushed element goes to a live consumer (the
/// behaviour suite's part, run against a cluster too), and WAIT's client goes as well.
#[test]
fn vanished_blocked_clients_leave_nothing_behind() {
    let s = shared();
    vanished_blocked_clients_leave_nothing(&s.proxy, |_| direct(&s.redis));
    // WAIT blocks too (for replicas that do not exist).
    let mut d = direct(&s.redis);
    let name = unique("wait");
    let mut c = named_client(&s.proxy, &name);
    c.cmd(&[b"WAIT", b"1", b"0"]);
    eventually("WAIT blocks", || blocked_named(&mut d, &name));
    drop(c);
    eventually("WAIT's client is gone", || {
        client_named(&mut d, &name).is_none()
    });
}

/// Every failure inside a script leaves no trace: a key in the way, a session whose counter is
/// not a number, a colliding id — the turn writes nothing at all.
#[test]
fn scripts_are_all_or_nothing() {
    let s = shared();
    let mut con = s.proxy.client();
    let mut d = direct(&s.redis);
    let user = unique("aon");
    let count = |d: &mut redis::Connection| -> i64 {
        let v = q(
            d,
            &[
                "FT.SEARCH",
                "agentmem:idx",
                &format!("@user:{{{}}}", user.replace('-', "\\-")),
                "LIMIT",
                "0",
                "0",
            ],
        );
        as_i64(&items(&v)[0])
    };
    // A session whose turn_count is junk: the turn fails before its first write.
    let thread = unique("aon-t");
    q(&mut con, &["MEM.SESSION", "START", &thread, "USER", &user]);
    q(
        &mut d,
        &[
            "HSET",
            &format!("agent:session:{thread}"),
            "turn_count",
            "many",
        ],
    );
    let events_before = items(&q(&mut con, &["MEM.EVENTS", &thread])).len();
    let e = err(
        &mut con,
        &[
            "MEM.TURN",
            &thread,
            "user",
            "The user likes jazz.",
            "USER",
            &user,
        ],
    );
    assert!(e.contains("turn_count"), "{e}");
    assert_eq!(count(&mut d), 0, "no memory written");
    assert_eq!(
        items(&q(&mut con, &["MEM.EVENTS", &thread])).len(),
        events_before
    );
    // The event stream key holds a string: nothing written either.
    let t2 = unique("aon-t");
    q(&mut d, &["SET", &format!("agent:events:{t2}"), "x"]);
    let e = err(
        &mut con,
        &[
            "MEM.TURN",
            &t2,
            "user",
            "The user likes blues.",
            "USER",
            &user,
        ],
    );
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(count(&mut d), 0);
    let exists: i64 = redis::cmd("EXISTS")
        .arg(format!("agent:session:{t2}"))
        .query(&mut d)
        .unwrap();
    assert_eq!(exists, 0);
}

/// Under load, a due check of the index (schema and model stamp) is made by one request while the
/// others go on: a recheck period costs one FT.INFO, not one per MEM.* in flight (which queued
/// behind each other on the proxy's one admin connection: seconds of latency every period).
#[test]
fn index_rechecks_are_single_flight_under_load() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |c| c.index_recheck_ms = 100);
    let mut con = proxy.client();
    remember(&mut con, "The user keeps bees on the roof.", "hive");
    let question = "Does the user keep any bees?";
    assert_eq!(
        recall_texts(&mut con, question, "hive"),
        ["The user keeps bees on the roof."]
    );
    let mut d = direct(&redis);
    let mut ft_info_calls = || command_calls(&mut d, "FT.INFO");
    let before = ft_info_calls();
    let start = Instant::now();
    let run = Duration::from_millis(1500);
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let mut c = proxy.client();
            std::thread::spawn(move || {
                let mut n = 0;
                while start.elapsed() < run {
                    assert_eq!(recall_texts(&mut c, question, "hive").len(), 1);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let recalls: i64 = clients.into_iter().map(|t| t.join().unwrap()).sum();
    let checks = ft_info_calls() - before;
    let periods = start.elapsed().as_millis() as i64 / 100 + 1;
    assert!(recalls > 100, "only {recalls} recalls");
    assert!(
        checks <= periods + 1,
        "{checks} index checks (FT.INFO) in {periods} recheck periods, {recalls} recalls"
    );
}

/// One turn in `thread`'s session and one event, whatever `way` did before it.
fn one_turn(con: &mut redis::Connection, thread: &str, way: &[&str]) {
    let s = q(con, &["MEM.SESSION", "GET", thread]);
    assert_eq!(as_i64(get(&s, "turn_count")), 1, "{way:?}");
    assert_eq!(items(get(&s, "recent_turns")).len(), 1, "{way:?}");
    let events = q(con, &["MEM.EVENTS", thread]);
    assert_eq!(items(&events).len(), 1, "{way:?}: {events:?}");
}

/// The one memory of `user` with `text`, and its hit count (0: written once, never bumped).
fn the_only_copy(con: &mut redis::Connection, user: &str, text: &str, way: &[&str]) -> i64 {
    let all = q(
        con,
        &[
            "MEM.RECALL",
            text,
            "USER",
            user,
            "MODE",
            "vector",
            "THRESHOLD",
            "2",
            "K",
            "10",
        ],
    );
    let copies: Vec<i64> = items(&all)
        .iter()
        .filter(|h| as_str(get(h, "text")) == text)
        .map(|h| as_i64(get(h, "hit_count")))
        .collect();
    assert_eq!(copies.len(), 1, "{way:?}");
    copies[0]
}

/// The first write after the index is lost is applied once (issue 27): the script fails on the
/// missing index before it writes, and the proxy's retry after recreating the index finds nothing
/// half done. MEM.TURN: one turn, one event, one memory; MEM.REMEMBER: a fresh memory, hit count 0.
#[test]
fn the_first_write_after_a_lost_index_is_applied_once() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut con = proxy.client();
    let mut d = direct(&redis);
    let ways: [&[&str]; 4] = [
        &["FLUSHALL"],
        &["FT.DROPINDEX", "agentmem:idx"],
        &["FT.DROPINDEX", "agentmem:idx", "DD"],
        &["SCRIPT", "FLUSH"],
    ];
    for (i, way) in ways.iter().enumerate() {
        let user = format!("once{i}");
        remember(&mut con, "The user keeps bees on the roof.", &user);
        // A turn that remembers: the dedup search fails first.
        q(&mut d, way);
        let thread = format!("once-thread-{i}");
        let text = "I moved to Lisbon in May.";
        let t = q(
            &mut con,
            &[
                "MEM.TURN", &thread, "user", text, "USER", &user, "REMEMBER", "semantic",
            ],
        );
        assert_eq!(as_i64(get(&t, "turn_count")), 1, "{way:?}");
        one_turn(&mut con, &thread, way);
        assert_eq!(the_only_copy(&mut con, &user, text, way), 0, "{way:?}");
        // A turn that remembers nothing: its only search is the recall.
        q(&mut d, way);
        let skip = format!("once-skip-{i}");
        let t = q(
            &mut con,
            &[
                "MEM.TURN",
                &skip,
                "user",
                "hello there",
                "USER",
                &user,
                "REMEMBER",
                "SKIP",
            ],
        );
        assert_eq!(as_i64(get(&t, "turn_count")), 1, "{way:?}");
        one_turn(&mut con, &skip, way);
        // A remember.
        q(&mut d, way);
        let text = "The user collects vinyl records.";
        let r = q(&mut con, &["MEM.REMEMBER", text, "USER", &user]);
        assert_eq!(as_i64(get(&r, "deduped")), 0, "{way:?}");
        assert_eq!(the_only_copy(&mut con, &user, text, way), 0, "{way:?}");
    }
}

/// A write whose reply times out (issue 27): the script was sent and is held by Redis (CLIENT
/// PAUSE WRITE lets the read-only rights check through and holds the write script). The client
/// gets a timeout error; memproxy does not send the write again, so when Redis runs it the turn
/// is there once, and the connection stays in step (the late reply is discarded).
#[test]
fn a_write_whose_reply_times_out_is_applied_once() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |c| c.op_timeout_ms = 400);
    let mut con = proxy.client();
    let mut d = direct(&redis);
    remember(&mut con, "The user keeps bees on the roof.", "late");
    // The turn script is loaded (else the held call is an EVALSHA that answers NOSCRIPT after
    // the timeout, and nothing runs).
    q(
        &mut con,
        &[
            "MEM.TURN",
            "warm-thread",
            "user",
            "hello",
            "USER",
            "late",
            "REMEMBER",
            "SKIP",
        ],
    );
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("WRITE")
        .query(&mut d)
        .unwrap();
    let e = err(
        &mut con,
        &[
            "MEM.TURN",
            "late-thread",
            "user",
            "I moved to Porto.",
            "USER",
            "late",
            "REMEMBER",
            "semantic",
        ],
    );
    assert!(e.contains("timeout"), "{e}");
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut d).unwrap();
    // The same connection goes on, in step; the held write ran once.
    eventually("the held turn runs", || {
        let s = q(&mut con, &["MEM.SESSION", "GET", "late-thread"]);
        s != Value::Nil
    });
    let way: &[&str] = &["timeout"];
    one_turn(&mut con, "late-thread", way);
    assert_eq!(the_only_copy(&mut con, "late", "I moved to Porto.", way), 0);
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

/// A write whose connection is cut after the script was sent (issue 27): Redis drops the held
/// script with the connection, the client gets an error and is closed, and nothing is written;
/// the client's retry on a new connection writes it once.
#[test]
fn a_write_cut_off_after_sending_is_not_applied_and_its_retry_is_once() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |c| c.op_timeout_ms = 5000);
    let mut d = direct(&redis);
    let mut con = proxy.client();
    remember(&mut con, "The user keeps bees on the roof.", "cut");
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("test-direct")
        .query(&mut d)
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3000)
        .arg("WRITE")
        .query(&mut d)
        .unwrap();
    let writer = std::thread::spawn(move || {
        redis::cmd("MEM.REMEMBER")
            .arg("The user collects vinyl records.")
            .arg("USER")
            .arg("cut")
            .query::<Value>(&mut con)
    });
    // Once the script is held in Redis, cut that connection.
    eventually("the write script is held", || {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut d).unwrap();
        list.lines()
            .any(|l| l.contains("cmd=evalsha") || l.contains("cmd=eval "))
    });
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut d).unwrap();
    for line in list
        .lines()
        .filter(|l| l.contains("cmd=evalsha") || l.contains("cmd=eval "))
    {
        let id = line.split(' ').find_map(|f| f.strip_prefix("id=")).unwrap();
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query(&mut d)
            .unwrap();
    }
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut d).unwrap();
    let r = writer.join().unwrap();
    assert!(r.is_err(), "the client hears of it: {r:?}");
    let mut again = proxy.client();
    let found = q(
        &mut again,
        &[
            "MEM.RECALL",
            "vinyl records",
            "USER",
            "cut",
            "MODE",
            "vector",
            "THRESHOLD",
            "2",
        ],
    );
    assert!(
        items(&found)
            .iter()
            .all(|h| as_str(get(h, "text")) != "The user collects vinyl records."),
        "the cut write did not happen"
    );
    let r = q(
        &mut again,
        &[
            "MEM.REMEMBER",
            "The user collects vinyl records.",
            "USER",
            "cut",
        ],
    );
    assert_eq!(as_i64(get(&r, "deduped")), 0);
    assert_eq!(
        the_only_copy(
            &mut again,
            "cut",
            "The user collects vinyl records.",
            &["cut"]
        ),
        0
    );
}

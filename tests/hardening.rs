//! Hardening: upstream faults, auth, limits, no partial writes, fuzzing (issue 6).

mod common;

use common::*;
use redis::Value;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

#[test]
fn upstream_restarted_mem_works_again_without_restarting_memproxy() {
    let mut redis = Redis::start(&[]);
    let port = redis.port;
    let proxy = Proxy::start(&redis.url(), |c| c.op_timeout_ms = 1000);
    let mut con = proxy.client();
    q(
        &mut con,
        &["MEM.REMEMBER", "The user likes sailing.", "USER", "restart"],
    );
    redis.kill();
    // A new server on the same port, empty: the index must be created again.
    let mut again = Redis::start_on(port, &[]);
    let mut fresh = proxy.client();
    assert_eq!(
        as_str(&q(&mut fresh, &["PING"])),
        "PONG",
        "new clients work at once"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r: redis::RedisResult<Value> = redis::cmd("MEM.REMEMBER")
            .arg("The user likes rowing.")
            .arg("USER")
            .arg("restart")
            .query(&mut fresh);
        match r {
            Ok(v) if !matches!(v, Value::ServerError(_)) => break,
            other => assert!(
                Instant::now() < deadline,
                "MEM.* did not recover: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let hits = items(&q(&mut fresh, &["MEM.RECALL", "rowing", "USER", "restart"])).to_vec();
    assert_eq!(hits.len(), 1);
    again.kill();
}

#[test]
fn slow_upstream_times_out_mem_but_not_passthrough() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |c| c.op_timeout_ms = 300);
    let mut con = proxy.client();
    q(
        &mut con,
        &["MEM.REMEMBER", "The user likes tea.", "USER", "slow"],
    );
    let mut d = direct(&redis);
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("ALL")
        .query(&mut d)
        .unwrap();
    let start = Instant::now();
    let e = err(&mut con, &["MEM.RECALL", "tea", "USER", "slow"]);
    assert!(e.contains("timeout"), "{e}");
    assert!(
        start.elapsed() < Duration::from_millis(1400),
        "MEM.* failed within its budget"
    );
    // Passthrough waits as Redis would.
    let v = q(&mut con, &["GET", "nothing"]);
    assert_eq!(v, Value::Nil);
    assert!(start.elapsed() >= Duration::from_millis(1400));
    // And MEM.* work again once Redis answers.
    let hits = items(&q(&mut con, &["MEM.RECALL", "tea", "USER", "slow"])).len();
    assert_eq!(hits, 1);
}

#[test]
fn acl_users_bound_to_their_scope() {
    let redis = Redis::start(&["--requirepass", "adminpw"]);
    let mut d = redis::Client::open(format!("redis://:adminpw@127.0.0.1:{}", redis.port))
        .unwrap()
        .get_connection()
        .unwrap();
    for u in ["alice", "bob"] {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(u)
            .arg("on")
            .arg(format!(">{u}pw"))
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .query(&mut d)
            .unwrap();
    }
    let proxy = Proxy::start(&format!("redis://:adminpw@127.0.0.1:{}", redis.port), |c| {
        c.bind_scope_to_acl_user = true
    });
    let mut c = proxy.raw();
    c.cmd(&[b"MEM.RECALL", b"anything", b"USER", b"alice"]);
    assert_eq!(c.read_str(), "-NOAUTH Authentication required.\r\n");
    c.cmd(&[b"AUTH", b"alice", b"wrong"]);
    assert!(c.read_str().starts_with("-WRONGPASS"));
    c.cmd(&[b"MEM.RECALL", b"anything", b"USER", b"alice"]);
    assert!(
        c.read_str().starts_with("-NOAUTH"),
        "a failed AUTH keeps it refused"
    );
    c.cmd(&[b"AUTH", b"alice", b"alicepw"]);
    assert_eq!(c.read_str(), "+OK\r\n");
    c.cmd(&[
        b"MEM.REMEMBER",
        b"Alice's secret is the garden gate code.",
        b"USER",
        b"alice",
    ]);
    let r = c.read_str();
    assert!(r.starts_with("*8\r\n$2\r\nid\r\n"), "{r}");
    let id = r.split("\r\n").nth(4).unwrap().to_string();
    c.cmd(&[b"MEM.RECALL", b"secret", b"USER", b"bob"]);
    assert!(c.read_str().starts_with("-NOPERM"));
    c.cmd(&[b"MEM.RECALL", b"secret"]);
    assert!(
        c.read_str().starts_with("-NOPERM"),
        "the default user is someone else's scope"
    );
    // Bob, through HELLO … AUTH, can neither read nor delete alice's memory by id.
    let mut b = proxy.raw();
    b.cmd(&[b"HELLO", b"3", b"AUTH", b"bob", b"bobpw"]);
    assert!(b.read_str().starts_with('%'));
    b.cmd(&[b"MEM.RECALL", b"secret", b"USER", b"alice"]);
    assert!(b.read_str().starts_with("-NOPERM"));
    b.cmd(&[b"MEM.FORGET", id.as_bytes()]);
    assert_eq!(b.read_str(), ":0\r\n");
    // Threads are bound too: alice's session is hers.
    c.cmd(&[b"MEM.SESSION", b"START", b"alice-thread", b"USER", b"alice"]);
    assert!(c.read_str().starts_with("*6\r\n"));
    c.cmd(&[
        b"MEM.TURN",
        b"alice-thread",
        b"user",
        b"hello from alice",
        b"USER",
        b"alice",
        b"REMEMBER",
        b"SKIP",
    ]);
    assert!(c.read_str().starts_with("*10\r\n"));
    for req in [
        vec![b"MEM.SESSION".as_slice(), b"GET", b"alice-thread"],
        vec![b"MEM.SESSION", b"GOAL", b"alice-thread", b"take over"],
        vec![b"MEM.SESSION", b"SCRATCHPAD", b"alice-thread", b"scribble"],
        vec![b"MEM.SESSION", b"START", b"alice-thread", b"USER", b"bob"],
        vec![b"MEM.EVENTS", b"alice-thread"],
        vec![
            b"MEM.TURN",
            b"alice-thread",
            b"user",
            b"hi from bob",
            b"USER",
            b"bob",
        ],
        vec![b"MEM.SESSION", b"END", b"alice-thread"],
    ] {
        b.cmd(&req);
        let r = b.read_str();
        assert!(
            r.starts_with("-NOPERM"),
            "{:?} -> {r}",
            String::from_utf8_lossy(&req.concat())
        );
    }
    c.cmd(&[b"MEM.SESSION", b"GET", b"alice-thread"]);
    let r = c.read_str();
    assert!(r.contains("hello from alice") && !r.contains("bob"), "{r}");
    c.cmd(&[b"MEM.EVENTS", b"alice-thread"]);
    assert!(
        c.read_str().starts_with("*2\r\n"),
        "thread_started and one turn, nothing from bob"
    );
    c.cmd(&[b"MEM.FORGET", id.as_bytes()]);
    assert_eq!(c.read_str(), ":1\r\n");
    // The proxy's own password never shows.
    c.cmd(&[b"MEM.INFO"]);
    assert!(!c.read_str().contains("adminpw"));
}

#[test]
fn oom_midway_leaves_nothing_half_written() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut con = proxy.client();
    q(
        &mut con,
        &["MEM.REMEMBER", "The user likes jazz.", "USER", "oom"],
    );
    q(
        &mut con,
        &["MEM.SESSION", "START", "oom-thread", "USER", "oom"],
    );
    let mut d = direct(&redis);
    let used: String = redis::cmd("INFO").arg("memory").query(&mut d).unwrap();
    let used: i64 = used
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used / 2)
        .query(&mut d)
        .unwrap();
    let e = err(
        &mut con,
        &[
            "MEM.REMEMBER",
            "The user likes opera.",
            "USER",
            "oom",
            "NODEDUP",
        ],
    );
    assert!(e.starts_with("OOM"), "{e}");
    let e = err(
        &mut con,
        &[
            "MEM.TURN",
            "oom-thread",
            "user",
            "The user likes blues.",
            "USER",
            "oom",
        ],
    );
    assert!(e.starts_with("OOM"), "{e}");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut d)
        .unwrap();
    // Nothing of either command is there: one memory, no turn, only the start event.
    assert_eq!(items(&q(&mut con, &["MEM.LIST", "USER", "oom"])).len(), 1);
    let s = q(&mut con, &["MEM.SESSION", "GET", "oom-thread"]);
    assert_eq!(as_i64(get(&s, "turn_count")), 0);
    assert_eq!(items(&q(&mut con, &["MEM.EVENTS", "oom-thread"])).len(), 1);
    // Every memory has its TTL (or is semantic): no episodic document without one.
    let keys: Vec<String> = redis::cmd("KEYS").arg("agent:mem:*").query(&mut d).unwrap();
    for k in keys {
        let ttl: i64 = redis::cmd("TTL").arg(&k).query(&mut d).unwrap();
        let doc: String = redis::cmd("JSON.GET")
            .arg(&k)
            .query(&mut d)
            .unwrap_or_default();
        assert!(ttl > 0, "{k} has no TTL: {doc}");
    }
}

#[test]
fn text_size_limit() {
    let proxy = Proxy::start(&shared().redis.url(), |c| c.max_text_bytes = 1000);
    let mut con = proxy.client();
    let e = err(&mut con, &["MEM.REMEMBER", &"a".repeat(1001)]);
    assert!(e.contains("over the limit of 1000 bytes"), "{e}");
    let e = err(&mut con, &["MEM.TURN", "t", "user", &"a".repeat(1001)]);
    assert!(e.contains("over the limit of 1000 bytes"), "{e}");
}

#[test]
fn client_that_vanishes_mid_request_leaks_nothing() {
    let p = &shared().proxy;
    let mut d = direct(&shared().redis);
    let count = |d: &mut redis::Connection| -> usize {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(d).unwrap();
        list.lines().count()
    };
    let before = count(&mut d);
    for i in 0..20 {
        let mut c = p.raw();
        c.send(format!("BLPOP vanish-{i} 0\r\nMEM.RECALL \"half\r\n").as_bytes());
        c.cmd(&[
            b"MEM.EMBED",
            b"the client will be gone before this is answered",
        ]);
    }
    eventually("upstream connections of vanished clients closed", || {
        count(&mut d) <= before
    });
}

/// Bounded random fuzzing of the request framer and the MEM.* argument parser on every test run
/// (the coverage-guided targets are in fuzz/). Inputs that crashed earlier are kept below.
#[test]
fn fuzz_framer_and_parser_bounded() {
    use memproxy::mem::Command;
    use memproxy::resp::{parse_request, Parsed};
    let cfg = memproxy::Config::default();
    let mut seed = 0x2545F4914F6CDD1Du64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let alphabet: &[&[u8]] = &[
        b"*",
        b"$",
        b"\r\n",
        b"\n",
        b"\r",
        b"-1",
        b"0",
        b"3",
        b"12",
        b"2147483648",
        b"\"",
        b"'",
        b"\\x4",
        b" ",
        b"MEM.RECALL",
        b"K",
        b"USER",
        b"THRESHOLD",
        b"nan",
        b"-0",
        b"WEIGHTS",
        b"mem.turn",
        b"\xff",
        b"\x00",
        b"MODE",
        b"hybrid",
        b"LIMIT",
    ];
    let start = Instant::now();
    let mut runs = 0u64;
    while start.elapsed() < Duration::from_secs(5) {
        let n = (rnd() % 24) as usize;
        let mut input = Vec::new();
        for _ in 0..n {
            input.extend_from_slice(alphabet[(rnd() % alphabet.len() as u64) as usize]);
        }
        let mut at = 0;
        while at < input.len() {
            match parse_request(&input[at..]) {
                Parsed::Request(r) => {
                    assert!(r.len > 0 && at + r.len <= input.len());
                    let args = r.owned_args(&input[at..]);
                    if !args.is_empty()
                        && args[0].len() > 4
                        && args[0][..4].eq_ignore_ascii_case(b"mem.")
                    {
                        let _ = Command::parse(args, &cfg);
                    }
                    at += r.len;
                }
                Parsed::Skip(k) => {
                    assert!(k > 0);
                    at += k;
                }
                Parsed::Incomplete(need) => {
                    assert!(need > input.len() - at);
                    break;
                }
                Parsed::Invalid(_) => break,
            }
        }
        // Argument lists straight into the parser, too.
        let argc = (rnd() % 8) as usize;
        let mut args = vec![[
            b"MEM.REMEMBER".as_slice(),
            b"MEM.RECALL",
            b"MEM.TURN",
            b"MEM.SESSION",
            b"MEM.FORGET",
            b"MEM.LIST",
            b"MEM.EVENTS",
        ][(rnd() % 7) as usize]
            .to_vec()];
        for _ in 0..argc {
            args.push(alphabet[(rnd() % alphabet.len() as u64) as usize].to_vec());
        }
        let _ = Command::parse(args, &cfg);
        runs += 1;
    }
    assert!(runs > 10_000, "only {runs} runs");
}

#[test]
fn sigterm_finishes_in_flight_replies_then_exits_zero() {
    let redis = Redis::start(&[]);
    sigterm_finishes_in_flight_replies(&redis.url());
}

#[test]
fn slow_reader_backpressure_stays_in_redis() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut d = direct(&redis);
    let big = "x".repeat(1 << 20);
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .query(&mut d)
        .unwrap();
    let mut c = proxy.raw();
    let mut burst = Vec::new();
    for _ in 0..100 {
        burst.extend(encode(&[b"GET", b"big"]));
    }
    c.send(&burst);
    // The client reads nothing: the proxy must stop reading from its upstream, so the replies
    // pile up in Redis's output buffer for that connection rather than in the proxy.
    eventually(
        "Redis buffering the replies the proxy does not take",
        || {
            let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut d).unwrap();
            list.lines().any(|l| {
                l.split(' ')
                    .find_map(|f| f.strip_prefix("omem="))
                    .and_then(|v| v.parse::<u64>().ok())
                    .is_some_and(|omem| omem > 32 << 20)
            })
        },
    );
    for _ in 0..100 {
        let r = c.read();
        assert_eq!(r.len(), (1 << 20) + "$1048576\r\n".len() + 2);
    }
}

#[test]
fn http_metrics_health_and_readiness() {
    let redis = Redis::start(&[]);
    let port = free_port();
    let proxy = Proxy::start(&redis.url(), |c| {
        c.http_listen = Some(format!("127.0.0.1:{port}"))
    });
    let get = |path: &str| -> (u16, String) {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        let code = body[9..12].parse().unwrap();
        (code, body)
    };
    assert_eq!(get("/healthz").0, 200);
    assert_eq!(get("/readyz").0, 200);
    let mut con = proxy.client();
    q(
        &mut con,
        &["MEM.REMEMBER", "The user likes chess.", "USER", "metrics"],
    );
    let _ = err(&mut con, &["MEM.RECALL", "x", "K", "0"]);
    let (code, m) = get("/metrics");
    assert_eq!(code, 200);
    for want in [
        r#"memproxy_mem_requests_total{outcome="ok",verb="mem.remember"} 1"#,
        r#"memproxy_mem_requests_total{outcome="client",verb="mem.recall"} 1"#,
        "memproxy_mem_request_seconds_bucket{verb=\"mem.remember\"",
        "memproxy_clients 1",
        "memproxy_embed_batch_size_count",
        "memproxy_embed_queue_depth 0",
        "memproxy_embed_cache_misses",
        "memproxy_upstream_lost_total 0",
    ] {
        assert!(m.contains(want), "missing {want} in\n{m}");
    }
    drop(redis);
    let (code, body) = get("/readyz");
    assert_eq!(code, 503, "{body}");
    assert_eq!(get("/healthz").0, 200);
}

//! memproxy behind Redis Sentinel (issue 27): `--upstream redis+sentinel://…/master` asks the
//! sentinels where the primary is for every upstream connection, so after a failover (the primary
//! killed with SIGKILL) the old clients get an error, not a hang, and new clients reach the
//! promoted replica within seconds. With `write_replicas = 1` no acknowledged memory is lost.
//! Real servers: a primary and a replica with the modules, three sentinels (the same binary).

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::Value;

fn until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn info(con: &mut redis::Connection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(con)
        .unwrap_or_default()
}

fn sentinel_cmd(port: u16, args: &[&str]) -> redis::RedisResult<Value> {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}"))?.get_connection()?;
    let mut cmd = redis::cmd("SENTINEL");
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(&mut c)
}

#[test]
fn follows_a_failover_and_keeps_every_acknowledged_memory() {
    let mut primary = Redis::start(&[]);
    let replica = Redis::start(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    let mut d = direct(&primary);
    until("the replica is online", 20, || {
        let i = info(&mut d, "replication");
        i.contains("connected_slaves:1") && i.contains("state=online")
    });
    let sentinels: Vec<Redis> = (0..3)
        .map(|_| Redis::sentinel("mm", primary.port))
        .collect();
    until("the sentinels know the replica and each other", 30, || {
        sentinels.iter().all(|s| {
            let n = |args: &[&str]| match sentinel_cmd(s.port, args) {
                Ok(Value::Array(a)) => a.len(),
                _ => 0,
            };
            n(&["replicas", "mm"]) == 1 && n(&["sentinels", "mm"]) == 2
        })
    });
    let hosts: Vec<String> = sentinels
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    let url = format!("redis+sentinel://{}/mm", hosts.join(","));
    // The compact storage layout here (the other sentinel tests keep the guide's): its windows
    // and hashes reach the replica and are found after the failover.
    let proxy = Proxy::start(&url, |c| {
        c.write_replicas = 1;
        c.storage = memproxy::config::Storage::Compact;
    });
    let mut con = proxy.client();
    let info = q(&mut con, &["MEM.INFO"]);
    assert!(
        as_str(get(&info, "upstream")).contains("sentinel master 'mm'"),
        "{info:?}"
    );
    assert_eq!(as_str(get(&info, "storage")), "compact");
    let filler: String = (0..30)
        .map(|i| format!("Leg {i} of the itinerary lists a train and a connection. "))
        .collect();
    let long = format!("{filler}The user's passport is in the hotel safe, code 4471.");
    let v = q(
        &mut con,
        &[
            "MEM.REMEMBER",
            &long,
            "USER",
            "sen-long",
            "KIND",
            "semantic",
        ],
    );
    let long_id = as_str(get(&v, "id"));
    let mut ids = Vec::new();
    for i in 0..30 {
        let v = q(
            &mut con,
            &[
                "MEM.REMEMBER",
                &format!("The user's flight {i} leaves from gate {}.", i + 3),
                "USER",
                "sen",
                "NODEDUP",
            ],
        );
        ids.push(as_str(get(&v, "id")));
    }

    // The primary dies right after the last acknowledged write.
    primary.kill();
    let t = Instant::now();
    let old: redis::RedisResult<Value> = redis::cmd("MEM.PING").query(&mut con);
    assert!(old.is_err(), "the old client gets an error: {old:?}");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "and not after a hang"
    );

    // New clients reach the promoted replica within seconds.
    until("a new client writes through the new primary", 40, || {
        let Ok(mut c) = redis::Client::open(proxy.url()).and_then(|c| c.get_connection()) else {
            return false;
        };
        redis::cmd("MEM.REMEMBER")
            .arg("The user moved to the window seat.")
            .arg("USER")
            .arg("sen")
            .arg("REPLICAS")
            .arg("0")
            .query::<Value>(&mut c)
            .is_ok()
    });
    let promoted = match sentinel_cmd(sentinels[0].port, &["get-master-addr-by-name", "mm"]) {
        Ok(Value::Array(a)) => as_str(&a[1]),
        other => panic!("{other:?}"),
    };
    assert_eq!(promoted, replica.port.to_string());
    let mut c = proxy.client();
    let listed: Vec<String> = items(&q(
        &mut c,
        &["MEM.LIST", "USER", "sen", "LIMIT", "0", "100"],
    ))
    .iter()
    .map(|m| as_str(get(m, "id")))
    .collect();
    for id in &ids {
        assert!(
            listed.contains(id),
            "acknowledged memory {id} lost in the failover"
        );
    }
    assert_eq!(listed.len(), ids.len() + 1);
    let hits = q(
        &mut c,
        &[
            "MEM.RECALL",
            "the hotel safe code for the user's passport",
            "USER",
            "sen-long",
            "MODE",
            "rank",
            "K",
            "1",
        ],
    );
    assert_eq!(as_str(get(&items(&hits)[0], "id")), long_id);
    let d = as_f64(get(&items(&hits)[0], "distance"));
    assert!(d < 0.5, "found by its window on the promoted replica ({d})");
    assert_eq!(as_str(get(&q(&mut c, &["MEM.INFO"]), "storage")), "compact");
}

/// A master the sentinels do not know: clients get a one-line error naming it, and memproxy
/// keeps running.
#[test]
fn an_unknown_master_is_named_in_the_error() {
    let primary = Redis::start(&[]);
    let s = Redis::sentinel("known", primary.port);
    let proxy = Proxy::start(
        &format!("redis+sentinel://127.0.0.1:{}/unknown", s.port),
        |_| {},
    );
    // The proxy answers one error line at connect and closes (read it raw: a client library's
    // handshake would take it as the reply to its own first command).
    let mut raw = std::net::TcpStream::connect(proxy.addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = String::new();
    std::io::Read::read_to_string(&mut raw, &mut got).unwrap();
    assert!(
        got.starts_with("-ERR upstream unavailable: no sentinel gave the primary of 'unknown'")
            && got.ends_with("\r\n")
            && got.matches("\r\n").count() == 1,
        "{got:?}"
    );
    // Pointed at the right name, the same sentinel works.
    let good = Proxy::start(
        &format!("redis+sentinel://127.0.0.1:{}/known", s.port),
        |_| {},
    );
    let v = q(&mut good.client(), &["MEM.PING"]);
    assert!(format!("{v:?}").contains("PONG"), "{v:?}");
}

/// Sentinels all down at start (issue 27): memproxy starts, /readyz answers 503, a client gets
/// one error line (not a hang); once the sentinels are up, new clients reach the primary and
/// /readyz turns 200 — every upstream connection asks the sentinels again.
#[test]
fn sentinels_down_at_start_then_up() {
    let primary = Redis::start(&[]);
    let ports = [free_port(), free_port()];
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{}/late",
        ports[0], ports[1]
    );
    let http_port = free_port();
    let proxy = Proxy::start(&url, |c| {
        c.http_listen = Some(format!("127.0.0.1:{http_port}"));
    });
    let base = format!("127.0.0.1:{http_port}");
    until("the HTTP listener", 20, || {
        http(&base, "GET", "/healthz", "").0 == 200
    });
    let (code, body) = http(&base, "GET", "/readyz", "");
    assert_eq!(code, 503, "{body}");
    let mut raw = proxy.raw();
    raw.cmd(&[b"PING"]);
    let line = raw.read_str();
    assert!(line.starts_with("-ERR upstream unavailable"), "{line}");
    assert!(!line.trim_end().contains('\n'), "one line: {line}");
    // The sentinels come up (on the ports the URL names).
    let _sentinels: Vec<Redis> = ports
        .iter()
        .map(|p| Redis::sentinel_on(*p, "late", primary.port))
        .collect();
    until("a new client reaches the primary", 30, || {
        let Ok(c) = redis::Client::open(proxy.url()) else {
            return false;
        };
        let Ok(mut con) = c.get_connection_with_timeout(Duration::from_secs(2)) else {
            return false;
        };
        redis::cmd("MEM.REMEMBER")
            .arg("The user's sentinel came back")
            .arg("USER")
            .arg("late")
            .query::<Value>(&mut con)
            .is_ok()
    });
    until("/readyz turns 200", 30, || {
        http(&base, "GET", "/readyz", "").0 == 200
    });
    let mut d = direct(&primary);
    let n: Vec<String> = redis::cmd("KEYS").arg("agent:mem:*").query(&mut d).unwrap();
    assert_eq!(n.len(), 1, "written on the primary the sentinels name");
}

/// Sentinels that disagree (issue 27): one left monitoring another server under the same master
/// name, listed first. memproxy asks them all and goes where the majority points, so clients
/// write to the real primary, not the stale one.
#[test]
fn a_stale_sentinel_listed_first_is_outvoted() {
    let primary = Redis::start(&[]);
    let stale = Redis::start(&[]);
    let odd = Redis::sentinel("m", stale.port);
    let good = [
        Redis::sentinel("m", primary.port),
        Redis::sentinel("m", primary.port),
    ];
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}/m",
        odd.port, good[0].port, good[1].port
    );
    let proxy = Proxy::start(&url, |_| {});
    let mut c = proxy.client();
    let texts = [
        "The user's dog is called Biscuit",
        "The user flies to Lisbon in March",
        "The user prefers tea over coffee",
        "The user's laptop runs Debian",
        "The user plays the cello on Sundays",
    ];
    for text in texts {
        q(&mut c, &["MEM.REMEMBER", text, "USER", "outvoted"]);
    }
    let keys = |r: &Redis| -> Vec<String> {
        redis::cmd("KEYS")
            .arg("agent:mem:*")
            .query(&mut direct(r))
            .unwrap()
    };
    assert_eq!(keys(&primary).len(), 5, "on the primary the majority names");
    assert!(
        keys(&stale).is_empty(),
        "nothing on the stale sentinel's server"
    );
}

/// Sentinels with a password of their own (`requirepass` in sentinel.conf): `sentinel_password`
/// reaches the primary; without it, a client gets one error line naming the refusal.
#[test]
fn sentinels_with_a_password() {
    let primary = Redis::start(&[]);
    let s = Redis::sentinel_with("locked", primary.port, "requirepass s3ntinel");
    let url = format!("redis+sentinel://127.0.0.1:{}/locked", s.port);
    let open = Proxy::start(&url, |c| c.sentinel_password = Some("s3ntinel".into()));
    let v = q(&mut open.client(), &["MEM.PING"]);
    assert!(format!("{v:?}").contains("PONG"), "{v:?}");
    let shut = Proxy::start(&url, |_| {});
    let mut raw = std::net::TcpStream::connect(shut.addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = String::new();
    std::io::Read::read_to_string(&mut raw, &mut got).unwrap();
    assert!(
        got.starts_with("-ERR upstream unavailable: no sentinel gave the primary of 'locked'")
            && got.contains("NOAUTH")
            && got.matches("\r\n").count() == 1,
        "{got:?}"
    );
}

/// Clients that reconnect in a loop while no sentinel gives the primary (here: the sentinel
/// refuses memproxy's missing password) do not flood the sentinels: after a failure memproxy
/// waits (100 ms, doubling to 2 s) before it asks again, and answers the same one-line error
/// meanwhile.
#[test]
fn failing_sentinels_are_asked_with_backoff() {
    let primary = Redis::start(&[]);
    let s = Redis::sentinel_with("shy", primary.port, "requirepass nope-nope");
    let proxy = Proxy::start(
        &format!("redis+sentinel://127.0.0.1:{}/shy", s.port),
        |_| {},
    );
    let connections = || -> i64 {
        let mut c = redis::Client::open(format!("redis://:nope-nope@127.0.0.1:{}", s.port))
            .unwrap()
            .get_connection()
            .unwrap();
        let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    let before = connections();
    let start = Instant::now();
    let mut errors = 0;
    while start.elapsed() < Duration::from_millis(500) {
        let mut raw = std::net::TcpStream::connect(proxy.addr).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = String::new();
        std::io::Read::read_to_string(&mut raw, &mut got).unwrap();
        assert!(got.starts_with("-ERR upstream unavailable"), "{got:?}");
        assert_eq!(got.matches("\r\n").count(), 1, "{got:?}");
        errors += 1;
    }
    // One for our own INFO connection; the rest are memproxy's questions.
    let asked = connections() - before - 1;
    assert!(errors >= 20, "only {errors} connections tried");
    assert!(
        (1..=6).contains(&asked),
        "{errors} clients in 500 ms made memproxy ask the sentinel {asked} times"
    );
}

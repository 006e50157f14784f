//! The proxy is transparent: every ordinary command behaves as on Redis (SPEC §1).

mod common;

use common::*;
use std::time::{Duration, Instant};

#[test]
fn inline_and_multibulk() {
    inline_and_multibulk_requests(&shared().proxy);
}

#[test]
fn ten_thousand_pipelined_in_one_write() {
    pipeline_of_ten_thousand(&shared().proxy);
}

#[test]
fn mixed_pipeline_keeps_order() {
    mixed_pipeline_in_order(&shared().proxy);
}

#[test]
fn pipelined_mem_verbs_apply_in_order() {
    common::pipelined_mem_verbs_apply_in_order(&shared().proxy);
}

#[test]
fn transactions() {
    transactions_refuse_mem_verbs(&shared().proxy);
}

#[test]
fn blocking_command_released_by_another_client() {
    blocked_client_released(&shared().proxy, |_| direct(&shared().redis));
}

#[test]
fn subscribe_and_psubscribe_receive_publish() {
    let p = &shared().proxy;
    let ch = unique("chan");
    let mut sub = p.raw();
    sub.cmd(&[b"SUBSCRIBE", ch.as_bytes()]);
    assert!(sub.read_str().contains("subscribe"));
    sub.cmd(&[b"PSUBSCRIBE", format!("{ch}*").as_bytes()]);
    assert!(sub.read_str().contains("psubscribe"));
    let mut publisher = p.client();
    let n: i64 = redis::cmd("PUBLISH")
        .arg(&ch)
        .arg("hi")
        .query(&mut publisher)
        .unwrap();
    assert_eq!(n, 2);
    let a = sub.read_str();
    let b = sub.read_str();
    assert!(a.contains("message") && a.ends_with("$2\r\nhi\r\n"), "{a}");
    assert!(b.contains("pmessage") && b.ends_with("$2\r\nhi\r\n"), "{b}");
}

#[test]
fn hello3_maps_and_tracking_pushes() {
    let p = &shared().proxy;
    let key = unique("track");
    let mut c = p.raw();
    c.cmd(&[b"HELLO", b"3"]);
    assert!(c.read_str().starts_with('%'), "HELLO 3 replies with a map");
    // MEM.* replies follow the negotiated protocol.
    c.cmd(&[b"MEM.PING"]);
    assert_eq!(c.read_str(), "+PONG\r\n");
    c.cmd(&[b"CLIENT", b"TRACKING", b"ON"]);
    assert_eq!(c.read_str(), "+OK\r\n");
    c.cmd(&[b"SET", key.as_bytes(), b"1"]);
    assert_eq!(c.read_str(), "+OK\r\n");
    c.cmd(&[b"GET", key.as_bytes()]);
    assert_eq!(c.read_str(), "$1\r\n1\r\n");
    let mut other = p.client();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("2")
        .query(&mut other)
        .unwrap();
    let push = c.read_str();
    assert!(push.starts_with(">2\r\n$10\r\ninvalidate\r\n"), "{push}");
    // The connection still answers in order after a push.
    c.cmd(&[b"GET", key.as_bytes()]);
    assert_eq!(c.read_str(), "$1\r\n2\r\n");
    c.cmd(&[b"HGETALL", b"no-such-hash"]);
    assert_eq!(c.read_str(), "%0\r\n");
}

#[test]
fn select_is_per_client() {
    let p = &shared().proxy;
    let key = unique("db");
    let mut a = p.raw();
    let mut b = p.raw();
    a.cmd(&[b"SELECT", b"3"]);
    assert_eq!(a.read_str(), "+OK\r\n");
    a.cmd(&[b"SET", key.as_bytes(), b"in3"]);
    assert_eq!(a.read_str(), "+OK\r\n");
    b.cmd(&[b"GET", key.as_bytes()]);
    assert_eq!(b.read_str(), "$-1\r\n");
    b.cmd(&[b"SELECT", b"3"]);
    b.cmd(&[b"GET", key.as_bytes()]);
    assert_eq!(b.read_str(), "+OK\r\n");
    assert_eq!(b.read_str(), "$3\r\nin3\r\n");
}

#[test]
fn client_reply_off_and_skip() {
    client_reply_silences(&shared().proxy);
}

#[test]
fn modules_pass_through() {
    let mut c = shared().proxy.client();
    let idx = unique("idx");
    let prefix = format!("{idx}:");
    let ok: String = redis::cmd("JSON.SET")
        .arg(format!("{prefix}1"))
        .arg("$")
        .arg(r#"{"name":"ada","n":3}"#)
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    let _: () = redis::cmd("FT.CREATE")
        .arg(&idx)
        .arg("ON")
        .arg("JSON")
        .arg("PREFIX")
        .arg("1")
        .arg(&prefix)
        .arg("SCHEMA")
        .arg("$.name")
        .arg("AS")
        .arg("name")
        .arg("TEXT")
        .query(&mut c)
        .unwrap();
    eventually("indexed", || {
        let v: redis::Value = redis::cmd("FT.SEARCH")
            .arg(&idx)
            .arg("@name:ada")
            .query(&mut c)
            .unwrap();
        items(&v).first().map(as_i64) == Some(1)
    });
    let got: String = redis::cmd("JSON.GET")
        .arg(format!("{prefix}1"))
        .arg("$.n")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, "[3]");
}

#[test]
fn malformed_request_gets_protocol_error_and_close() {
    malformed_requests_are_refused_as_redis_does(&shared().proxy);
}

#[test]
fn resp3_mem_replies_are_maps() {
    resp3_mem_nulls_follow_the_protocol(&shared().proxy);
}

#[test]
fn auth_and_hello_auth_against_password_protected_upstream() {
    let redis = Redis::start(&["--requirepass", "s3cret"]);
    let proxy = Proxy::start(&format!("redis://:s3cret@127.0.0.1:{}", redis.port), |_| {});
    let mut c = proxy.raw();
    c.send(b"GET x\r\n");
    assert!(c.read_str().starts_with("-NOAUTH"));
    c.send(b"MEM.PING\r\n");
    assert_eq!(c.read_str(), "-NOAUTH Authentication required.\r\n");
    c.send(b"AUTH wrong\r\n");
    assert!(c.read_str().starts_with("-WRONGPASS"));
    c.send(b"MEM.PING\r\n");
    assert_eq!(c.read_str(), "-NOAUTH Authentication required.\r\n");
    c.send(b"AUTH s3cret\r\n");
    assert_eq!(c.read_str(), "+OK\r\n");
    c.send(b"MEM.PING\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");

    let mut h = proxy.raw();
    h.cmd(&[b"HELLO", b"3", b"AUTH", b"default", b"nope"]);
    assert!(h.read_str().starts_with("-WRONGPASS"));
    h.cmd(&[b"MEM.PING"]);
    assert!(h.read_str().starts_with("-NOAUTH"));
    h.cmd(&[b"HELLO", b"3", b"AUTH", b"default", b"s3cret"]);
    assert!(h.read_str().starts_with('%'));
    h.cmd(&[b"MEM.PING"]);
    assert_eq!(h.read_str(), "+PONG\r\n");
}

#[test]
fn auth_and_hello_as_an_acl_user() {
    let s = shared();
    common::auth_and_hello_as_an_acl_user(&s.proxy, |args| {
        q(&mut direct(&s.redis), args);
    });
}

#[test]
fn upstream_killed_with_requests_in_flight() {
    let mut redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |c| c.op_timeout_ms = 1000);
    let mut blocked = proxy.raw();
    // Behind it: requests whose replies are off (owed nothing), CLIENT REPLY ON (answered) and
    // an UNSUBSCRIBE of three channels (three replies).
    blocked.send(b"BLPOP never-pushed 0\r\nPING\r\nMEM.PING\r\nCLIENT REPLY OFF\r\nGET k\r\nMEM.PING\r\nCLIENT REPLY ON\r\nUNSUBSCRIBE a b c\r\n");
    let mut d = direct(&redis);
    eventually("client blocked", || {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut d).unwrap();
        info.contains("blocked_clients:1")
    });
    let start = Instant::now();
    redis.kill();
    for _ in 0..7 {
        let r = blocked.read_str();
        assert!(r.starts_with("-ERR upstream connection lost"), "{r}");
    }
    assert!(blocked.closed());
    assert!(start.elapsed() < Duration::from_secs(5));
    // New clients are told the upstream is unavailable, and closed.
    let mut late = proxy.raw();
    let r = late.read_str();
    assert!(r.starts_with("-ERR upstream unavailable:"), "{r}");
    assert!(late.closed());
}

/// The MEM.* at the front when Redis dies is answered too (it had been dropped: only the
/// requests behind it got the error), then the client is closed.
#[test]
fn upstream_killed_during_a_mem_command() {
    let mut redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |c| c.op_timeout_ms = 10_000);
    let user = unique("killed-mem");
    let mut c = proxy.raw();
    c.cmd(&[
        b"MEM.REMEMBER",
        b"The user drinks tea.",
        b"USER",
        user.as_bytes(),
    ]);
    assert!(!c.read_str().starts_with('-'));
    // Redis holds every command: the next MEM.REMEMBER waits on its script, PING behind it.
    q(&mut direct(&redis), &["CLIENT", "PAUSE", "20000", "ALL"]);
    let mut burst = encode(&[
        b"MEM.REMEMBER",
        b"The user drinks coffee.",
        b"USER",
        user.as_bytes(),
    ]);
    burst.extend(encode(&[b"PING"]));
    c.send(&burst);
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    redis.kill();
    for _ in 0..2 {
        let r = c.read_str();
        assert!(r.starts_with("-ERR upstream connection lost"), "{r}");
    }
    assert!(c.closed());
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// A MEM.* that times out keeps the client's connection (its late replies dropped), and the
/// WATCH on it.
#[test]
fn a_timed_out_mem_command_keeps_its_watch() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |c| c.op_timeout_ms = 300);
    common::a_timed_out_mem_command_keeps_its_watch(&proxy, || direct(&redis));
}

#[test]
fn exec_during_a_busy_script_answers_as_redis() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |_| {});
    let addr = format!("127.0.0.1:{}", redis.port).parse().unwrap();
    common::exec_during_a_busy_script_answers_as_redis(&proxy, &mut direct(&redis), addr);
}

#[test]
fn client_reply_is_checked_by_redis() {
    let s = shared();
    common::client_reply_is_checked_by_redis(&s.proxy, |args| {
        q(&mut direct(&s.redis), args);
    });
}

#[test]
fn state_changed_inside_multi_follows_exec() {
    common::state_changed_inside_multi_follows_exec(&shared().proxy);
}

#[test]
fn state_changed_under_client_reply_off_is_followed() {
    common::state_changed_under_client_reply_off_is_followed(&shared().proxy);
}

#[test]
fn tracking_invalidations_reach_an_idle_client() {
    common::tracking_invalidations_reach_an_idle_client(&shared().proxy);
}

#[test]
fn commands_memproxy_cannot_follow_inside_multi() {
    common::commands_memproxy_cannot_follow_inside_multi(&shared().proxy);
}

#[test]
fn skip_is_spent_on_a_mem_answered_by_the_proxy() {
    common::skip_is_spent_on_a_mem_answered_by_the_proxy(&shared().proxy);
}

#[test]
fn random_pipelines_are_answered_as_redis_answers_them() {
    let s = shared();
    common::answers_as_redis_does(&s.proxy, &s.redis, 1, 300);
}

#[test]
fn an_idle_connection_closed_by_redis_closes_the_client() {
    let s = shared();
    common::an_idle_connection_closed_by_redis_closes_the_client(&s.proxy, |args| {
        q(&mut direct(&s.redis), args);
    });
}

#[test]
fn a_refused_multi_opens_no_transaction() {
    let s = shared();
    common::a_refused_multi_opens_no_transaction(&s.proxy, |args| {
        q(&mut direct(&s.redis), args);
    });
}

#[test]
fn max_clients() {
    let proxy = Proxy::start(&shared().redis.url(), |c| c.max_clients = 2);
    let mut a = proxy.raw();
    let mut b = proxy.raw();
    a.send(b"PING\r\n");
    b.send(b"PING\r\n");
    assert_eq!(a.read_str(), "+PONG\r\n");
    assert_eq!(b.read_str(), "+PONG\r\n");
    let mut c = proxy.raw();
    assert_eq!(c.read_str(), "-ERR max number of clients reached\r\n");
    drop(a);
    eventually("a slot frees up", || {
        let mut d = proxy.raw();
        d.send(b"PING\r\n");
        d.read_str() == "+PONG\r\n"
    });
}

#[test]
fn command_table_knows_the_mem_verbs() {
    let s = shared();
    command_table_merges_the_mem_verbs(&s.proxy, &mut direct(&s.redis));
}

#[test]
fn unsubscribe_without_subscriptions_answers_once_per_channel() {
    // Redis's own suite ("UNSUBSCRIBE from non-subscribed channels"): three channels, three
    // replies, none of them a push in RESP2.
    let mut c = shared().proxy.raw();
    c.cmd(&[b"UNSUBSCRIBE", b"foo", b"bar", b"quux"]);
    for ch in ["foo", "bar", "quux"] {
        let r = c.read_str();
        assert!(r.contains("unsubscribe") && r.contains(ch), "{r}");
    }
    c.cmd(&[b"PING"]);
    assert_eq!(c.read_str(), "+PONG\r\n");
}

#[test]
fn unsubscribe_outside_subscribed_mode_keeps_mem_verbs() {
    unsubscribe_keeps_the_session(&shared().proxy);
}

#[test]
fn metrics_count_the_same_things() {
    metrics_follow_requests(&shared().redis.url());
}

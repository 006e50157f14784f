//! A proxy that dies (issue 27): memproxy killed with SIGKILL under a load of MEM.TURN, MEM.REMEMBER
//! and ordinary commands leaves no half-written memory, session or event (every write is one
//! script inside Redis), and a new memproxy on the same port serves at once.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

fn until_serving(port: u16) -> Duration {
    let t = Instant::now();
    loop {
        if let Ok(mut c) = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        {
            if redis::cmd("MEM.EMBED")
                .arg("ready?")
                .query::<Value>(&mut c)
                .is_ok()
            {
                return t.elapsed();
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "memproxy did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_killed_proxy_leaves_nothing_half_written_and_a_new_one_serves_at_once() {
    let redis = Redis::start(&[]);
    let port = free_port();
    let mut proxy = spawn_memproxy(port, &redis.url());
    until_serving(port);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for w in 0..4 {
            let stop = &stop;
            s.spawn(move || {
                let Ok(mut c) = redis::Client::open(format!("redis://127.0.0.1:{port}"))
                    .and_then(|c| c.get_connection())
                else {
                    return;
                };
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let thread = format!("crash-{w}-{}", i % 3);
                    let mut p = redis::pipe();
                    p.cmd("MEM.TURN")
                        .arg(&thread)
                        .arg("user")
                        .arg(format!("Worker {w} says step {i} of the plan is done."))
                        .arg("USER")
                        .arg(format!("crash{w}"))
                        .arg("REMEMBER")
                        .arg("semantic")
                        .cmd("MEM.REMEMBER")
                        .arg(format!("The user's parcel {w}-{i} arrives on day {i}."))
                        .arg("USER")
                        .arg(format!("crash{w}"))
                        .arg("NODEDUP")
                        .cmd("SET")
                        .arg(format!("crash:{w}:{i}"))
                        .arg(i)
                        .cmd("INCR")
                        .arg("crash:count");
                    if p.query::<Vec<Value>>(&mut c).is_err() {
                        return;
                    }
                    i += 1;
                }
            });
        }
        std::thread::sleep(Duration::from_millis(1500));
        proxy.kill().unwrap(); // SIGKILL, mid-load
        let _ = proxy.wait();
        stop.store(true, Ordering::Relaxed);
    });

    // What Redis holds is whole: every memory has its fields and vector, every session's
    // turns match its counter and its event stream.
    let mut d = direct(&redis);
    let keys: Vec<String> = redis::cmd("KEYS").arg("agent:mem:*").query(&mut d).unwrap();
    assert!(
        keys.len() > 4,
        "the load wrote something ({} memories)",
        keys.len()
    );
    for k in &keys {
        let doc: String = redis::cmd("JSON.GET").arg(k).query(&mut d).unwrap();
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        for f in [
            "id",
            "user",
            "namespace",
            "kind",
            "text",
            "created_ts",
            "hit_count",
        ] {
            assert!(v.get(f).is_some(), "{k} lacks {f}: {doc}");
        }
        assert_eq!(v["embedding"].as_array().map(|a| a.len()), Some(384), "{k}");
    }
    let sessions: Vec<String> = redis::cmd("KEYS")
        .arg("agent:session:crash-*")
        .query(&mut d)
        .unwrap();
    assert!(!sessions.is_empty());
    for s in &sessions {
        let (count, turns): (i64, String) = redis::cmd("HMGET")
            .arg(s)
            .arg("turn_count")
            .arg("recent_turns")
            .query(&mut d)
            .unwrap();
        let turns: Vec<serde_json::Value> = serde_json::from_str(&turns).unwrap();
        assert_eq!(turns.len() as i64, count.min(20), "{s}");
        let events: i64 = redis::cmd("XLEN")
            .arg(s.replace("agent:session:", "agent:events:"))
            .query(&mut d)
            .unwrap();
        assert_eq!(events, count, "{s}: one event per turn");
    }

    // A new memproxy on the same port serves at once, and the data is there.
    let mut again = spawn_memproxy(port, &redis.url());
    let took = until_serving(port);
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap();
    let hits: Value = redis::cmd("MEM.RECALL")
        .arg("When does the parcel arrive?")
        .arg("USER")
        .arg("crash0")
        .arg("MODE")
        .arg("keyword")
        .query(&mut c)
        .unwrap();
    assert!(
        matches!(hits, Value::Array(ref a) if !a.is_empty()),
        "{hits:?}"
    );
    let _ = again.kill();
    let _ = again.wait();
    println!("restarted memproxy served after {took:?}");
}

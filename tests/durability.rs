//! What "acknowledged" means (issue 27): with `write_replicas` / REPLICAS n a MEM.* write answers
//! only once that many replicas have it, and says so with a NOREPLICAS error (the write done, the
//! count named) when they do not within `write_wait_ms`; FSYNC waits for the AOF (WAITAOF).
//! A real primary with a real replica, on free ports.

mod common;

use common::*;

fn replicated() -> (Redis, Redis) {
    let primary = Redis::start(&[]);
    let replica = Redis::start(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    let mut d = direct(&primary);
    eventually("the replica is connected", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut d)
            .unwrap_or_default();
        info.contains("connected_slaves:1") && info.contains("state=online")
    });
    (primary, replica)
}

fn on_replica(r: &mut redis::Connection, id: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(format!("agent:mem:{id}"))
        .query::<i64>(r)
        .unwrap()
        == 1
}

/// With `write_replicas = 1` every acknowledged memory and turn is on the replica the moment the
/// reply arrives; asking for more replicas than exist answers NOREPLICAS naming the count, and
/// the write itself stands (it cannot be taken back).
#[test]
fn acknowledged_writes_are_on_the_replicas_asked_for() {
    let (primary, replica) = replicated();
    let proxy = Proxy::start(&primary.url(), |c| c.write_replicas = 1);
    let mut con = proxy.client();
    let mut r = direct(&replica);
    for i in 0..20 {
        let v = q(
            &mut con,
            &[
                "MEM.REMEMBER",
                &format!("The user's locker number {i} is {}.", i * 7),
                "USER",
                "dur",
                "NODEDUP",
            ],
        );
        let id = as_str(get(&v, "id"));
        assert!(
            on_replica(&mut r, &id),
            "memory {i} acknowledged but not on the replica"
        );
    }
    let t = q(
        &mut con,
        &[
            "MEM.TURN",
            "dur-thread",
            "user",
            "I prefer window seats.",
            "USER",
            "dur",
            "REMEMBER",
            "semantic",
        ],
    );
    let id = as_str(get(get(&t, "remembered"), "id"));
    assert!(on_replica(&mut r, &id));
    let n: i64 = redis::cmd("HGET")
        .arg("agent:session:dur-thread")
        .arg("turn_count")
        .query(&mut r)
        .unwrap();
    assert_eq!(n, 1);

    // Two replicas asked for, one there: the error says the write happened and who has it.
    let e = err(
        &mut con,
        &[
            "MEM.REMEMBER",
            "The user owns a kayak.",
            "USER",
            "dur",
            "REPLICAS",
            "2",
        ],
    );
    assert!(
        e.starts_with("NOREPLICAS MEM.REMEMBER wrote memory "),
        "{e}"
    );
    assert!(e.contains("only 1 of 2 replicas"), "{e}");
    assert!(!e.contains('\n'));
    let hits = items(&q(
        &mut con,
        &["MEM.RECALL", "kayak", "USER", "dur", "MODE", "keyword"],
    ))
    .len();
    assert_eq!(hits, 1, "the write stands");
    // REPLICAS 0 on the call turns the default off.
    q(
        &mut con,
        &[
            "MEM.REMEMBER",
            "The user owns a canoe.",
            "USER",
            "dur",
            "REPLICAS",
            "0",
        ],
    );
}

/// Without the setting nothing waits (the docs say what a failover can lose); bad values are
/// one-line errors that write nothing; FSYNC needs the AOF and says so when it is off.
#[test]
fn durability_options_are_checked_and_fsync_needs_the_aof() {
    let redis = Redis::start(&[]);
    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut con = proxy.client();
    for (args, want) in [
        (&["REPLICAS", "-1"][..], "REPLICAS"),
        (&["REPLICAS", "101"][..], "REPLICAS"),
        (&["REPLICAS", "x"][..], "REPLICAS"),
        (&["FSYNC", "1"][..], ""),
    ] {
        let mut a = vec!["MEM.REMEMBER", "The user flies kites.", "USER", "opts"];
        a.extend(args);
        let e = err(&mut con, &a);
        assert!(
            e.starts_with("ERR MEM.REMEMBER") && e.contains(want) && !e.contains('\n'),
            "{e}"
        );
    }
    assert!(items(&q(&mut con, &["MEM.LIST", "USER", "opts"])).is_empty());
    // No AOF: WAITAOF refuses, and the error says the memory was written.
    let e = err(
        &mut con,
        &[
            "MEM.REMEMBER",
            "The user flies kites.",
            "USER",
            "opts",
            "FSYNC",
        ],
    );
    assert!(
        e.starts_with("NOREPLICAS MEM.REMEMBER wrote memory") && e.contains("WAITAOF"),
        "{e}"
    );
    // With the AOF on, FSYNC answers once it is on disk.
    let aof = Redis::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let proxy = Proxy::start(&aof.url(), |c| c.write_fsync = true);
    let mut con = proxy.client();
    let v = q(
        &mut con,
        &["MEM.REMEMBER", "The user flies kites.", "USER", "opts"],
    );
    assert_eq!(as_i64(get(&v, "deduped")), 0);
    let t = q(
        &mut con,
        &[
            "MEM.TURN",
            "aof-thread",
            "user",
            "hello",
            "USER",
            "opts",
            "REMEMBER",
            "SKIP",
        ],
    );
    assert_eq!(as_i64(get(&t, "turn_count")), 1);
}

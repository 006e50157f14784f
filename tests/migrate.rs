//! `memproxy migrate` (issue 17, point 2): an index memproxy refuses (here the guide's schema on
//! another prefix) moved to one it accepts, interrupted after every step and resumed, and rolled
//! back — from the middle and from the end. Run as the binary, against a Redis of its own.

mod common;

use std::process::Command;

use common::*;
use redis::Value;

fn migrate(url: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_memproxy"))
        .args(["migrate", "--upstream", url])
        .args(args)
        .env("MEMPROXY_DEPS", deps())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn step(d: &mut redis::Connection) -> Option<String> {
    redis::cmd("HGET")
        .arg("agentmem:idx:migration")
        .arg("step")
        .query(d)
        .unwrap()
}

fn count(d: &mut redis::Connection, pattern: &str) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(d).unwrap();
    keys.len()
}

fn index_info(d: &mut redis::Connection) -> (String, String) {
    let info: Value = redis::cmd("FT.INFO").arg("agentmem:idx").query(d).unwrap();
    let def = get(&info, "index_definition");
    (
        as_str(get(&info, "index_name")),
        as_str(&items(get(def, "prefixes"))[0]),
    )
}

#[test]
fn another_prefix_migrated_step_by_step_and_rolled_back() {
    let redis = Redis::start(&[]);
    let mut d = direct(&redis);
    // The guide's schema, on a prefix of its own, with 10,000 memories.
    let _: () = redis::cmd("FT.CREATE")
        .arg(guide_index("agentmem:idx", "memory:"))
        .query(&mut d)
        .unwrap();
    let mut p = redis::pipe();
    for i in 0..10_000u64 {
        let doc = serde_json::json!({
            "id": format!("m{i}"), "user": "ann", "namespace": "default", "kind": "semantic",
            "source_thread": "", "text": format!("planted memory {i}"),
            "embedding": random_unit(i), "created_ts": i as f64, "hit_count": 0,
        });
        p.cmd("JSON.SET")
            .arg(format!("memory:m{i}"))
            .arg("$")
            .arg(doc.to_string());
    }
    let _: () = p.query(&mut d).unwrap();

    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut con = proxy.client();
    let e = err(&mut con, &["MEM.LIST", "USER", "ann"]);
    assert!(
        e.contains("index schema mismatch") && e.contains("memory:"),
        "{e}"
    );
    let url = redis.url();

    // Interrupted after building, then rolled back from the middle.
    let (ok, log) = migrate(&url, &["--stop-after", "built"]);
    assert!(ok, "{log}");
    assert_eq!(step(&mut d).as_deref(), Some("built"));
    assert_eq!(count(&mut d, "agent:mem:*"), 10_000, "the copies");
    let (ok, log) = migrate(&url, &["--rollback"]);
    assert!(ok, "{log}");
    assert_eq!(step(&mut d), None);
    assert_eq!(count(&mut d, "agent:mem:*"), 0, "the copies are gone");
    assert_eq!(count(&mut d, "memory:*"), 10_000, "the originals stay");
    assert_eq!(
        index_info(&mut d),
        ("agentmem:idx".into(), "memory:".into())
    );

    // Interrupted after every step, resumed each time.
    for s in ["baseline", "built", "verified"] {
        let (ok, log) = migrate(&url, &["--stop-after", s]);
        assert!(ok, "{log}");
        assert_eq!(step(&mut d).as_deref(), Some(s));
        assert!(err(&mut con, &["MEM.LIST", "USER", "ann"]).contains("mismatch"));
    }
    let (ok, log) = migrate(&url, &[]);
    assert!(ok, "{log}");
    assert!(log.contains("at step switched"), "{log}");
    assert_eq!(
        index_info(&mut d),
        ("agentmem:idx.migrated".into(), "agent:mem:".into())
    );
    eventually("memproxy to accept the migrated index", || {
        redis::cmd("MEM.LIST")
            .arg("USER")
            .arg("ann")
            .query::<Value>(&mut con)
            .is_ok()
    });
    let n: Value = redis::cmd("FT.SEARCH")
        .arg("agentmem:idx")
        .arg("@user:{ann}")
        .arg("LIMIT")
        .arg(0)
        .arg(0)
        .query(&mut d)
        .unwrap();
    assert_eq!(
        items(&n)[0],
        Value::Int(10_000),
        "every memory, through the alias"
    );
    let listed = q(&mut con, &["MEM.LIST", "USER", "ann", "LIMIT", "0", "1000"]);
    assert_eq!(items(&listed).len(), 1000, "a page of 1000");
    let hit = q(
        &mut con,
        &[
            "MEM.RECALL",
            "planted memory 7",
            "USER",
            "ann",
            "MODE",
            "keyword",
        ],
    );
    assert!(!items(&hit).is_empty());
    // Run again: nothing to do.
    let (ok, log) = migrate(&url, &[]);
    assert!(ok && log.contains("at step switched"), "{log}");

    // And back to the original.
    let (ok, log) = migrate(&url, &["--rollback"]);
    assert!(ok, "{log}");
    assert_eq!(
        index_info(&mut d),
        ("agentmem:idx".into(), "memory:".into())
    );
    assert_eq!(count(&mut d, "agent:mem:*"), 0);
    let n: Value = redis::cmd("FT.SEARCH")
        .arg("agentmem:idx")
        .arg("*")
        .arg("LIMIT")
        .arg(0)
        .arg(0)
        .query(&mut d)
        .unwrap();
    assert_eq!(items(&n)[0], Value::Int(10_000));
    eventually("memproxy to refuse the original again", || {
        redis::cmd("MEM.LIST")
            .arg("USER")
            .arg("ann")
            .query::<Value>(&mut con)
            .is_err()
    });
}

/// A source of another vector dimension: its documents are copied to the configured prefix and
/// the copies re-embedded by memproxy's model; on the same prefix it is refused with the way out.
#[test]
fn another_dimension_is_reembedded_into_a_prefix_of_its_own() {
    let redis = Redis::start(&[]);
    let mut d = direct(&redis);
    let _: () = redis::cmd("FT.CREATE")
        .arg(&[
            "agentmem:idx",
            "ON",
            "JSON",
            "PREFIX",
            "1",
            "old:",
            "SCHEMA",
            "$.text",
            "AS",
            "text",
            "TEXT",
            "$.user",
            "AS",
            "user",
            "TAG",
            "$.embedding",
            "AS",
            "embedding",
            "VECTOR",
            "FLAT",
            "6",
            "TYPE",
            "FLOAT32",
            "DIM",
            "8",
            "DISTANCE_METRIC",
            "COSINE",
        ])
        .query(&mut d)
        .unwrap();
    let topics = ["sailing", "chess", "gardening", "jazz", "pottery"];
    let mut p = redis::pipe();
    for i in 0..500usize {
        let doc = serde_json::json!({
            "id": format!("o{i}"), "user": "ann", "namespace": "default", "kind": "semantic",
            "source_thread": "", "text": format!("The user loves {} (note {i}).", topics[i % 5]),
            "embedding": vec![0.125f32; 8], "created_ts": i as f64, "hit_count": 0,
        });
        p.cmd("JSON.SET")
            .arg(format!("old:o{i}"))
            .arg("$")
            .arg(doc.to_string());
    }
    let _: () = p.query(&mut d).unwrap();
    let url = redis.url();
    // Same prefix: refused, nothing written.
    let out = Command::new(env!("CARGO_BIN_EXE_memproxy"))
        .args(["migrate", "--upstream", &url])
        .env("MEMPROXY_DEPS", deps())
        .env("MEMPROXY_MEM_KEY_PREFIX", "old:")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && log.contains("need a prefix of their own"),
        "{log}"
    );
    assert_eq!(step(&mut d), None);

    let (ok, log) = migrate(&url, &[]);
    assert!(ok, "{log}");
    assert_eq!(count(&mut d, "agent:mem:*"), 500);
    let v: String = redis::cmd("JSON.GET")
        .arg("agent:mem:o3")
        .arg("$.embedding")
        .query(&mut d)
        .unwrap();
    let v: Vec<Vec<f32>> = serde_json::from_str(&v).unwrap();
    assert_eq!(v[0].len(), 384);
    let old: String = redis::cmd("JSON.GET")
        .arg("old:o3")
        .arg("$.embedding")
        .query(&mut d)
        .unwrap();
    assert!(old.starts_with("[[0.125"), "the source is untouched: {old}");
    let proxy = Proxy::start(&url, |_| {});
    let mut con = proxy.client();
    let hits = q(
        &mut con,
        &[
            "MEM.RECALL",
            "Does the user play board games?",
            "USER",
            "ann",
            "K",
            "3",
            "MODE",
            "vector",
            "THRESHOLD",
            "2",
        ],
    );
    let top = as_str(get(&items(&hits)[0], "text"));
    assert!(top.contains("chess"), "{top}");
}

/// The guide's own schema on memproxy's prefix: accepted as it is (memproxy compares scopes
/// exactly), and migrated on request to an index whose scope tags are CASESENSITIVE, over the
/// same documents (no copies).
#[test]
fn the_guides_schema_is_upgraded_in_place() {
    let redis = Redis::start(&[]);
    let mut d = direct(&redis);
    let _: () = redis::cmd("FT.CREATE")
        .arg(guide_index("agentmem:idx", "agent:mem:"))
        .query(&mut d)
        .unwrap();
    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut con = proxy.client();
    q(
        &mut con,
        &[
            "MEM.REMEMBER",
            "The user is allergic to peanuts.",
            "USER",
            "Ann",
        ],
    );
    let (ok, log) = migrate(&redis.url(), &[]);
    assert!(ok, "{log}");
    assert_eq!(count(&mut d, "agent:mem:*"), 1, "no copies");
    let info: Value = redis::cmd("FT.INFO")
        .arg("agentmem:idx")
        .query(&mut d)
        .unwrap();
    assert_eq!(as_str(get(&info, "index_name")), "agentmem:idx.migrated");
    let user = items(get(&info, "attributes"))
        .iter()
        .find(|a| as_str(get(a, "attribute")) == "user")
        .map(|a| format!("{a:?}"))
        .unwrap();
    assert!(user.contains("CASESENSITIVE"), "{user}");
    let hits = q(&mut con, &["MEM.RECALL", "food allergies?", "USER", "Ann"]);
    assert_eq!(items(&hits).len(), 1);
    let (ok, log) = migrate(&redis.url(), &[]);
    assert!(ok && log.contains("at step switched"), "{log}");
}

//! Long-term memory: MEM.REMEMBER, MEM.RECALL, MEM.FORGET, MEM.LIST, MEM.INFO (issue 4).

mod common;
#[path = "../bench/sentences.rs"]
mod sentences;

use common::*;
use redis::Value;

fn remember(con: &mut redis::Connection, text: &str, opts: &[&str]) -> Value {
    let mut args = vec!["MEM.REMEMBER", text];
    args.extend_from_slice(opts);
    q(con, &args)
}

fn recall(con: &mut redis::Connection, text: &str, opts: &[&str]) -> Vec<Value> {
    let mut args = vec!["MEM.RECALL", text];
    args.extend_from_slice(opts);
    items(&q(con, &args)).to_vec()
}

fn texts(hits: &[Value]) -> Vec<String> {
    hits.iter().map(|h| as_str(get(h, "text"))).collect()
}

#[test]
fn guide_walkthrough() {
    let mut con = shared().proxy.client();
    let seeds = tsv("redis-docs-seed-memories.tsv");
    for s in &seeds {
        let r = remember(&mut con, &s[1], &["KIND", &s[0]]);
        assert_eq!(as_i64(get(&r, "deduped")), 0);
    }
    // The guide's own recall (KNN, cut-off 0.55) stays available as MODE vector, with the
    // guide's published distances.
    let guide = ["MODE", "vector"];
    let probes = tsv("seed-demo-probes.tsv");
    for p in &probes[..2] {
        let hits = recall(&mut con, &p[0], &guide);
        assert!(!hits.is_empty(), "{} recalls something", p[0]);
        let top = &hits[0];
        assert!(
            as_str(get(top, "text")).starts_with(&p[1]),
            "{} → {:?}",
            p[0],
            texts(&hits)
        );
        let d = as_f64(get(top, "distance"));
        assert!(
            (d - p[2].parse::<f64>().unwrap()).abs() <= 0.005,
            "{}: {d}",
            p[0]
        );
        assert_eq!(as_str(get(top, "retrieval")), "vector");
        assert_eq!(as_str(get(top, "user")), "default");
        assert!(hits.iter().all(|h| as_f64(get(h, "distance")) <= 0.55));
    }
    // The paraphrase dedups onto its seed as semantic.
    let r = remember(&mut con, &probes[2][0], &["KIND", "semantic"]);
    assert_eq!(as_i64(get(&r, "deduped")), 1);
    assert!((as_f64(get(&r, "distance")) - 0.1472).abs() <= 0.005);
    let hits = recall(&mut con, &probes[2][0], &["K", "1", "MODE", "vector"]);
    assert_eq!(as_str(get(&hits[0], "text")), seeds[0][1]);
    assert_eq!(as_i64(get(&hits[0], "hit_count")), 1);
    assert_eq!(as_str(get(&hits[0], "id")), as_str(get(&r, "id")));
    // Teal recalls nothing and is written fresh.
    assert!(recall(&mut con, &probes[3][0], &guide).is_empty());
    let r = remember(&mut con, &probes[3][0], &[]);
    assert_eq!(as_i64(get(&r, "deduped")), 0);
    assert!(as_f64(get(&r, "distance")) > 0.8);
    // Another user sees none of it.
    assert!(recall(&mut con, &probes[0][0], &["USER", "bob"]).is_empty());
    assert!(recall(&mut con, &probes[0][0], &["USER", "bob", "MODE", "vector"]).is_empty());
}

#[test]
fn isolation_cannot_be_widened() {
    let mut con = shared().proxy.client();
    let ns = unique("iso");
    remember(
        &mut con,
        "Alice keeps her passport in the blue drawer.",
        &["USER", "alice", "NS", &ns, "KIND", "semantic"],
    );
    let probe = "Where is the passport?";
    assert_eq!(
        recall(&mut con, probe, &["USER", "alice", "NS", &ns]).len(),
        1
    );
    for user in [
        "alice*",
        "*",
        "al?ce",
        "alice} | @user:{bob",
        "alice\\",
        " alice",
        "alice ",
        "ALICE",
        "{alice}",
        "alice|bob",
        "-alice",
        "%alice%",
    ] {
        for mode in ["vector", "keyword", "hybrid", "auto"] {
            let hits = recall(
                &mut con,
                probe,
                &["USER", user, "NS", &ns, "MODE", mode, "THRESHOLD", "2"],
            );
            assert!(
                hits.is_empty(),
                "USER {user:?} ({mode}) reached alice: {:?}",
                texts(&hits)
            );
        }
        let listed = items(&q(&mut con, &["MEM.LIST", "USER", user, "NS", &ns])).len();
        assert_eq!(listed, 0, "LIST USER {user:?}");
        assert_eq!(
            as_i64(&q(&mut con, &["MEM.FORGET", "USER", user, "NS", &ns])),
            0,
            "FORGET USER {user:?}"
        );
    }
    for bad_ns in [
        format!("{ns}*"),
        "*".into(),
        format!("{ns}}} | @namespace:{{x"),
        format!(" {ns}"),
        format!("{ns}\\"),
    ] {
        let hits = recall(
            &mut con,
            probe,
            &[
                "USER",
                "alice",
                "NS",
                &bad_ns,
                "THRESHOLD",
                "2",
                "MODE",
                "hybrid",
            ],
        );
        assert!(hits.is_empty(), "NS {bad_ns:?} reached alice");
    }
    assert!(err(&mut con, &["MEM.RECALL", probe, "USER", ""]).contains("USER must not be empty"));
    assert!(
        err(&mut con, &["MEM.RECALL", probe, "USER", "alice", "NS", ""])
            .contains("NS must not be empty")
    );
    assert!(err(
        &mut con,
        &["MEM.RECALL", probe, "KIND", "semantic|episodic"]
    )
    .contains("unknown KIND"));
    // Alice still has her memory.
    assert_eq!(
        recall(&mut con, probe, &["USER", "alice", "NS", &ns]).len(),
        1
    );

    // A TAG query splits "alice,mallory" at the comma and matches it for alice; the exact scope
    // check keeps it out of alice's reads and out of her erasure.
    remember(
        &mut con,
        "Mallory hid the passport under the mat.",
        &["USER", "alice,mallory", "NS", &ns, "KIND", "semantic"],
    );
    let hits = recall(
        &mut con,
        probe,
        &[
            "USER",
            "alice",
            "NS",
            &ns,
            "THRESHOLD",
            "2",
            "MODE",
            "hybrid",
        ],
    );
    assert_eq!(
        texts(&hits),
        vec!["Alice keeps her passport in the blue drawer.".to_string()]
    );
    assert_eq!(
        items(&q(&mut con, &["MEM.LIST", "USER", "alice", "NS", &ns])).len(),
        1
    );
    assert_eq!(
        as_i64(&q(&mut con, &["MEM.FORGET", "USER", "alice", "NS", &ns])),
        1
    );
    assert_eq!(
        recall(&mut con, probe, &["USER", "alice,mallory", "NS", &ns]).len(),
        1
    );
}

#[test]
fn ttls_by_kind_and_overrides() {
    let mut con = shared().proxy.client();
    let user = unique("ttl");
    let mut d = direct(&shared().redis);
    let ttl_of = |d: &mut redis::Connection, r: &Value| -> i64 {
        redis::cmd("TTL")
            .arg(format!("agent:mem:{}", as_str(get(r, "id"))))
            .query(d)
            .unwrap()
    };
    let e = remember(&mut con, "episodic by default", &["USER", &user]);
    assert!((604_790..=604_800).contains(&as_i64(get(&e, "ttl"))));
    assert!((604_790..=604_800).contains(&ttl_of(&mut d, &e)));
    let s = remember(
        &mut con,
        "semantic never expires",
        &["USER", &user, "KIND", "semantic"],
    );
    assert_eq!(as_i64(get(&s, "ttl")), -1);
    assert_eq!(ttl_of(&mut d, &s), -1);
    let t = remember(
        &mut con,
        "a short lived note about lunch",
        &["USER", &user, "TTL", "100"],
    );
    assert!((95..=100).contains(&ttl_of(&mut d, &t)));
    let p = remember(
        &mut con,
        "an episode kept forever by request",
        &["USER", &user, "PERSIST"],
    );
    assert_eq!(ttl_of(&mut d, &p), -1);
    let st = remember(
        &mut con,
        "semantic with a ttl",
        &["USER", &user, "KIND", "semantic", "ttl", "50"],
    );
    assert!((45..=50).contains(&ttl_of(&mut d, &st)));
    // Recall reports the same TTLs.
    let hits = recall(
        &mut con,
        "semantic never expires",
        &["USER", &user, "K", "1"],
    );
    assert_eq!(as_i64(get(&hits[0], "ttl")), -1);
}

#[test]
fn forget_and_list() {
    let mut con = shared().proxy.client();
    let user = unique("forget");
    let other = unique("keep");
    for i in 0..5 {
        remember(
            &mut con,
            &format!("fact number {i} about gardening and tomatoes {i}"),
            &["USER", &user, "NS", "a", "NODEDUP"],
        );
    }
    remember(
        &mut con,
        "a fact in another namespace",
        &["USER", &user, "NS", "b"],
    );
    remember(
        &mut con,
        "a fact of another user",
        &["USER", &other, "NS", "a"],
    );
    let page1 = items(&q(
        &mut con,
        &["MEM.LIST", "USER", &user, "NS", "a", "LIMIT", "0", "2"],
    ))
    .to_vec();
    let page2 = items(&q(
        &mut con,
        &["MEM.LIST", "USER", &user, "NS", "a", "LIMIT", "2", "2"],
    ))
    .to_vec();
    let page3 = items(&q(
        &mut con,
        &["MEM.LIST", "USER", &user, "NS", "a", "LIMIT", "4", "2"],
    ))
    .to_vec();
    assert_eq!((page1.len(), page2.len(), page3.len()), (2, 2, 1));
    let all: Vec<Value> = [page1, page2, page3].concat();
    let ts: Vec<f64> = all.iter().map(|h| as_f64(get(h, "created_ts"))).collect();
    assert!(ts.windows(2).all(|w| w[0] >= w[1]), "newest first: {ts:?}");
    assert!(all
        .iter()
        .all(|h| matches!(h, Value::Array(a) if !a.iter().any(|f| as_str(f) == "embedding"))));
    // One by id, then the rest of the scope; other scopes untouched.
    let id = as_str(get(&all[0], "id"));
    assert_eq!(as_i64(&q(&mut con, &["MEM.FORGET", &id])), 1);
    assert_eq!(as_i64(&q(&mut con, &["MEM.FORGET", &id])), 0);
    assert_eq!(
        as_i64(&q(&mut con, &["MEM.FORGET", "USER", &user, "NS", "a"])),
        4
    );
    assert_eq!(
        items(&q(&mut con, &["MEM.LIST", "USER", &user, "NS", "b"])).len(),
        1
    );
    assert_eq!(
        items(&q(&mut con, &["MEM.LIST", "USER", &other, "NS", "a"])).len(),
        1
    );
    // Without NS: every namespace of the user.
    assert_eq!(as_i64(&q(&mut con, &["MEM.FORGET", "USER", &user])), 1);
    assert_eq!(
        items(&q(&mut con, &["MEM.LIST", "USER", &other, "NS", "a"])).len(),
        1
    );
}

#[test]
fn keyword_and_hybrid() {
    let mut con = shared().proxy.client();
    let user = unique("kw");
    remember(
        &mut con,
        "The deploy key for project zanzibar rotates every Friday.",
        &["USER", &user, "KIND", "semantic"],
    );
    remember(
        &mut con,
        "The user enjoys hiking in the Alps during summer.",
        &["USER", &user, "KIND", "semantic"],
    );
    let hits = recall(&mut con, "zanzibar", &["USER", &user, "MODE", "keyword"]);
    assert_eq!(
        texts(&hits),
        vec!["The deploy key for project zanzibar rotates every Friday.".to_string()]
    );
    assert_eq!(as_str(get(&hits[0], "retrieval")), "keyword");
    assert!(as_f64(get(&hits[0], "score")) > 0.0);
    assert_eq!(get(&hits[0], "distance"), &Value::Nil);
    // Query syntax in keyword text is neutralised, not an error.
    assert!(
        recall(
            &mut con,
            "@text:{*} | -zanzibar* %%",
            &["USER", &user, "MODE", "keyword"]
        )
        .len()
            <= 1
    );
    assert!(recall(&mut con, "()", &["USER", &user, "MODE", "keyword"]).is_empty());
    let hybrid = recall(
        &mut con,
        "mountain walks in summer",
        &["USER", &user, "MODE", "hybrid", "WEIGHTS", "1", "2"],
    );
    assert_eq!(
        as_str(get(&hybrid[0], "text")),
        "The user enjoys hiking in the Alps during summer."
    );
    assert_eq!(as_str(get(&hybrid[0], "retrieval")), "hybrid");
    // Fused score: vector rank 1 (weight 2) + keyword rank 1 (weight 1).
    let score = as_f64(get(&hybrid[0], "score"));
    assert!((score - (2.0 / 61.0 + 1.0 / 61.0)).abs() < 1e-9, "{score}");
}

#[test]
fn concurrent_identical_remembers_make_one_memory() {
    let user = unique("race");
    let ids: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..16)
            .map(|_| {
                let user = user.clone();
                s.spawn(move || {
                    let mut con = shared().proxy.client();
                    as_str(get(
                        &remember(
                            &mut con,
                            "The user takes their coffee black.",
                            &["USER", &user, "KIND", "semantic"],
                        ),
                        "id",
                    ))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(ids.iter().all(|i| *i == ids[0]));
    let mut con = shared().proxy.client();
    let all = items(&q(&mut con, &["MEM.LIST", "USER", &user])).to_vec();
    assert_eq!(all.len(), 1);
    assert_eq!(as_i64(get(&all[0], "hit_count")), 15);
}

/// CREATED and HITS restore a memory learned earlier: a new memory carries them, and a dedup
/// adds 1 + HITS without touching the time.
#[test]
fn remember_restores_a_time_and_uses() {
    let mut con = shared().proxy.client();
    let user = unique("restore");
    let r = remember(
        &mut con,
        "The user keeps a sourdough starter called Gerald.",
        &["USER", &user, "CREATED", "1700000000.5", "HITS", "4"],
    );
    assert_eq!(as_i64(get(&r, "deduped")), 0);
    let listed =
        |con: &mut redis::Connection| items(&q(con, &["MEM.LIST", "USER", &user])).to_vec();
    let m = listed(&mut con);
    assert_eq!(as_f64(get(&m[0], "created_ts")), 1_700_000_000.5);
    assert_eq!(as_i64(get(&m[0], "hit_count")), 4);
    let again = remember(
        &mut con,
        "The user keeps a sourdough starter called Gerald.",
        &["USER", &user, "HITS", "2"],
    );
    assert_eq!(as_i64(get(&again, "deduped")), 1);
    let m = listed(&mut con);
    assert_eq!(m.len(), 1);
    assert_eq!(as_i64(get(&m[0], "hit_count")), 4 + 1 + 2);
    assert_eq!(as_f64(get(&m[0], "created_ts")), 1_700_000_000.5);
}

#[test]
fn errors_for_each_verb() {
    let mut con = shared().proxy.client();
    let cases: &[(&[&str], &str)] = &[
        (
            &["MEM.REMEMBER"],
            "wrong number of arguments for 'mem.remember'",
        ),
        (&["MEM.REMEMBER", ""], "text is empty"),
        (
            &["MEM.REMEMBER", "x", "COLOR", "red"],
            "unknown option 'COLOR'",
        ),
        (
            &["MEM.REMEMBER", "x", "USER", "a", "user", "b"],
            "option USER given more than once",
        ),
        (
            &["MEM.REMEMBER", "x", "KIND", "procedural"],
            "unknown KIND 'procedural'",
        ),
        (
            &["MEM.REMEMBER", "x", "TTL", "soon"],
            "TTL must be an integer",
        ),
        (&["MEM.REMEMBER", "x", "TTL", "0"], "TTL must be an integer"),
        (
            &["MEM.REMEMBER", "x", "CREATED", "yesterday"],
            "CREATED must be a number from 0 to",
        ),
        (
            &["MEM.REMEMBER", "x", "CREATED", "99999999999"],
            "CREATED must be a number from 0 to",
        ),
        (
            &["MEM.REMEMBER", "x", "HITS", "-1"],
            "HITS must be an integer from 0 to 2147483647",
        ),
        (
            &["MEM.REMEMBER", "x", "TTL", "5", "PERSIST"],
            "TTL and PERSIST cannot be combined",
        ),
        (
            &["MEM.REMEMBER", "x", "DEDUP", "3"],
            "DEDUP must be a number from 0 to 2",
        ),
        (
            &["MEM.REMEMBER", "x", "DEDUP", "0.1", "NODEDUP"],
            "cannot be combined",
        ),
        (&["MEM.REMEMBER", "x", "USER"], "option USER needs 1 value"),
        (
            &["MEM.RECALL"],
            "wrong number of arguments for 'mem.recall'",
        ),
        (&["MEM.RECALL", " "], "query is empty"),
        (
            &["MEM.RECALL", "x", "K", "0"],
            "K must be an integer from 1 to 1000",
        ),
        (
            &["MEM.RECALL", "x", "K", "1001"],
            "K must be an integer from 1 to 1000",
        ),
        (&["MEM.RECALL", "x", "K", "ten"], "K must be an integer"),
        (
            &["MEM.RECALL", "x", "THRESHOLD", "-0.1"],
            "THRESHOLD must be a number from 0 to 2",
        ),
        (
            &["MEM.RECALL", "x", "THRESHOLD", "2.5"],
            "THRESHOLD must be a number from 0 to 2",
        ),
        (
            &["MEM.RECALL", "x", "THRESHOLD", "nan"],
            "THRESHOLD must be a number",
        ),
        (
            &["MEM.RECALL", "x", "MODE", "fuzzy"],
            "unknown MODE 'fuzzy'",
        ),
        (&["MEM.RECALL", "x", "KIND", "x"], "unknown KIND"),
        (
            &["MEM.RECALL", "x", "WEIGHTS", "1"],
            "option WEIGHTS needs 2 values",
        ),
        (
            &["MEM.RECALL", "x", "WEIGHTS", "1", "x"],
            "WEIGHTS must be a number",
        ),
        (
            &["MEM.RECALL", "x", "K", "1", "K", "2"],
            "option K given more than once",
        ),
        (
            &["MEM.FORGET"],
            "wrong number of arguments for 'mem.forget'",
        ),
        (
            &["MEM.FORGET", "a", "b"],
            "wrong number of arguments for 'mem.forget'",
        ),
        (
            &["MEM.FORGET", "USER", "u", "LIMIT", "1"],
            "unknown option 'LIMIT'",
        ),
        (
            &["MEM.LIST", "LIMIT", "0", "0"],
            "LIMIT count must be an integer from 1 to 1000",
        ),
        (
            &["MEM.LIST", "LIMIT", "-1", "5"],
            "LIMIT offset must be an integer",
        ),
        (&["MEM.LIST", "NS"], "option NS needs 1 value"),
        (
            &["MEM.INFO", "x"],
            "wrong number of arguments for 'mem.info'",
        ),
    ];
    for (args, want) in cases {
        let e = err(&mut con, args);
        assert!(
            e.starts_with("ERR") && e.contains(want),
            "{args:?} → {e:?}, want {want:?}"
        );
        assert!(!e.contains('\n'));
    }
    // None of that wrote anything.
    assert!(recall(&mut con, "x", &["THRESHOLD", "0"]).is_empty());
}

#[test]
fn interop_with_the_guide_layout() {
    let mut con = shared().proxy.client();
    let user = unique("interop");
    // A document as the guide's demo writes it, with redis-cli-style commands.
    let v: Vec<f64> = redis::cmd("MEM.EMBED")
        .arg("The user's favourite editor is Helix.")
        .query(&mut con)
        .unwrap();
    let doc = serde_json::json!({
        "id": "0123456789ab", "user": user, "namespace": "default", "kind": "semantic",
        "source_thread": "t1", "text": "The user's favourite editor is Helix.", "embedding": v,
        "created_ts": 1700000000.5, "hit_count": 0
    });
    let _: () = redis::cmd("JSON.SET")
        .arg("agent:mem:0123456789ab")
        .arg("$")
        .arg(doc.to_string())
        .query(&mut con)
        .unwrap();
    let hits = recall(
        &mut con,
        "Which editor does the user like?",
        &["USER", &user],
    );
    assert_eq!(as_str(get(&hits[0], "id")), "0123456789ab");
    assert_eq!(as_str(get(&hits[0], "source_thread")), "t1");
    // What MEM.REMEMBER writes reads back in the same layout.
    let r = remember(
        &mut con,
        "The user works from Lisbon.",
        &["USER", &user, "THREAD", "t2", "KIND", "semantic"],
    );
    let id = as_str(get(&r, "id"));
    assert!(
        id.len() == 12
            && id
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    let raw: String = redis::cmd("JSON.GET")
        .arg(format!("agent:mem:{id}"))
        .query(&mut con)
        .unwrap();
    let got: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let keys: std::collections::BTreeSet<&str> = got
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "created_ts",
            "embedding",
            "hit_count",
            "id",
            "kind",
            "namespace",
            "source_thread",
            "text",
            "user"
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(got["embedding"].as_array().unwrap().len(), 384);
    assert_eq!(got["source_thread"], "t2");
    assert!(got["created_ts"].is_f64() && got["hit_count"] == 0);
}

#[test]
fn info_reports_the_index() {
    let mut con = shared().proxy.client();
    let info = q(&mut con, &["MEM.INFO"]);
    assert_eq!(as_str(get(&info, "index")), "agentmem:idx");
    assert_eq!(as_i64(get(&info, "dim")), 384);
    assert_eq!(as_str(get(&info, "model")), "all-MiniLM-L6-v2");
    assert_eq!(as_i64(get(&info, "indexing_failures")), 0);
    assert!((as_f64(get(&info, "recall_threshold")) - 0.55).abs() < 1e-12);
}

#[test]
fn resp3_recall_is_a_map() {
    let mut c = shared().proxy.raw();
    let user = unique("r3");
    c.cmd(&[b"HELLO", b"3"]);
    c.read();
    c.cmd(&[
        b"MEM.REMEMBER",
        b"The user plays the cello.",
        b"USER",
        user.as_bytes(),
    ]);
    let r = c.read_str();
    assert!(r.starts_with("%4\r\n$2\r\nid\r\n"), "{r}");
    assert!(
        r.contains("$8\r\ndistance\r\n_\r\n"),
        "no nearest memory → nil: {r}"
    );
    c.cmd(&[b"MEM.RECALL", b"What instrument?", b"USER", user.as_bytes()]);
    let r = c.read_str();
    assert!(r.starts_with("*1\r\n%12\r\n"), "{r}");
    assert!(
        r.contains("$8\r\ndistance\r\n,0."),
        "distance is a double: {r}"
    );
}

#[test]
fn mismatching_index_is_reported_and_passthrough_still_works() {
    let redis = Redis::start(&[]);
    let mut d = direct(&redis);
    let _: () = redis::cmd("FT.CREATE")
        .arg("agentmem:idx")
        .arg("ON")
        .arg("JSON")
        .arg("PREFIX")
        .arg("1")
        .arg("agent:mem:")
        .arg("SCHEMA")
        .arg("$.embedding")
        .arg("AS")
        .arg("embedding")
        .arg("VECTOR")
        .arg("HNSW")
        .arg("6")
        .arg("TYPE")
        .arg("FLOAT32")
        .arg("DIM")
        .arg("768")
        .arg("DISTANCE_METRIC")
        .arg("COSINE")
        .query(&mut d)
        .unwrap();
    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut con = proxy.client();
    let e = err(&mut con, &["MEM.RECALL", "anything"]);
    assert!(
        e.contains("index schema mismatch")
            && e.contains("vector dim of embedding is 768, the model's is 384"),
        "{e}"
    );
    let e = err(&mut con, &["MEM.REMEMBER", "anything"]);
    assert!(e.contains("vector dim of embedding is 768"), "{e}");
    assert_eq!(as_str(&q(&mut con, &["SET", "k", "v"])), "OK");
    assert_eq!(as_str(&q(&mut con, &["GET", "k"])), "v");
    // The index was left alone.
    let info: Value = redis::cmd("FT.INFO")
        .arg("agentmem:idx")
        .query(&mut d)
        .unwrap();
    assert!(format!("{info:?}").contains("768"));
}

#[test]
fn missing_modules_are_named() {
    let redis = Redis::start_with(false, &[]);
    let proxy = Proxy::start(&redis.url(), |_| {});
    let mut con = proxy.client();
    let e = err(&mut con, &["MEM.RECALL", "anything"]);
    assert!(e.contains("lacks the Search module"), "{e}");
    assert_eq!(as_str(&q(&mut con, &["PING"])), "PONG");
}

/// Hybrid recall falls back to its keyword side when the vector side cannot be had: here every
/// embedding outlasts a 1 ms deadline (a model run takes several ms), so hybrid answers with
/// keyword hits marked `keyword`, and vector mode answers the embedder's error.
#[test]
fn hybrid_falls_back_to_keyword_when_the_embedding_fails() {
    let s = shared();
    let mut writer = s.proxy.client();
    let user = unique("fallback");
    remember(
        &mut writer,
        "The user collects antique barometers.",
        &["USER", &user],
    );
    let proxy = Proxy::start(&s.redis.url(), |c| c.embed_timeout_ms = 1);
    let mut con = proxy.client();
    // A long question (256 tokens) takes the model well over the 1 ms deadline.
    let long = "weather instruments in the study ".repeat(60);
    let question = format!("barometers {long} {}", unique("q"));
    let hits = recall(&mut con, &question, &["USER", &user, "MODE", "hybrid"]);
    assert_eq!(texts(&hits), vec!["The user collects antique barometers."]);
    assert_eq!(as_str(get(&hits[0], "retrieval")), "keyword");
    let e = err(
        &mut con,
        &[
            "MEM.RECALL",
            &format!("{long} {}", unique("again")),
            "USER",
            &user,
        ],
    );
    assert!(e.contains("timed out"), "{e}");
}

/// The default recall (`MODE auto`, issues 15 and 36) is two decisions: the gate (nothing unless
/// the scope's nearest memory is within `recall_auto_threshold`) and the ranking (the nearest
/// memories within `recall_hit_threshold` and within `recall_relative_cutoff` of the best,
/// reordered by evidence). Every hit keeps the raw `distance` MODE vector reports; questions the
/// scope's memories do not touch recall nothing; of two facts that differ only in age, the newer
/// comes first when recency counts (docs/RECALL.md).
#[test]
fn auto_recall_is_a_gate_then_a_ranking() {
    let s = shared();
    let mut con = s.proxy.client();
    let mut d = direct(&s.redis);
    let user = unique("auto");
    let id = |v: &Value| as_str(get(v, "id"));
    let ids: Vec<String> = [
        "The user is allergic to peanuts.",
        "The user is vegetarian and does not eat meat or fish.",
        "The user plays five-a-side football on Thursday nights.",
        "The user's manager is called Priya.",
        "The user's cat is called Pixel.",
    ]
    .iter()
    .map(|t| id(&remember(&mut con, t, &["USER", &user])))
    .collect();
    let info = q(&mut con, &["MEM.INFO"]);
    let gate = as_f64(get(&info, "recall_auto_threshold"));
    let cut = as_f64(get(&info, "recall_hit_threshold"));
    let relative = as_f64(get(&info, "recall_relative_cutoff"));

    let question = "Does the user have any food allergies?";
    let hits = recall(&mut con, question, &["USER", &user]);
    assert_eq!(id(&hits[0]), ids[0], "{:?}", texts(&hits));
    assert_eq!(as_str(get(&hits[0], "retrieval")), "auto");
    for q_ in [
        question,
        "What is my cat's name?",
        "What does the user eat?",
        "Who does the user report to?",
        "What is the capital of Peru?",
    ] {
        let auto = recall(&mut con, q_, &["USER", &user]);
        let plain = recall(
            &mut con,
            q_,
            &["USER", &user, "MODE", "vector", "THRESHOLD", "2", "K", "5"],
        );
        let nearest = as_f64(get(&plain[0], "distance"));
        if nearest > gate {
            assert!(auto.is_empty(), "{q_}: the gate");
        }
        for h in &auto {
            let raw = plain.iter().find(|p| id(p) == id(h)).expect("a candidate");
            let dist = as_f64(get(h, "distance"));
            assert!((dist - as_f64(get(raw, "distance"))).abs() < 1e-6);
            assert!(dist <= cut, "{q_}: per-hit cut-off");
            assert!(
                relative == 0.0 || (1.0 - dist) >= (1.0 - nearest) - relative - 1e-9,
                "{q_}: relative cut-off"
            );
        }
    }
    // Questions the memories do not touch, small talk, stopwords, symbols: nothing.
    for q_ in [
        "What is the capital of Peru?",
        "Thanks, that's all for now.",
        "How many players are on a baseball team?",
        "is it the and of?",
        "?!*%@{}",
    ] {
        assert!(recall(&mut con, q_, &["USER", &user]).is_empty(), "{q_}");
    }
    // THRESHOLD is the gate in auto mode.
    assert!(recall(&mut con, question, &["USER", &user, "THRESHOLD", "0.1"]).is_empty());

    // Two facts equal but for their age: the newer first, either way round, when recency counts
    // (`recall_recency_weight`; the recall bench chose the default's weight on its sets).
    let recent = Proxy::start(&s.redis.url(), |c| c.recall_recency_weight = 0.05);
    let mut con = recent.client();
    let berlin = id(&remember(
        &mut con,
        "The user lives in Berlin.",
        &["USER", &user],
    ));
    let lisbon = id(&remember(
        &mut con,
        "The user lives in Lisbon.",
        &["USER", &user],
    ));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let age = |d: &mut redis::Connection, id: &str, days: f64| {
        let _: () = redis::cmd("JSON.SET")
            .arg(format!("agent:mem:{id}"))
            .arg("$.created_ts")
            .arg(now - days * 86_400.0)
            .query(d)
            .unwrap();
    };
    for (old, new) in [(&berlin, &lisbon), (&lisbon, &berlin)] {
        age(&mut d, old, 120.0);
        age(&mut d, new, 2.0);
        let hits = recall(&mut con, "Where does the user live?", &["USER", &user]);
        assert_eq!(&id(&hits[0]), new, "{:?}", texts(&hits));
        assert_eq!(&id(&hits[1]), old);
        assert!(as_f64(get(&hits[0], "score")) > as_f64(get(&hits[1], "score")));
    }
}

/// `recall_min_standout`: nothing is recalled unless the nearest candidate stands that far above
/// the farthest of a full set of `recall_candidates`; a scope with fewer memories has no
/// background, so only the cut-off applies. (A margin of 0.9 nothing can reach.)
#[test]
fn auto_recall_needs_the_nearest_to_stand_out_of_a_full_scope() {
    let s = shared();
    // A full set is 8 candidates here (the scope holds 8 memories).
    let strict = Proxy::start(&s.redis.url(), |c| {
        c.recall_min_standout = 0.9;
        c.recall_candidates = 8;
    });
    let mut con = strict.client();
    let user = unique("standout");
    remember(
        &mut con,
        "The user is allergic to peanuts.",
        &["USER", &user],
    );
    let question = "Does the user have any food allergies?";
    assert_eq!(recall(&mut con, question, &["USER", &user]).len(), 1);
    for t in [
        "The user plays five-a-side football on Thursday nights.",
        "The user's manager is called Priya.",
        "The user's cat is called Pixel.",
        "The user works as a backend engineer at a fintech startup.",
        "The user drives an old green Volvo.",
        "The user sings in a choir on Mondays.",
        "The user collects vinyl records.",
    ] {
        remember(&mut con, t, &["USER", &user]);
    }
    assert!(recall(&mut con, question, &["USER", &user]).is_empty());
    // The default margin lets the same question through.
    let hits = recall(&mut s.proxy.client(), question, &["USER", &user]);
    assert_eq!(texts(&hits)[0], "The user is allergic to peanuts.");
}

/// `recall_keyword_weight`: keyword evidence is added to a candidate's similarity as this weight
/// times the share of the question's rarity-weighted words it contains (rarity among the
/// candidates; 1.0 here, so it shows; store::rank has the formula), the hits come in score order,
/// and the evidence never admits a memory beyond the per-hit cut-off. It needs no search of its
/// own, so it works in a scope of any size (it was off past 1,000 memories when it was BM25).
#[test]
fn keyword_evidence_reorders_within_the_cut_off_only() {
    let s = shared();
    let strong = |url: &str| {
        Proxy::start(url, |c| {
            c.recall_keyword_weight = 1.0;
            c.recall_relative_cutoff = 0.0;
            c.recall_recency_weight = 0.05;
            c.recall_hit_threshold = 0.63;
        })
    };
    let proxy = strong(&s.redis.url());
    let mut con = proxy.client();
    let user = unique("kwev");
    let okafor = "The user has a dentist appointment with Dr Okafor on Friday.";
    let texts_ = [
        "The user has a doctor's appointment with Dr Mensah on Tuesday.",
        okafor,
        "The user's sister is visiting in June.",
    ];
    for t in texts_ {
        remember(&mut con, t, &["USER", &user]);
    }
    let cut = as_f64(get(&q(&mut con, &["MEM.INFO"]), "recall_hit_threshold"));
    let question = "When do I see Okafor for my appointment?";
    let hits = recall(&mut con, question, &["USER", &user]);
    assert_eq!(texts(&hits)[0], okafor, "{:?}", texts(&hits));
    assert!(hits.len() >= 2, "{:?}", texts(&hits));
    // What the evidence and the (brand-new) recency gain add: exactly the formula's share for each.
    let added = |h: &Value| as_f64(get(h, "score")) - (1.0 - as_f64(get(h, "distance")));
    let recency = 0.05;
    let overlap = memproxy::store::rank::rarity_overlap(question, &texts_);
    for h in &hits {
        let i = texts_
            .iter()
            .position(|t| *t == as_str(get(h, "text")))
            .unwrap();
        assert!(
            (added(h) - recency - overlap[i]).abs() < 0.01,
            "{}: {} vs {}",
            texts_[i],
            added(h),
            overlap[i]
        );
    }
    assert!(overlap[1] > overlap[0] && overlap[0] > 0.0, "{overlap:?}");
    for w in hits.windows(2) {
        assert!(as_f64(get(&w[0], "score")) >= as_f64(get(&w[1], "score")));
    }
    // Every hit is within the cut-off, whatever its keyword evidence, for questions near and far.
    for q_ in [
        question,
        "Okafor",
        "Friday Tuesday June appointment dentist doctor",
    ] {
        for h in recall(&mut con, q_, &["USER", &user]) {
            assert!(as_f64(get(&h, "distance")) <= cut, "{q_}: {h:?}");
        }
    }
    // A stopword-only question has no keyword evidence and still answers (nothing).
    assert!(recall(&mut con, "is it the and of?", &["USER", &user]).is_empty());

    // Past 1,000 memories in the scope the evidence still counts.
    let mut d = direct(&s.redis);
    let mut p = redis::pipe();
    for i in 0..1_001u64 {
        p.add_command(plant_cmd(
            &format!("kwev{}x{i:05}", std::process::id()),
            &user,
            "default",
            "semantic",
            &random_unit(29_000 + i),
            1.7e9,
            0,
        ))
        .ignore();
    }
    let _: () = p.query(&mut d).unwrap();
    wait_indexed(&mut d);
    let fresh = strong(&s.redis.url());
    let mut con = fresh.client();
    for _ in 0..2 {
        let hits = recall(&mut con, question, &["USER", &user]);
        assert_eq!(texts(&hits)[0], okafor, "{:?}", texts(&hits));
        assert!(
            added(&hits[0]) > recency + 0.2,
            "keyword evidence: {}",
            added(&hits[0])
        );
    }
}

/// `recall_hybrid_policy = "adaptive"` (the default) counts the scope in the script and picks
/// brute force for a small scope and HNSW batches for one above 1,000 memories. Both branches must
/// find the same nearest memory as an exact search would, and the marker must never reach
/// RediSearch (it would answer a syntax error).
#[test]
fn adaptive_policy_finds_the_nearest_in_small_and_large_scopes() {
    let mut con = shared().proxy.client();
    let mut d = direct(&shared().redis);
    let ns = format!("adaptive-{}", std::process::id());
    let mut p = redis::pipe();
    for i in 0..1_100u64 {
        p.add_command(plant_cmd(
            &format!("adaptive{i:05}"),
            "crowd",
            &ns,
            "semantic",
            &random_unit(9_000 + i),
            1.7e9,
            0,
        ))
        .ignore();
    }
    for i in 0..3u64 {
        p.add_command(plant_cmd(
            &format!("adaptsolo{i}"),
            "solo",
            &ns,
            "semantic",
            &random_unit(19_000 + i),
            1.7e9,
            0,
        ))
        .ignore();
    }
    let _: () = p.query(&mut d).unwrap();
    let fact = "The user keeps two beehives on the roof of the office.";
    for user in ["crowd", "solo"] {
        remember(
            &mut con,
            fact,
            &["USER", user, "NS", &ns, "KIND", "semantic"],
        );
    }
    wait_indexed(&mut d);
    // The large scope really is above the brute-force limit, the small one below.
    for (user, large) in [("crowd", true), ("solo", false)] {
        let n: Vec<Value> = redis::cmd("FT.AGGREGATE")
            .arg("agentmem:idx")
            .arg(format!(
                "@user:{{{user}}} @namespace:{{{}}}",
                ns.replace('-', "\\-")
            ))
            .arg(&["LOAD", "0", "LIMIT", "1000", "1", "DIALECT", "2"][..])
            .query(&mut d)
            .unwrap();
        let n = match &n[0] {
            Value::Int(n) => *n,
            other => panic!("count {other:?}"),
        };
        assert_eq!(n > 1000, large, "{user}: {n} memories counted");
    }
    for user in ["crowd", "solo"] {
        let hits = recall(
            &mut con,
            "Where does the user keep bees?",
            &[
                "USER",
                user,
                "NS",
                &ns,
                "MODE",
                "vector",
                "THRESHOLD",
                "2",
                "K",
                "3",
            ],
        );
        assert_eq!(
            texts(&hits).first().map(String::as_str),
            Some(fact),
            "{user}"
        );
        assert_eq!(hits.len(), 3, "{user}: K candidates from the scope");
        let auto = recall(
            &mut con,
            "Where does the user keep bees?",
            &["USER", user, "NS", &ns],
        );
        assert_eq!(
            texts(&auto).first().map(String::as_str),
            Some(fact),
            "{user} (auto)"
        );
    }
}

/// A user's own facts are still found when the scope also holds hundreds of memories about other
/// people on the same topics ("The customer asked about restaurant suggestions that avoid
/// peanuts"), as often as in the plain KNN at the same cut-off: the chatter must not push the
/// facts out of the candidates or make the scope's background swallow them.
#[test]
fn auto_recall_finds_own_facts_in_a_busy_scope() {
    let mut con = shared().proxy.client();
    let user = unique("busy");
    let eval = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/data/recall-eval.tsv"),
    )
    .unwrap();
    let rows: Vec<Vec<&str>> = eval
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split('\t').collect())
        .filter(|c: &Vec<&str>| c.len() > 3 && c[1] == "alice")
        .collect();
    let mut facts = std::collections::HashMap::new();
    let mut p = redis::pipe();
    for c in rows.iter().filter(|c| c[0] == "fact") {
        facts.insert(c[2], c[5]);
        p.cmd("MEM.REMEMBER")
            .arg(c[5])
            .arg("USER")
            .arg(&user)
            .arg("NODEDUP")
            .ignore();
    }
    // The recall benchmark's busy scopes: work chatter about other people, never "The user".
    let chatter: Vec<String> = (0..512)
        .filter(|i| i % 8 != 0)
        .map(sentences::sentence)
        .collect();
    for text in &chatter {
        p.cmd("MEM.REMEMBER")
            .arg(text)
            .arg("USER")
            .arg(&user)
            .arg("NODEDUP")
            .ignore();
    }
    let n = chatter.len();
    let _: () = p.query(&mut con).unwrap();
    let asks: Vec<&Vec<&str>> = rows.iter().filter(|c| c[0] == "ask").collect();
    let cut = as_f64(get(&q(&mut con, &["MEM.INFO"]), "recall_auto_threshold")).to_string();
    let found = |con: &mut redis::Connection, opts: &[&str]| {
        asks.iter()
            .filter(|c| {
                let mut o = vec!["USER", &user, "K", "3"];
                o.extend(opts);
                texts(&recall(con, c[3], &o))
                    .iter()
                    .any(|t| t == facts[c[2]])
            })
            .count()
    };
    let auto = found(&mut con, &[]);
    let plain = found(&mut con, &["MODE", "vector", "THRESHOLD", &cut]);
    assert!(
        auto * 10 >= plain * 9 && auto > 0,
        "{auto} of {} questions found their fact among {n} memories of chatter (MODE vector at {cut}: {plain})",
        asks.len()
    );
}

/// The hit-count gain (`recall_hit_weight`, off by default: on the evaluation set it costs
/// recall, docs/RECALL.md) when an operator turns it on: of two answers to one
/// question, the one remembered many times (HITS, as an import restores it) comes first, where
/// without the gain the other does.
#[test]
fn hit_count_gain_when_on_puts_the_often_remembered_first() {
    let s = shared();
    let mut con = s.proxy.client();
    let user = unique("hits");
    remember(
        &mut con,
        "The user drinks black coffee at work.",
        &["USER", &user],
    );
    remember(
        &mut con,
        "The user likes a cappuccino on Sunday mornings.",
        &["USER", &user, "HITS", "15"],
    );
    let question = "What coffee does the user like?";
    let first =
        |con: &mut redis::Connection| texts(&recall(con, question, &["USER", &user]))[0].clone();
    assert_eq!(first(&mut con), "The user drinks black coffee at work.");
    // The relative cut-off off too: by similarity alone the cappuccino is 0.16 below the best;
    // keyword evidence off (only the black coffee has the question's word "coffee").
    let gain = Proxy::start(&s.redis.url(), |c| {
        c.recall_hit_weight = 0.05;
        c.recall_relative_cutoff = 0.0;
        c.recall_keyword_weight = 0.0;
    });
    assert_eq!(
        first(&mut gain.client()),
        "The user likes a cappuccino on Sunday mornings."
    );
}

/// Weeks-old facts against brand-new chatter on the same topic: the recency gain must not bury
/// the fact (with a 30-day half-life the 20-day-old fact fell to fourth behind chatter about a
/// time zone; with the default 60 days it is in the top three).
#[test]
fn recency_does_not_bury_a_weeks_old_fact_under_new_chatter() {
    let s = shared();
    let mut con = s.proxy.client();
    let mut d = direct(&s.redis);
    let user = unique("recency-busy");
    let fact = as_str(get(
        &remember(
            &mut con,
            "The user lives in Toronto with his partner.",
            &["USER", &user, "NODEDUP"],
        ),
        "id",
    ));
    let mut p = redis::pipe();
    // The busy scopes' chatter about a time zone ("My manager prefers working in the
    // Europe/Berlin time zone (note 385)."…), written now.
    for text in (384..448).filter(|i| i % 8 != 0).map(sentences::sentence) {
        p.cmd("MEM.REMEMBER")
            .arg(text)
            .arg("USER")
            .arg(&user)
            .arg("NODEDUP")
            .ignore();
    }
    let _: () = p.query(&mut con).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let _: () = redis::cmd("JSON.SET")
        .arg(format!("agent:mem:{fact}"))
        .arg("$.created_ts")
        .arg(now - 20.0 * 86_400.0)
        .query(&mut d)
        .unwrap();
    let hits = recall(
        &mut con,
        "Which city is the user based in?",
        &["USER", &user, "K", "3"],
    );
    assert!(
        hits.iter().any(|h| as_str(get(h, "id")) == fact),
        "{:?}",
        texts(&hits)
    );
}

/// `adaptive` counts a scope (FT.AGGREGATE … LIMIT 1000 1) in the first recall's script; the
/// recalls after it reuse that count for a while and run one command fewer.
#[test]
fn auto_recall_counts_a_scope_once() {
    let mut con = shared().proxy.client();
    let mut d = direct(&shared().redis);
    let name = unique("counted");
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(&name)
        .query(&mut con)
        .unwrap();
    let user = unique("counted-user");
    remember(
        &mut con,
        "The user grows tomatoes on the balcony.",
        &["USER", &user],
    );
    let question = "Does the user have a garden?";
    let mut upstream_cmds = || -> i64 {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut d).unwrap();
        let line = list
            .lines()
            .find(|l| l.contains(&format!(" name={name} ")))
            .expect("the client's upstream connection")
            .to_string();
        line.split(' ')
            .find_map(|f| f.strip_prefix("tot-cmds="))
            .unwrap()
            .parse()
            .unwrap()
    };
    // Embedded once first, and the scripts loaded (a recall of another scope), so that both
    // recalls below are the same work but for the count.
    let _: Value = q(&mut con, &["MEM.EMBED", question]);
    recall(&mut con, question, &["USER", &unique("counted-other")]);
    let mut cost = |con: &mut redis::Connection, args: &[&str]| {
        let before = upstream_cmds();
        let hits = recall(con, question, args);
        assert_eq!(texts(&hits), ["The user grows tomatoes on the balcony."]);
        upstream_cmds() - before
    };
    let first = cost(&mut con, &["USER", &user]);
    let second = cost(&mut con, &["USER", &user]);
    assert_eq!(
        second,
        first - 1,
        "first recall {first} commands, second {second}"
    );
    // The guide's `MODE vector` reuses the count as well.
    let user = unique("counted-vector");
    remember(
        &mut con,
        "The user grows tomatoes on the balcony.",
        &["USER", &user],
    );
    let vector = ["USER", &user, "MODE", "vector", "THRESHOLD", "0.9"];
    let first = cost(&mut con, &vector);
    let second = cost(&mut con, &vector);
    assert_eq!(
        second,
        first - 1,
        "MODE vector: first recall {first} commands, second {second}"
    );
}

/// A long text is found by any part of it (issue 25): the model reads a text's first 256 tokens,
/// so MEM.REMEMBER also embeds its later windows (`$.windows`) and `MODE auto` searches them.
/// `MODE vector`, the guide's KNN on `embedding`, still sees the first window only; a short text's
/// document keeps the guide's layout (no `windows`).
#[test]
fn long_texts_are_found_by_their_second_half() {
    let s = shared();
    let mut con = s.proxy.client();
    let mut d = direct(&s.redis);
    let user = unique("long");
    let filler = "To cook dried pasta well, bring a large pot of water to a rolling boil, salt it \
                  generously, add the pasta and stir in the first minute so it does not stick. \
                  Taste it a minute before the time on the packet; drain it while it still has \
                  some bite and keep a cup of the starchy water for the sauce. ";
    let text = format!(
        "{}Anyway, about me: my sister Ines just moved to Porto, where she works as an architect.",
        filler.repeat(6)
    );
    assert!(text.len() > 1500);
    let id = as_str(get(&remember(&mut con, &text, &["USER", &user]), "id"));
    remember(
        &mut con,
        "The user's cat is called Pixel.",
        &["USER", &user],
    );
    let doc: String = redis::cmd("JSON.GET")
        .arg(format!("agent:mem:{id}"))
        .arg("$.windows")
        .query(&mut d)
        .unwrap();
    let windows: Vec<Vec<Vec<f64>>> = serde_json::from_str(&doc).unwrap();
    assert!(windows[0].len() >= 2 && windows[0].iter().all(|w| w.len() == 384));

    let question = "Which city did my sister Ines move to?";
    let hits = recall(&mut con, question, &["USER", &user]);
    assert_eq!(as_str(get(&hits[0], "id")), id, "{:?}", texts(&hits));
    let by_window = as_f64(get(&hits[0], "distance"));
    let first: Vec<Value> = recall(
        &mut con,
        question,
        &["USER", &user, "MODE", "vector", "THRESHOLD", "2"],
    );
    let first = first.iter().find(|h| as_str(get(h, "id")) == id).unwrap();
    assert!(
        by_window + 0.1 < as_f64(get(first, "distance")),
        "the window ({by_window}) is nearer than the first window ({:?})",
        get(first, "distance")
    );
    // A short text's document has no windows.
    let short: Value = redis::cmd("JSON.GET")
        .arg(format!(
            "agent:mem:{}",
            as_str(get(
                &remember(&mut con, "The user likes tea.", &["USER", &user]),
                "id"
            ))
        ))
        .arg("$.windows")
        .query(&mut d)
        .unwrap();
    assert!(!format!("{short:?}").contains("384"));
    // A 100 KB turn is accepted and remembered whole; its tail is searchable by keyword.
    let big = format!("{} The deploy key is kiwi-orbit-7.", filler.repeat(400));
    assert!(big.len() > 100_000);
    let t = q(
        &mut con,
        &[
            "MEM.TURN",
            &unique("long-thread"),
            "assistant",
            &big,
            "USER",
            &user,
            "REMEMBER",
            "semantic",
        ],
    );
    assert!(!matches!(get(&t, "remembered"), Value::Nil));
    let hits = recall(
        &mut con,
        "kiwi-orbit-7",
        &["USER", &user, "MODE", "keyword"],
    );
    assert_eq!(hits.len(), 1);
    // ... and by meaning too, by its last sentence: windows cover a 100 KB text to its end.
    let tail =
        "Anyway, about me: my sister Ines just moved to Porto, where she works as an architect.";
    let huge = format!("{}{tail}", filler.repeat(350));
    assert!(huge.len() > 100_000);
    let huge_id = as_str(get(&remember(&mut con, &huge, &["USER", &user]), "id"));
    let hits = recall(&mut con, question, &["USER", &user, "K", "5"]);
    assert!(
        hits.iter().any(|h| as_str(get(h, "id")) == huge_id),
        "{huge_id} not among {:?}",
        hits.iter()
            .map(|h| as_str(get(h, "id")))
            .collect::<Vec<_>>()
    );
}

/// `MODE rank`: the ranking without the gate — the K best, however loosely the question matches
/// (what a search API promises), best first, each with its score; THRESHOLD still caps a hit's
/// distance when given. `MODE auto` on the same question answers nothing.
#[test]
fn rank_mode_returns_the_k_best_without_the_gate() {
    let mut con = shared().proxy.client();
    let user = unique("rank");
    for t in [
        "Alice is vegetarian and avoids fish.",
        "Alice works night shifts at the hospital.",
        "Alice's brother lives in Oslo.",
    ] {
        remember(&mut con, t, &["USER", &user]);
    }
    let question = "what should I cook for her?";
    assert!(recall(&mut con, question, &["USER", &user]).is_empty());
    let hits = recall(
        &mut con,
        question,
        &["USER", &user, "MODE", "rank", "K", "2"],
    );
    assert_eq!(texts(&hits).len(), 2);
    assert_eq!(texts(&hits)[0], "Alice is vegetarian and avoids fish.");
    assert_eq!(as_str(get(&hits[0], "retrieval")), "rank");
    assert!(as_f64(get(&hits[0], "score")) >= as_f64(get(&hits[1], "score")));
    let capped = recall(
        &mut con,
        question,
        &["USER", &user, "MODE", "rank", "THRESHOLD", "0.1"],
    );
    assert!(capped.is_empty(), "{:?}", texts(&capped));
    // Hostile questions: stopwords, punctuation, 10 KB, time nonsense — ranked, never an error.
    let long = "what about the hospital shifts ".repeat(330);
    for q_ in [
        "the of and is",
        "?!.,;",
        &long,
        "3000 years ago",
        "last Smarch",
    ] {
        let hits = recall(&mut con, q_, &["USER", &user, "MODE", "rank", "K", "3"]);
        assert_eq!(hits.len(), 3, "{}", &q_[..q_.len().min(40)]);
    }
}

/// `AT unix-seconds`: the question's own time for time phrases and recency (replayed
/// conversations, benchmarks). With the time weight on (1.0, so it shows), "yesterday" relative to AT lifts the
/// memory written the day before AT over a nearer one written a month earlier; out of range is
/// a one-line error that writes nothing.
#[test]
fn at_sets_the_time_a_question_is_asked() {
    let s = shared();
    let timed = Proxy::start(&s.redis.url(), |c| {
        c.recall_time_weight = 1.0;
        c.recall_relative_cutoff = 0.0;
    });
    let mut con = timed.client();
    let user = unique("at");
    let at = 1_710_504_000.0_f64; // 2024-03-15T12:00:00Z
    remember(
        &mut con,
        "We talked about the garden and planted tomatoes.",
        &[
            "USER",
            &user,
            "CREATED",
            &(at - 30.0 * 86_400.0).to_string(),
        ],
    );
    remember(
        &mut con,
        "We talked about the garden fence that needs painting.",
        &["USER", &user, "CREATED", &(at - 86_400.0).to_string()],
    );
    let question = "What did we say about planting tomatoes in the garden yesterday?";
    let opts = |at: &str| -> Vec<String> {
        ["USER", &user, "MODE", "rank", "AT", at]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let first = |con: &mut redis::Connection, at: &str| {
        let o = opts(at);
        let o: Vec<&str> = o.iter().map(String::as_str).collect();
        texts(&recall(con, question, &o))[0].clone()
    };
    assert!(first(&mut con, &at.to_string()).contains("fence"));
    // A month later "yesterday" points at neither: similarity decides.
    assert!(first(&mut con, &(at + 40.0 * 86_400.0).to_string()).contains("tomatoes"));
    for bad in ["-1", "abc", "1e300", "nan"] {
        let e = err(
            &mut con,
            &["MEM.RECALL", question, "USER", &user, "AT", bad],
        );
        assert!(
            e.starts_with("ERR MEM.RECALL: AT") && !e.contains('\n'),
            "{bad}: {e}"
        );
    }
}

/// `recall_diversity`: at most one hit per source thread until every thread has one — a
/// conversation's many near-identical turns do not crowd out another conversation.
#[test]
fn diversity_takes_one_hit_per_thread_first() {
    let s = shared();
    let diverse = Proxy::start(&s.redis.url(), |c| {
        c.recall_diversity = true;
        c.recall_relative_cutoff = 0.0;
    });
    let mut con = diverse.client();
    let user = unique("div");
    for (thread, t) in [
        ("trip", "I booked the flights to Japan for April."),
        ("trip", "The Japan flights leave from Heathrow in April."),
        ("trip", "I paid for the April flights to Japan."),
        ("hotel", "Our hotel in Kyoto is near the station."),
    ] {
        remember(&mut con, t, &["USER", &user, "THREAD", thread, "NODEDUP"]);
    }
    let question = "When are my flights to Japan?";
    let threads = |con: &mut redis::Connection| -> Vec<String> {
        recall(con, question, &["USER", &user, "MODE", "rank", "K", "2"])
            .iter()
            .map(|h| as_str(get(h, "source_thread")))
            .collect()
    };
    assert_eq!(threads(&mut con), ["trip", "hotel"]);
    let plain = Proxy::start(&s.redis.url(), |c| c.recall_diversity = false);
    assert_eq!(threads(&mut plain.client()), ["trip", "trip"]);
}

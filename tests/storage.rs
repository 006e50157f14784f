//! The two storage layouts (issue 38): every verb through the same test code against a memproxy
//! that made its index in the guide's layout (JSON, FLOAT32) and one that made it compact (HASH,
//! FLOAT16), each on a Redis of its own; what the layouts return is compared with each other.

mod common;

use std::sync::OnceLock;

use common::*;
use memproxy::config::Storage;
use redis::Value;

/// One layout's Redis and memproxy (HTTP on, for the routes and MCP).
struct Side {
    storage: Storage,
    redis: Redis,
    proxy: Proxy,
    http: String,
}

fn sides() -> &'static [Side; 2] {
    static SIDES: OnceLock<[Side; 2]> = OnceLock::new();
    SIDES.get_or_init(|| {
        [Storage::Guide, Storage::Compact].map(|storage| {
            let redis = Redis::start(&[]);
            let port = free_port();
            let proxy = Proxy::start(&redis.url(), |c| {
                c.storage = storage;
                c.http_listen = Some(format!("127.0.0.1:{port}"));
                c.max_text_bytes = 256 * 1024;
            });
            let http = format!("http://127.0.0.1:{port}");
            eventually("the HTTP listener", || {
                common::http(&http, "GET", "/healthz", "").0 == 200
            });
            Side {
                storage,
                redis,
                proxy,
                http,
            }
        })
    })
}

fn texts(v: &Value) -> Vec<String> {
    items(v).iter().map(|h| as_str(get(h, "text"))).collect()
}

/// The keys of memory `id` as Redis holds them: the memory, and in the compact layout its
/// windows (`<key>#w<n>`).
fn keys_of(side: &Side, id: &str) -> Vec<String> {
    let mut d = direct(&side.redis);
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("agent:mem:{id}*"))
        .query(&mut d)
        .unwrap();
    keys.sort();
    keys
}

#[test]
fn each_layout_is_made_as_set_and_reported() {
    for side in sides() {
        let mut con = side.proxy.client();
        let info = q(&mut con, &["MEM.INFO"]);
        let name = side.storage.name();
        assert_eq!(as_str(get(&info, "storage")), name);
        let mut d = direct(&side.redis);
        let ft: Value = redis::cmd("FT.INFO")
            .arg("agentmem:idx")
            .query(&mut d)
            .unwrap();
        let def = format!("{ft:?}");
        let key_type = if side.storage == Storage::Compact {
            "HASH"
        } else {
            "JSON"
        };
        assert!(def.contains(key_type), "{name}: {def}");
        if side.storage == Storage::Compact {
            assert!(def.contains("FLOAT16"), "{def}");
        }
        let (code, body) = common::http(&side.http, "GET", "/readyz", "");
        assert_eq!(code, 200, "{body}");
        assert!(body.contains(&format!("storage {name}")), "{body}");
    }
}

#[test]
fn remember_recall_list_forget_agree_across_layouts() {
    let facts = [
        "The user prefers green tea in the morning.",
        "The user's daughter Mia plays the cello.",
        "The user is allergic to peanuts.",
        "The user drives a 2014 blue Volvo estate.",
        "The user works night shifts at the harbour.",
    ];
    let mut seen: Vec<Vec<Vec<String>>> = Vec::new();
    for side in sides() {
        let name = side.storage.name();
        let mut con = side.proxy.client();
        let user = unique("agree");
        for f in facts {
            let r = q(
                &mut con,
                &["MEM.REMEMBER", f, "USER", &user, "KIND", "semantic"],
            );
            assert_eq!(as_i64(get(&r, "deduped")), 0, "{name}");
        }
        // Dedup: a near-copy bumps the first.
        let r = q(
            &mut con,
            &[
                "MEM.REMEMBER",
                "The user prefers green tea in the morning!",
                "USER",
                &user,
                "KIND",
                "semantic",
            ],
        );
        assert_eq!(as_i64(get(&r, "deduped")), 1, "{name}: {r:?}");
        let tea = as_str(get(&r, "id"));
        let mut per_mode = Vec::new();
        for mode in ["auto", "rank", "vector", "keyword", "hybrid"] {
            let hits = q(
                &mut con,
                &[
                    "MEM.RECALL",
                    "What instrument does Mia play?",
                    "USER",
                    &user,
                    "MODE",
                    mode,
                    "K",
                    "3",
                    "THRESHOLD",
                    "0.9",
                ],
            );
            let t = texts(&hits);
            assert!(
                t.first().is_some_and(|x| x.contains("cello")),
                "{name} {mode}: {t:?}"
            );
            per_mode.push(t);
        }
        let listed = q(&mut con, &["MEM.LIST", "USER", &user]);
        assert_eq!(items(&listed).len(), 5, "{name}");
        let tea_hit = items(&listed)
            .iter()
            .find(|h| as_str(get(h, "id")) == tea)
            .unwrap_or_else(|| panic!("{name}: the deduped memory is listed"));
        assert_eq!(as_i64(get(tea_hit, "hit_count")), 1, "{name}");
        assert_eq!(as_i64(&q(&mut con, &["MEM.FORGET", &tea])), 1, "{name}");
        assert_eq!(items(&q(&mut con, &["MEM.LIST", "USER", &user])).len(), 4);
        assert_eq!(
            as_i64(&q(&mut con, &["MEM.FORGET", "USER", &user])),
            4,
            "{name}"
        );
        assert!(items(&q(&mut con, &["MEM.LIST", "USER", &user])).is_empty());
        seen.push(per_mode);
    }
    assert_eq!(seen[0], seen[1], "the layouts rank alike");
}

#[test]
fn recall_distances_agree_within_two_thousandths() {
    let seeds = tsv("redis-docs-seed-memories.tsv");
    let probes = tsv("seed-demo-probes.tsv");
    let mut answers: Vec<Vec<Vec<(String, f64)>>> = Vec::new();
    for side in sides() {
        let mut con = side.proxy.client();
        let user = unique("dist");
        for s in &seeds {
            q(
                &mut con,
                &["MEM.REMEMBER", &s[1], "USER", &user, "KIND", &s[0]],
            );
        }
        let mut per_probe = Vec::new();
        for p in probes.iter().filter(|p| !p[0].starts_with('#')) {
            let hits = q(
                &mut con,
                &[
                    "MEM.RECALL",
                    &p[0],
                    "USER",
                    &user,
                    "MODE",
                    "vector",
                    "K",
                    "3",
                    "THRESHOLD",
                    "2",
                ],
            );
            per_probe.push(
                items(&hits)
                    .iter()
                    .map(|h| (as_str(get(h, "text")), as_f64(get(h, "distance"))))
                    .collect(),
            );
        }
        answers.push(per_probe);
    }
    assert!(!answers[0].is_empty());
    for (g, c) in answers[0].iter().zip(&answers[1]) {
        let gt: Vec<&String> = g.iter().map(|(t, _)| t).collect();
        let ct: Vec<&String> = c.iter().map(|(t, _)| t).collect();
        assert_eq!(gt, ct, "top 3 differ");
        for ((_, a), (_, b)) in g.iter().zip(c) {
            assert!(
                (a - b).abs() <= 0.002,
                "distance {a} (guide) vs {b} (compact)"
            );
        }
    }
}

#[test]
fn a_long_text_is_found_by_any_part_and_leaves_nothing_when_forgotten() {
    let filler: String = (0..30)
        .map(|i| format!("Line {i} of the inventory lists crates of assorted hardware and paint. "))
        .collect();
    let long = format!("{filler}The spare key to the boathouse hangs behind the red fuse box.");
    for side in sides() {
        let name = side.storage.name();
        let mut con = side.proxy.client();
        let user = unique("long");
        let r = q(
            &mut con,
            &["MEM.REMEMBER", &long, "USER", &user, "KIND", "semantic"],
        );
        let id = as_str(get(&r, "id"));
        let hits = q(
            &mut con,
            &["MEM.RECALL", "Where is the boathouse key?", "USER", &user],
        );
        assert_eq!(texts(&hits), vec![long.clone()], "{name}");
        assert!(as_f64(get(&items(&hits)[0], "distance")) < 0.5, "{name}");
        let stored = keys_of(side, &id).len();
        if side.storage == Storage::Compact {
            assert!(stored > 1, "windows are hashes of their own");
            // A window is part of its memory: its own key is not a memory id.
            let window = format!("{id}#w1");
            assert_eq!(as_i64(&q(&mut con, &["MEM.FORGET", &window])), 0);
            assert_eq!(keys_of(side, &id).len(), stored);
        } else {
            assert_eq!(stored, 1);
        }
        assert_eq!(
            items(&q(&mut con, &["MEM.LIST", "USER", &user])).len(),
            1,
            "{name}"
        );
        assert_eq!(as_i64(&q(&mut con, &["MEM.FORGET", &id])), 1);
        assert!(
            keys_of(side, &id).is_empty(),
            "{name}: windows deleted with the memory"
        );
        // A whole scope too, counting memories only.
        let r = q(
            &mut con,
            &["MEM.REMEMBER", &long, "USER", &user, "KIND", "semantic"],
        );
        let id = as_str(get(&r, "id"));
        assert_eq!(keys_of(side, &id).len(), stored);
        q(&mut con, &["MEM.REMEMBER", "A short one.", "USER", &user]);
        assert_eq!(
            as_i64(&q(&mut con, &["MEM.FORGET", "USER", &user])),
            2,
            "{name}"
        );
        assert!(keys_of(side, &id).is_empty(), "{name}");
    }
}

#[test]
fn turn_session_events_and_consolidate_in_both_layouts() {
    for side in sides() {
        let name = side.storage.name();
        let mut con = side.proxy.client();
        let user = unique("turn");
        let t = unique("thread");
        q(
            &mut con,
            &[
                "MEM.TURN",
                &t,
                "user",
                "I just adopted a grey cat named Miso.",
                "USER",
                &user,
            ],
        );
        let r = q(
            &mut con,
            &[
                "MEM.TURN",
                &t,
                "user",
                "What is my cat called?",
                "USER",
                &user,
            ],
        );
        assert_eq!(as_i64(get(&r, "turn_count")), 2, "{name}");
        assert!(
            texts(get(&r, "recalled"))
                .iter()
                .any(|x| x.contains("Miso")),
            "{name}: {r:?}"
        );
        let s = q(&mut con, &["MEM.SESSION", "GET", &t, "USER", &user]);
        assert_eq!(as_i64(get(&s, "turn_count")), 2, "{name}");
        let ev = q(&mut con, &["MEM.EVENTS", &t, "USER", &user]);
        assert_eq!(items(&ev).len(), 2, "{name}");
        // Near-duplicates written without dedup, merged by MEM.CONSOLIDATE.
        for text in [
            "The user's cat is called Miso.",
            "The user's cat is named Miso.",
        ] {
            q(
                &mut con,
                &[
                    "MEM.REMEMBER",
                    text,
                    "USER",
                    &user,
                    "NS",
                    "pets",
                    "NODEDUP",
                    "KIND",
                    "semantic",
                ],
            );
        }
        let done = q(&mut con, &["MEM.CONSOLIDATE", "USER", &user, "NS", "pets"]);
        assert_eq!(items(&done).len(), 1, "{name}: {done:?}");
        assert_eq!(items(get(&items(&done)[0], "merged")).len(), 1, "{name}");
        let left = q(&mut con, &["MEM.LIST", "USER", &user, "NS", "pets"]);
        assert_eq!(items(&left).len(), 1, "{name}");
        assert_eq!(as_i64(get(&items(&left)[0], "hit_count")), 0, "{name}");
    }
}

#[test]
fn http_routes_and_export_import_in_both_layouts() {
    for side in sides() {
        let name = side.storage.name();
        let user = unique("web");
        let scope = format!(r#""user":"{user}","namespace":"demo""#);
        let (code, body) = common::http(&side.http, "POST", "/reset", &format!("{{{scope}}}"));
        assert_eq!(code, 200, "{name}: {body}");
        let (code, body) = common::http(
            &side.http,
            "GET",
            &format!("/state?user={user}&namespace=demo"),
            "",
        );
        assert_eq!(code, 200, "{body}");
        let s: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(s["memories"].as_array().unwrap().len(), 8, "{name}");
        // The guide demo's other routes: a turn that dedups onto a seed, a new thread, a memory
        // dropped (and put back by the export below's second reset).
        let (code, body) = common::http(
            &side.http,
            "POST",
            "/turn",
            &format!(
                r#"{{{scope},"text":"I prefer concise answers without filler phrases.","kind":"semantic","role":"user","threshold":"0.55","mode":"vector"}}"#
            ),
        );
        assert_eq!(code, 200, "{name}: {body}");
        let t: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(t["deduped"], true, "{name}: {t}");
        assert!(
            (t["existing_distance"].as_f64().unwrap() - 0.1472).abs() < 0.005,
            "{t}"
        );
        assert_eq!(t["recalled"][0]["retrieval"], "vector");
        let (code, body) = common::http(&side.http, "POST", "/new_thread", &format!("{{{scope}}}"));
        assert_eq!(code, 200, "{name}: {body}");
        let id = s["memories"][0]["id"]
            .as_str()
            .or(s["memories"][0]["memory_id"].as_str())
            .unwrap_or_default()
            .to_string();
        let (code, body) = common::http(
            &side.http,
            "POST",
            "/drop_memory",
            &format!(r#"{{{scope},"memory_id":"{id}"}}"#),
        );
        assert_eq!(code, 200, "{name}: {body}");
        assert!(body.contains(r#""deleted":true"#), "{name}: {body}");
        let (code, body) = common::http(&side.http, "POST", "/reset", &format!("{{{scope}}}"));
        assert_eq!(code, 200, "{name}: {body}");
        // Export from this layout, import into a fresh Redis in the other: the same memories.
        let (ok, out, err) = memproxy(
            &[
                "export",
                "--upstream",
                &side.redis.url(),
                "--user",
                &user,
                "--embeddings",
            ],
            None,
        );
        assert!(ok, "{name}: {err}");
        assert_eq!(out.lines().count(), 8, "{name}");
        let other = Redis::start(&[]);
        let to = if side.storage == Storage::Compact {
            "guide"
        } else {
            "compact"
        };
        let (ok, _, err) = memproxy(
            &[
                "import",
                "--upstream",
                &other.url(),
                "--storage",
                to,
                "--trust-embeddings",
            ],
            Some(&out),
        );
        assert!(ok, "{name} -> {to}: {err}");
        let p = Proxy::start(&other.url(), |_| {});
        let mut con = p.client();
        assert_eq!(as_str(get(&q(&mut con, &["MEM.INFO"]), "storage")), to);
        let listed = q(&mut con, &["MEM.LIST", "USER", &user, "NS", "demo"]);
        assert_eq!(items(&listed).len(), 8, "{name} -> {to}");
    }
}

#[test]
fn an_existing_index_keeps_its_own_layout() {
    // The compact side's Redis, reached by a memproxy set to the guide's layout.
    let compact = &sides()[1];
    let p = Proxy::start(&compact.redis.url(), |c| c.storage = Storage::Guide);
    let mut con = p.client();
    let user = unique("keep");
    q(
        &mut con,
        &[
            "MEM.REMEMBER",
            "The user collects vintage fountain pens.",
            "USER",
            &user,
        ],
    );
    assert_eq!(
        as_str(get(&q(&mut con, &["MEM.INFO"]), "storage")),
        "compact"
    );
    let hits = q(
        &mut con,
        &["MEM.RECALL", "fountain pens", "USER", &user, "MODE", "rank"],
    );
    assert_eq!(items(&hits).len(), 1);
    let mut d = direct(&compact.redis);
    let key = format!("agent:mem:{}", as_str(get(&items(&hits)[0], "id")));
    let t: String = redis::cmd("TYPE").arg(&key).query(&mut d).unwrap();
    assert_eq!(t, "hash");
}

#[test]
fn compact_recall_skips_what_it_cannot_read() {
    let side = &sides()[1];
    let mut con = side.proxy.client();
    let mut d = direct(&side.redis);
    let user = unique("bad");
    q(
        &mut con,
        &[
            "MEM.REMEMBER",
            "The user plays chess on Sundays.",
            "USER",
            &user,
        ],
    );
    let before = as_i64(get(&q(&mut con, &["MEM.INFO"]), "indexing_failures"));
    // Another program's JSON document under the prefix, a hash with a vector of the wrong size,
    // and a memory whose number was edited by hand.
    let _: () = redis::cmd("JSON.SET")
        .arg(format!("agent:mem:{user}-json"))
        .arg("$")
        .arg(format!(
            r#"{{"user":"{user}","namespace":"default","kind":"episodic","text":"chess json"}}"#
        ))
        .query(&mut d)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("agent:mem:{user}-short"))
        .arg("user")
        .arg(&user)
        .arg("namespace")
        .arg("default")
        .arg("kind")
        .arg("episodic")
        .arg("text")
        .arg("chess short vector")
        .arg("embedding")
        .arg(vec![0u8; 10])
        .query(&mut d)
        .unwrap();
    let listed = q(&mut con, &["MEM.LIST", "USER", &user]);
    let id = as_str(get(&items(&listed)[0], "id"));
    let _: () = redis::cmd("HSET")
        .arg(format!("agent:mem:{id}"))
        .arg("created_ts")
        .arg("yesterday")
        .query(&mut d)
        .unwrap();
    for mode in ["auto", "rank", "vector", "keyword", "hybrid"] {
        let hits = q(
            &mut con,
            &["MEM.RECALL", "chess", "USER", &user, "MODE", mode],
        );
        for t in texts(&hits) {
            assert!(!t.contains("json") && !t.contains("short"), "{mode}: {t}");
        }
    }
    assert!(items(&q(&mut con, &["MEM.LIST", "USER", &user])).len() <= 1);
    let after = as_i64(get(&q(&mut con, &["MEM.INFO"]), "indexing_failures"));
    assert!(
        after >= before + 2,
        "MEM.INFO counts what the index skipped: {before} -> {after}"
    );
}

#[test]
fn reembed_rewrites_compact_vectors_and_their_windows() {
    // A Redis of its own: reembed examines every memory of the index.
    let redis = Redis::start(&[]);
    let p = Proxy::start(&redis.url(), |c| c.storage = Storage::Compact);
    let mut con = p.client();
    let filler: String = (0..30)
        .map(|i| format!("Row {i} of the manifest lists pallets of tinned tomatoes. "))
        .collect();
    let long =
        format!("{filler}The harbour master's phone number is taped inside the lighthouse door.");
    let r = q(
        &mut con,
        &["MEM.REMEMBER", &long, "USER", "re", "KIND", "semantic"],
    );
    let id = as_str(get(&r, "id"));
    q(
        &mut con,
        &[
            "MEM.REMEMBER",
            "The user grows chillies on the balcony.",
            "USER",
            "re",
        ],
    );
    // Scramble the stored vectors (another model's, as far as reembed can tell).
    let mut d = direct(&redis);
    let key = format!("agent:mem:{id}");
    let noise: Vec<u8> = random_unit(7)
        .iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect();
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("embedding")
        .arg(&noise)
        .query(&mut d)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("{key}#w1"))
        .arg("windows")
        .arg(&noise)
        .query(&mut d)
        .unwrap();
    drop(p);
    let (ok, _, err) = memproxy(&["reembed", "--upstream", &redis.url()], None);
    assert!(ok, "{err}");
    assert!(err.contains("2 memories examined, 1 re-embedded"), "{err}");
    let p = Proxy::start(&redis.url(), |_| {});
    let mut con = p.client();
    let hits = q(
        &mut con,
        &[
            "MEM.RECALL",
            "Where is the harbour master's number?",
            "USER",
            "re",
        ],
    );
    assert_eq!(texts(&hits), vec![long]);
    let windows: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{key}#w*"))
        .query(&mut d)
        .unwrap();
    assert!(!windows.is_empty());
}

#[test]
fn migrate_converts_between_layouts_and_rolls_back() {
    let filler: String = (0..30)
        .map(|i| format!("Entry {i} of the diary notes the tides and the wind. "))
        .collect();
    let long = format!("{filler}The user's grandmother's ring is in the walnut box.");
    for (from, to) in [
        (Storage::Guide, Storage::Compact),
        (Storage::Compact, Storage::Guide),
    ] {
        let redis = Redis::start(&[]);
        let url = redis.url();
        let p = Proxy::start(&url, |c| c.storage = from);
        let mut con = p.client();
        for t in [
            "The user sings in a choir.",
            "The user's bike is a green Brompton.",
        ] {
            q(
                &mut con,
                &["MEM.REMEMBER", t, "USER", "mig", "KIND", "semantic"],
            );
        }
        q(
            &mut con,
            &[
                "MEM.REMEMBER",
                "The user is in Lisbon this week.",
                "USER",
                "mig",
            ],
        );
        q(
            &mut con,
            &["MEM.REMEMBER", &long, "USER", "mig", "KIND", "semantic"],
        );
        drop(p);
        let prefix = format!("{}:mem:", to.name());
        let run = |extra: &[&str]| {
            let mut args = vec!["migrate", "--upstream", &url, "--storage", to.name()];
            args.extend(["--mem-key-prefix", &prefix]);
            args.extend(extra);
            memproxy(&args, None)
        };
        let (ok, _, err) = run(&[]);
        assert!(ok, "{} -> {}: {err}", from.name(), to.name());
        let p = Proxy::start(&url, |c| {
            c.storage = to;
            c.mem_key_prefix = prefix.clone();
        });
        let mut con = p.client();
        assert_eq!(
            as_str(get(&q(&mut con, &["MEM.INFO"]), "storage")),
            to.name()
        );
        let listed = q(&mut con, &["MEM.LIST", "USER", "mig"]);
        assert_eq!(items(&listed).len(), 4, "{} -> {}", from.name(), to.name());
        let lisbon = items(&listed)
            .iter()
            .find(|h| as_str(get(h, "text")).contains("Lisbon"))
            .unwrap();
        assert!(as_i64(get(lisbon, "ttl")) > 0, "the TTL came along");
        let hits = q(
            &mut con,
            &[
                "MEM.RECALL",
                "Where is my grandmother's ring kept?",
                "USER",
                "mig",
            ],
        );
        assert_eq!(
            texts(&hits),
            vec![long.clone()],
            "{} -> {}",
            from.name(),
            to.name()
        );
        drop(p);
        let (ok, _, err) = run(&["--rollback"]);
        assert!(ok, "rollback: {err}");
        let mut d = direct(&redis);
        let left: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query(&mut d)
            .unwrap();
        assert!(left.is_empty(), "{left:?}");
        let p = Proxy::start(&url, |c| c.storage = from);
        let mut con = p.client();
        assert_eq!(
            as_str(get(&q(&mut con, &["MEM.INFO"]), "storage")),
            from.name()
        );
        assert_eq!(items(&q(&mut con, &["MEM.LIST", "USER", "mig"])).len(), 4);
    }
}

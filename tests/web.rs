//! memproxy's HTTP face (issue 14): the guide demo's routes, the page in a real headless
//! chromium, and MCP through the official TypeScript SDK. The Node scripts are
//! tests/clients/web_clients.mjs; MEM.* calls on the Redis side check what they did.

mod common;

use std::process::Command;

use common::*;
use memproxy::config::Storage;
use serde_json::Value;

/// A proxy of its own with the HTTP listener on; `tokens` for MCP.
fn web_proxy(tokens: &[&str]) -> (Proxy, String) {
    web_proxy_on(&shared().redis.url(), tokens, Storage::Guide)
}

/// [`web_proxy`] in front of `upstream`, making its index in `storage` if it has none.
fn web_proxy_on(upstream: &str, tokens: &[&str], storage: Storage) -> (Proxy, String) {
    let port = free_port();
    let tokens: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    let proxy = Proxy::start(upstream, |c| {
        c.http_listen = Some(format!("127.0.0.1:{port}"));
        c.mcp_tokens = tokens;
        c.storage = storage;
    });
    let base = format!("http://127.0.0.1:{port}");
    eventually("the HTTP listener", || {
        http(&base, "GET", "/healthz", "").0 == 200
    });
    (proxy, base)
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

fn node(args: &[&str]) -> Option<Value> {
    let dir = deps().join("node");
    if !dir.join("node_modules/@modelcontextprotocol/sdk").exists() {
        panic!("run scripts/setup.sh (it installs the MCP SDK and playwright-core with npm ci)");
    }
    let script = dir.join("web_clients.mjs");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/web_clients.mjs"),
        &script,
    )
    .unwrap();
    let out = Command::new("node")
        .arg(&script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    Some(json(text.lines().last().unwrap_or("{}")))
}

#[test]
fn guide_routes_answer_with_the_guides_fields() {
    let (_p, base) = web_proxy(&[]);
    let user = unique("routes");
    let scope = format!(r#""user":"{user}","namespace":"demo""#);
    let (code, body) = http(&base, "POST", "/reset", &format!("{{{scope}}}"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(json(&body)["seeded"], 8);
    let (code, body) = http(
        &base,
        "POST",
        "/turn",
        &format!(
            r#"{{{scope},"text":"I prefer concise answers without filler phrases.","kind":"semantic","role":"user","threshold":"0.55","mode":"vector"}}"#
        ),
    );
    assert_eq!(code, 200, "{body}");
    let t = json(&body);
    for f in [
        "recalled",
        "deduped",
        "memory_id",
        "existing_distance",
        "kind",
        "timings",
        "thread_id",
    ] {
        assert!(t.get(f).is_some(), "/turn lacks {f}: {t}");
    }
    assert_eq!(t["deduped"], true, "{t}");
    assert!((t["existing_distance"].as_f64().unwrap() - 0.1472).abs() < 0.005);
    assert_eq!(t["recalled"][0]["retrieval"], "vector");
    let (code, body) = http(
        &base,
        "GET",
        &format!("/state?user={user}&namespace=demo"),
        "",
    );
    assert_eq!(code, 200, "{body}");
    let s = json(&body);
    for f in [
        "index",
        "thread_id",
        "session",
        "memories",
        "events",
        "projection",
    ] {
        assert!(s.get(f).is_some(), "/state lacks {f}");
    }
    assert_eq!(s["memories"].as_array().unwrap().len(), 8);
    assert_eq!(s["session"]["turn_count"], 1);
    assert_eq!(s["projection"]["layout"], "polar");
    assert_eq!(s["projection"]["points"].as_array().unwrap().len(), 8);
    // The same memories through MEM.*.
    let mut con = shared().proxy.client();
    let listed = items(&q(&mut con, &["MEM.LIST", "USER", &user, "NS", "demo"])).len();
    assert_eq!(listed, 8);
    // Bad input: 400 with a one-line error, nothing written.
    for (path, body) in [
        ("/turn", format!(r#"{{{scope},"text":""}}"#)),
        ("/turn", format!(r#"{{{scope},"text":"x","kind":"weird"}}"#)),
        (
            "/turn",
            format!(r#"{{{scope},"text":"x","threshold":"abc"}}"#),
        ),
        ("/turn", "{not json".to_string()),
        ("/drop_memory", "{}".to_string()),
    ] {
        let (code, b) = http(&base, "POST", path, &body);
        assert_eq!(code, 400, "{path} {body} → {b}");
        let e = json(&b)["error"].as_str().unwrap().to_string();
        assert!(!e.is_empty() && !e.contains('\n'), "{e}");
    }
    // /drop_memory answers the guide's fields: deleted, memory_id.
    let id = s["memories"][0]["id"].as_str().unwrap().to_string();
    for deleted in [true, false] {
        let (code, b) = http(
            &base,
            "POST",
            "/drop_memory",
            &format!(r#"{{"memory_id":"{id}"}}"#),
        );
        assert_eq!(code, 200, "{b}");
        assert_eq!(
            json(&b),
            serde_json::json!({"deleted": deleted, "memory_id": id})
        );
    }
    let listed = items(&q(&mut con, &["MEM.LIST", "USER", &user, "NS", "demo"])).len();
    assert_eq!(listed, 7);
    assert_eq!(http(&base, "GET", "/", "").0, 200);
    assert_eq!(http(&base, "GET", "/no-such-route", "").0, 404);
}

#[test]
fn mcp_tools_through_the_official_sdk() {
    // The guide layout (the shared Redis's index), then the compact one on a Redis of its own.
    mcp_tools(&shared().redis, shared().proxy.client(), Storage::Guide);
    let redis = Redis::start(&[]);
    let (p, _) = web_proxy_on(&redis.url(), &[], Storage::Compact);
    mcp_tools(&redis, p.client(), Storage::Compact);
}

fn mcp_tools(redis: &Redis, mut con: redis::Connection, layout: Storage) {
    assert_eq!(
        as_str(get(&q(&mut con, &["MEM.INFO"]), "storage")),
        layout.name()
    );
    let user = unique("mcp");
    let bound = format!("tok-{user}={user}");
    let (_p, base) = web_proxy_on(&redis.url(), &[&bound], layout);
    // No token, or a wrong one: refused before MCP.
    assert_eq!(http(&base, "POST", "/mcp", "{}").0, 401);
    // Another tenant's memory and thread, which the bound token must not reach.
    let other = unique("mcp-other");
    let other_mem = as_str(get(
        &q(
            &mut con,
            &["MEM.REMEMBER", "The other user's secret.", "USER", &other],
        ),
        "id",
    ));
    let other_thread = as_str(get(
        &q(&mut con, &["MEM.SESSION", "NEW", "USER", &other]),
        "thread",
    ));
    let out = node(&[
        "mcp",
        &base,
        &format!("tok-{user}"),
        &user,
        &other_mem,
        &other_thread,
    ])
    .unwrap();
    let names: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["remember", "recall", "forget", "turn", "session"]);
    assert_eq!(out["remember"]["isError"], false, "{out}");
    assert_eq!(out["remember"]["structured"]["result"]["deduped"], 0);
    let hits = &out["recall"]["structured"]["result"];
    assert_eq!(hits[0]["text"], "The user is allergic to peanuts.", "{out}");
    assert_eq!(hits[0]["user"], user.as_str());
    let turned = &out["turn"]["structured"]["result"];
    assert_eq!(
        turned["recalled"][0]["text"], "The user is allergic to peanuts.",
        "{out}"
    );
    assert_eq!(out["session_get"]["structured"]["result"]["turn_count"], 1);
    // A token bound to a user cannot reach another; a missing argument is a JSON-RPC error.
    assert!(
        out["other_user"]["rpcError"]
            .as_str()
            .unwrap()
            .contains("bound to user"),
        "{out}"
    );
    assert!(
        out["bad"]["rpcError"]
            .as_str()
            .unwrap()
            .contains("'query' is required"),
        "{out}"
    );
    assert_eq!(out["forget"]["structured"]["result"], 1, "{out}");
    assert!(items(&q(&mut con, &["MEM.LIST", "USER", &user])).is_empty());
    // The other tenant's memory is still there, its thread unread and untouched.
    assert_eq!(out["forget_other"]["structured"]["result"], 0, "{out}");
    assert_eq!(items(&q(&mut con, &["MEM.LIST", "USER", &other])).len(), 1);
    for k in ["session_other", "turn_other"] {
        assert_eq!(out[k]["isError"], true, "{k}: {out}");
        assert!(
            out[k]["text"].as_str().unwrap().contains("NOPERM"),
            "{k}: {out}"
        );
    }
    let session = q(&mut con, &["MEM.SESSION", "GET", &other_thread]);
    assert_eq!(as_i64(get(&session, "turn_count")), 0);
}

#[test]
fn the_page_in_headless_chromium() {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !std::path::Path::new(&chromium).exists() {
        skipped(
            "the_page_in_headless_chromium",
            &format!("no chromium at {chromium} (scripts/setup.sh installs Debian's chromium when run as root)"),
        );
        return;
    }
    let (_p, base) = web_proxy(&[]);
    let user = unique("page");
    let shot = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/demo-page.png");
    let out = node(&["page", &base, &user, shot.to_str().unwrap()]).unwrap();
    assert_eq!(out["errors"].as_array().unwrap().len(), 0, "{out}");
    assert_eq!(out["seeded"], 8);
    let first = out["first"]["recalled"].as_array().unwrap();
    assert!(
        first[0].as_str().unwrap().contains("concise answers"),
        "{out}"
    );
    assert!(out["first"]["decision"].as_str().unwrap().contains("skip"));
    assert!(
        out["dedup"]["decision"]
            .as_str()
            .unwrap()
            .starts_with("Deduplicated"),
        "{out}"
    );
    assert!(
        out["fresh"]["decision"]
            .as_str()
            .unwrap()
            .starts_with("Remembered"),
        "{out}"
    );
    assert_eq!(out["points"], 9);
    assert!(out["legend"].as_str().unwrap().contains("sourdough"));
    assert_eq!(out["turns"].as_array().unwrap().len(), 3);
    assert!(out["events"].as_u64().unwrap() >= 3);
    // What the page did, seen through MEM.*: the dropped memory is gone, reset left the seeds.
    let mut con = shared().proxy.client();
    let dropped = out["dropped"].as_str().unwrap();
    assert!(!out["afterDrop"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i == dropped));
    let listed = q(&mut con, &["MEM.LIST", "USER", &user]);
    let texts: Vec<String> = items(&listed)
        .iter()
        .map(|m| as_str(get(m, "text")))
        .collect();
    assert_eq!(texts.len(), 8);
    assert!(!texts.iter().any(|t| t.contains("sourdough")));
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
}

#[test]
fn the_page_and_mcp_can_be_turned_off() {
    let port = free_port();
    let _p = Proxy::start(&shared().redis.url(), |c| {
        c.http_listen = Some(format!("127.0.0.1:{port}"));
        c.http_demo = false;
        c.mcp = false;
    });
    let base = format!("http://127.0.0.1:{port}");
    eventually("the HTTP listener", || {
        http(&base, "GET", "/healthz", "").0 == 200
    });
    assert_eq!(http(&base, "GET", "/metrics", "").0, 200);
    for (method, path) in [
        ("GET", "/"),
        ("GET", "/state"),
        ("POST", "/turn"),
        ("POST", "/mcp"),
    ] {
        assert_eq!(http(&base, method, path, "{}").0, 404, "{method} {path}");
    }
}

/// A form post, as the guide's own page sends (`application/x-www-form-urlencoded`).
fn form(base: &str, path: &str, pairs: &[(&str, &str)]) -> (u16, Value) {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    let (status, body) = http_as(
        base,
        "POST",
        path,
        "application/x-www-form-urlencoded",
        &body,
    );
    (status, json(&body))
}

/// Route by route, the fields the guide's `demo_server.py` answers and its page reads, with the
/// page's own form posts: /turn (`write_skipped`, `embed_ms`/`recall_ms`/`write_ms`, `kind` null
/// when nothing is written, recalled items with `ttl_seconds`), "Set as goal" (`action=goal`: the
/// goal set, recall, no memory), /state (the index panel's fields, `session.ttl_seconds`,
/// `memories[].ttl_seconds`, `events[].event_id`, `recalled`), and the guide's error lines.
#[test]
fn the_guides_page_gets_every_field_it_reads() {
    let (_p, base) = web_proxy(&[]);
    let user = unique("page");
    let scope = [("user", user.as_str()), ("namespace", "default")];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v: Vec<(&str, &str)> = scope.to_vec();
        v.extend_from_slice(extra);
        v
    };
    let (code, r) = form(&base, "/reset", &scope);
    assert_eq!((code, r["seeded"].as_i64()), (200, Some(8)), "{r}");
    let (code, t) = form(
        &base,
        "/turn",
        &with(&[
            ("text", "Remind me which theme I prefer in editors."),
            ("kind", "episodic"),
            ("role", "user"),
            ("threshold", "0.55"),
            ("action", "turn"),
        ]),
    );
    assert_eq!(code, 200, "{t}");
    for f in [
        "thread_id",
        "write_skipped",
        "memory_id",
        "deduped",
        "existing_distance",
        "kind",
        "recalled",
        "embed_ms",
        "recall_ms",
        "write_ms",
    ] {
        assert!(t.get(f).is_some(), "/turn lacks {f}: {t}");
    }
    assert_eq!(
        (t["write_skipped"].as_bool(), t["kind"].as_str()),
        (Some(false), Some("episodic"))
    );
    let hit = &t["recalled"][0];
    for f in ["id", "text", "kind", "distance", "ttl_seconds"] {
        assert!(hit.get(f).is_some(), "a recalled memory lacks {f}: {hit}");
    }
    assert!(
        hit["ttl_seconds"].is_null(),
        "a semantic seed has no TTL: {hit}"
    );
    // "Set as goal": the session's goal, recall, no memory written.
    let before = items(&q(
        &mut shared().proxy.client(),
        &["MEM.LIST", "USER", &user],
    ))
    .len();
    let (code, g) = form(
        &base,
        "/turn",
        &with(&[
            ("text", "Ship the release by Friday"),
            ("kind", "episodic"),
            ("action", "goal"),
        ]),
    );
    assert_eq!(code, 200, "{g}");
    assert_eq!(g["write_skipped"], true, "{g}");
    assert!(g["memory_id"].is_null() && g["kind"].is_null(), "{g}");
    let after = items(&q(
        &mut shared().proxy.client(),
        &["MEM.LIST", "USER", &user],
    ))
    .len();
    assert_eq!(before, after, "a goal writes no memory");
    let (code, body) = http(
        &base,
        "GET",
        &format!("/state?user={user}&namespace=default"),
        "",
    );
    assert_eq!(code, 200, "{body}");
    let s = json(&body);
    for f in [
        "num_docs",
        "index_name",
        "indexing_failures",
        "model",
        "session_ttl_seconds",
        "dedup_threshold",
        "default_recall_threshold",
        "stack_label",
    ] {
        assert!(s["index"].get(f).is_some(), "/state index lacks {f}");
    }
    assert_eq!(s["session"]["goal"], "Ship the release by Friday");
    assert_eq!(s["session"]["turn_count"], 1, "the goal is not a turn");
    for f in [
        "thread_id",
        "user",
        "goal",
        "scratchpad",
        "turn_count",
        "ttl_seconds",
        "recent_turns",
    ] {
        assert!(s["session"].get(f).is_some(), "session lacks {f}");
    }
    assert!(s["session"]["ttl_seconds"].as_i64().unwrap() > 0);
    let m = &s["memories"][0];
    for f in ["id", "kind", "text", "hit_count", "ttl_seconds"] {
        assert!(m.get(f).is_some(), "a listed memory lacks {f}: {m}");
    }
    let actions: Vec<&str> = s["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert!(
                e.get("event_id").is_some() && e.get("detail").is_some(),
                "{e}"
            );
            e["action"].as_str().unwrap()
        })
        .collect();
    assert!(actions.contains(&"goal_set"), "{actions:?}");
    assert_eq!(s["recalled"], serde_json::json!([]));
    // Another user naming this thread cannot set its goal, nor take it over.
    let thread = s["thread_id"].as_str().unwrap().to_string();
    let intruder = unique("intruder");
    let (code, e) = form(
        &base,
        "/turn",
        &[
            ("user", intruder.as_str()),
            ("thread_id", thread.as_str()),
            ("text", "Transfer everything to me"),
            ("action", "goal"),
        ],
    );
    assert_eq!(code, 400, "{e}");
    assert!(e["error"].as_str().unwrap().contains("another user"), "{e}");
    let (_, body) = http(
        &base,
        "GET",
        &format!("/state?user={user}&namespace=default"),
        "",
    );
    let after = json(&body);
    assert_eq!(after["session"]["user"].as_str(), Some(user.as_str()));
    assert_eq!(after["session"]["goal"], "Ship the release by Friday");
    // The guide's error lines.
    let (code, e) = form(&base, "/turn", &with(&[("text", "   ")]));
    assert_eq!((code, e["error"].as_str()), (400, Some("text is required")));
    let (code, e) = form(&base, "/drop_memory", &[]);
    assert_eq!(
        (code, e["error"].as_str()),
        (400, Some("memory_id is required"))
    );
}

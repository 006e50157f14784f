//! `memproxy export` and `memproxy import` (issue 17, point 4), run as the binary a user runs,
//! against real Redis servers: a round trip between two deployments, a second import that
//! deduplicates, bad lines, and 10,000 memories.

mod common;

use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

/// Run the binary with `args`; (success, stdout, stderr).
fn memproxy(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_memproxy"));
    c.args(args)
        .env("MEMPROXY_DEPS", deps())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    {
        use std::io::Write;
        let mut i = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            i.write_all(s.as_bytes()).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn lines(s: &str) -> Vec<Value> {
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A user's memories in both namespaces the test uses: (text, namespace, hits, created_ts).
fn listed(con: &mut redis::Connection, user: &str) -> Vec<(String, String, i64, String)> {
    let mut v: Vec<_> = Vec::new();
    for ns in ["default", "work"] {
        let page = q(
            con,
            &["MEM.LIST", "USER", user, "NS", ns, "LIMIT", "0", "100"],
        );
        v.extend(items(&page).iter().map(|m| {
            (
                as_str(get(m, "text")),
                as_str(get(m, "namespace")),
                as_i64(get(m, "hit_count")),
                as_str(get(m, "created_ts")),
            )
        }));
    }
    v.sort();
    v
}

#[test]
fn a_users_memories_move_between_deployments() {
    let s = shared();
    let mut con = s.proxy.client();
    let user = unique("export");
    let other = unique("export-other");
    for (text, opts) in [
        ("The user is allergic to peanuts.", vec!["KIND", "semantic"]),
        (
            "The user prefers tea.",
            vec!["NS", "work", "KIND", "semantic"],
        ),
        (
            "We talked about the Q3 roadmap.",
            vec!["KIND", "episodic", "TTL", "5000"],
        ),
    ] {
        let mut a = vec!["MEM.REMEMBER", text, "USER", &user];
        a.extend(opts);
        q(&mut con, &a);
    }
    // A reinforced memory (hit count 1) and another user's memory that must not leave.
    q(
        &mut con,
        &[
            "MEM.REMEMBER",
            "The user is allergic to peanuts.",
            "USER",
            &user,
            "KIND",
            "semantic",
        ],
    );
    q(
        &mut con,
        &["MEM.REMEMBER", "The other user's secret.", "USER", &other],
    );

    let url = s.redis.url();
    let (ok, out, err) = memproxy(
        &[
            "export",
            "--upstream",
            &url,
            "--user",
            &user,
            "--embeddings",
        ],
        None,
    );
    assert!(ok, "{err}");
    let exported = lines(&out);
    assert_eq!(exported.len(), 3, "{out}");
    assert!(exported.iter().all(|l| l["user"] == user.as_str()));
    let peanuts = exported
        .iter()
        .find(|l| l["text"] == "The user is allergic to peanuts.")
        .unwrap();
    assert_eq!(peanuts["hit_count"], 1);
    assert_eq!(peanuts["ttl"], -1);
    assert_eq!(peanuts["embedding"].as_array().unwrap().len(), 384);
    let episode = exported.iter().find(|l| l["kind"] == "episodic").unwrap();
    let ttl = episode["ttl"].as_i64().unwrap();
    assert!((4900..=5000).contains(&ttl), "{ttl}");
    let (_, only_work, _) = memproxy(
        &[
            "export",
            "--upstream",
            &url,
            "--user",
            &user,
            "--ns",
            "work",
        ],
        None,
    );
    assert_eq!(lines(&only_work).len(), 1);
    assert!(lines(&only_work)[0].get("embedding").is_none());

    // Into another Redis.
    let target = Redis::start(&[]);
    let (ok, _, err) = memproxy(&["import", "--upstream", &target.url()], Some(&out));
    assert!(ok, "{err}");
    assert!(err.contains("3 written, 0 deduplicated"), "{err}");
    let proxy = Proxy::start(&target.url(), |_| {});
    let mut t = proxy.client();
    let want = listed(&mut con, &user);
    assert_eq!(
        listed(&mut t, &user),
        want,
        "texts, namespaces, hit counts and timestamps"
    );
    let ep = items(&q(&mut t, &["MEM.LIST", "USER", &user, "KIND", "episodic"])).to_vec();
    assert!(as_i64(get(&ep[0], "ttl")) > 4800);
    assert!(items(&q(&mut t, &["MEM.LIST", "USER", &other])).is_empty());

    // Again: every line deduplicates onto its copy, adding its hit count (and the dedup's 1).
    let (ok, _, err) = memproxy(&["import", "--upstream", &target.url()], Some(&out));
    assert!(ok, "{err}");
    assert!(err.contains("0 written, 3 deduplicated"), "{err}");
    let again = listed(&mut t, &user);
    assert_eq!(again.len(), 3);
    for ((text, _, hits, _), (_, _, before, _)) in again.iter().zip(&want) {
        assert_eq!(*hits, 2 * before + 1, "{text}");
    }

    // Bad lines: each named by its number; the good one is imported anyway.
    let bad = format!(
        "not json\n{{\"user\":\"{user}\"}}\n{{\"text\":\"The user rows on Sundays.\",\"user\":\"{user}\",\"kind\":\"weird\"}}\n{{\"text\":\"The user rows on Sundays.\",\"user\":\"{user}\"}}\n"
    );
    let (ok, _, err) = memproxy(&["import", "--upstream", &target.url()], Some(&bad));
    assert!(!ok);
    for n in [
        "line 1: not JSON",
        "line 2: no \"text\"",
        "line 3: ERR MEM.REMEMBER",
    ] {
        assert!(err.contains(n), "{n}: {err}");
    }
    assert!(
        err.contains("1 written, 0 deduplicated onto existing memories, 3 failed"),
        "{err}"
    );
}

#[test]
fn ten_thousand_memories_export() {
    let s = shared();
    let mut con = s.proxy.client();
    let mut d = direct(&s.redis);
    q(&mut con, &["MEM.INFO"]);
    let user = unique("export-10k");
    for chunk in (0..10_000u64).collect::<Vec<_>>().chunks(500) {
        let mut p = redis::pipe();
        for &i in chunk {
            p.add_command(plant_cmd(
                &format!("{user}-{i}"),
                &user,
                "default",
                "semantic",
                &random_unit(i),
                i as f64,
                0,
            ));
        }
        let _: () = p.query(&mut d).unwrap();
    }
    wait_indexed(&mut d);
    let (ok, out, err) = memproxy(
        &["export", "--upstream", &s.redis.url(), "--user", &user],
        None,
    );
    assert!(ok, "{err}");
    let exported = lines(&out);
    assert_eq!(exported.len(), 10_000);
    let mut ids: Vec<&str> = exported.iter().map(|l| l["id"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 10_000, "every memory once");
}

//! `memproxy export` and `memproxy import` (issue 17, point 4), run as the binary a user runs,
//! against real Redis servers: a round trip between two deployments, a second import that
//! deduplicates, bad lines, and 10,000 memories.

mod common;

use common::*;
use serde_json::Value;

/// `memproxy export --user user --embeddings` from the Redis at `url`.
fn export_with_embeddings(url: &str, user: &str) -> (bool, String, String) {
    let args = ["export", "--upstream", url, "--user", user, "--embeddings"];
    memproxy(&args, None)
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
    let (ok, out, err) = export_with_embeddings(&url, &user);
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
    // Each line's time and hit count went in with its memory (one JSON.SET a line, in the
    // remember script): an import stopped between lines leaves no memory half restored.
    assert_eq!(command_calls(&mut direct(&target), "json.set"), 3);
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

/// `import --trust-embeddings`: an export's own vectors are used instead of the model, after the
/// first lines were checked against it; a file whose vectors are not the model's is caught on
/// its first line and re-embedded; another model's lines are never used.
#[test]
fn import_trusts_only_embeddings_the_model_confirms() {
    let s = shared();
    let mut con = s.proxy.client();
    let user = unique("trust");
    // The evaluation set's facts, one user; the ones written (default dedup) are pairwise
    // farther apart than the dedup distance, so every exported line imports as written.
    let facts = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/data/recall-eval.tsv"),
    )
    .unwrap();
    for text in facts
        .lines()
        .filter_map(|l| l.strip_prefix("fact\t"))
        .map(|l| l.rsplit('\t').next().unwrap())
    {
        q(
            &mut con,
            &["MEM.REMEMBER", text, "USER", &user, "KIND", "semantic"],
        );
    }
    let (ok, out, err) = export_with_embeddings(&s.redis.url(), &user);
    assert!(ok, "{err}");
    let exported = lines(&out);
    let n = exported.len();
    assert!(n > 40 && n < 64, "{n} memories");
    // Every memory of `target` is found by its own text at distance ~0: its vector is the
    // model's for that text.
    let faithful = |target: &Redis| {
        let proxy = Proxy::start(&target.url(), |_| {});
        let mut t = proxy.client();
        for l in &exported {
            let text = l["text"].as_str().unwrap();
            let top = q(
                &mut t,
                &[
                    "MEM.RECALL",
                    text,
                    "USER",
                    &user,
                    "MODE",
                    "vector",
                    "THRESHOLD",
                    "2",
                    "K",
                    "1",
                ],
            );
            let top = &items(&top)[0];
            assert_eq!(as_str(get(top, "text")), text);
            assert!(as_f64(get(top, "distance")) < 1e-4, "{text}");
        }
    };

    // Import `file` with --trust-embeddings into an empty Redis: every line written, every vector
    // the model's, and `report` in what it printed.
    let import = |file: &str, report: &str| {
        let target = Redis::start(&[]);
        let args = ["import", "--upstream", &target.url(), "--trust-embeddings"];
        let (ok, _, err) = memproxy(&args, Some(file));
        assert!(ok, "{err}");
        assert!(
            err.contains(&format!("{n} written, 0 deduplicated")),
            "{err}"
        );
        assert!(err.contains(report), "{err}");
        faithful(&target);
        err
    };
    import(
        &out,
        &format!(
            "{} embeddings used from the file, 16 compared with the model",
            n - 16
        ),
    );

    // A bad line with a usable vector first: reported, not compared, and the trust goes on.
    let mut bad = exported[0].clone();
    bad["text"] = "".into();
    let target = Redis::start(&[]);
    let args = ["import", "--upstream", &target.url(), "--trust-embeddings"];
    let (ok, _, err) = memproxy(&args, Some(&format!("{bad}\n{out}")));
    assert!(!ok && err.contains("line 1: no \"text\""), "{err}");
    assert!(
        err.contains(&format!(
            "{} embeddings used from the file, 15 compared with the model",
            n - 15
        )),
        "{err}"
    );

    // The first two lines' vectors swapped: still unit vectors of the right size and model
    // name, but not the model's for their texts.
    let mut swapped = exported.clone();
    let first = swapped[0]["embedding"].clone();
    swapped[0]["embedding"] = swapped[1]["embedding"].clone();
    swapped[1]["embedding"] = first;
    let file: String = swapped.iter().map(|l| format!("{l}\n")).collect();
    let err = import(
        &file,
        "0 embeddings used from the file, 1 compared with the model",
    );
    assert!(
        err.contains("line 1: the file's embedding differs"),
        "{err}"
    );

    // Another model's lines are embedded by this one, read ahead so that the model batches
    // them (one at a time, each line would be a run of its own).
    let other: String = exported
        .iter()
        .map(|l| {
            let mut l = l.clone();
            l["model"] = "all-mpnet-base-v2".into();
            format!("{l}\n")
        })
        .collect();
    let err = import(
        &other,
        "0 embeddings used from the file, 0 compared with the model",
    );
    let stats = err
        .split("the model embedded ")
        .nth(1)
        .expect("model statistics");
    let words: Vec<usize> = stats
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (texts, runs) = (words[0], words[1]);
    assert!(texts >= n && runs * 2 <= texts, "{err}");
}

//! MEM.CONSOLIDATE (issue 17, point 1): near-duplicates of one exact scope merged into their
//! oldest member. Memories are planted with JSON.SET straight into Redis in the guide's layout
//! (other writers do exactly this), with vectors chosen so that the distances are known.

mod common;

use common::*;
use redis::Value;

fn groups(v: &Value) -> Vec<(String, Vec<String>, i64, i64)> {
    items(v)
        .iter()
        .map(|g| {
            (
                as_str(get(g, "kept")),
                items(get(g, "merged")).iter().map(as_str).collect(),
                as_i64(get(g, "hit_count")),
                as_i64(get(g, "ttl")),
            )
        })
        .collect()
}

#[test]
fn merges_into_the_oldest_within_one_exact_scope() {
    let s = shared();
    let mut con = s.proxy.client();
    let mut d = direct(&s.redis);
    q(&mut con, &["MEM.INFO"]); // the index exists
    let user = unique("cons");
    let other = unique("cons-other");
    let id = |n: &str| format!("{user}-{n}");
    let a = random_unit(1);
    let (a1, a2) = (near(&a, 2), near(&near(&a, 2), 3));
    let b = random_unit(4);
    let mut p = redis::pipe();
    p.add_command(plant_cmd(
        &id("a"),
        &user,
        "default",
        "semantic",
        &a,
        100.0,
        2,
    ));
    p.add_command(plant_cmd(
        &id("a1"),
        &user,
        "default",
        "semantic",
        &a1,
        200.0,
        3,
    ));
    p.add_command(plant_cmd(
        &id("a2"),
        &user,
        "default",
        "semantic",
        &a2,
        300.0,
        0,
    ));
    p.add_command(plant_cmd(
        &id("b"),
        &user,
        "default",
        "semantic",
        &b,
        150.0,
        7,
    ));
    // The same vector in another user, another namespace and another kind: never merged.
    p.add_command(plant_cmd(
        &id("x-user"),
        &other,
        "default",
        "semantic",
        &a,
        50.0,
        1,
    ));
    p.add_command(plant_cmd(
        &id("x-ns"),
        &user,
        "work",
        "semantic",
        &a1,
        60.0,
        1,
    ));
    p.add_command(plant_cmd(
        &id("x-kind"),
        &user,
        "default",
        "episodic",
        &a2,
        70.0,
        1,
    ));
    p.cmd("EXPIRE")
        .arg(format!("agent:mem:{}", id("a")))
        .arg(1000);
    p.cmd("EXPIRE")
        .arg(format!("agent:mem:{}", id("a2")))
        .arg(50);
    let _: () = p.query(&mut d).unwrap();
    wait_indexed(&mut d);

    let want = vec![(id("a"), vec![id("a1"), id("a2")], 5, -1)];
    let dry = q(&mut con, &["MEM.CONSOLIDATE", "USER", &user, "DRYRUN"]);
    assert_eq!(groups(&dry), want);
    let exists = |d: &mut redis::Connection, n: &str| -> i64 {
        redis::cmd("EXISTS")
            .arg(format!("agent:mem:{}", id(n)))
            .query(d)
            .unwrap()
    };
    for n in ["a", "a1", "a2", "b", "x-user", "x-ns", "x-kind"] {
        assert_eq!(exists(&mut d, n), 1, "dry run left {n}");
    }

    let done = q(&mut con, &["MEM.CONSOLIDATE", "USER", &user]);
    assert_eq!(groups(&done), want);
    assert_eq!(exists(&mut d, "a1") + exists(&mut d, "a2"), 0);
    for n in ["a", "b", "x-user", "x-ns", "x-kind"] {
        assert_eq!(exists(&mut d, n), 1, "{n} must stay");
    }
    let kept: String = redis::cmd("JSON.GET")
        .arg(format!("agent:mem:{}", id("a")))
        .arg("$.hit_count")
        .query(&mut d)
        .unwrap();
    assert_eq!(kept, "[5]");
    let ttl: i64 = redis::cmd("TTL")
        .arg(format!("agent:mem:{}", id("a")))
        .query(&mut d)
        .unwrap();
    assert_eq!(ttl, -1, "the merged member without a TTL wins");
    // Nothing left to merge; and a wider threshold still never crosses scopes.
    assert!(items(&q(&mut con, &["MEM.CONSOLIDATE", "USER", &user])).is_empty());
    assert!(items(&q(
        &mut con,
        &[
            "MEM.CONSOLIDATE",
            "USER",
            &user,
            "NS",
            "work",
            "THRESHOLD",
            "0.5"
        ]
    ))
    .is_empty());
    // Errors: one line each.
    for bad in [
        vec!["MEM.CONSOLIDATE", "USER", &user, "THRESHOLD", "3"],
        vec!["MEM.CONSOLIDATE", "KIND", "weird"],
        vec!["MEM.CONSOLIDATE", "DRYRUN", "extra"],
    ] {
        let e = err(&mut con, &bad);
        assert!(e.contains("MEM.CONSOLIDATE"), "{e}");
    }
}

#[test]
fn ten_thousand_memories_with_a_hundred_duplicates() {
    let s = shared();
    let mut con = s.proxy.client();
    let mut d = direct(&s.redis);
    q(&mut con, &["MEM.INFO"]);
    let user = unique("cons-10k");
    let n = 10_000u64;
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut p = redis::pipe();
        for &i in chunk {
            let v = if i % 100 == 99 {
                near(&random_unit(i - 1 + 1_000_000), i)
            } else {
                random_unit(i + 1_000_000)
            };
            p.add_command(plant_cmd(
                &format!("{user}-{i}"),
                &user,
                "default",
                "semantic",
                &v,
                i as f64,
                1,
            ));
        }
        let _: () = p.query(&mut d).unwrap();
    }
    wait_indexed(&mut d);
    let started = std::time::Instant::now();
    let dry = groups(&q(&mut con, &["MEM.CONSOLIDATE", "USER", &user, "DRYRUN"]));
    eprintln!("dry run over {n} memories: {:?}", started.elapsed());
    assert_eq!(dry.len(), 100);
    for (kept, merged, hits, ttl) in &dry {
        let i: u64 = kept.rsplit('-').next().unwrap().parse().unwrap();
        assert_eq!(i % 100, 98, "the older of each pair is kept");
        assert_eq!(merged, &vec![format!("{user}-{}", i + 1)]);
        assert_eq!((*hits, *ttl), (2, -1));
    }
    let done = groups(&q(&mut con, &["MEM.CONSOLIDATE", "USER", &user]));
    assert_eq!(done, dry);
    let listed: Value = redis::cmd("FT.SEARCH")
        .arg("agentmem:idx")
        .arg(format!("@user:{{{}}}", user.replace('-', "\\-")))
        .arg("LIMIT")
        .arg(0)
        .arg(0)
        .query(&mut d)
        .unwrap();
    assert_eq!(items(&listed)[0], Value::Int(9_900));
}

/// Reinforcements that race with a merge are never lost: every MEM.REMEMBER of the same text
/// lands on whichever member exists at that moment, and the merge sums what it finds.
#[test]
fn remembers_during_a_merge_lose_no_hits() {
    let s = shared();
    let mut con = s.proxy.client();
    let mut d = direct(&s.redis);
    let user = unique("cons-race");
    let text = "The user waters the office plants on Fridays.";
    let first = q(
        &mut con,
        &["MEM.REMEMBER", text, "USER", &user, "KIND", "semantic"],
    );
    let kept_id = as_str(get(&first, "id"));
    // An older near-copy written by another writer.
    let v: Vec<f32> = items(&q(&mut con, &["MEM.EMBED", text]))
        .iter()
        .map(|x| as_f64(x) as f32)
        .collect();
    let old_id = format!("{user}-old");
    let _: () = plant_cmd(&old_id, &user, "default", "semantic", &near(&v, 9), 1.0, 0)
        .query(&mut d)
        .unwrap();
    wait_indexed(&mut d);
    let url = s.proxy.url();
    let (u, t) = (user.clone(), text.to_string());
    let writer = std::thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        for _ in 0..40 {
            let r = q(
                &mut c,
                &["MEM.REMEMBER", &t, "USER", &u, "KIND", "semantic"],
            );
            assert_eq!(as_i64(get(&r, "deduped")), 1);
        }
    });
    let mut merged = 0;
    for _ in 0..1000 {
        if writer.is_finished() && merged > 0 {
            break;
        }
        merged += items(&q(&mut con, &["MEM.CONSOLIDATE", "USER", &user])).len();
    }
    assert_eq!(merged, 1, "one merge");
    writer.join().unwrap();
    let left = items(&q(&mut con, &["MEM.LIST", "USER", &user])).to_vec();
    assert_eq!(left.len(), 1, "one memory left");
    assert_eq!(as_str(get(&left[0], "id")), old_id, "the older one is kept");
    assert_eq!(
        as_i64(get(&left[0], "hit_count")),
        40,
        "no reinforcement lost"
    );
    assert_ne!(kept_id, old_id);
}

/// The background consolidator (off by default): every interval, every scope, reported in
/// MEM.INFO. A Redis of its own, so that it does not merge the other tests' memories.
#[test]
fn the_background_consolidator_merges_every_scope() {
    let redis = Redis::start(&[]);
    let mut d = direct(&redis);
    let proxy = Proxy::start(&redis.url(), |c| {
        c.consolidate_interval_seconds = 1;
        c.consolidate_redis_share = 0.5;
    });
    let mut con = proxy.client();
    let info = q(&mut con, &["MEM.INFO"]);
    assert_eq!(
        as_i64(get(get(&info, "consolidator"), "interval_seconds")),
        1
    );
    let mut p = redis::pipe();
    for (i, user) in ["ann", "ben"].iter().enumerate() {
        let v = random_unit(i as u64 + 77);
        p.add_command(plant_cmd(
            &format!("{user}-1"),
            user,
            "default",
            "semantic",
            &v,
            1.0,
            1,
        ));
        p.add_command(plant_cmd(
            &format!("{user}-2"),
            user,
            "default",
            "semantic",
            &near(&v, 5),
            2.0,
            1,
        ));
        p.add_command(plant_cmd(
            &format!("{user}-3"),
            user,
            "default",
            "episodic",
            &v,
            3.0,
            1,
        ));
    }
    let _: () = p.query(&mut d).unwrap();
    eventually("a background pass to merge both users' pairs", || {
        let c = q(&mut con, &["MEM.INFO"]);
        as_i64(get(get(&c, "consolidator"), "memories_removed")) == 2
    });
    for user in ["ann", "ben"] {
        let left = items(&q(&mut con, &["MEM.LIST", "USER", user])).to_vec();
        let mut ids: Vec<String> = left.iter().map(|m| as_str(get(m, "id"))).collect();
        ids.sort();
        assert_eq!(
            ids,
            [format!("{user}-1"), format!("{user}-3")],
            "the episodic copy is another kind"
        );
    }
    let c = q(&mut con, &["MEM.INFO"]);
    assert_eq!(
        get(get(&c, "consolidator"), "last_error"),
        &redis::Value::Nil
    );
}

//! Working memory and agent turns: MEM.TURN, MEM.SESSION, MEM.EVENTS (issue 5).

mod common;

use common::*;
use redis::Value;

fn turn(
    con: &mut redis::Connection,
    thread: &str,
    role: &str,
    content: &str,
    opts: &[&str],
) -> Value {
    let mut args = vec!["MEM.TURN", thread, role, content];
    args.extend_from_slice(opts);
    q(con, &args)
}

#[test]
fn concurrent_turns_lose_nothing() {
    let thread = unique("busy");
    let user = unique("busy-user");
    std::thread::scope(|s| {
        for c in 0..8 {
            let (thread, user) = (thread.clone(), user.clone());
            s.spawn(move || {
                let mut con = shared().proxy.client();
                for i in 0..50 {
                    // Roles are free text: each turn's role names it, so the event log shows the order.
                    let role = format!("c{c}-t{i}");
                    turn(
                        &mut con,
                        &thread,
                        &role,
                        &format!("client {c} says hello number {i}"),
                        &["USER", &user, "REMEMBER", "SKIP"],
                    );
                }
            });
        }
    });
    let mut con = shared().proxy.client();
    let s = q(&mut con, &["MEM.SESSION", "GET", &thread]);
    assert_eq!(as_i64(get(&s, "turn_count")), 400);
    let turns = items(get(&s, "recent_turns"));
    assert_eq!(turns.len(), 20);
    let roles: Vec<String> = turns.iter().map(|t| as_str(get(t, "role"))).collect();
    let distinct: std::collections::HashSet<&String> = roles.iter().collect();
    assert_eq!(distinct.len(), 20);
    // The events were appended in the same atomic step, so they give the true order.
    let events = items(&q(&mut con, &["MEM.EVENTS", &thread, "COUNT", "20"])).to_vec();
    let mut last20: Vec<String> = events
        .iter()
        .map(|e| {
            as_str(get(e, "action"))
                .trim_start_matches("turn_appended:")
                .to_string()
        })
        .collect();
    last20.reverse();
    assert_eq!(roles, last20);
    let total = items(&q(&mut con, &["MEM.EVENTS", &thread, "COUNT", "1000"])).len();
    assert_eq!(total, 400);
    assert!(as_i64(get(&s, "ttl")) > 3500);
}

#[test]
fn each_turn_refreshes_the_ttl() {
    let mut con = shared().proxy.client();
    let thread = unique("ttl");
    turn(
        &mut con,
        &thread,
        "user",
        "first words",
        &["REMEMBER", "SKIP"],
    );
    let mut d = direct(&shared().redis);
    let key = format!("agent:session:{thread}");
    let _: () = redis::cmd("EXPIRE")
        .arg(&key)
        .arg(100)
        .query(&mut d)
        .unwrap();
    turn(
        &mut con,
        &thread,
        "assistant",
        "second words",
        &["REMEMBER", "SKIP"],
    );
    let ttl: i64 = redis::cmd("TTL").arg(&key).query(&mut d).unwrap();
    assert!(ttl > 3590, "{ttl}");
}

#[test]
fn session_ttl_given_at_start_is_kept_by_later_writes() {
    let mut con = shared().proxy.client();
    let thread = unique("own-ttl");
    q(&mut con, &["MEM.SESSION", "START", &thread, "TTL", "120"]);
    let ttl =
        |con: &mut redis::Connection| as_i64(get(&q(con, &["MEM.SESSION", "GET", &thread]), "ttl"));
    assert!((115..=120).contains(&ttl(&mut con)));
    turn(
        &mut con,
        &thread,
        "user",
        "a turn refreshes to the session's own ttl",
        &["REMEMBER", "SKIP"],
    );
    q(
        &mut con,
        &["MEM.SESSION", "GOAL", &thread, "so does a goal"],
    );
    assert!((115..=120).contains(&ttl(&mut con)));
    assert!(err(
        &mut con,
        &["MEM.SESSION", "START", &unique("t"), "TTL", "0"]
    )
    .contains("TTL must be an integer"));
}

#[test]
fn guide_walkthrough_through_turns() {
    let mut con = shared().proxy.client();
    let user = unique("walk");
    for s in tsv("redis-docs-seed-memories.tsv") {
        q(
            &mut con,
            &["MEM.REMEMBER", &s[1], "KIND", &s[0], "USER", &user],
        );
    }
    let probes = tsv("seed-demo-probes.tsv");
    let thread = unique("walk-thread");
    let t = turn(
        &mut con,
        &thread,
        "user",
        &probes[0][0],
        &["USER", &user, "REMEMBER", "SKIP"],
    );
    assert_eq!(as_str(get(&t, "thread")), thread);
    assert_eq!(as_i64(get(&t, "turn_count")), 1);
    let top = &items(get(&t, "recalled"))[0];
    assert!(as_str(get(top, "text")).starts_with(&probes[0][1]));
    // MEM.TURN recalls with the same default as MEM.RECALL (issue 15), and still reports the
    // guide's raw distance.
    assert_eq!(as_str(get(top, "retrieval")), "auto");
    assert!((as_f64(get(top, "distance")) - 0.4705).abs() <= 0.005);
    assert_eq!(get(&t, "remembered"), &Value::Nil);

    let t = turn(&mut con, &thread, "user", &probes[1][0], &["USER", &user]);
    let top = &items(get(&t, "recalled"))[0];
    assert!((as_f64(get(top, "distance")) - 0.4420).abs() <= 0.005);
    let rem = get(&t, "remembered");
    assert_eq!(as_i64(get(rem, "deduped")), 0);
    assert!(as_i64(get(rem, "ttl")) > 604_000, "episodic by default");

    // The semantic paraphrase dedups onto its seed.
    let t = turn(
        &mut con,
        &thread,
        "user",
        &probes[2][0],
        &["USER", &user, "REMEMBER", "semantic"],
    );
    let rem = get(&t, "remembered");
    assert_eq!(as_i64(get(rem, "deduped")), 1);
    let seed_id = as_str(get(rem, "id"));
    // The turn is not recalled to itself: a brand-new text recalls nothing of its own.
    let fresh = "Completely new: the user collects antique barometers.";
    let t = turn(&mut con, &thread, "user", fresh, &["USER", &user]);
    assert!(items(get(&t, "recalled"))
        .iter()
        .all(|h| as_str(get(h, "text")) != fresh));
    let t2 = turn(&mut con, &thread, "user", fresh, &["USER", &user]);
    assert_eq!(
        as_str(get(&items(get(&t2, "recalled"))[0], "text")),
        fresh,
        "recalled on the next turn"
    );

    let events = items(&q(&mut con, &["MEM.EVENTS", &thread])).to_vec();
    assert_eq!(events.len(), 5);
    let details: Vec<String> = events.iter().map(|e| as_str(get(e, "detail"))).collect();
    assert_eq!(details[2], format!("deduped onto {seed_id}"));
    assert!(
        details[1].starts_with("wrote ") && details[1].ends_with(" as episodic"),
        "{details:?}"
    );
    assert_eq!(details[4], "", "SKIP logs the event with no write");
    assert!(events
        .iter()
        .all(|e| as_str(get(e, "action")) == "turn_appended:user"));
    // SKIP wrote no memory: only the seeds, the outage turn and the barometers remain.
    let listed = items(&q(
        &mut con,
        &["MEM.LIST", "USER", &user, "LIMIT", "0", "100"],
    ))
    .len();
    assert_eq!(listed, 8 + 2);
}

#[test]
fn session_lifecycle() {
    let mut con = shared().proxy.client();
    let thread = unique("life");
    let s = q(
        &mut con,
        &[
            "MEM.SESSION",
            "START",
            &thread,
            "USER",
            "ada",
            "AGENT",
            "planner",
            "GOAL",
            "ship it",
        ],
    );
    assert_eq!(as_i64(get(&s, "created")), 1);
    assert_eq!(
        as_str(&q(
            &mut con,
            &["MEM.SESSION", "SCRATCHPAD", &thread, "step 1 done"]
        )),
        "OK"
    );
    assert_eq!(
        as_str(&q(
            &mut con,
            &["MEM.SESSION", "GOAL", &thread, "ship it twice"]
        )),
        "OK"
    );
    turn(
        &mut con,
        &thread,
        "user",
        "let us begin",
        &["USER", "ada", "REMEMBER", "SKIP"],
    );
    let g = q(&mut con, &["MEM.SESSION", "GET", &thread]);
    assert_eq!(as_str(get(&g, "thread_id")), thread);
    assert_eq!(as_str(get(&g, "user")), "ada");
    assert_eq!(as_str(get(&g, "agent")), "planner");
    assert_eq!(as_str(get(&g, "goal")), "ship it twice");
    assert_eq!(as_str(get(&g, "scratchpad")), "step 1 done");
    assert_eq!(as_i64(get(&g, "turn_count")), 1);
    let turns = items(get(&g, "recent_turns"));
    assert_eq!(as_str(get(&turns[0], "content")), "let us begin");
    assert!(as_f64(get(&turns[0], "ts")) > 1.7e9);
    assert!(as_i64(get(&g, "ttl")) > 3500);
    let actions: Vec<String> = items(&q(&mut con, &["MEM.EVENTS", &thread]))
        .iter()
        .map(|e| as_str(get(e, "action")))
        .collect();
    assert_eq!(
        actions,
        [
            "turn_appended:user",
            "goal_set",
            "scratchpad_set",
            "thread_started"
        ]
    );
    assert_eq!(
        items(&q(&mut con, &["MEM.EVENTS", &thread, "COUNT", "2"])).len(),
        2
    );
    assert_eq!(as_i64(&q(&mut con, &["MEM.SESSION", "END", &thread])), 1);
    assert_eq!(q(&mut con, &["MEM.SESSION", "GET", &thread]), Value::Nil);
    assert!(items(&q(&mut con, &["MEM.EVENTS", &thread])).is_empty());
    assert_eq!(as_i64(&q(&mut con, &["MEM.SESSION", "END", &thread])), 0);
    // NEW makes a fresh thread id.
    let n = q(&mut con, &["MEM.SESSION", "NEW", "USER", "ada"]);
    let t = as_str(get(&n, "thread"));
    assert_eq!(t.len(), 16);
    assert_eq!(
        as_str(get(&q(&mut con, &["MEM.SESSION", "GET", &t]), "user")),
        "ada"
    );
    assert!(err(&mut con, &["MEM.SESSION", "GOAL", &unique("nosuch"), "x"]).contains("no session"));
    // START on a thread of another user is refused, not a takeover; its own user may update it.
    let e = err(
        &mut con,
        &[
            "MEM.SESSION",
            "START",
            &t,
            "USER",
            "eve",
            "GOAL",
            "mine now",
        ],
    );
    assert!(e.starts_with("NOPERM"), "{e}");
    let g = q(&mut con, &["MEM.SESSION", "GET", &t]);
    assert_eq!(
        (as_str(get(&g, "user")), as_str(get(&g, "goal"))),
        ("ada".to_string(), String::new())
    );
    let again = q(
        &mut con,
        &["MEM.SESSION", "START", &t, "USER", "ada", "GOAL", "g2"],
    );
    assert_eq!(as_i64(get(&again, "created")), 0);
}

#[test]
fn events_are_trimmed_near_max_len() {
    let proxy = Proxy::start(&shared().redis.url(), |c| {
        c.events_max_len = 10;
        c.event_key_prefix = "trim:events:".into();
    });
    let mut con = proxy.client();
    let thread = unique("trim");
    q(&mut con, &["MEM.SESSION", "START", &thread]);
    for i in 0..500 {
        q(
            &mut con,
            &["MEM.SESSION", "GOAL", &thread, &format!("goal {i}")],
        );
    }
    let mut d = direct(&shared().redis);
    let len: i64 = redis::cmd("XLEN")
        .arg(format!("trim:events:{thread}"))
        .query(&mut d)
        .unwrap();
    // MAXLEN ~ trims whole stream nodes (100 entries by default): near, not exact.
    assert!((10..=110).contains(&len), "XLEN {len}");
    let newest = items(&q(&mut con, &["MEM.EVENTS", &thread, "COUNT", "1"])).to_vec();
    assert_eq!(as_str(get(&newest[0], "detail")), "goal 499");
}

#[test]
fn errors_for_each_verb() {
    let mut con = shared().proxy.client();
    let cases: &[(&[&str], &str)] = &[
        (
            &["MEM.TURN", "t", "user"],
            "wrong number of arguments for 'mem.turn'",
        ),
        (&["MEM.TURN", "t", "", "hello"], "role must not be empty"),
        (
            &["MEM.TURN", "", "user", "hello"],
            "thread must not be empty",
        ),
        (&["MEM.TURN", "t", "user", "  "], "content is empty"),
        (
            &["MEM.TURN", "t", "user", "hi", "REMEMBER", "maybe"],
            "unknown REMEMBER 'maybe'",
        ),
        (
            &["MEM.TURN", "t", "user", "hi", "FOO", "1"],
            "unknown option 'FOO'",
        ),
        (
            &["MEM.TURN", "t", "user", "hi", "K", "0"],
            "K must be an integer from 1 to 1000",
        ),
        (
            &["MEM.TURN", "t", "user", "hi", "MODE", "x"],
            "unknown MODE",
        ),
        (
            &["MEM.TURN", "t", "user", "hi", "THRESHOLD", "3"],
            "THRESHOLD must be a number",
        ),
        (
            &["MEM.SESSION"],
            "wrong number of arguments for 'mem.session'",
        ),
        (&["MEM.SESSION", "BEGIN", "t"], "unknown subcommand 'BEGIN'"),
        (&["MEM.SESSION", "START"], "wrong number of arguments"),
        (
            &["MEM.SESSION", "START", "t", "COLOR", "x"],
            "unknown option 'COLOR'",
        ),
        (
            &["MEM.SESSION", "GET", "t", "extra"],
            "unknown option 'extra'",
        ),
        (&["MEM.SESSION", "GOAL", "t", ""], "goal is empty"),
        (
            &["MEM.EVENTS"],
            "wrong number of arguments for 'mem.events'",
        ),
        (
            &["MEM.EVENTS", "t", "COUNT", "0"],
            "COUNT must be an integer",
        ),
        (&["MEM.EVENTS", "t", "LIMIT", "1"], "unknown option 'LIMIT'"),
    ];
    for (args, want) in cases {
        let e = err(&mut con, args);
        assert!(
            e.starts_with("ERR") && e.contains(want),
            "{args:?} → {e:?}, want {want:?}"
        );
    }
    // Nothing was written by any of them.
    assert_eq!(q(&mut con, &["MEM.SESSION", "GET", "t"]), Value::Nil);
    // Any non-empty role is fine.
    let t = turn(
        &mut con,
        &unique("roles"),
        "tool:search",
        "results: 3 documents",
        &["REMEMBER", "SKIP"],
    );
    assert_eq!(as_i64(get(&t, "turn_count")), 1);
}

#[test]
fn wrongtype_in_the_way_writes_nothing() {
    let mut con = shared().proxy.client();
    let thread = unique("wt");
    let user = unique("wt-user");
    let mut d = direct(&shared().redis);
    let _: () = redis::cmd("SET")
        .arg(format!("agent:events:{thread}"))
        .arg("not a stream")
        .query(&mut d)
        .unwrap();
    let e = err(
        &mut con,
        &[
            "MEM.TURN",
            &thread,
            "user",
            "The user likes green tea.",
            "USER",
            &user,
        ],
    );
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(
        q(&mut con, &["MEM.SESSION", "GET", &thread]),
        Value::Nil,
        "no session created"
    );
    assert!(
        items(&q(&mut con, &["MEM.LIST", "USER", &user])).is_empty(),
        "no memory written"
    );
}

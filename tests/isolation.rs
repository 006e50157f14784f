//! MEM.* act as the client: an isolation suite that attacks the proxy as a tenant would.
//!
//! One password-protected Redis with ACL users and one proxy (memproxy's own credentials are the
//! admin's, used only for the index). Each attempt is refused or scoped, and Redis's own keyspace
//! shows nothing written.

mod common;

use std::sync::OnceLock;

use common::*;
use redis::Value;

struct Env {
    redis: Redis,
    proxy: Proxy,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let redis = Redis::start(&["--requirepass", "adminpw"]);
        let mut d = admin_of(&redis);
        let users: [(&str, &[&str]); 4] = [
            ("writer", &["~*", "&*", "+@all"]),
            ("reader", &["~*", "&*", "+@all", "-@write"]),
            ("other", &["~other:*", "&*", "+@all"]),
            ("plain", &["~*", "&*", "+@read"]),
        ];
        for (u, rules) in users {
            let mut c = redis::cmd("ACL");
            c.arg("SETUSER").arg(u).arg("on").arg(format!(">{u}pw"));
            for r in rules {
                c.arg(*r);
            }
            c.query::<()>(&mut d).unwrap();
        }
        let proxy = Proxy::start(
            &format!("redis://:adminpw@127.0.0.1:{}", redis.port),
            |_| {},
        );
        Env { redis, proxy }
    })
}

fn admin_of(redis: &Redis) -> redis::Connection {
    redis::Client::open(format!("redis://:adminpw@127.0.0.1:{}", redis.port))
        .unwrap()
        .get_connection()
        .unwrap()
}

fn admin() -> redis::Connection {
    admin_of(&env().redis)
}

/// A proxy connection authenticated as `user`.
fn as_user(user: &str) -> redis::Connection {
    let c = redis::Client::open(format!("redis://{user}:{user}pw@{}", env().proxy.addr)).unwrap();
    c.get_connection().unwrap()
}

fn keys(d: &mut redis::Connection, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS").arg(pattern).query(d).unwrap()
}

#[test]
fn read_only_user_reads_but_cannot_write_or_delete() {
    let mut w = as_user("writer");
    let user = unique("ro");
    let v = q(
        &mut w,
        &["MEM.REMEMBER", "The user collects stamps.", "USER", &user],
    );
    let id = as_str(get(&v, "id"));
    let mut d = admin();
    let mut r = as_user("reader");
    let hits = items(&q(&mut r, &["MEM.RECALL", "hobbies stamps", "USER", &user])).len();
    assert_eq!(hits, 1, "reading is allowed");
    let dry = q(&mut r, &["MEM.CONSOLIDATE", "USER", &user, "DRYRUN"]);
    assert!(items(&dry).is_empty(), "a dry run only reads");
    let thread = user.clone();
    for attempt in [
        vec!["MEM.REMEMBER", "The user hates stamps.", "USER", &user],
        vec![
            "MEM.TURN",
            &thread,
            "user",
            "I hate stamps now.",
            "USER",
            &user,
        ],
        vec!["MEM.FORGET", &id],
        vec!["MEM.FORGET", "USER", &user],
        vec!["MEM.SESSION", "START", &thread, "USER", &user],
        vec!["MEM.CONSOLIDATE", "USER", &user],
    ] {
        let e = err(&mut r, &attempt);
        assert!(e.starts_with("NOPERM"), "{attempt:?}: {e}");
    }
    // Redis's keyspace: the one memory, unchanged; no session, no events.
    let hits = items(&q(&mut w, &["MEM.LIST", "USER", &user])).to_vec();
    assert_eq!(hits.len(), 1);
    assert_eq!(as_i64(get(&hits[0], "hit_count")), 0);
    assert_eq!(keys(&mut d, &format!("agent:mem:{id}")).len(), 1);
    assert!(keys(&mut d, &format!("agent:session:{thread}")).is_empty());
    assert!(keys(&mut d, &format!("agent:events:{thread}")).is_empty());
}

#[test]
fn key_restricted_user_cannot_read_memories() {
    let mut w = as_user("writer");
    let user = unique("kr");
    q(
        &mut w,
        &[
            "MEM.REMEMBER",
            "The code word is heliotrope.",
            "USER",
            &user,
        ],
    );
    let mut o = as_user("other");
    for attempt in [
        vec!["MEM.RECALL", "code word", "USER", &user],
        vec!["MEM.RECALL", "heliotrope", "USER", &user, "MODE", "keyword"],
        vec!["MEM.LIST", "USER", &user],
        vec!["MEM.EVENTS", "some-thread"],
        vec!["MEM.SESSION", "GET", "some-thread"],
    ] {
        let e = err(&mut o, &attempt);
        assert!(e.starts_with("NOPERM"), "{attempt:?}: {e}");
    }
}

#[test]
fn a_user_without_scripting_is_refused_by_redis() {
    let mut p = as_user("plain");
    let e = err(&mut p, &["MEM.RECALL", "anything"]);
    assert!(e.starts_with("NOPERM"), "{e}");
}

#[test]
fn noauth_and_noperm_come_before_any_model_run() {
    // A proxy of its own, so that its model counters count this test alone.
    let proxy = Proxy::start(
        &format!("redis://:adminpw@127.0.0.1:{}", env().redis.port),
        |_| {},
    );
    let texts = |p: &Proxy| {
        let mut w = redis::Client::open(format!("redis://writer:writerpw@{}", p.addr))
            .unwrap()
            .get_connection()
            .unwrap();
        as_i64(get(&q(&mut w, &["MEM.INFO"]), "embed_texts"))
    };
    // The proxy's own start-up runs (the recall prototypes) are counted before any client.
    let start = texts(&proxy);
    let mut raw = proxy.raw();
    let text = unique("never embedded text");
    // A malformed MEM.* first: answered before Redis is asked, so it must not count as admitted.
    raw.cmd(&[b"MEM.RECALL", b"x", b"K", b"0"]);
    assert!(raw.read_str().starts_with("-ERR MEM.RECALL"));
    for cmd in [
        vec![b"MEM.REMEMBER".as_slice(), text.as_bytes()],
        vec![b"MEM.EMBED", text.as_bytes()],
        vec![b"MEM.RECALL", text.as_bytes()],
    ] {
        raw.cmd(&cmd);
        let r = raw.read_str();
        assert!(r.starts_with("-NOAUTH"), "{r}");
    }
    raw.cmd(&[b"AUTH", b"reader", b"readerpw"]);
    raw.read();
    raw.cmd(&[b"MEM.REMEMBER", text.as_bytes()]);
    assert!(raw.read_str().starts_with("-NOPERM"));
    raw.cmd(&[b"MEM.TURN", b"t", b"user", text.as_bytes()]);
    assert!(raw.read_str().starts_with("-NOPERM"));
    let mut plain = proxy.raw();
    plain.cmd(&[b"AUTH", b"plain", b"plainpw"]);
    plain.read();
    plain.cmd(&[b"MEM.RECALL", text.as_bytes()]);
    assert!(plain.read_str().starts_with("-NOPERM"));
    assert_eq!(texts(&proxy), start, "no model run for a refused request");
    // The same request, allowed, does run the model.
    raw.cmd(&[b"MEM.RECALL", text.as_bytes()]);
    assert!(raw.read_str().starts_with('*'));
    assert_eq!(texts(&proxy), start + 1);
}

#[test]
fn a_trusted_connection_asks_redis_nothing_before_the_model_runs() {
    // Commands Redis ran for this client's upstream connection (script calls count their own).
    let name = unique("trust");
    let mut w = as_user("writer");
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(&name)
        .query(&mut w)
        .unwrap();
    let mut d = admin();
    let mut upstream_cmds = || {
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut d).unwrap();
        let line = list
            .lines()
            .find(|l| l.contains(&format!(" name={name} ")))
            .expect("the client's upstream connection");
        line.split(' ')
            .find_map(|f| f.strip_prefix("tot-cmds="))
            .unwrap()
            .parse::<i64>()
            .unwrap()
    };
    let mut recall_cost = |w: &mut redis::Connection, text: &str| {
        let before = upstream_cmds();
        let _: Vec<Value> = redis::cmd("MEM.RECALL")
            .arg(text)
            .arg("USER")
            .arg(unique("nobody"))
            .query(w)
            .unwrap();
        // CLIENT LIST itself is not this connection's.
        upstream_cmds() - before
    };
    // Before any MEM.* has passed, a text the model must run for costs the rights check first.
    let untrusted = recall_cost(&mut w, &unique("first question"));
    let fresh = unique("second question");
    let trusted = recall_cost(&mut w, &fresh);
    let cached = recall_cost(&mut w, &fresh);
    assert!(untrusted > cached, "untrusted {untrusted}, cached {cached}");
    assert_eq!(trusted, cached, "a trusted fresh recall adds no check");
    // AUTH again: the trust is gone, the check is back.
    let _: () = redis::cmd("AUTH")
        .arg("writer")
        .arg("writerpw")
        .query(&mut w)
        .unwrap();
    assert!(recall_cost(&mut w, &unique("third question")) > cached);
}

#[test]
fn selected_database_is_respected() {
    let mut w = as_user("writer");
    q(&mut w, &["SELECT", "3"]);
    let e = err(
        &mut w,
        &["MEM.REMEMBER", "The user likes db3.", "USER", "db3"],
    );
    assert!(e.contains("database 0") && e.contains("database 3"), "{e}");
    assert_eq!(q(&mut w, &["MEM.PING"]), Value::SimpleString("PONG".into()));
    q(&mut w, &["SELECT", "0"]);
    let v = q(
        &mut w,
        &["MEM.REMEMBER", "The user likes db0.", "USER", "db3"],
    );
    assert_eq!(as_str(get(&v, "id")).len(), 12);
    // Inside a transaction the SELECT counts from EXEC on.
    q(&mut w, &["MULTI"]);
    q(&mut w, &["SELECT", "5"]);
    q(&mut w, &["EXEC"]);
    let e = err(&mut w, &["MEM.LIST", "USER", "db3"]);
    assert!(e.contains("database 5"), "{e}");
}

#[test]
fn client_reply_modes_keep_every_reply_in_its_slot() {
    let mut c = env().proxy.raw();
    c.cmd(&[b"AUTH", b"writer", b"writerpw"]);
    assert_eq!(c.read_str(), "+OK\r\n");
    let user = unique("reply");
    // OFF: the MEM.* runs (its write happens) but answers nothing; ON brings replies back.
    let mut batch = Vec::new();
    batch.extend(encode(&[b"CLIENT", b"REPLY", b"OFF"]));
    batch.extend(encode(&[
        b"MEM.REMEMBER",
        b"The user rides a unicycle.",
        b"USER",
        user.as_bytes(),
    ]));
    batch.extend(encode(&[b"SET", b"reply-k", b"1"]));
    batch.extend(encode(&[b"CLIENT", b"REPLY", b"ON"]));
    batch.extend(encode(&[b"ECHO", b"after-on"]));
    // SKIP: the next command (a MEM.*) is silent, the one after answers.
    batch.extend(encode(&[b"CLIENT", b"REPLY", b"SKIP"]));
    batch.extend(encode(&[b"MEM.PING"]));
    batch.extend(encode(&[b"ECHO", b"after-skip"]));
    c.send(&batch);
    assert_eq!(c.read_str(), "+OK\r\n", "CLIENT REPLY ON");
    assert_eq!(c.read_str(), "$8\r\nafter-on\r\n");
    assert_eq!(c.read_str(), "$10\r\nafter-skip\r\n");
    c.cmd(&[b"MEM.LIST", b"USER", user.as_bytes()]);
    assert!(
        c.read_str().contains("unicycle"),
        "the silent MEM.REMEMBER ran"
    );
    // CLIENT REPLY inside MULTI is queued like any command.
    c.send(
        &[
            encode(&[b"MULTI"]),
            encode(&[b"CLIENT", b"REPLY", b"ON"]),
            encode(&[b"EXEC"]),
            encode(&[b"MEM.PING"]),
        ]
        .concat(),
    );
    assert_eq!(c.read_str(), "+OK\r\n");
    assert_eq!(c.read_str(), "+QUEUED\r\n");
    assert_eq!(c.read_str(), "*1\r\n+OK\r\n");
    assert_eq!(c.read_str(), "+PONG\r\n");
}

#[test]
fn mem_inside_multi_is_refused_and_the_transaction_goes_on() {
    let mut c = env().proxy.raw();
    c.cmd(&[b"AUTH", b"writer", b"writerpw"]);
    c.read();
    c.send(
        &[
            encode(&[b"MULTI"]),
            encode(&[b"MEM.RECALL", b"x"]),
            encode(&[b"SET", b"m-k", b"v"]),
            encode(&[b"EXEC"]),
        ]
        .concat(),
    );
    assert_eq!(c.read_str(), "+OK\r\n");
    assert!(c.read_str().contains("cannot run inside MULTI"));
    assert_eq!(c.read_str(), "+QUEUED\r\n");
    assert_eq!(c.read_str(), "*1\r\n+OK\r\n");
}

/// On the guide's index (TAGs not case-sensitive) and with separators in names, dedup never
/// touches another scope's memory, and no id of another user is revealed.
#[test]
fn dedup_stays_in_the_exact_scope() {
    let mut w = as_user("writer");
    let (a, b) = (unique("Dd"), unique("Dd"));
    for (victim, attacker) in [(a.clone(), a.to_lowercase()), (format!("{b},x"), b.clone())] {
        let v = q(
            &mut w,
            &[
                "MEM.REMEMBER",
                "The user's bank PIN is 4321.",
                "USER",
                &victim,
            ],
        );
        let victim_id = as_str(get(&v, "id"));
        let a = q(
            &mut w,
            &[
                "MEM.REMEMBER",
                "The user's bank PIN is 4321.",
                "USER",
                &attacker,
            ],
        );
        assert_eq!(as_i64(get(&a, "deduped")), 0, "{victim} vs {attacker}");
        assert_ne!(as_str(get(&a, "id")), victim_id);
        let hits = items(&q(&mut w, &["MEM.LIST", "USER", &victim])).to_vec();
        assert_eq!(
            as_i64(get(&hits[0], "hit_count")),
            0,
            "the victim's memory was not bumped"
        );
        // The turn's dedup as well.
        let t = q(
            &mut w,
            &[
                "MEM.TURN",
                &unique("dd-t"),
                "user",
                "The user's bank PIN is 4321.",
                "USER",
                &attacker,
                "REMEMBER",
                "episodic",
            ],
        );
        let rem = get(&t, "remembered");
        assert_ne!(as_str(get(rem, "id")), victim_id);
    }
}

/// Any value works for every verb and none widens a scope; empty values are refused clearly.
#[test]
fn hostile_values_work_and_stay_scoped() {
    let mut w = as_user("writer");
    let tag = unique("v");
    let values = [
        format!("{tag}/slash"),
        format!("{tag}\"quote"),
        format!("{tag}\\back"),
        format!("{tag},comma"),
        format!("{tag}|pipe"),
        format!("{tag}{{}}braces"),
        format!("{tag}*star"),
        format!("{tag}-dash"),
        format!("{tag} space"),
        format!("{tag}ünï😀"),
    ];
    for v in &values {
        let r = q(
            &mut w,
            &[
                "MEM.REMEMBER",
                "The user likes kites.",
                "USER",
                v,
                "NS",
                v,
                "THREAD",
                v,
            ],
        );
        let id = as_str(get(&r, "id"));
        let hits = items(&q(&mut w, &["MEM.RECALL", "kites", "USER", v, "NS", v])).to_vec();
        assert_eq!(hits.len(), 1, "{v}");
        assert_eq!(as_str(get(&hits[0], "user")), *v);
        assert_eq!(
            items(&q(
                &mut w,
                &["MEM.RECALL", "kites", "USER", v, "NS", v, "MODE", "hybrid"]
            ))
            .len(),
            1
        );
        assert_eq!(
            items(&q(&mut w, &["MEM.LIST", "USER", v, "NS", v])).len(),
            1
        );
        let t = q(
            &mut w,
            &["MEM.TURN", v, "user", "hello kites", "USER", v, "NS", v],
        );
        assert_eq!(as_i64(get(&t, "turn_count")), 1, "{v}");
        assert!(q(&mut w, &["MEM.SESSION", "GET", v]) != Value::Nil);
        assert!(!items(&q(&mut w, &["MEM.EVENTS", v])).is_empty());
        assert_eq!(as_i64(&q(&mut w, &["MEM.FORGET", &id])), 1, "{v}");
    }
    // The prefix of them all sees none of them.
    assert!(items(&q(&mut w, &["MEM.RECALL", "kites", "USER", &tag])).is_empty());
    for (opt, verb) in [
        ("USER", "MEM.RECALL"),
        ("NS", "MEM.RECALL"),
        ("THREAD", "MEM.RECALL"),
    ] {
        let e = err(&mut w, &[verb, "kites", opt, ""]);
        assert!(
            e.starts_with("ERR MEM.RECALL") && e.contains("empty"),
            "{e}"
        );
    }
}

/// With scopes bound to ACL users, a user named with '/' forgets its own memory by id.
#[test]
fn bound_scope_forgets_by_id_for_any_name() {
    let redis = Redis::start(&["--requirepass", "adminpw"]);
    let mut d = admin_of(&redis);
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("team/a")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .query::<()>(&mut d)
        .unwrap();
    let proxy = Proxy::start(&format!("redis://:adminpw@127.0.0.1:{}", redis.port), |c| {
        c.bind_scope_to_acl_user = true
    });
    let mut c = redis::Client::open(format!("redis://{}", proxy.addr))
        .unwrap()
        .get_connection()
        .unwrap();
    q(&mut c, &["AUTH", "team/a", "pw"]);
    let v = q(
        &mut c,
        &[
            "MEM.REMEMBER",
            "The team meets on Mondays.",
            "USER",
            "team/a",
        ],
    );
    let id = as_str(get(&v, "id"));
    assert_eq!(as_i64(&q(&mut c, &["MEM.FORGET", &id])), 1);
}

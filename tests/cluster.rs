//! memproxy in front of a Redis Cluster (issue 26): a real 3-master cluster with the modules,
//! started here on free ports; memproxy pointed at one node detects the cluster and presents one
//! plain Redis to a non-cluster client.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use redis::Value;

struct Setup {
    cluster: ClusterNodes,
    proxy: Proxy,
}

fn setup() -> &'static Setup {
    static S: OnceLock<Setup> = OnceLock::new();
    S.get_or_init(|| {
        let cluster = ClusterNodes::start(3);
        let proxy = Proxy::start(&cluster.nodes[1].url(), |_| {});
        Setup { cluster, proxy }
    })
}

/// Keys `prefix:0 …` until every master holds at least one.
/// Run one command straight on every master (an ACL user the tests create, for one).
fn on_every_master(s: &Setup, args: &[&str]) {
    for n in &s.cluster.nodes {
        q(&mut direct(n), args);
    }
}

fn spread(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}:{i}")).collect()
}

#[test]
fn keys_go_to_their_masters_and_multi_key_commands_are_split() {
    let s = setup();
    let mut c = s.proxy.client();
    let keys = spread(&unique("k"), 30);
    for k in &keys {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg(format!("v-{k}"))
            .query(&mut c)
            .unwrap();
    }
    // Each key lives on the master of its slot, and only there.
    for k in &keys {
        let mut d = direct(s.cluster.owner(k));
        let v: String = redis::cmd("GET").arg(k).query(&mut d).unwrap();
        assert_eq!(v, format!("v-{k}"));
    }
    let mut masters_used = std::collections::HashSet::new();
    for k in &keys {
        masters_used.insert(s.cluster.owner(k).port);
    }
    assert_eq!(masters_used.len(), 3, "the keys span every master");
    // MGET across slots: values in the request's order, a missing key as nil.
    let mut mget = redis::cmd("MGET");
    for k in &keys {
        mget.arg(k);
    }
    mget.arg("no-such-key-{x}");
    let vals: Vec<Option<String>> = mget.query(&mut c).unwrap();
    assert_eq!(vals.len(), keys.len() + 1);
    for (k, v) in keys.iter().zip(&vals) {
        assert_eq!(v.as_deref(), Some(format!("v-{k}").as_str()));
    }
    assert_eq!(vals.last().unwrap(), &None);
    // EXISTS and DEL sum over masters; MSET lands everywhere.
    let n: i64 = redis::cmd("EXISTS")
        .arg(&keys)
        .arg("nope")
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 30);
    let mut mset = redis::cmd("MSET");
    for k in &keys {
        mset.arg(k).arg("m");
    }
    let _: () = mset.query(&mut c).unwrap();
    let v: String = redis::cmd("GET").arg(&keys[7]).query(&mut c).unwrap();
    assert_eq!(v, "m");
    let n: i64 = redis::cmd("DEL").arg(&keys).query(&mut c).unwrap();
    assert_eq!(n, 30);
    let n: i64 = redis::cmd("EXISTS").arg(&keys).query(&mut c).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn cross_slot_commands_answer_crossslot_and_same_slot_ones_run() {
    let s = setup();
    let mut c = s.proxy.client();
    let u = unique("x");
    let (a, b) = (format!("{u}:a"), format!("{u}:b"));
    assert_ne!(s.cluster.keyslot(&a), s.cluster.keyslot(&b), "two slots");
    assert!(err(&mut c, &["SUNIONSTORE", &a, &b, "c"]).starts_with("CROSSSLOT"));
    // Refused before Redis could say the key does not exist, as Redis Cluster does.
    assert!(err(&mut c, &["RENAME", &a, &b]).starts_with("CROSSSLOT"));
    assert!(err(&mut c, &["EVAL", "return 1", "2", &a, &b]).starts_with("CROSSSLOT"));
    // With one hash tag they share a slot and run.
    let (ta, tb) = (format!("{{{u}}}:a"), format!("{{{u}}}:b"));
    let _: () = redis::cmd("SADD").arg(&ta).arg("1").query(&mut c).unwrap();
    let _: () = redis::cmd("SADD").arg(&tb).arg("2").query(&mut c).unwrap();
    let n: i64 = redis::cmd("SUNIONSTORE")
        .arg(format!("{{{u}}}:c"))
        .arg(&ta)
        .arg(&tb)
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 2);
    let v: i64 = redis::cmd("EVAL")
        .arg("return redis.call('SCARD', KEYS[1])")
        .arg(1)
        .arg(format!("{{{u}}}:c"))
        .query(&mut c)
        .unwrap();
    assert_eq!(v, 2);
    // An empty tag is no tag: the whole key is hashed.
    let _: () = redis::cmd("SET").arg("{}x").arg("1").query(&mut c).unwrap();
    let mut d = direct(s.cluster.owner("{}x"));
    let v: String = redis::cmd("GET").arg("{}x").query(&mut d).unwrap();
    assert_eq!(v, "1");
}

#[test]
fn transactions_run_on_the_master_of_their_slot() {
    let s = setup();
    let mut c = s.proxy.client();
    let u = unique("tx");
    let k = format!("{{{u}}}:n");
    let v: Vec<i64> = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg(&k)
        .cmd("INCR")
        .arg(&k)
        .query(&mut c)
        .unwrap();
    assert_eq!(v, vec![1, 2]);
    // A transaction over two slots is refused as a whole.
    let r: redis::RedisResult<Vec<i64>> = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg(format!("{u}:a"))
        .cmd("INCR")
        .arg(format!("{u}:b"))
        .query(&mut c);
    let e = r.unwrap_err().to_string().to_lowercase();
    assert!(e.contains("execabort") || e.contains("crossslot"), "{e}");
    let n: i64 = redis::cmd("EXISTS")
        .arg(format!("{u}:a"))
        .arg(format!("{u}:b"))
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 0, "nothing of the refused transaction ran");
    // WATCH + MULTI/EXEC on the watched key's master.
    let _: () = redis::cmd("WATCH").arg(&k).query(&mut c).unwrap();
    let v: Vec<i64> = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg(&k)
        .query(&mut c)
        .unwrap();
    assert_eq!(v, vec![3]);
}

#[test]
fn keys_dbsize_and_scan_cover_every_master() {
    let s = setup();
    let mut c = s.proxy.client();
    let u = unique("scan");
    let keys = spread(&u, 40);
    for k in &keys {
        let _: () = redis::cmd("SET").arg(k).arg(1).query(&mut c).unwrap();
    }
    let mut listed: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{u}:*"))
        .query(&mut c)
        .unwrap();
    listed.sort();
    let mut want = keys.clone();
    want.sort();
    assert_eq!(listed, want);
    let mut scanned = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{u}:*"))
            .arg("COUNT")
            .arg(1000)
            .query(&mut c)
            .unwrap();
        scanned.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    scanned.sort();
    scanned.dedup();
    assert_eq!(scanned, want);
    let total: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    let mut sum = 0;
    for n in &s.cluster.nodes {
        let mut d = direct(n);
        let k: i64 = redis::cmd("DBSIZE").query(&mut d).unwrap();
        sum += k;
    }
    assert!(total >= 40 && (total - sum).abs() < 40, "{total} vs {sum}");
}

#[test]
fn a_pipeline_across_slots_gets_its_replies_in_order() {
    let s = setup();
    let u = unique("pipe");
    let mut raw = s.proxy.raw();
    let mut bytes = Vec::new();
    for i in 0..200 {
        let k = format!("{u}:{i}");
        bytes.extend(encode(&[b"SET", k.as_bytes(), i.to_string().as_bytes()]));
        bytes.extend(encode(&[b"GET", k.as_bytes()]));
    }
    raw.send(&bytes);
    for i in 0..200 {
        assert_eq!(raw.read(), b"+OK\r\n");
        let v = i.to_string();
        assert_eq!(raw.read(), format!("${}\r\n{v}\r\n", v.len()).into_bytes());
    }
}

#[test]
fn auth_applies_on_every_master_the_client_uses() {
    let s = setup();
    let user = unique("acl");
    for n in &s.cluster.nodes {
        let mut d = direct(n);
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&user)
            .arg("on")
            .arg(">pw")
            .arg("~ro:*")
            .arg("+@read")
            .arg("+@connection")
            .arg("+acl|whoami")
            .query(&mut d)
            .unwrap();
    }
    let mut c = s.proxy.client();
    let _: () = redis::cmd("AUTH")
        .arg(&user)
        .arg("pw")
        .query(&mut c)
        .unwrap();
    // Whatever master a key lives on, the client acts as its ACL user there.
    for k in spread(&unique("ro"), 12) {
        let e = err(&mut c, &["SET", &k, "1"]);
        assert!(e.starts_with("NOPERM"), "{k}: {e}");
    }
    let who: String = redis::cmd("ACL").arg("WHOAMI").query(&mut c).unwrap();
    assert_eq!(who, user);
}

#[test]
fn a_client_that_leaves_while_blocked_leaves_nothing_blocked() {
    let s = setup();
    let u = unique("blk");
    let keys = spread(&u, 6);
    let mut raw = s.proxy.raw();
    // Touch every master first, then block on one.
    for k in &keys {
        raw.cmd(&[b"GET", k.as_bytes()]);
        raw.read();
    }
    raw.cmd(&[b"BLPOP", keys[0].as_bytes(), b"0"]);
    let owner = s.cluster.owner(&keys[0]);
    eventually("the client blocks on its master", || blocked(owner) >= 1);
    drop(raw);
    eventually("no client stays blocked", || blocked(owner) == 0);
}

/// CLIENT ID is one id across the masters, and CLIENT UNBLOCK from another client finds the
/// client on whichever master it is blocked (not its first), as on one Redis.
#[test]
fn client_unblock_finds_a_client_blocked_on_any_master() {
    let s = setup();
    let u = unique("unblock");
    let keys = spread(&u, 12);
    let mut a = named_client(&s.proxy, &u);
    // Every master touched; its first master is the first key's.
    for k in &keys {
        a.cmd(&[b"GET", k.as_bytes()]);
        a.read();
    }
    a.cmd(&[b"CLIENT", b"ID"]);
    let id_line = a.read();
    let id = std::str::from_utf8(&id_line[1..])
        .unwrap()
        .trim()
        .to_string();
    let home = s.cluster.owner(&keys[0]).port;
    let elsewhere: Vec<&String> = keys
        .iter()
        .filter(|k| s.cluster.owner(k).port != home)
        .collect();
    let mut b = s.proxy.client();
    let b_id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut b).unwrap();
    assert_ne!(b_id.to_string(), id, "each client has its own id");

    // Unblocked as by a timeout: BLPOP answers nil.
    a.cmd(&[b"BLPOP", elsewhere[0].as_bytes(), b"0"]);
    let owner = s.cluster.owner(elsewhere[0]);
    eventually(
        "the client blocks on a master that is not its first",
        || blocked_named(&mut direct(owner), &u),
    );
    assert_eq!(q(&mut b, &["CLIENT", "UNBLOCK", &id]), Value::Int(1));
    assert_eq!(a.read(), b"*-1\r\n");

    // Unblocked with an error, on another master.
    let other = elsewhere
        .iter()
        .find(|k| s.cluster.owner(k).port != owner.port)
        .unwrap_or(&elsewhere[0]);
    a.cmd(&[b"BRPOP", other.as_bytes(), b"0"]);
    let owner = s.cluster.owner(other);
    eventually("the client blocks again", || {
        blocked_named(&mut direct(owner), &u)
    });
    assert_eq!(
        q(&mut b, &["CLIENT", "UNBLOCK", &id, "ERROR"]),
        Value::Int(1)
    );
    assert!(a.read().starts_with(b"-UNBLOCKED"));

    // Not blocked, unknown, misspelt: as Redis answers.
    assert_eq!(q(&mut b, &["CLIENT", "UNBLOCK", &id]), Value::Int(0));
    assert_eq!(
        q(&mut b, &["CLIENT", "UNBLOCK", "987654321"]),
        Value::Int(0)
    );
    let e = err(&mut b, &["CLIENT", "UNBLOCK", &id, "NOW"]);
    assert!(e.contains("TIMEOUT or ERROR"), "{e}");
    // The client goes on as before.
    a.cmd(&[b"PING"]);
    assert_eq!(a.read(), b"+PONG\r\n");
}

/// RANDOMKEY finds keys wherever they live, and a server knob (DEBUG
/// SET-ACTIVE-EXPIRE, as CONFIG SET) holds on every master.
#[test]
fn randomkey_and_server_knobs_cover_every_master() {
    // A cluster of its own: FLUSHALL and expiry tests beside it would move its keys.
    let cluster = ClusterNodes::start(3);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |_| {});
    let s = Setup { cluster, proxy };
    let mut c = s.proxy.client();
    let u = unique("rk");
    let keys = spread(&u, 3);
    for k in &keys {
        let _: () = redis::cmd("SET").arg(k).arg(1).query(&mut c).unwrap();
    }
    // Every master's key is found over enough draws.
    let mut masters_seen = std::collections::HashSet::new();
    for _ in 0..300 {
        let k: Option<String> = redis::cmd("RANDOMKEY").query(&mut c).unwrap();
        let k = k.expect("a key");
        masters_seen.insert(s.cluster.owner(&k).port);
        if masters_seen.len() == 3 {
            break;
        }
    }
    assert_eq!(masters_seen.len(), 3, "RANDOMKEY reaches every master");
    let _: () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query(&mut c)
        .unwrap();
    let short = spread(&format!("{u}-ttl"), 3);
    for k in &short {
        let _: () = redis::cmd("PSETEX")
            .arg(k)
            .arg(50)
            .arg(1)
            .query(&mut c)
            .unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(400));
    // Not expired actively on any master: each key is still in its master's count of keys in
    // its slot, until it is read (counted first, asserted once active expiry is back on).
    let mut kept = Vec::new();
    for k in &short {
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(k)
            .query(&mut c)
            .unwrap();
        let n: i64 = redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot)
            .query(&mut direct(s.cluster.owner(k)))
            .unwrap();
        kept.push((k, n));
    }
    let _: () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(1)
        .query(&mut c)
        .unwrap();
    for (k, n) in kept {
        assert!(n >= 1, "{k} was expired actively");
    }
}

/// INFO through memproxy reads the cluster as one Redis: a client blocked on any master counts,
/// and the keyspace line adds up every master's keys (as DBSIZE does); the rest is one master's.
/// A cluster of its own: the shared one's counts move with the tests beside this one.
#[test]
fn info_adds_up_the_masters() {
    let cluster = ClusterNodes::start(3);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |_| {});
    let s = Setup { cluster, proxy };
    let mut c = s.proxy.client();
    let field = |info: &str, name: &str| -> i64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(-1)
    };
    let blocked_now = |c: &mut redis::Connection| -> i64 {
        let info: String = redis::cmd("INFO").arg("clients").query(c).unwrap();
        field(&info, "blocked_clients")
    };
    let u = unique("info");
    // Block a client on a key of every master in turn: INFO sees it wherever it waits.
    for k in spread(&u, 3) {
        assert_eq!(blocked_now(&mut c), 0);
        let mut raw = s.proxy.raw();
        raw.cmd(&[b"BLPOP", k.as_bytes(), b"0"]);
        eventually("INFO counts the blocked client", || {
            blocked_now(&mut c) == 1
        });
        drop(raw);
        eventually("and no more once it left", || blocked_now(&mut c) == 0);
    }
    let keys = spread(&format!("{u}-k"), 30);
    for k in &keys {
        let _: () = redis::cmd("SET").arg(k).arg(1).query(&mut c).unwrap();
    }
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    let db0 = info
        .lines()
        .find_map(|l| l.strip_prefix("db0:keys="))
        .and_then(|v| v.split(',').next()?.parse::<i64>().ok())
        .expect("a db0 line");
    let sum: i64 = s
        .cluster
        .nodes
        .iter()
        .map(|n| redis::cmd("DBSIZE").query::<i64>(&mut direct(n)).unwrap())
        .sum();
    assert_eq!(db0, sum);
    assert!(db0 >= 30, "{db0}");
    assert!(info.contains("redis_version:"), "the rest is one master's");
    assert_eq!(info.matches("# Server").count(), 1);
}

fn blocked(r: &Redis) -> i64 {
    let mut d = direct(r);
    let info: String = redis::cmd("INFO").arg("clients").query(&mut d).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1)
}

#[test]
fn a_moved_slot_is_followed() {
    // A cluster of its own: slots move.
    let cluster = ClusterNodes::start(3);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |_| {});
    let mut c = proxy.client();
    let key = "{moving}:k";
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("before")
        .query(&mut c)
        .unwrap();
    let from = cluster.owner(key);
    let to = cluster.nodes.iter().find(|n| n.port != from.port).unwrap();
    let slot = cluster.keyslot(key);
    cluster.begin_move(slot, from, to);
    // Mid-move: a new key of the slot goes to the importing side by ASK.
    let _: () = redis::cmd("SET")
        .arg("{moving}:new")
        .arg("during")
        .query(&mut c)
        .unwrap();
    cluster.migrate_keys(slot, from, to, 1, Duration::ZERO);
    let v: String = redis::cmd("GET").arg(key).query(&mut c).unwrap();
    assert_eq!(v, "before", "ASK followed mid-move");
    cluster.end_move(slot, to);
    let v: String = redis::cmd("GET").arg(key).query(&mut c).unwrap();
    assert_eq!(v, "before", "MOVED followed after the move");
    let v: String = redis::cmd("GET").arg("{moving}:new").query(&mut c).unwrap();
    assert_eq!(v, "during");
    let mut d = direct(to);
    let v: String = redis::cmd("GET").arg("{moving}:new").query(&mut d).unwrap();
    assert_eq!(
        v, "during",
        "the write made mid-move landed on the new owner, once"
    );
    let mut d = direct(from);
    let n: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut d)
        .unwrap();
    assert_eq!(n, 0, "nothing of the slot stays on the old owner");
    // A slot that no master serves: Redis Cluster's own CLUSTERDOWN, and the rest still served.
    let mut dto = direct(to);
    let _: () = redis::cmd("CLUSTER")
        .arg("DELSLOTS")
        .arg(slot)
        .query(&mut dto)
        .unwrap();
    let e = err(&mut c, &["GET", key]);
    assert!(e.starts_with("CLUSTERDOWN"), "{e}");
    let _: () = redis::cmd("SET")
        .arg("{elsewhere}:k")
        .arg("1")
        .query(&mut c)
        .unwrap();
}

/// Users whose data lands on every master (by their hash tag).
fn users_on_every_master(s: &Setup, prefix: &str) -> Vec<String> {
    let mut seen = std::collections::HashMap::new();
    for i in 0..200 {
        let u = format!("{prefix}-{i}");
        seen.entry(s.cluster.owner(&format!("{{{u}}}")).port)
            .or_insert(u);
        if seen.len() == 3 {
            break;
        }
    }
    seen.into_values().collect()
}

#[test]
fn memories_live_on_their_users_master_and_recall_finds_them() {
    let s = setup();
    let mut c = s.proxy.client();
    let users = users_on_every_master(s, &unique("mu"));
    assert_eq!(users.len(), 3);
    let mut ids = Vec::new();
    for u in &users {
        let r = q(
            &mut c,
            &[
                "MEM.REMEMBER",
                &format!("{u} keeps a sourdough starter called Bubbles"),
                "USER",
                u,
                "KIND",
                "semantic",
            ],
        );
        let id = as_str(get(&r, "id"));
        assert!(id.starts_with(&format!("{{{u}}}:")), "{id}");
        // The document is on the master of the user's slot, under the guide's prefix.
        let mut d = direct(s.cluster.owner(&format!("{{{u}}}")));
        let doc: String = redis::cmd("JSON.GET")
            .arg(format!("agent:mem:{id}"))
            .arg("$.user")
            .query(&mut d)
            .unwrap();
        assert_eq!(doc, format!("[\"{u}\"]"));
        ids.push(id);
    }
    for (u, id) in users.iter().zip(&ids) {
        let hits = q(
            &mut c,
            &[
                "MEM.RECALL",
                "what is the name of my bread starter?",
                "USER",
                u,
                "MODE",
                "vector",
                "THRESHOLD",
                "0.9",
            ],
        );
        let found: Vec<String> = items(&hits).iter().map(|h| as_str(get(h, "id"))).collect();
        assert_eq!(
            found,
            vec![id.clone()],
            "{u} finds its memory and only its own"
        );
        let auto = q(
            &mut c,
            &[
                "MEM.RECALL",
                "what is the name of my bread starter?",
                "USER",
                u,
            ],
        );
        assert!(items(&auto).len() <= 1);
    }
    // Dedup runs on the user's master: the same text again is the same memory.
    let again = q(
        &mut c,
        &[
            "MEM.REMEMBER",
            &format!("{} keeps a sourdough starter called Bubbles", users[0]),
            "USER",
            &users[0],
            "KIND",
            "semantic",
        ],
    );
    assert_eq!(as_str(get(&again, "id")), ids[0]);
    assert_eq!(as_i64(get(&again, "deduped")), 1);
    // LIST, FORGET by id (the id routes to its master), FORGET a whole scope.
    let listed = q(&mut c, &["MEM.LIST", "USER", &users[1]]);
    assert_eq!(items(&listed).len(), 1);
    assert_eq!(as_i64(&q(&mut c, &["MEM.FORGET", &ids[1]])), 1);
    assert_eq!(items(&q(&mut c, &["MEM.LIST", "USER", &users[1]])).len(), 0);
    assert_eq!(as_i64(&q(&mut c, &["MEM.FORGET", "USER", &users[2]])), 1);
    // MEM.INFO counts every master's index.
    let info = q(&mut c, &["MEM.INFO"]);
    assert!(as_i64(get(&info, "num_docs")) >= 1);
    // Every master has an index of its own, named for a slot it serves.
    for n in &s.cluster.nodes {
        let mut d = direct(n);
        let list: Vec<String> = redis::cmd("FT._LIST").query(&mut d).unwrap();
        assert_eq!(list.len(), 1, "{list:?}");
        assert!(list[0].starts_with("agentmem:idx{"), "{list:?}");
    }
}

#[test]
fn a_turn_and_its_session_live_with_the_user() {
    let s = setup();
    let mut c = s.proxy.client();
    let users = users_on_every_master(s, &unique("tu"));
    for u in &users {
        let t = format!("thread-{u}");
        q(
            &mut c,
            &["MEM.REMEMBER", "The user is allergic to peanuts", "USER", u],
        );
        let out = q(
            &mut c,
            &[
                "MEM.TURN",
                &t,
                "user",
                "Can I eat satay sauce?",
                "USER",
                u,
                "REMEMBER",
                "EPISODIC",
            ],
        );
        assert_eq!(as_i64(get(&out, "turn_count")), 1);
        let session = q(&mut c, &["MEM.SESSION", "GET", &t, "USER", u]);
        assert_eq!(as_str(get(&session, "user")), *u);
        assert_eq!(as_i64(get(&session, "turn_count")), 1);
        let events = q(&mut c, &["MEM.EVENTS", &t, "USER", u]);
        assert!(!items(&events).is_empty());
        // The session hash carries the user's tag, on the user's master.
        let mut d = direct(s.cluster.owner(&format!("{{{u}}}")));
        let n: i64 = redis::cmd("EXISTS")
            .arg(format!("agent:session:{{{u}}}:{t}"))
            .query(&mut d)
            .unwrap();
        assert_eq!(n, 1);
        // Without USER a thread cannot be found in cluster mode: one clear error.
        let e = err(&mut c, &["MEM.SESSION", "GET", &t]);
        assert!(e.contains("USER"), "{e}");
        // Another user's name does not open it.
        let other = q(&mut c, &["MEM.SESSION", "GET", &t, "USER", "mallory"]);
        assert_eq!(other, Value::Nil);
    }
}

#[test]
fn hostile_user_names_keep_their_data_together() {
    let s = setup();
    let mut c = s.proxy.client();
    for u in ["{", "}", "a}b", "{x}", "{}", "~61", "~", "with space"] {
        let r = q(
            &mut c,
            &[
                "MEM.REMEMBER",
                "The user likes green tea",
                "USER",
                u,
                "NODEDUP",
            ],
        );
        let id = as_str(get(&r, "id"));
        let hits = q(
            &mut c,
            &[
                "MEM.RECALL",
                "green tea",
                "USER",
                u,
                "MODE",
                "vector",
                "THRESHOLD",
                "1",
            ],
        );
        let found: Vec<String> = items(&hits).iter().map(|h| as_str(get(h, "id"))).collect();
        assert!(found.contains(&id), "{u:?}: {found:?}");
        for h in items(&hits) {
            assert_eq!(as_str(get(h, "user")), u);
        }
        assert_eq!(as_i64(&q(&mut c, &["MEM.FORGET", &id])), 1, "{u:?}");
    }
}

#[test]
fn flushall_through_memproxy_and_every_master_gets_its_index_again() {
    // A cluster of its own: FLUSHALL reaches every master.
    let cluster = ClusterNodes::start(3);
    let proxy = Proxy::start(&cluster.nodes[2].url(), |_| {});
    let s = Setup { cluster, proxy };
    let mut c = s.proxy.client();
    let users = users_on_every_master(&s, "flush");
    for u in &users {
        q(
            &mut c,
            &["MEM.REMEMBER", "The user sails on weekends", "USER", u],
        );
    }
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 0);
    for u in &users {
        let r = q(
            &mut c,
            &["MEM.REMEMBER", "The user sails on weekends", "USER", u],
        );
        assert_eq!(
            as_i64(get(&r, "deduped")),
            0,
            "{u}: written once, not found twice"
        );
        let hits = q(
            &mut c,
            &[
                "MEM.RECALL",
                "what do I do on weekends?",
                "USER",
                u,
                "MODE",
                "vector",
                "THRESHOLD",
                "1",
            ],
        );
        assert_eq!(items(&hits).len(), 1, "{u}");
    }
}

#[test]
fn a_users_slot_moves_while_memproxy_serves_them() {
    let cluster = ClusterNodes::start(3);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |_| {});
    let user = "mover";
    let tag = format!("{{{user}}}");
    let from = cluster.owner(&tag);
    let to = cluster.nodes.iter().find(|n| n.port != from.port).unwrap();
    let mut c = proxy.client();
    let mut written = Vec::new();
    for i in 0..20 {
        let r = q(
            &mut c,
            &[
                "MEM.REMEMBER",
                &format!("Fact number {i} about the user's garden"),
                "USER",
                user,
                "NODEDUP",
            ],
        );
        written.push(as_str(get(&r, "id")));
    }
    // A writer that keeps remembering (and recalling) while the slot moves.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let url = proxy.url();
        std::thread::spawn(move || {
            let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
            let mut ids = Vec::new();
            let mut i = 100;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r: redis::RedisResult<Value> = redis::cmd("MEM.REMEMBER")
                    .arg(format!("Fact number {i} about the user's garden"))
                    .arg("USER")
                    .arg("mover")
                    .arg("NODEDUP")
                    .query(&mut c);
                match r {
                    Ok(v) => ids.push(as_str(get(&v, "id"))),
                    Err(e) => panic!("a write during the move failed: {e}"),
                }
                let _: Value = redis::cmd("MEM.RECALL")
                    .arg("the garden")
                    .arg("USER")
                    .arg("mover")
                    .query(&mut c)
                    .expect("a recall during the move");
                i += 1;
            }
            ids
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let slot = cluster.keyslot(&tag);
    // A few keys at a time, as redis-cli --cluster reshard does.
    cluster.begin_move(slot, from, to);
    cluster.migrate_keys(slot, from, to, 5, Duration::from_millis(30));
    cluster.end_move(slot, to);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let during = writer.join().unwrap();
    assert!(
        during.len() >= 3,
        "writes ran during the move: {}",
        during.len()
    );
    eprintln!("{} memories written while the slot moved", during.len());
    written.extend(during);
    // Every acknowledged memory is there once, on the new owner, and recall finds it.
    let listed = q(&mut c, &["MEM.LIST", "USER", user, "LIMIT", "0", "1000"]);
    let mut ids: Vec<String> = items(&listed)
        .iter()
        .map(|h| as_str(get(h, "id")))
        .collect();
    ids.sort();
    let mut want = written.clone();
    want.sort();
    assert_eq!(ids, want, "every acknowledged write, once");
    let n: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut direct(from))
        .unwrap();
    assert_eq!(n, 0);
    for (i, id) in written.iter().enumerate().step_by(7) {
        let text: String = {
            let mut d = direct(to);
            let t: String = redis::cmd("JSON.GET")
                .arg(format!("agent:mem:{id}"))
                .arg("$.text")
                .query(&mut d)
                .unwrap();
            t.trim_matches(|c| c == '[' || c == ']' || c == '"')
                .to_string()
        };
        let hits = q(
            &mut c,
            &[
                "MEM.RECALL",
                &text,
                "USER",
                user,
                "MODE",
                "vector",
                "K",
                "1",
            ],
        );
        assert_eq!(
            as_str(get(&items(&hits)[0], "id")),
            *id,
            "memory {i} found on its new master"
        );
    }
}

/// A master killed while requests of one pipeline wait: every one not answered yet gets the
/// error line (those to other masters and the MEM.* after them too), then the client is closed,
/// as in single mode (`passthrough::upstream_killed_with_requests_in_flight`).
#[test]
fn a_killed_master_answers_every_outstanding_request() {
    let mut cluster = ClusterNodes::start(3);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |c| c.op_timeout_ms = 1000);
    let key = (0..200)
        .map(|i| format!("{{killed-{i}}}"))
        .find(|k| cluster.owner(k).port != cluster.nodes[0].port)
        .unwrap();
    let victim = cluster.owner(&key).port;
    let mut c = proxy.raw();
    // The client's first master is nodes[0] (PING), its BLPOP waits on another.
    c.cmd(&[b"PING"]);
    assert_eq!(c.read_str(), "+PONG\r\n");
    let mut burst = encode(&[b"BLPOP", key.as_bytes(), b"0"]);
    burst.extend(encode(&[b"PING"]));
    burst.extend(encode(&[b"MEM.PING"]));
    // Behind them: requests whose replies are off (owed nothing), CLIENT REPLY ON (answered) and
    // an UNSUBSCRIBE of three channels (three replies): seven errors, as in single mode.
    for r in [
        &[&b"CLIENT"[..], b"REPLY", b"OFF"][..],
        &[b"GET", key.as_bytes()],
        &[b"MEM.PING"],
        &[b"CLIENT", b"REPLY", b"ON"],
        &[b"UNSUBSCRIBE", b"a", b"b", b"c"],
    ] {
        burst.extend(encode(r));
    }
    c.send(&burst);
    let mut d = direct(cluster.owner(&key));
    eventually("the client blocks", || blocked_clients(&mut d) >= 1);
    let i = cluster.nodes.iter().position(|n| n.port == victim).unwrap();
    let started = std::time::Instant::now();
    cluster.nodes[i].kill();
    for _ in 0..7 {
        let r = c.read_str();
        assert!(r.starts_with("-ERR upstream connection lost"), "{r}");
    }
    assert!(c.closed());
    assert!(started.elapsed() < Duration::from_secs(5));
    // A master that cannot be reached is worded as single mode words an upstream it cannot reach.
    let mut late = proxy.raw();
    late.cmd(&[b"GET", key.as_bytes()]);
    let r = late.read_str();
    assert!(r.starts_with("-ERR upstream unavailable: "), "{r}");
    assert!(late.closed());
}

#[test]
fn a_killed_master_is_followed_to_its_promoted_replica() {
    let mut cluster = ClusterNodes::start_with_replicas(3, 1);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |_| {});
    // A user whose master is not the node memproxy was pointed at.
    let user = (0..200)
        .map(|i| format!("fo-{i}"))
        .find(|u| cluster.owner(&format!("{{{u}}}")).port != cluster.nodes[0].port)
        .unwrap();
    let victim = cluster.owner(&format!("{{{user}}}")).port;
    let mut c = proxy.client();
    let mut ids = Vec::new();
    for i in 0..10 {
        // REPLICAS 1: acknowledged only once the replica has it.
        let r = q(
            &mut c,
            &[
                "MEM.REMEMBER",
                &format!("Failover fact {i}"),
                "USER",
                &user,
                "NODEDUP",
                "REPLICAS",
                "1",
            ],
        );
        ids.push(as_str(get(&r, "id")));
    }
    let k = format!("{{{user}}}:plain");
    let _: () = redis::cmd("SET").arg(&k).arg("v").query(&mut c).unwrap();
    let _: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut c).unwrap();
    let i = cluster.nodes.iter().position(|n| n.port == victim).unwrap();
    cluster.nodes[i].kill();
    // The old client gets errors, not a hang; within seconds new clients reach the promoted
    // replica, which has every acknowledged memory.
    let started = std::time::Instant::now();
    let e = redis::cmd("GET").arg(&k).query::<String>(&mut c);
    assert!(e.is_err(), "the client of the killed master gets an error");
    let mut found = Vec::new();
    while started.elapsed() < Duration::from_secs(30) {
        let attempt = (|| -> redis::RedisResult<Vec<String>> {
            let mut c = redis::Client::open(proxy.url())?
                .get_connection_with_timeout(Duration::from_secs(5))?;
            c.set_read_timeout(Some(Duration::from_secs(10)))?;
            let v: String = redis::cmd("GET").arg(&k).query(&mut c)?;
            assert_eq!(v, "v");
            let listed: Value = redis::cmd("MEM.LIST")
                .arg("USER")
                .arg(&user)
                .arg("LIMIT")
                .arg(0)
                .arg(100)
                .query(&mut c)?;
            Ok(items(&listed)
                .iter()
                .map(|h| as_str(get(h, "id")))
                .collect())
        })();
        match attempt {
            Ok(ids) => {
                found = ids;
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
    eprintln!("followed the failover in {:?}", started.elapsed());
    found.sort();
    ids.sort();
    assert_eq!(
        found, ids,
        "every acknowledged memory is on the promoted replica"
    );
}

#[test]
fn users_that_share_a_master_never_see_each_other() {
    let s = setup();
    let mut c = s.proxy.client();
    let base = unique("iso");
    // Two users on one master (one index), and a name that tries to widen the filter.
    let a = format!("{base}-a");
    let owner = s.cluster.owner(&format!("{{{a}}}")).port;
    let b = (0..500)
        .map(|i| format!("{base}-b{i}"))
        .find(|u| s.cluster.owner(&format!("{{{u}}}")).port == owner)
        .unwrap();
    q(
        &mut c,
        &["MEM.REMEMBER", "The user's bank PIN is 4417", "USER", &a],
    );
    for u in [b.as_str(), "*", &format!("{a}}} | @user:{{{b}")] {
        for mode in ["auto", "vector", "keyword", "hybrid"] {
            let hits = q(
                &mut c,
                &[
                    "MEM.RECALL",
                    "what is my bank PIN?",
                    "USER",
                    u,
                    "MODE",
                    mode,
                    "THRESHOLD",
                    "2",
                ],
            );
            assert!(items(&hits).is_empty(), "{u} {mode}: {hits:?}");
        }
        assert_eq!(as_i64(&q(&mut c, &["MEM.FORGET", "USER", u])), 0);
    }
    assert_eq!(items(&q(&mut c, &["MEM.LIST", "USER", &a])).len(), 1);
}

#[test]
fn a_client_that_pipelines_across_slots_and_leaves_harms_nothing() {
    let s = setup();
    let u = unique("gone");
    let mut raw = s.proxy.raw();
    let mut bytes = Vec::new();
    for i in 0..2000 {
        let k = format!("{u}:{i}");
        bytes.extend(encode(&[b"SET", k.as_bytes(), b"1"]));
    }
    bytes.extend(encode(&[b"BLPOP", format!("{u}:list").as_bytes(), b"0"]));
    raw.send(&bytes);
    // The whole pipeline went out over every master, up to the BLPOP; then the client goes.
    let owner = s.cluster.owner(&format!("{u}:list"));
    eventually("the pipeline reaches its BLPOP", || blocked(owner) >= 1);
    drop(raw);
    eventually("nothing stays blocked", || blocked(owner) == 0);
    let mut d = direct(s.cluster.owner(&format!("{u}:1999")));
    let n: i64 = redis::cmd("EXISTS")
        .arg(format!("{u}:1999"))
        .query(&mut d)
        .unwrap();
    assert_eq!(n, 1, "the requests before it ran");
    // The proxy serves the next client at once.
    let mut c = s.proxy.client();
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn the_guide_routes_work_in_front_of_a_cluster() {
    let s = setup();
    let port = free_port();
    let _proxy = Proxy::start(&s.cluster.nodes[0].url(), |c| {
        c.http_listen = Some(format!("127.0.0.1:{port}"));
    });
    let addr = format!("127.0.0.1:{port}");
    eventually("the HTTP listener", || {
        http(&addr, "GET", "/readyz", "").0 == 200
    });
    for user in users_on_every_master(s, &unique("web")) {
        let scope = format!(r#""user":"{user}","namespace":"demo""#);
        let (code, body) = http(&addr, "POST", "/reset", &format!("{{{scope}}}"));
        assert_eq!(code, 200, "{body}");
        let (code, body) = http(
            &addr,
            "POST",
            "/turn",
            &format!(
                r#"{{{scope},"text":"I prefer concise answers without filler phrases.","kind":"semantic","role":"user"}}"#
            ),
        );
        assert_eq!(code, 200, "{body}");
        let (code, body) = http(
            &addr,
            "GET",
            &format!("/state?user={user}&namespace=demo"),
            "",
        );
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["session"]["user"], user.as_str(), "{body}");
        assert!(
            v["memories"].as_array().is_some_and(|m| !m.is_empty()),
            "{body}"
        );
        // The documents are on the user's master, tagged with the user.
        let mut d = direct(s.cluster.owner(&format!("{{{user}}}")));
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("agent:mem:{{{user}}}:*"))
            .query(&mut d)
            .unwrap();
        assert!(!keys.is_empty());
    }
}

#[test]
fn memories_move_from_one_redis_into_a_cluster_by_export_and_import() {
    let s = setup();
    // One Redis with memories of users that will land on every master.
    let single = Redis::start(&[]);
    let users = users_on_every_master(s, &unique("move"));
    {
        let p = Proxy::start(&single.url(), |_| {});
        let mut c = p.client();
        for u in &users {
            q(
                &mut c,
                &[
                    "MEM.REMEMBER",
                    "The user's cat is called Miso",
                    "USER",
                    u,
                    "KIND",
                    "semantic",
                ],
            );
            q(
                &mut c,
                &[
                    "MEM.REMEMBER",
                    "The user flew to Lisbon last week",
                    "USER",
                    u,
                ],
            );
        }
    }
    let (ok, out, err) = memproxy(
        &["export", "--upstream", &single.url(), "--embeddings"],
        None,
    );
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 6);
    let (ok, _, err) = memproxy(
        &[
            "import",
            "--upstream",
            &s.cluster.nodes[0].url(),
            "--trust-embeddings",
        ],
        Some(&out),
    );
    assert!(ok, "{err}");
    assert!(err.contains("6 written"), "{err}");
    let mut c = s.proxy.client();
    for u in &users {
        let listed = q(&mut c, &["MEM.LIST", "USER", u]);
        assert_eq!(items(&listed).len(), 2, "{u}");
        let hits = q(
            &mut c,
            &[
                "MEM.RECALL",
                "what is my cat's name?",
                "USER",
                u,
                "MODE",
                "vector",
                "K",
                "1",
            ],
        );
        assert_eq!(
            as_str(get(&items(&hits)[0], "text")),
            "The user's cat is called Miso"
        );
    }
    // And out of the cluster again: export reads every master.
    let node1 = s.cluster.nodes[1].url();
    let (ok, out, err) = memproxy(&["export", "--upstream", &node1, "--user", &users[2]], None);
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        out.contains(&format!("\"id\":\"{{{}}}:", users[2])),
        "{out}"
    );
    // Re-embedding reads every master (the same model: nothing to rewrite, every memory seen).
    let (ok, _, err) = memproxy(&["reembed", "--upstream", &node1], None);
    assert!(ok, "{err}");
    assert!(err.contains(", 0 re-embedded"), "{err}");
    // Every master's index already has memproxy's schema: migrate passes them all over.
    let (ok, _, err) = memproxy(&["migrate", "--upstream", &node1], None);
    assert!(ok, "{err}");
    assert_eq!(err.matches("nothing to migrate").count(), 3, "{err}");
}

/// `memproxy migrate` in front of a cluster: every master's index, here the guide's schema (scope
/// tags matching case-insensitively), becomes memproxy's, each on its own master, documents
/// untouched; run again it has nothing left to do; `--rollback` restores every master's original.
#[test]
fn migrate_covers_every_master() {
    let cluster = ClusterNodes::start(3);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |_| {});
    let s = Setup { cluster, proxy };
    let mut c = s.proxy.client();
    let users = users_on_every_master(&s, "mig");
    for u in &users {
        for text in [
            "The user is allergic to peanuts",
            "The user's bike is a red Brompton",
        ] {
            q(&mut c, &["MEM.REMEMBER", text, "USER", u]);
        }
    }
    // Each master's index replaced by one of the guide's schema over the same documents.
    let index_of = |node: &Redis| -> String {
        let list: Vec<String> = redis::cmd("FT._LIST").query(&mut direct(node)).unwrap();
        assert_eq!(list.len(), 1, "{list:?}");
        list[0].clone()
    };
    let names: Vec<String> = s.cluster.nodes.iter().map(index_of).collect();
    for (node, name) in s.cluster.nodes.iter().zip(&names) {
        let mut d = direct(node);
        let _: () = redis::cmd("FT.DROPINDEX").arg(name).query(&mut d).unwrap();
        let _: () = redis::cmd("FT.CREATE")
            .arg(guide_index(name, "agent:mem:"))
            .query(&mut d)
            .unwrap();
    }
    let node1 = s.cluster.nodes[1].url();
    let (ok, _, err) = memproxy(&["migrate", "--upstream", &node1], None);
    assert!(ok, "{err}");
    assert_eq!(err.matches("at step switched").count(), 3, "{err}");
    let info = |node: &Redis, name: &str| -> Value {
        redis::cmd("FT.INFO")
            .arg(name)
            .query(&mut direct(node))
            .unwrap()
    };
    for (node, name) in s.cluster.nodes.iter().zip(&names) {
        let i = info(node, name);
        assert_eq!(as_str(get(&i, "index_name")), format!("{name}.migrated"));
        assert!(format!("{:?}", get(&i, "attributes")).contains("CASESENSITIVE"));
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("agent:mem:*")
            .query(&mut direct(node))
            .unwrap();
        assert_eq!(keys.len(), 2, "no copies, nothing lost on {name}");
    }
    // Recall finds every user's memories through the migrated indexes.
    let fresh = Proxy::start(&s.cluster.nodes[2].url(), |_| {});
    let mut f = fresh.client();
    for u in &users {
        let hits = q(&mut f, &["MEM.RECALL", "food allergies?", "USER", u]);
        assert_eq!(items(&hits).len(), 1, "{u}: {hits:?}");
    }
    let (ok, _, err) = memproxy(&["migrate", "--upstream", &node1], None);
    assert!(ok && err.matches("at step switched").count() == 3, "{err}");
    let (ok, _, err) = memproxy(&["migrate", "--upstream", &node1, "--rollback"], None);
    assert!(ok, "{err}");
    for (node, name) in s.cluster.nodes.iter().zip(&names) {
        let i = info(node, name);
        assert_eq!(as_str(get(&i, "index_name")), *name, "the original again");
        assert!(!format!("{:?}", get(&i, "attributes")).contains("CASESENSITIVE"));
    }
}

#[test]
fn the_background_consolidator_covers_every_master() {
    let cluster = ClusterNodes::start(3);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |c| {
        c.consolidate_interval_seconds = 1;
        c.consolidate_redis_share = 0.5;
    });
    let s = Setup { cluster, proxy };
    let mut c = s.proxy.client();
    let users = users_on_every_master(&s, "cons");
    for u in &users {
        for (text, kind) in [
            ("The user drinks green tea every morning", "semantic"),
            ("The user drinks green tea every morning.", "semantic"),
            ("The user drinks green tea every morning", "episodic"),
        ] {
            q(
                &mut c,
                &["MEM.REMEMBER", text, "USER", u, "KIND", kind, "NODEDUP"],
            );
        }
    }
    eventually("a background pass over every master", || {
        let i = q(&mut c, &["MEM.INFO"]);
        as_i64(get(get(&i, "consolidator"), "memories_removed")) == 3
    });
    for u in &users {
        let left = q(&mut c, &["MEM.LIST", "USER", u]);
        let mut kinds: Vec<String> = items(&left)
            .iter()
            .map(|m| as_str(get(m, "kind")))
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            ["episodic", "semantic"],
            "{u}: the pair merged, the other kind kept"
        );
    }
    let i = q(&mut c, &["MEM.INFO"]);
    assert_eq!(get(get(&i, "consolidator"), "last_error"), &Value::Nil);
}

#[test]
fn client_reply_off_and_skip_hold_over_every_master() {
    let s = setup();
    let u = unique("reply");
    let mut raw = s.proxy.raw();
    let mut bytes = Vec::new();
    bytes.extend(encode(&[b"CLIENT", b"REPLY", b"OFF"]));
    for i in 0..20 {
        let k = format!("{u}:{i}");
        bytes.extend(encode(&[b"SET", k.as_bytes(), b"quiet"]));
    }
    bytes.extend(encode(&[
        b"MEM.REMEMBER",
        b"The user likes quiet mornings",
        b"USER",
        u.as_bytes(),
    ]));
    bytes.extend(encode(&[b"CLIENT", b"REPLY", b"ON"]));
    bytes.extend(encode(&[b"GET", format!("{u}:7").as_bytes()]));
    bytes.extend(encode(&[b"CLIENT", b"REPLY", b"SKIP"]));
    bytes.extend(encode(&[b"INCR", format!("{u}:n").as_bytes()]));
    bytes.extend(encode(&[b"INCR", format!("{u}:n").as_bytes()]));
    raw.send(&bytes);
    // Only ON's OK, the GET and the second INCR answer.
    assert_eq!(raw.read(), b"+OK\r\n");
    assert_eq!(raw.read(), b"$5\r\nquiet\r\n");
    assert_eq!(raw.read(), b":2\r\n");
    // Every silenced request ran.
    let mut c = s.proxy.client();
    let n: i64 = redis::cmd("EXISTS")
        .arg((0..20).map(|i| format!("{u}:{i}")).collect::<Vec<_>>())
        .query(&mut c)
        .unwrap();
    assert_eq!(n, 20);
    assert_eq!(items(&q(&mut c, &["MEM.LIST", "USER", &u])).len(), 1);
}

#[test]
fn a_manual_failover_is_followed_by_clients_already_connected() {
    let cluster = ClusterNodes::start_with_replicas(3, 1);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |_| {});
    let user = (0..200)
        .map(|i| format!("mf-{i}"))
        .find(|u| cluster.owner(&format!("{{{u}}}")).port == cluster.nodes[1].port)
        .unwrap();
    let mut c = proxy.client();
    let k = format!("{{{user}}}:k");
    let _: () = redis::cmd("SET")
        .arg(&k)
        .arg("before")
        .query(&mut c)
        .unwrap();
    let first = q(
        &mut c,
        &[
            "MEM.REMEMBER",
            "The user's boat is called Tern",
            "USER",
            &user,
            "REPLICAS",
            "1",
        ],
    );
    // CLUSTER FAILOVER on master 1's replica: the two swap roles without losing a write.
    let replica = &cluster.nodes[3 + 1];
    let mut r = direct(replica);
    let _: () = redis::cmd("CLUSTER").arg("FAILOVER").query(&mut r).unwrap();
    eventually("the replica is master", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut r)
            .unwrap_or_default();
        info.contains("role:master")
    });
    // The same client goes on: MOVED is followed, MEM.* find the new master.
    let v: String = redis::cmd("GET").arg(&k).query(&mut c).unwrap();
    assert_eq!(v, "before");
    let _: () = redis::cmd("SET")
        .arg(&k)
        .arg("after")
        .query(&mut c)
        .unwrap();
    let second = q(
        &mut c,
        &["MEM.REMEMBER", "The user sails on Sundays", "USER", &user],
    );
    let listed = q(&mut c, &["MEM.LIST", "USER", &user]);
    let mut ids: Vec<String> = items(&listed)
        .iter()
        .map(|h| as_str(get(h, "id")))
        .collect();
    ids.sort();
    let mut want = vec![as_str(get(&first, "id")), as_str(get(&second, "id"))];
    want.sort();
    assert_eq!(ids, want);
    let v: String = redis::cmd("GET").arg(&k).query(&mut r).unwrap();
    assert_eq!(v, "after", "the write went to the new master");
}

#[test]
fn a_transaction_memproxy_keeps_is_bounded() {
    let s = setup();
    let proxy = Proxy::start(&s.cluster.nodes[0].url(), |c| c.max_request_bytes = 4096);
    let mut c = proxy.client();
    let k = format!("{{{}}}:tx", unique("big"));
    let big = "x".repeat(3000);
    // Commands before the first key are kept (the transaction may move to the key's master):
    // at most one request's worth.
    let r: redis::RedisResult<Vec<String>> = redis::pipe()
        .atomic()
        .cmd("ECHO")
        .arg(&big)
        .cmd("ECHO")
        .arg(&big)
        .cmd("SET")
        .arg(&k)
        .arg("v")
        .query(&mut c);
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("max_request_bytes") || e.contains("EXECABORT"),
        "{e}"
    );
    let n: i64 = redis::cmd("EXISTS").arg(&k).query(&mut c).unwrap();
    assert_eq!(n, 0, "nothing of the refused transaction ran");
    // Once a key names the master, Redis queues the commands itself, as on one Redis.
    let r: Vec<String> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg(&k)
        .arg(&big)
        .cmd("SET")
        .arg(&k)
        .arg(&big)
        .query(&mut c)
        .unwrap();
    assert_eq!(r, ["OK", "OK"]);
    // The connection goes on.
    let _: () = redis::cmd("SET")
        .arg(&k)
        .arg("small")
        .query(&mut c)
        .unwrap();
}

#[test]
fn large_replies_to_a_cross_slot_pipeline_arrive_whole_and_in_order() {
    let s = setup();
    let proxy = Proxy::start(&s.cluster.nodes[0].url(), |c| {
        c.client_buffer_bytes = 64 * 1024
    });
    let u = unique("large");
    let mut c = proxy.client();
    let value = "v".repeat(100_000);
    for i in 0..30 {
        let _: () = redis::cmd("SET")
            .arg(format!("{u}:{i}"))
            .arg(format!("{i}{value}"))
            .query(&mut c)
            .unwrap();
    }
    let mut raw = proxy.raw();
    let mut bytes = Vec::new();
    for i in 0..30 {
        bytes.extend(encode(&[b"GET", format!("{u}:{i}").as_bytes()]));
    }
    raw.send(&bytes);
    for i in 0..30 {
        let want = format!("{i}{value}");
        assert_eq!(
            raw.read(),
            format!("${}\r\n{want}\r\n", want.len()).into_bytes(),
            "reply {i}"
        );
    }
}

#[test]
fn a_braced_index_name_is_refused_in_cluster_mode() {
    let s = setup();
    let url = s.cluster.nodes[0].url();
    let args = [
        "--upstream",
        &url,
        "--listen",
        "127.0.0.1:0",
        "--mem-index-name",
        "idx{x}",
    ];
    let (ok, _, err) = memproxy(&args, None);
    assert!(!ok, "{err}");
    assert!(err.contains("must not contain"), "{err}");
}

/// A slot half moved (issue 26, hostile cases): a multi-key command over keys of which some have
/// left answers Redis's own `TRYAGAIN` as one error line and the connection goes on; a key that
/// has left is followed there with ASK; once the move ends, both keys answer from the new owner.
#[test]
fn a_half_moved_slot_answers_tryagain_and_asks() {
    let cluster = ClusterNodes::start(3);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |_| {});
    let mut c = proxy.client();
    let (a, b) = ("{half}a", "{half}b");
    q(&mut c, &["SET", a, "1"]);
    q(&mut c, &["SET", b, "2"]);
    let slot = cluster.keyslot(a);
    let from = cluster.owner(a);
    let to = cluster
        .nodes
        .iter()
        .take(3)
        .find(|n| n.port != from.port)
        .unwrap();
    cluster.begin_move(slot, from, to);
    cluster.migrate(from, to, &[a.to_string()]);
    let e = err(&mut c, &["MGET", a, b]);
    assert!(e.starts_with("TRYAGAIN"), "{e}");
    assert_eq!(
        as_str(&q(&mut c, &["PING"])),
        "PONG",
        "the connection goes on"
    );
    assert_eq!(as_str(&q(&mut c, &["GET", a])), "1", "followed with ASK");
    assert_eq!(as_str(&q(&mut c, &["GET", b])), "2", "still on the source");
    cluster.migrate_keys(slot, from, to, 10, Duration::ZERO);
    cluster.end_move(slot, to);
    let both = q(&mut c, &["MGET", a, b]);
    assert_eq!(
        items(&both).iter().map(as_str).collect::<Vec<_>>(),
        ["1", "2"]
    );
}

#[test]
fn reads_follow_a_moved_slot_without_a_write_first() {
    // Issue 37: after a user's slot moved behind memproxy's back, a read-only MEM.* ran on the
    // old master (its search script declared no key, so Redis never answered MOVED) and found
    // nothing, for good. Only reads here after the move.
    let cluster = ClusterNodes::start(3);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |_| {});
    let user = "reader";
    let tag = format!("{{{user}}}");
    let from = cluster.owner(&tag);
    let to = cluster.nodes.iter().find(|n| n.port != from.port).unwrap();
    let mut c = proxy.client();
    let facts = [
        "The user keeps bees in the back garden.",
        "The user's sister lives in Valencia.",
        "The user plays the cello in a quartet.",
        "The user is allergic to penicillin.",
        "The user drives an old green Volvo.",
    ];
    let mut ids = Vec::new();
    for f in facts {
        let r = q(
            &mut c,
            &["MEM.REMEMBER", f, "USER", user, "KIND", "semantic"],
        );
        ids.push(as_str(get(&r, "id")));
    }
    q(
        &mut c,
        &[
            "MEM.TURN",
            "t1",
            "user",
            "Hello there",
            "USER",
            user,
            "REMEMBER",
            "SKIP",
        ],
    );
    // memproxy has the slot map with the user on `from`; now the slot moves without it.
    let slot = cluster.keyslot(&tag);
    cluster.begin_move(slot, from, to);
    cluster.migrate_keys(slot, from, to, 10, Duration::ZERO);
    cluster.end_move(slot, to);
    // Reads as a read-only user (no write commands; RediSearch 2.10 declares FT.SEARCH's index
    // a read-write key, so `%R~` key rights cannot run it at all).
    for n in &cluster.nodes {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("ro")
            .arg("on")
            .arg(">ropw")
            .arg("~*")
            .arg("+@all")
            .arg("-@write")
            .query(&mut direct(n))
            .unwrap();
    }
    let mut reader = proxy.client();
    let _: () = redis::cmd("AUTH")
        .arg("ro")
        .arg("ropw")
        .query(&mut reader)
        .unwrap();
    for mode in ["vector", "rank"] {
        let hits = q(
            &mut reader,
            &[
                "MEM.RECALL",
                "Who in the family lives in Spain?",
                "USER",
                user,
                "MODE",
                mode,
                "THRESHOLD",
                "2",
                "K",
                "5",
            ],
        );
        assert_eq!(items(&hits).len(), 5, "MODE {mode} finds every memory");
    }
    let listed = q(&mut reader, &["MEM.LIST", "USER", user]);
    let mut got: Vec<String> = items(&listed)
        .iter()
        .map(|h| as_str(get(h, "id")))
        .collect();
    got.sort();
    ids.sort();
    assert_eq!(got, ids, "MEM.LIST on the new owner");
    let session = q(&mut reader, &["MEM.SESSION", "GET", "t1", "USER", user]);
    assert!(!items(&session).is_empty(), "the session is found");
    let events = q(&mut reader, &["MEM.EVENTS", "t1", "USER", user]);
    assert!(!items(&events).is_empty(), "the events are found");
    let turn = q(
        &mut c,
        &[
            "MEM.TURN",
            "t1",
            "user",
            "Which instrument do I play?",
            "USER",
            user,
            "REMEMBER",
            "SKIP",
            "MODE",
            "vector",
            "THRESHOLD",
            "2",
        ],
    );
    assert!(
        !items(get(&turn, "recalled")).is_empty(),
        "the turn's recall"
    );
    // An erasure reaches the memories where they live now.
    let forgotten = q(&mut c, &["MEM.FORGET", "USER", user]);
    assert_eq!(as_i64(&forgotten), 5, "{forgotten:?}");
    let n: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut direct(from))
        .unwrap();
    assert_eq!(n, 0, "nothing was written on the old owner");
}

#[test]
fn sigterm_finishes_in_flight_replies_then_exits_zero() {
    let s = setup();
    sigterm_finishes_in_flight_replies(&s.cluster.nodes[0].url());
}

#[test]
fn malformed_request_gets_redis_protocol_error_and_close() {
    let s = setup();
    malformed_requests_are_refused_as_redis_does(&s.proxy);
}

#[test]
fn vanished_blocked_clients_leave_nothing_behind() {
    let s = setup();
    vanished_blocked_clients_leave_nothing(&s.proxy, |key| direct(s.cluster.owner(key)));
}

#[test]
fn replies_before_a_blocking_command_in_a_pipeline_arrive_first() {
    let s = setup();
    replies_before_a_blocking_command_arrive_first(&s.proxy, |key| direct(s.cluster.owner(key)));
}

#[test]
fn auth_and_hello_as_an_acl_user_on_every_master() {
    let s = setup();
    auth_and_hello_as_an_acl_user(&s.proxy, |args| on_every_master(s, args));
}

/// A MEM.* that times out on the master holding the client's WATCH keeps that connection (its
/// late replies dropped), and the WATCH with it, as in single mode.
#[test]
fn a_timed_out_mem_command_keeps_its_watch() {
    let cluster = ClusterNodes::start(1);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |c| c.op_timeout_ms = 300);
    common::a_timed_out_mem_command_keeps_its_watch(&proxy, || direct(&cluster.nodes[0]));
}

#[test]
fn exec_during_a_busy_script_answers_as_redis() {
    let cluster = ClusterNodes::start(1);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |_| {});
    let addr = format!("127.0.0.1:{}", cluster.nodes[0].port)
        .parse()
        .unwrap();
    common::exec_during_a_busy_script_answers_as_redis(
        &proxy,
        &mut direct(&cluster.nodes[0]),
        addr,
    );
}

#[test]
fn client_reply_is_checked_by_redis() {
    let s = setup();
    common::client_reply_is_checked_by_redis(&s.proxy, |args| on_every_master(s, args));
}

#[test]
fn state_changed_inside_multi_follows_exec() {
    common::state_changed_inside_multi_follows_exec(&setup().proxy);
}

#[test]
fn state_changed_under_client_reply_off_is_followed() {
    common::state_changed_under_client_reply_off_is_followed(&setup().proxy);
}

#[test]
fn tracking_invalidations_reach_an_idle_client() {
    common::tracking_invalidations_reach_an_idle_client(&setup().proxy);
}

#[test]
fn commands_memproxy_cannot_follow_inside_multi() {
    common::commands_memproxy_cannot_follow_inside_multi(&setup().proxy);
}

#[test]
fn skip_is_spent_on_a_mem_answered_by_the_proxy() {
    common::skip_is_spent_on_a_mem_answered_by_the_proxy(&setup().proxy);
}

#[test]
fn random_pipelines_are_answered_as_redis_answers_them() {
    // The reference is a plain Redis of its own (the keys of one pipeline share a slot).
    common::answers_as_redis_does(&setup().proxy, &shared().redis, 2, 300);
}

#[test]
fn the_sessions_answer_mem_verbs_alike() {
    // Single mode (a proxy in front of one Redis) against cluster mode, byte for byte.
    common::sessions_answer_mem_verbs_alike(&shared().proxy, &setup().proxy, 3, 300);
}

#[test]
fn an_idle_connection_closed_by_redis_closes_the_client() {
    let s = setup();
    common::an_idle_connection_closed_by_redis_closes_the_client(&s.proxy, |args| {
        on_every_master(s, args)
    });
}

#[test]
fn tracking_options_that_need_one_connection_are_refused() {
    let mut c = setup().proxy.raw();
    c.cmd(&[b"HELLO", b"3"]);
    c.read();
    for opt in [&[&b"REDIRECT"[..], b"5"][..], &[b"OPTIN"], &[b"OPTOUT"]] {
        let mut args: Vec<&[u8]> = vec![b"CLIENT", b"TRACKING", b"ON"];
        args.extend(opt);
        c.cmd(&args);
        let r = c.read_str();
        assert!(
            r.starts_with("-ERR CLIENT TRACKING REDIRECT, OPTIN and OPTOUT are not supported"),
            "{r}"
        );
    }
    c.cmd(&[b"CLIENT", b"TRACKINGINFO"]);
    let info = c.read_str();
    assert!(info.contains("off"), "{info}");
    // Inside a transaction too (the transaction then fails, as for other refusals there).
    let mut burst = encode(&[b"MULTI"]);
    burst.extend(encode(&[b"CLIENT", b"TRACKING", b"ON", b"OPTIN"]));
    burst.extend(encode(&[b"EXEC"]));
    c.send(&burst);
    assert_eq!(c.read_str(), "+OK\r\n");
    assert!(c.read_str().starts_with("-ERR CLIENT TRACKING REDIRECT"));
    assert!(c.read_str().starts_with("-EXECABORT"));
}

#[test]
fn a_refused_multi_opens_no_transaction() {
    let s = setup();
    common::a_refused_multi_opens_no_transaction(&s.proxy, |args| on_every_master(s, args));
}

#[test]
fn per_client_bounds() {
    let s = setup();
    bounds_refuse_one_client(&Proxy::start(&s.cluster.nodes[0].url(), bounded));
}

#[test]
fn inline_and_multibulk() {
    inline_and_multibulk_requests(&setup().proxy);
}

#[test]
fn ten_thousand_pipelined_in_one_write() {
    pipeline_of_ten_thousand(&setup().proxy);
}

#[test]
fn mixed_pipeline_keeps_order() {
    mixed_pipeline_in_order(&setup().proxy);
}

#[test]
fn pipelined_mem_verbs_apply_in_order() {
    common::pipelined_mem_verbs_apply_in_order(&setup().proxy);
}

#[test]
fn transactions() {
    transactions_refuse_mem_verbs(&setup().proxy);
}

#[test]
fn client_reply_off_and_skip() {
    client_reply_silences(&setup().proxy);
}

#[test]
fn resp3_mem_replies_are_maps() {
    resp3_mem_nulls_follow_the_protocol(&setup().proxy);
}

#[test]
fn blocking_command_released_by_another_client() {
    let s = setup();
    blocked_client_released(&s.proxy, |key| direct(s.cluster.owner(key)));
}

#[test]
fn command_table_knows_the_mem_verbs() {
    let s = setup();
    command_table_merges_the_mem_verbs(&s.proxy, &mut direct(&s.cluster.nodes[0]));
}

#[test]
fn unsubscribe_outside_subscribed_mode_keeps_mem_verbs() {
    let s = setup();
    unsubscribe_keeps_the_session(&s.proxy);
}

#[test]
fn metrics_count_the_same_things() {
    metrics_follow_requests(&setup().cluster.nodes[0].url());
}

#[test]
fn a_transaction_is_queued_by_redis_itself() {
    let s = setup();
    let mut c = s.proxy.client();
    let mut raw = s.proxy.raw();
    // Queue-time errors are Redis's own (an unknown command, a wrong arity), and EXEC aborts.
    let k = format!("{{{}}}:q", unique("tx"));
    raw.cmd(&[b"MULTI"]);
    assert_eq!(raw.read_str(), "+OK\r\n");
    raw.cmd(&[b"SET", k.as_bytes(), b"1"]);
    assert_eq!(raw.read_str(), "+QUEUED\r\n");
    raw.cmd(&[b"NOSUCHCOMMAND", b"x"]);
    assert!(raw.read_str().starts_with("-ERR unknown command"));
    raw.cmd(&[b"GET"]);
    assert!(raw.read_str().starts_with("-ERR wrong number of arguments"));
    raw.cmd(&[b"EXEC"]);
    assert!(raw.read_str().starts_with("-EXECABORT"));
    let n: i64 = redis::cmd("EXISTS").arg(&k).query(&mut c).unwrap();
    assert_eq!(n, 0);
    // Keyless commands first, then a key whose master is not the client's first: the
    // transaction moves there and runs whole.
    for u in users_on_every_master(s, &unique("tx")) {
        let k = format!("{{{u}}}:m");
        raw.cmd(&[b"MULTI"]);
        assert_eq!(raw.read_str(), "+OK\r\n");
        raw.cmd(&[b"PING"]);
        assert_eq!(raw.read_str(), "+QUEUED\r\n");
        raw.cmd(&[b"SET", k.as_bytes(), b"v"]);
        assert_eq!(raw.read_str(), "+QUEUED\r\n");
        raw.cmd(&[b"GET", k.as_bytes()]);
        assert_eq!(raw.read_str(), "+QUEUED\r\n");
        raw.cmd(&[b"EXEC"]);
        assert_eq!(raw.read_str(), "*3\r\n+PONG\r\n+OK\r\n$1\r\nv\r\n");
    }
    // DISCARD: nothing runs.
    raw.cmd(&[b"MULTI"]);
    assert_eq!(raw.read_str(), "+OK\r\n");
    raw.cmd(&[b"SET", k.as_bytes(), b"2"]);
    assert_eq!(raw.read_str(), "+QUEUED\r\n");
    raw.cmd(&[b"DISCARD"]);
    assert_eq!(raw.read_str(), "+OK\r\n");
    let n: i64 = redis::cmd("EXISTS").arg(&k).query(&mut c).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn the_compact_layout_on_a_cluster() {
    // A cluster of its own: the shared one's masters hold the guide layout's index.
    let cluster = ClusterNodes::start(3);
    let proxy = Proxy::start(&cluster.nodes[0].url(), |c| {
        c.storage = memproxy::config::Storage::Compact;
    });
    let s = Setup { cluster, proxy };
    let mut c = s.proxy.client();
    let users = users_on_every_master(&s, &unique("cu"));
    let filler: String = (0..30)
        .map(|i| format!("Line {i} of the ledger lists parcels and their weights. "))
        .collect();
    for u in &users {
        let long = format!("{filler}{u} hid the spare key under the third flowerpot.");
        let r = q(
            &mut c,
            &["MEM.REMEMBER", &long, "USER", u, "KIND", "semantic"],
        );
        let id = as_str(get(&r, "id"));
        let owner = s.cluster.owner(&format!("{{{u}}}"));
        let mut d = direct(owner);
        let t: String = redis::cmd("TYPE")
            .arg(format!("agent:mem:{id}"))
            .query(&mut d)
            .unwrap();
        assert_eq!(t, "hash");
        let windows: Vec<String> = redis::cmd("KEYS")
            .arg(format!("agent:mem:{id}#w*"))
            .query(&mut d)
            .unwrap();
        assert!(!windows.is_empty(), "the windows live beside the memory");
        q(
            &mut c,
            &["MEM.REMEMBER", "The user likes plums.", "USER", u],
        );
        let hits = q(
            &mut c,
            &["MEM.RECALL", "where is the spare key?", "USER", u],
        );
        let ids: Vec<String> = items(&hits).iter().map(|h| as_str(get(h, "id"))).collect();
        assert_eq!(ids, vec![id.clone()], "{u}: found by its later window");
        let hits = q(
            &mut c,
            &[
                "MEM.RECALL",
                "plums",
                "USER",
                u,
                "MODE",
                "vector",
                "THRESHOLD",
                "0.9",
            ],
        );
        assert_eq!(items(&hits).len(), 1, "{u}");
        let listed = q(&mut c, &["MEM.LIST", "USER", u]);
        let order: Vec<String> = items(&listed)
            .iter()
            .map(|h| as_str(get(h, "text")))
            .collect();
        assert_eq!(order.len(), 2);
        assert_eq!(
            order[0], "The user likes plums.",
            "newest first on a cluster node"
        );
        assert_eq!(as_i64(&q(&mut c, &["MEM.FORGET", &id])), 1);
        let left: Vec<String> = redis::cmd("KEYS")
            .arg(format!("agent:mem:{id}*"))
            .query(&mut d)
            .unwrap();
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(as_i64(&q(&mut c, &["MEM.FORGET", "USER", u])), 1);
        // A turn, and near-duplicates merged, on the user's master.
        let t = unique("ct");
        q(
            &mut c,
            &["MEM.TURN", &t, "user", "My cat is called Miso.", "USER", u],
        );
        let r = q(
            &mut c,
            &["MEM.TURN", &t, "user", "What is my cat called?", "USER", u],
        );
        assert_eq!(as_i64(get(&r, "turn_count")), 2);
        assert!(
            format!("{:?}", get(&r, "recalled")).contains("Miso"),
            "{r:?}"
        );
        for text in [
            "The user's dog is called Rex.",
            "The user's dog is named Rex.",
        ] {
            q(
                &mut c,
                &["MEM.REMEMBER", text, "USER", u, "NS", "pets", "NODEDUP"],
            );
        }
        let merged = q(&mut c, &["MEM.CONSOLIDATE", "USER", u, "NS", "pets"]);
        assert_eq!(items(&merged).len(), 1, "{merged:?}");
        assert_eq!(
            items(&q(&mut c, &["MEM.LIST", "USER", u, "NS", "pets"])).len(),
            1
        );
    }
    assert_eq!(as_str(get(&q(&mut c, &["MEM.INFO"]), "storage")), "compact");
}

//! `INFO` over a cluster's masters, read as one Redis: the client's first master's reply, with
//! the counters that add up across masters (blocked clients, keys, commands processed, expired
//! keys …) summed, and the keyspace lines (`db0:keys=…,expires=…`) of every master added up.
//! Everything else (version, role, memory, replication, per-command stats) is the first master's:
//! a per-node figure has no sum that means anything.

/// The `INFO` fields whose sum over the masters is the cluster's own figure.
const ADDITIVE: &[&str] = &[
    // clients
    "connected_clients",
    "blocked_clients",
    "tracking_clients",
    "pubsub_clients",
    "watching_clients",
    "clients_in_timeout_table",
    "total_watched_keys",
    "total_blocking_keys",
    "total_blocking_keys_on_nokey",
    // stats
    "total_connections_received",
    "total_commands_processed",
    "total_net_input_bytes",
    "total_net_output_bytes",
    "rejected_connections",
    "expired_keys",
    "expired_subkeys",
    "evicted_keys",
    "evicted_clients",
    "keyspace_hits",
    "keyspace_misses",
    "pubsub_channels",
    "pubsub_patterns",
    "pubsubshard_channels",
    "total_error_replies",
    "total_reads_processed",
    "total_writes_processed",
];

/// The payload of a bulk (`$`) or verbatim (`=`, `txt:` prefixed) reply, and how to write it
/// back.
fn text_of(frame: &[u8]) -> Option<(u8, &str)> {
    let kind = *frame.first()?;
    if kind != b'$' && kind != b'=' {
        return None;
    }
    let eol = frame.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&frame[1..eol]).ok()?.parse().ok()?;
    let body = frame.get(eol + 2..eol + 2 + len)?;
    let body = if kind == b'=' { body.get(4..)? } else { body };
    Some((kind, std::str::from_utf8(body).ok()?))
}

/// `db0:keys=1,expires=0,avg_ttl=0,subexpiry=0`: its counts by name.
fn db_counts(value: &str) -> Vec<(&str, i64)> {
    value
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k, v.parse().ok()?))
        })
        .collect()
}

/// The masters' `INFO` replies as one (`None` when the first is not a text reply: an error, say,
/// which is passed on as it is).
pub fn merge(replies: &[&[u8]]) -> Option<Vec<u8>> {
    let (kind, first) = text_of(replies.first()?)?;
    let others: Vec<&str> = replies[1..]
        .iter()
        .filter_map(|f| text_of(f).map(|(_, t)| t))
        .collect();
    let field = |text: &str, name: &str| -> Option<i64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    };
    // Every master's keyspace lines, summed by database (keys and expires; avg_ttl the first's).
    let mut dbs: Vec<(String, Vec<(String, i64)>)> = Vec::new();
    for text in std::iter::once(first).chain(others.iter().copied()) {
        for line in text.lines() {
            let Some((db, value)) = line.trim_end().split_once(':') else {
                continue;
            };
            if !(db.starts_with("db") && db[2..].parse::<u32>().is_ok()) {
                continue;
            }
            let counts = db_counts(value);
            match dbs.iter_mut().find(|(d, _)| d == db) {
                Some((_, acc)) => {
                    for (k, v) in counts {
                        if k == "avg_ttl" {
                            continue;
                        }
                        match acc.iter_mut().find(|(n, _)| n == k) {
                            Some((_, a)) => *a += v,
                            None => acc.push((k.to_string(), v)),
                        }
                    }
                }
                None => dbs.push((
                    db.to_string(),
                    counts
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                )),
            }
        }
    }
    dbs.sort_by_key(|(d, _)| d[2..].parse::<u32>().unwrap_or(0));
    let db_line = |(db, counts): &(String, Vec<(String, i64)>)| {
        let values: Vec<String> = counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{db}:{}", values.join(","))
    };
    let mut out = String::with_capacity(first.len() + 64);
    let mut in_keyspace = false;
    for line in first.split_inclusive('\n') {
        let bare = line.trim_end();
        if bare.starts_with('#') {
            if in_keyspace {
                // The masters' databases, where the first master's keyspace section ended.
                dbs.iter()
                    .for_each(|d| out.push_str(&(db_line(d) + "\r\n")));
                dbs.clear();
            }
            in_keyspace = bare.eq_ignore_ascii_case("# keyspace");
            out.push_str(line);
            continue;
        }
        if in_keyspace && bare.starts_with("db") && bare.contains(':') {
            continue;
        }
        if in_keyspace && bare.is_empty() {
            dbs.iter()
                .for_each(|d| out.push_str(&(db_line(d) + "\r\n")));
            dbs.clear();
            in_keyspace = false;
        }
        match bare.split_once(':').filter(|(k, _)| ADDITIVE.contains(k)) {
            Some((name, _)) => {
                let sum = std::iter::once(first)
                    .chain(others.iter().copied())
                    .filter_map(|t| field(t, name))
                    .sum::<i64>();
                out.push_str(&format!("{name}:{sum}\r\n"));
            }
            None => out.push_str(line),
        }
    }
    if in_keyspace {
        dbs.iter()
            .for_each(|d| out.push_str(&(db_line(d) + "\r\n")));
    }
    let mut frame = Vec::with_capacity(out.len() + 16);
    let body_len = out.len() + if kind == b'=' { 4 } else { 0 };
    frame.push(kind);
    frame.extend_from_slice(format!("{body_len}\r\n").as_bytes());
    if kind == b'=' {
        frame.extend_from_slice(b"txt:");
    }
    frame.extend_from_slice(out.as_bytes());
    frame.extend_from_slice(b"\r\n");
    Some(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(t: &str) -> Vec<u8> {
        format!("${}\r\n{t}\r\n", t.len()).into_bytes()
    }

    #[test]
    fn counters_and_keyspaces_add_up() {
        let a = bulk("# Server\r\nredis_version:8.2.3\r\n\r\n# Clients\r\nconnected_clients:2\r\nblocked_clients:0\r\n\r\n# Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=500,subexpiry=0\r\n");
        let b = bulk("# Server\r\nredis_version:8.2.3\r\n\r\n# Clients\r\nconnected_clients:1\r\nblocked_clients:1\r\n\r\n# Keyspace\r\ndb0:keys=4,expires=0,avg_ttl=0,subexpiry=0\r\n");
        let c = bulk("# Clients\r\nconnected_clients:1\r\nblocked_clients:0\r\n");
        let m = merge(&[&a, &b, &c]).unwrap();
        let (_, t) = text_of(&m).unwrap();
        assert!(t.contains("redis_version:8.2.3\r\n"), "{t}");
        assert!(t.contains("connected_clients:4\r\n"), "{t}");
        assert!(t.contains("blocked_clients:1\r\n"), "{t}");
        assert!(
            t.contains("db0:keys=7,expires=1,avg_ttl=500,subexpiry=0\r\n"),
            "{t}"
        );
        // A keyspace the first master lacks still shows, in its section.
        let empty = bulk("# Keyspace\r\n");
        let m = merge(&[&empty, &a]).unwrap();
        let (_, t) = text_of(&m).unwrap();
        assert_eq!(
            t,
            "# Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=500,subexpiry=0\r\n"
        );
        // RESP3's verbatim string stays one.
        let v = b"=23\r\ntxt:blocked_clients:2\r\n\r\n".to_vec();
        let m = merge(&[&v, &v]).unwrap();
        assert_eq!(m, b"=23\r\ntxt:blocked_clients:4\r\n\r\n".to_vec());
        // An error is not merged.
        assert!(merge(&[b"-ERR no\r\n", &a]).is_none());
    }
}

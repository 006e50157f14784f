//! `INFO` over a cluster's masters, read as one Redis: the client's first master's reply, with
//! what adds up across masters summed — the counters of [`ADDITIVE`] (blocked clients, commands
//! processed, expired keys …) and the per-name lines of the keyspace (`db0:keys=…,expires=…`),
//! command and error statistics (`cmdstat_get:calls=…,usec=…`, `errorstat_ERR:count=…`), a line
//! only some masters have included. Everything else (version, role, memory, replication) is the
//! first master's: a per-node figure has no sum that means anything.

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
    // persistence: writes not yet saved, the cluster's "dirty"
    "rdb_changes_since_last_save",
];

/// A line of `name:k=v,k=v` counts whose values add up by name across masters.
fn summed_line(name: &str) -> bool {
    name.starts_with("cmdstat_")
        || name.starts_with("errorstat_")
        || name
            .strip_prefix("db")
            .is_some_and(|n| n.parse::<u32>().is_ok())
}

/// The payload of a bulk (`$`) or verbatim (`=`, `txt:` prefixed) reply, and its kind.
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

/// One master's reply: its sections (the `# Name` line as written; `""` before the first) and
/// their `name:value` lines.
type Sections<'a> = Vec<(&'a str, Vec<(&'a str, &'a str)>)>;

fn sections(text: &str) -> Sections<'_> {
    let mut out: Sections = vec![("", Vec::new())];
    for line in text.lines().map(str::trim_end) {
        if line.starts_with('#') {
            out.push((line, Vec::new()));
        } else if let Some((k, v)) = line.split_once(':') {
            out.last_mut().expect("one at least").1.push((k, v));
        }
    }
    out
}

/// `a=1,b=2` summed with `c=3,a=4` → `a=5,b=2,c=3` (in first-seen order); `avg_ttl` stays the
/// first's, `usec_per_call` is `usec / calls` again.
fn add_counts(values: &[&str]) -> String {
    // Each count by name, and whether Redis writes it with decimals (usec_per_call).
    let mut acc: Vec<(&str, f64, bool)> = Vec::new();
    for (i, v) in values.iter().enumerate() {
        for kv in v.split(',') {
            let Some((k, text)) = kv.split_once('=') else {
                continue;
            };
            let Ok(n) = text.parse::<f64>() else { continue };
            match acc.iter_mut().find(|(name, ..)| *name == k) {
                Some((_, a, _)) if k != "avg_ttl" || i == 0 => *a += n,
                Some(_) => {}
                None => acc.push((k, n, text.contains('.'))),
            }
        }
    }
    let get = |name: &str| acc.iter().find(|(k, ..)| *k == name).map(|(_, v, _)| *v);
    if let (Some(usec), Some(calls)) = (get("usec"), get("calls")) {
        let per = if calls > 0.0 { usec / calls } else { 0.0 };
        if let Some((_, v, _)) = acc.iter_mut().find(|(k, ..)| *k == "usec_per_call") {
            *v = per;
        }
    }
    acc.iter()
        .map(|(k, v, decimals)| {
            if *decimals {
                format!("{k}={v:.2}")
            } else {
                format!("{k}={}", *v as i64)
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The masters' `INFO` replies as one (`None` when the first is not a text reply: an error, say,
/// which is passed on as it is).
pub fn merge(replies: &[&[u8]]) -> Option<Vec<u8>> {
    let (kind, first) = text_of(replies.first()?)?;
    let all: Vec<Sections> = std::iter::once(first)
        .chain(
            replies[1..]
                .iter()
                .filter_map(|f| text_of(f).map(|(_, t)| t)),
        )
        .map(sections)
        .collect();
    let values_of = |section: &str, name: &str| -> Vec<&str> {
        all.iter()
            .flat_map(|m| m.iter().filter(|(s, _)| s.eq_ignore_ascii_case(section)))
            .flat_map(|(_, lines)| lines.iter())
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| *v)
            .collect()
    };
    let mut out = String::with_capacity(first.len() + 64);
    for (i, (section, lines)) in all[0].iter().enumerate() {
        if i > 0 {
            if i > 1 {
                out.push_str("\r\n");
            }
            out.push_str(section);
            out.push_str("\r\n");
        }
        for (name, value) in lines {
            if ADDITIVE.contains(name) {
                let sum: i64 = values_of(section, name)
                    .iter()
                    .filter_map(|v| v.trim().parse::<i64>().ok())
                    .sum();
                out.push_str(&format!("{name}:{sum}\r\n"));
            } else if summed_line(name) {
                out.push_str(&format!(
                    "{name}:{}\r\n",
                    add_counts(&values_of(section, name))
                ));
            } else {
                out.push_str(&format!("{name}:{value}\r\n"));
            }
        }
        // Lines of this section that only other masters have (a key space, a command).
        let mut extra: Vec<&str> = Vec::new();
        for m in &all[1..] {
            for (_, ls) in m.iter().filter(|(s, _)| s.eq_ignore_ascii_case(section)) {
                for (name, _) in ls {
                    if summed_line(name)
                        && !lines.iter().any(|(k, _)| k == name)
                        && !extra.contains(name)
                    {
                        extra.push(name);
                    }
                }
            }
        }
        extra.sort_by_key(|n| n.strip_prefix("db").and_then(|d| d.parse::<u32>().ok()));
        for name in extra {
            out.push_str(&format!(
                "{name}:{}\r\n",
                add_counts(&values_of(section, name))
            ));
        }
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

    fn text(f: &[u8]) -> String {
        text_of(f).unwrap().1.to_string()
    }

    #[test]
    fn counters_and_per_name_lines_add_up() {
        let a = bulk("# Server\r\nredis_version:8.2.3\r\n\r\n# Clients\r\nconnected_clients:2\r\nblocked_clients:0\r\n\r\n# Commandstats\r\ncmdstat_get:calls=2,usec=10,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n\r\n# Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=500,subexpiry=0\r\n");
        let b = bulk("# Server\r\nredis_version:8.2.3\r\n\r\n# Clients\r\nconnected_clients:1\r\nblocked_clients:1\r\n\r\n# Commandstats\r\ncmdstat_get:calls=2,usec=30,usec_per_call=15.00,rejected_calls=0,failed_calls=1\r\ncmdstat_blpop:calls=1,usec=4,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n\r\n# Keyspace\r\ndb0:keys=4,expires=0,avg_ttl=0,subexpiry=0\r\ndb2:keys=1,expires=0,avg_ttl=0,subexpiry=0\r\n");
        let m = text(&merge(&[&a, &b]).unwrap());
        assert_eq!(
            m,
            "# Server\r\nredis_version:8.2.3\r\n\r\n# Clients\r\nconnected_clients:3\r\nblocked_clients:1\r\n\r\n# Commandstats\r\ncmdstat_get:calls=4,usec=40,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\ncmdstat_blpop:calls=1,usec=4,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n\r\n# Keyspace\r\ndb0:keys=7,expires=1,avg_ttl=500,subexpiry=0\r\ndb2:keys=1,expires=0,avg_ttl=0,subexpiry=0\r\n"
        );
        // A keyspace only another master has still shows, in its section.
        let m = text(&merge(&[&bulk("# Keyspace\r\n"), &a]).unwrap());
        assert_eq!(
            m,
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

//! What "durable on request" costs (issue 27): MEM.REMEMBER throughput and p50 on a primary with
//! one replica, without a guarantee (REPLICAS 0), with REPLICAS 1 (WAIT), and with FSYNC on a
//! primary with `appendfsync everysec` (WAITAOF), at 1 and 8 clients, rounds interleaved so that
//! only ratios within one run count. Texts are unique (NODEDUP, no embedding cache hits beyond
//! the first round). `cargo build --release && cargo bench --bench durable`; DURABLE_SECS=3.
mod common;
use common::*;

fn main() {
    let secs = duration_from_env("DURABLE_SECS", 3.0);
    // Each server in a directory of its own (the AOF and the replica's sync files stay out of
    // the checkout).
    let dir = |name: &str| {
        let d =
            std::env::temp_dir().join(format!("memproxy-durable-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.display().to_string()
    };
    let (pdir, rdir) = (dir("primary"), dir("replica"));
    let (_p, pport) = start_redis(&[
        "--dir",
        &pdir,
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
    ]);
    let (_r, _rport) = start_redis(&[
        "--dir",
        &rdir,
        "--replicaof",
        "127.0.0.1",
        &pport.to_string(),
    ]);
    let mut d = connect(pport);
    loop {
        let i: String = redis::cmd("INFO").arg("replication").query(&mut d).unwrap();
        if i.contains("connected_slaves:1") && i.contains("state=online") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (_m, mport) = start_memproxy(pport, &[]);
    let rows: [(&str, &[&str]); 3] = [
        ("no guarantee (REPLICAS 0)", &["REPLICAS", "0"]),
        ("REPLICAS 1 (WAIT)", &["REPLICAS", "1"]),
        ("FSYNC (WAITAOF, everysec)", &["FSYNC"]),
    ];
    println!("# MEM.REMEMBER with and without a durability guarantee\n");
    println!("Primary with one replica and AOF (everysec), one memproxy, {:.0} s a cell, two rounds interleaved.\n", secs.as_secs_f64());
    println!("| what | clients | round | remembers/s | p50 ms | p99 ms | / no guarantee |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    let mut n = 0usize;
    for clients in [1usize, 8] {
        for round in 1..=2 {
            let mut base = 0.0;
            for (name, opts) in rows {
                n += 1;
                let tag = n;
                let (rps, lat) = load(
                    clients,
                    secs,
                    |_| connect(mport),
                    |con, seq| {
                        let text = format!(
                            "The user's note {tag}-{seq} says the meeting moved to room {seq}."
                        );
                        let mut c = redis::cmd("MEM.REMEMBER");
                        c.arg(&text).arg("USER").arg("bench").arg("NODEDUP");
                        for o in opts {
                            c.arg(*o);
                        }
                        let _: redis::Value = c.query(con).unwrap();
                    },
                );
                if opts[0] == "REPLICAS" && opts[1] == "0" {
                    base = rps;
                }
                println!(
                    "| {name} | {clients} | {round} | {rps:.1} | {:.3} | {:.3} | {:.2}× |",
                    pct(&lat, 0.5),
                    pct(&lat, 0.99),
                    rps / base
                );
            }
        }
    }
}

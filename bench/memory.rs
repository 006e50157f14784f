//! Long-term memory: MEM.REMEMBER and MEM.RECALL latency and throughput at 1, 8 and 32 clients,
//! with the embedding time (MEM.EMBED of equally fresh texts) beside them; recall p50 with 1k,
//! 10k and 100k memories in the index (loaded with pipelined JSON.SET of computed vectors); and
//! Redis memory per stored memory.
//!
//! usage: cargo bench --bench memory   (BENCH_SECONDS per cell, default 3; MAX_MEMORIES, default
//!        100000, 1000000 adds the 1M row (about 15 GiB of Redis memory); SCALE_ONLY=1 skips the
//!        throughput cells; BENCH_CONFIG, a memproxy config file to try instead of the defaults)

#[path = "common.rs"]
mod common;

use common::*;
use redis::Value;

/// Small deterministic RNG (xorshift) with a Box–Muller normal.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    fn normal(&mut self) -> f64 {
        let (u, v) = (self.next().max(1e-12), self.next());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

fn used_memory(con: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("memory").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn num_docs(con: &mut redis::Connection) -> i64 {
    let v: Value = redis::cmd("FT.INFO")
        .arg("agentmem:idx")
        .query(con)
        .unwrap();
    let Value::Array(a) = v else { panic!() };
    let i = a
        .iter()
        .position(|x| match x {
            Value::BulkString(b) => b == b"num_docs",
            Value::SimpleString(s) => s == "num_docs",
            _ => false,
        })
        .unwrap();
    match &a[i + 1] {
        Value::BulkString(b) => String::from_utf8_lossy(b).parse().unwrap(),
        Value::Int(n) => *n,
        other => panic!("{other:?}"),
    }
}

fn main() {
    let dur = duration_from_env("BENCH_SECONDS", 3.0);
    let max: usize = std::env::var("MAX_MEMORIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let (_redis, rport) = start_redis(&[]);
    let (_proxy, mport) = start_memproxy_bench_config(rport);
    let mut direct = connect(rport);
    let mut con = connect(mport);
    let _: Value = redis::cmd("MEM.INFO").query(&mut con).unwrap(); // creates the index
    let mem_empty = used_memory(&mut direct);

    // Base vectors from the real model; the bulk are noisy copies (same distribution of norms).
    let base: Vec<Vec<f64>> = (0..256)
        .map(|i| {
            redis::cmd("MEM.EMBED")
                .arg(sentence(i))
                .query(&mut con)
                .unwrap()
        })
        .collect();
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut loaded = 0usize;
    // Every bulk memory is user "bench"'s; user "few" owns 50 of them (a selective scope).
    let mut load_to = |target: usize, direct: &mut redis::Connection| {
        while loaded < target {
            let mut pipe = redis::pipe();
            for _ in 0..500.min(target - loaded) {
                let b = &base[loaded % base.len()];
                let mut v: Vec<f64> = b.iter().map(|x| x + 0.02 * rng.normal()).collect();
                let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                v.iter_mut().for_each(|x| *x /= n);
                let v32: Vec<f32> = v.iter().map(|x| *x as f32).collect();
                let id = format!("{:012x}", 0xb000_0000_0000u64 + loaded as u64);
                let doc = serde_json::json!({
                    "id": id, "user": if loaded.is_multiple_of(20) && loaded < 1000 { "few" } else { "bench" }, "namespace": "default", "kind": "semantic", "source_thread": "",
                    "text": sentence(loaded), "embedding": v32, "created_ts": 1.7e9 + loaded as f64, "hit_count": 0
                });
                pipe.cmd("JSON.SET")
                    .arg(format!("agent:mem:{id}"))
                    .arg("$")
                    .arg(doc.to_string())
                    .ignore();
                loaded += 1;
            }
            let _: () = pipe.query(direct).unwrap();
        }
    };
    load_to(1000, &mut direct);

    println!(
        "# long-term memory, {} s per cell; embedding = MEM.EMBED of equally fresh texts",
        dur.as_secs_f64()
    );
    println!(
        "{:<34} {:>7} {:>10} {:>9} {:>9}",
        "what (1k memories in the index)", "clients", "ops/s", "p50_ms", "p99_ms"
    );
    let clients_cells: &[usize] = if std::env::var_os("SCALE_ONLY").is_some() {
        &[]
    } else {
        &[1, 8, 32]
    };
    for &clients in clients_cells {
        for (what, verb) in [
            ("embed (MEM.EMBED)", "MEM.EMBED"),
            ("MEM.REMEMBER", "MEM.REMEMBER"),
            ("MEM.RECALL", "MEM.RECALL"),
        ] {
            let (rate, lat) = load(
                clients,
                dur,
                |_| connect(mport),
                |c, i| {
                    let text = format!("{} [{verb} {clients}]", sentence(i));
                    let mut cmd = redis::cmd(verb);
                    cmd.arg(&text);
                    if verb != "MEM.EMBED" {
                        cmd.arg("USER").arg("bench-live");
                    }
                    let _: Value = cmd.query(c).unwrap();
                },
            );
            println!(
                "{:<34} {:>7} {:>10.1} {:>9.3} {:>9.3}",
                what,
                clients,
                rate,
                pct(&lat, 0.5),
                pct(&lat, 0.99)
            );
        }
    }

    println!();
    println!(
        "{:<10} {:>13} {:>13} {:>15} {:>19} {:>21} {:>8}",
        "memories",
        "recall_p50_ms",
        "embed_p50_ms",
        "recall-embed_ms",
        "cached_recall_p50",
        "cached, 50-memory user",
        "load_s"
    );
    for size in [1_000usize, 10_000, 100_000, 1_000_000]
        .into_iter()
        .filter(|s| *s <= max)
    {
        let t = std::time::Instant::now();
        load_to(size, &mut direct);
        let load_s = t.elapsed().as_secs_f64();
        // Embed and recall interleaved on one connection, so the machine's noise hits both alike;
        // the cached recall repeats a text already embedded (the search alone).
        let (mut emb, mut rec, mut cached, mut few) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let start = std::time::Instant::now();
        let mut i = 0;
        while start.elapsed() < dur * 2 {
            let text = format!("{} <{size}>", sentence(i * 7 + 3));
            let mut time = |out: &mut Vec<std::time::Duration>, cmd: &mut redis::Cmd| {
                let t = std::time::Instant::now();
                let _: Value = cmd.query(&mut con).unwrap();
                out.push(t.elapsed());
            };
            time(&mut emb, redis::cmd("MEM.EMBED").arg(format!("{text} e")));
            let recall = |user: &str| {
                let mut c = redis::cmd("MEM.RECALL");
                c.arg(&text).arg("USER").arg(user);
                c
            };
            // The same recall twice: first with a fresh text, then with its embedding cached;
            // then the same text in the selective scope. The memories were written straight
            // into Redis, so a fresh text's candidates are often new to the proxy, which reads
            // their vectors first (one JSON.MGET); the cached recall finds them kept.
            time(&mut rec, &mut recall("bench"));
            time(&mut cached, &mut recall("bench"));
            time(&mut few, &mut recall("few"));
            i += 1;
        }
        for v in [&mut emb, &mut rec, &mut cached, &mut few] {
            v.sort();
        }
        let (r, e) = (pct(&rec, 0.5), pct(&emb, 0.5));
        println!(
            "{:<10} {:>13.3} {:>13.3} {:>15.3} {:>19.3} {:>21.3} {:>8.1}",
            size,
            r,
            e,
            r - e,
            pct(&cached, 0.5),
            pct(&few, 0.5),
            load_s
        );
    }
    let docs = num_docs(&mut direct);
    let used = used_memory(&mut direct) - mem_empty;
    println!();
    println!("redis memory per stored memory: {:.0} bytes ({} docs, {:.1} MiB; JSON doc with 384 floats + HNSW + text index)", used as f64 / docs as f64, docs, used as f64 / 1048576.0);
}

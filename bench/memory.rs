//! Long-term memory in both storage layouts, side by side in one run (each its own Redis and
//! memproxy, cells interleaved): MEM.REMEMBER and MEM.RECALL latency and throughput at 1, 8 and
//! 32 clients, with the embedding time (MEM.EMBED of equally fresh texts) beside them; recall p50
//! with 1k, 10k and 100k memories in the index (loaded straight into Redis: pipelined JSON.SET,
//! or HSET in the compact layout, of computed vectors); Redis memory per stored memory at each
//! size; and Redis memory per window of a long text written through MEM.REMEMBER.
//!
//! usage: cargo bench --bench memory   (BENCH_SECONDS per cell, default 3; MAX_MEMORIES, default
//!        100000, 1000000 adds the 1M row (about 15 GiB of Redis memory for the guide layout,
//!        3.5 GiB compact); SCALE_ONLY=1 skips the throughput cells; LAYOUTS, default
//!        "guide,compact"; BENCH_CONFIG, a memproxy config file to try instead of the defaults)

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

/// One layout's Redis and memproxy, and how many bulk memories its index holds.
struct Side {
    layout: &'static str,
    _redis: Proc,
    _proxy: Proc,
    mport: u16,
    direct: redis::Connection,
    con: redis::Connection,
    loaded: usize,
    mem_empty: i64,
}

impl Side {
    fn start(layout: &'static str) -> Side {
        let (redis, rport) = start_redis(&[]);
        let (proxy, mport) = match std::env::var("BENCH_CONFIG") {
            Ok(c) => start_memproxy(rport, &["--config", &c, "--storage", layout]),
            Err(_) => start_memproxy(rport, &["--storage", layout]),
        };
        let mut direct = connect(rport);
        let mut con = connect(mport);
        let _: Value = redis::cmd("MEM.INFO").query(&mut con).unwrap(); // creates the index
        let mem_empty = used_memory(&mut direct);
        Side {
            layout,
            _redis: redis,
            _proxy: proxy,
            mport,
            direct,
            con,
            loaded: 0,
            mem_empty,
        }
    }

    /// Load bulk memories up to `target`: noisy copies of `base` (same distribution of norms),
    /// every one user "bench"'s but for 50 of user "few" (a selective scope).
    fn load_to(&mut self, target: usize, base: &[Vec<f64>], rng: &mut Rng) {
        while self.loaded < target {
            let mut pipe = redis::pipe();
            for _ in 0..500.min(target - self.loaded) {
                let loaded = self.loaded;
                let b = &base[loaded % base.len()];
                let mut v: Vec<f64> = b.iter().map(|x| x + 0.02 * rng.normal()).collect();
                let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                v.iter_mut().for_each(|x| *x /= n);
                let v32: Vec<f32> = v.iter().map(|x| *x as f32).collect();
                let id = format!("{:012x}", 0xb000_0000_0000u64 + loaded as u64);
                let user = if loaded.is_multiple_of(20) && loaded < 1000 {
                    "few"
                } else {
                    "bench"
                };
                let key = format!("agent:mem:{id}");
                if self.layout == "compact" {
                    let blob: Vec<u8> = v32
                        .iter()
                        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                        .collect();
                    pipe.cmd("HSET")
                        .arg(&key)
                        .arg("user")
                        .arg(user)
                        .arg("namespace")
                        .arg("default")
                        .arg("kind")
                        .arg("semantic")
                        .arg("source_thread")
                        .arg("")
                        .arg("text")
                        .arg(sentence(loaded))
                        .arg("embedding")
                        .arg(blob)
                        .arg("created_ts")
                        .arg(1.7e9 + loaded as f64)
                        .arg("hit_count")
                        .arg(0)
                        .ignore();
                } else {
                    let doc = serde_json::json!({
                        "id": id, "user": user, "namespace": "default", "kind": "semantic", "source_thread": "",
                        "text": sentence(loaded), "embedding": v32, "created_ts": 1.7e9 + loaded as f64, "hit_count": 0
                    });
                    pipe.cmd("JSON.SET")
                        .arg(&key)
                        .arg("$")
                        .arg(doc.to_string())
                        .ignore();
                }
                self.loaded += 1;
            }
            let _: () = pipe.query(&mut self.direct).unwrap();
        }
    }

    /// Redis memory a document of the index, over what the empty index took.
    fn bytes_per_doc(&mut self) -> (f64, i64) {
        let docs = num_docs(&mut self.direct);
        let used = used_memory(&mut self.direct) - self.mem_empty;
        (used as f64 / docs as f64, docs)
    }
}

fn main() {
    let dur = duration_from_env("BENCH_SECONDS", 3.0);
    let max: usize = std::env::var("MAX_MEMORIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let layouts: Vec<&'static str> = std::env::var("LAYOUTS")
        .unwrap_or_else(|_| "guide,compact".into())
        .split(',')
        .map(|l| match l.trim() {
            "guide" => "guide",
            "compact" => "compact",
            other => panic!("LAYOUTS: unknown layout {other:?} (guide, compact)"),
        })
        .collect();
    let mut sides: Vec<Side> = layouts.iter().map(|l| Side::start(l)).collect();

    // Base vectors from the real model.
    let base: Vec<Vec<f64>> = (0..256)
        .map(|i| {
            redis::cmd("MEM.EMBED")
                .arg(sentence(i))
                .query(&mut sides[0].con)
                .unwrap()
        })
        .collect();
    let mut rngs: Vec<Rng> = sides.iter().map(|_| Rng(0x9e3779b97f4a7c15)).collect();
    for (s, rng) in sides.iter_mut().zip(&mut rngs) {
        s.load_to(1000, &base, rng);
    }

    println!(
        "# long-term memory by storage layout, {} s per cell, layouts interleaved; embedding = MEM.EMBED of equally fresh texts",
        dur.as_secs_f64()
    );
    println!(
        "{:<34} {:<8} {:>7} {:>10} {:>9} {:>9}",
        "what (1k memories in the index)", "layout", "clients", "ops/s", "p50_ms", "p99_ms"
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
            for side in &sides {
                let mport = side.mport;
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
                    "{:<34} {:<8} {:>7} {:>10.1} {:>9.3} {:>9.3}",
                    what,
                    side.layout,
                    clients,
                    rate,
                    pct(&lat, 0.5),
                    pct(&lat, 0.99)
                );
            }
        }
    }

    println!();
    println!(
        "{:<10} {:<8} {:>13} {:>13} {:>15} {:>19} {:>21} {:>8} {:>14}",
        "memories",
        "layout",
        "recall_p50_ms",
        "embed_p50_ms",
        "recall-embed_ms",
        "cached_recall_p50",
        "cached, 50-memory user",
        "load_s",
        "bytes_a_memory"
    );
    let mut per_doc: Vec<(usize, &str, f64)> = Vec::new();
    for size in [1_000usize, 10_000, 100_000, 1_000_000]
        .into_iter()
        .filter(|s| *s <= max)
    {
        let mut load_s = Vec::new();
        for (s, rng) in sides.iter_mut().zip(&mut rngs) {
            let t = std::time::Instant::now();
            s.load_to(size, &base, rng);
            load_s.push(t.elapsed().as_secs_f64());
        }
        // Embed and recall interleaved on one connection, so the machine's noise hits both alike;
        // the cached recall repeats a text already embedded (the search alone). Layouts
        // alternate question by question.
        let n = sides.len();
        let (mut emb, mut rec, mut cached, mut few) = (
            vec![Vec::new(); n],
            vec![Vec::new(); n],
            vec![Vec::new(); n],
            vec![Vec::new(); n],
        );
        let start = std::time::Instant::now();
        let mut i = 0;
        while start.elapsed() < dur * 2 * n as u32 {
            let text = format!("{} <{size}>", sentence(i * 7 + 3));
            for (j, side) in sides.iter_mut().enumerate() {
                let con = &mut side.con;
                let mut time = |out: &mut Vec<std::time::Duration>, cmd: &mut redis::Cmd| {
                    let t = std::time::Instant::now();
                    let _: Value = cmd.query(con).unwrap();
                    out.push(t.elapsed());
                };
                time(
                    &mut emb[j],
                    redis::cmd("MEM.EMBED").arg(format!("{text} e")),
                );
                let recall = |user: &str| {
                    let mut c = redis::cmd("MEM.RECALL");
                    c.arg(&text).arg("USER").arg(user);
                    c
                };
                // The same recall twice: first with a fresh text, then with its embedding
                // cached; then the same text in the selective scope.
                time(&mut rec[j], &mut recall("bench"));
                time(&mut cached[j], &mut recall("bench"));
                time(&mut few[j], &mut recall("few"));
            }
            i += 1;
        }
        for (j, side) in sides.iter_mut().enumerate() {
            for v in [&mut emb[j], &mut rec[j], &mut cached[j], &mut few[j]] {
                v.sort();
            }
            let (r, e) = (pct(&rec[j], 0.5), pct(&emb[j], 0.5));
            let (bytes, _) = side.bytes_per_doc();
            per_doc.push((size, side.layout, bytes));
            println!(
                "{:<10} {:<8} {:>13.3} {:>13.3} {:>15.3} {:>19.3} {:>21.3} {:>8.1} {:>14.0}",
                size,
                side.layout,
                r,
                e,
                r - e,
                pct(&cached[j], 0.5),
                pct(&few[j], 0.5),
                load_s[j],
                bytes
            );
        }
    }

    // A long text through MEM.REMEMBER: the memory and its windows (one multi-value vector in the
    // guide layout, one hash each in the compact one).
    let long: String = (0..400)
        .map(|i| format!("{} Note {i} of the long record.", sentence(i + 90_000)))
        .collect::<Vec<_>>()
        .join(" ");
    println!();
    println!(
        "# a long text ({} KB) through MEM.REMEMBER, five times (unique each)",
        long.len() / 1024
    );
    println!(
        "{:<8} {:>9} {:>16} {:>18}",
        "layout", "windows", "bytes_a_text", "bytes_a_window"
    );
    for side in &mut sides {
        let before = used_memory(&mut side.direct);
        let mut windows = 0usize;
        for k in 0..5 {
            let text = format!("Record {k}. {long}");
            let _: Value = redis::cmd("MEM.REMEMBER")
                .arg(&text)
                .arg("USER")
                .arg("bench-long")
                .arg("KIND")
                .arg("semantic")
                .query(&mut side.con)
                .unwrap();
            windows += memproxy::embed::windows::split(&text).len();
        }
        let used = (used_memory(&mut side.direct) - before) as f64;
        println!(
            "{:<8} {:>9} {:>16.0} {:>18.0}",
            side.layout,
            windows / 5,
            used / 5.0,
            used / windows as f64
        );
    }

    println!();
    println!("# redis memory per stored memory (JSON doc or hash, HNSW, text and tag indexes)");
    println!(
        "{:<10} {:<8} {:>10} {:>12}",
        "memories", "layout", "bytes", "/ guide"
    );
    for (size, layout, bytes) in &per_doc {
        let guide = per_doc
            .iter()
            .find(|(s, l, _)| s == size && *l == "guide")
            .map(|(_, _, b)| *b);
        println!(
            "{:<10} {:<8} {:>10.0} {:>12}",
            size,
            layout,
            bytes,
            guide.map_or("-".into(), |g| format!("{:.2}x", bytes / g))
        );
    }
}

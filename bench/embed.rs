//! Embedding throughput and latency: the best raw ONNX Runtime configuration found for the same
//! graph on the same cores (this process; a sweep of graph optimisation level, intra-op spinning,
//! batch size and batch shape, tokenising as memproxy does) beside memproxy's MEM.EMBED (the
//! release binary with its default settings, over loopback), in one run.
//!
//! The texts are agent-memory sentences of 10–25 tokens with every eighth a paragraph of about
//! 80, all distinct so no cache helps.
//!
//! First a sweep picks the best raw configuration; then that configuration and memproxy's cells
//! run in interleaved rounds (these machines are noisy: only the medians of one run compare).
//!
//! Section 2 also runs memproxy with the same model behind an OpenAI-compatible embeddings
//! endpoint (`--embedder`): a server in this process (tests/common/openai.rs) runs the model as
//! memproxy runs it and answers `POST /v1/embeddings`, so the rows beside the in-process ones show
//! what the endpoint's round trip (HTTP, JSON both ways, loopback) costs.
//!
//! Last, the same comparison with redis-benchmark as the client (section 3), on texts both sides
//! draw alike.
//!
//! usage: cargo build --release && cargo bench --bench embed
//!        (BENCH_SECONDS per cell, default 3; BENCH_ROUNDS, default 3; EMBED_THREADS, default: all
//!        cores; EMBED_MODEL, a model directory, default the bundled fp32 graph; EMBED_EXTRA, memproxy
//!        settings to try, `;`-separated, e.g. "embed_workers = 2;embed_threads = 1")

#[path = "common.rs"]
mod common;
#[path = "../tests/common/openai.rs"]
mod openai;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;

/// The benchmark's texts: mostly short, every eighth long.
fn text(i: usize) -> String {
    if i.is_multiple_of(8) {
        (0..4)
            .map(|k| sentence(i * 4 + k))
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        sentence(i)
    }
}

fn main() {
    let dur = duration_from_env("BENCH_SECONDS", 3.0);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: usize = std::env::var("EMBED_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cores);
    let env = ort_env();
    let texts: Vec<String> = (0..8192).map(text).collect();
    let session = |level: u8, spinning: bool| raw_session(env, level, spinning, threads);
    let raw_cell = |raw: &mut Raw, batch: usize, sorted: Option<usize>, dur: Duration| {
        timed(dur, batch, |n| {
            let chunk: Vec<String> = (0..batch)
                .map(|i| texts[(n + i) % texts.len()].clone())
                .collect();
            raw.embed(&chunk, sorted);
        })
    };

    println!(
        "# embedding: {}, {threads} intra-op threads on {cores} cores",
        model_dir().display()
    );
    println!(
        "\n## 1. Raw ONNX Runtime configurations, one pass of {:.1} s each\n",
        dur.as_secs_f64() / 2.0
    );
    println!(
        "{:<44} {:>8} {:>14} {:>9} {:>9}",
        "what", "batch", "sentences/s", "p50_ms", "p99_ms"
    );
    let shapes: [(usize, Option<usize>); 5] = [
        (1, None),
        (8, None),
        (32, None),
        (32, Some(2048)),
        (64, Some(2048)),
    ];
    let mut best = (0f64, 1u8, false, 1usize, None);
    for level in [1u8, 3] {
        for spinning in [false, true] {
            let mut raw = session(level, spinning);
            for (batch, sorted) in shapes {
                let (rate, lat) = raw_cell(&mut raw, batch, sorted, dur / 2);
                if rate > best.0 {
                    best = (rate, level, spinning, batch, sorted);
                }
                row(&raw_name(level, spinning, sorted), batch, rate, &lat);
            }
        }
    }
    let (_, level, spinning, batch, sorted) = best;
    let best_name = raw_name(level, spinning, sorted);

    println!(
        "\n## 2. The best raw configuration beside memproxy's MEM.EMBED (defaults), {rounds} interleaved rounds of {:.1} s a cell; medians\n",
        dur.as_secs_f64()
    );
    let (_redis, rport) = start_redis(&[]);
    let model = model_dir().display().to_string();
    let (_proxy, mport) = start_memproxy(rport, &["--config", &write_config(), "--model", &model]);
    // The same model behind an endpoint in this process, run as memproxy runs it (its default
    // session options), and a memproxy that embeds through it.
    let server = openai::Server::start(served_model(threads));
    let (_endpoint_proxy, eport) = start_memproxy(
        rport,
        &[
            "--config",
            &write_config(),
            "--embedder",
            &server.base(),
            "--embedder-model",
            &model_dir().file_name().unwrap().to_string_lossy(),
            "--embedder-api-key-env",
            "MEMPROXY_BENCH_NO_KEY",
        ],
    );
    // (connections, commands each pipelines)
    let proxy_cells = [(1usize, 1usize), (8, 1), (4, 16), (32, 1)];
    let mut raw = session(level, spinning);
    let mut raw1 = session(3, true);
    let mut raw_rates = Vec::new();
    let mut raw_p50 = Vec::new();
    let mut proxy_rates = vec![Vec::new(); proxy_cells.len()];
    let mut proxy_p50 = vec![Vec::new(); proxy_cells.len()];
    let mut endpoint_rates = vec![Vec::new(); proxy_cells.len()];
    let mut endpoint_p50 = vec![Vec::new(); proxy_cells.len()];
    let next = AtomicUsize::new(0);
    // (MEM.EMBED/s, p50 ms) of `clients` connections pipelining `depth` each, to `port`.
    let cell = |port: u16, clients: usize, depth: usize| {
        let (rate, lat) = load(
            clients,
            dur,
            |_| connect(port),
            |con, _| {
                // Each text once (the cache must not help), drawn like the raw cells' texts.
                let mut pipe = redis::pipe();
                for _ in 0..depth {
                    pipe.cmd("MEM.EMBED")
                        .arg(text(next.fetch_add(1, Ordering::Relaxed)));
                }
                let v: Vec<Vec<f64>> = pipe.query(con).unwrap();
                assert_eq!(v.len(), depth);
                assert_eq!(v[0].len(), 384);
            },
        );
        (rate * depth as f64, pct(&lat, 0.5))
    };
    for _ in 0..rounds {
        let (rate, _) = raw_cell(&mut raw, batch, sorted, dur);
        raw_rates.push(rate);
        let (_, lat) = raw_cell(&mut raw1, 1, None, dur / 2);
        raw_p50.push(pct(&lat, 0.5));
        for (c, &(clients, depth)) in proxy_cells.iter().enumerate() {
            let (rate, p50) = cell(mport, clients, depth);
            proxy_rates[c].push(rate);
            proxy_p50[c].push(p50);
            let (rate, p50) = cell(eport, clients, depth);
            endpoint_rates[c].push(rate);
            endpoint_p50[c].push(p50);
        }
    }
    println!(
        "{:<44} {:>8} {:>14} {:>9}",
        "what", "batch", "sentences/s", "p50_ms"
    );
    let raw_rate = median(&mut raw_rates);
    println!(
        "{:<44} {:>8} {:>14.1} {:>9}",
        best_name, batch, raw_rate, "-"
    );
    let raw_one = median(&mut raw_p50);
    println!(
        "{:<44} {:>8} {:>14} {:>9.3}",
        raw_name(3, true, None),
        1,
        "-",
        raw_one
    );
    let mut proxy_best = 0f64;
    let mut proxy_one = 0f64;
    for (c, &(clients, depth)) in proxy_cells.iter().enumerate() {
        let rate = median(&mut proxy_rates[c]);
        let p50 = median(&mut proxy_p50[c]);
        proxy_best = proxy_best.max(rate);
        if clients == 1 && depth == 1 {
            proxy_one = p50;
        }
        println!(
            "{:<44} {:>8} {:>14.1} {:>9.3}",
            format!("memproxy MEM.EMBED, {clients} conn × {depth} pipelined"),
            clients * depth,
            rate,
            p50
        );
    }
    let mut endpoint_best = 0f64;
    let mut endpoint_one = 0f64;
    for (c, &(clients, depth)) in proxy_cells.iter().enumerate() {
        let rate = median(&mut endpoint_rates[c]);
        let p50 = median(&mut endpoint_p50[c]);
        endpoint_best = endpoint_best.max(rate);
        if clients == 1 && depth == 1 {
            endpoint_one = p50;
        }
        println!(
            "{:<44} {:>8} {:>14.1} {:>9.3}",
            format!("memproxy via endpoint, {clients} conn × {depth}"),
            clients * depth,
            rate,
            p50
        );
    }
    println!();
    println!(
        "best throughput: memproxy {proxy_best:.1}/s vs best raw {raw_rate:.1}/s = {:.3}x (target >= 0.95x)",
        proxy_best / raw_rate
    );
    println!(
        "one sentence p50: memproxy {proxy_one:.3} ms vs raw {raw_one:.3} ms = +{:.3} ms",
        proxy_one - raw_one
    );
    println!(
        "the same model through the endpoint: best throughput {endpoint_best:.1}/s = {:.3}x the in-process model's; one sentence p50 {endpoint_one:.3} ms = +{:.3} ms",
        endpoint_best / proxy_best,
        endpoint_one - proxy_one
    );
    light_client(dur, rounds, mport, &mut raw, sorted, &mut raw1);
}

/// The sentence redis-benchmark sends, `__rand_int__` being a 12-digit random number.
const BENCH_SENTENCE: &str =
    "The customer asked about the flaky test in the inventory service note __rand_int__";

/// Section 3: the same comparison with the load generator Redis servers are measured with
/// (`redis-benchmark`, in C). The client of section 2 (the redis crate, turning 384 bulk strings
/// into doubles per reply) shares the two cores with the model; redis-benchmark costs ~0.5% of
/// them, so what is left is what memproxy adds. Both sides embed the same kind of text: one
/// sentence with a fresh 12-digit number, as redis-benchmark writes `__rand_int__`.
fn light_client(
    dur: Duration,
    rounds: usize,
    mport: u16,
    raw: &mut Raw,
    sorted: Option<usize>,
    raw1: &mut Raw,
) {
    let have = std::process::Command::new("redis-benchmark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        println!("\n(section 3 skipped: redis-benchmark not found; Debian package redis-tools)");
        return;
    }
    // The same numbers redis-benchmark draws from (0..1e8, zero-padded to 12 digits).
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        BENCH_SENTENCE.replace("__rand_int__", &format!("{:012}", seed % 100_000_000))
    };
    // (connections, pipeline depth)
    let cells = [(1usize, 1usize), (4, 16), (32, 1)];
    let (mut raw_rates, mut raw_p50) = (Vec::new(), Vec::new());
    let mut rates = vec![Vec::new(); cells.len()];
    let mut p50s = vec![Vec::new(); cells.len()];
    for _ in 0..rounds {
        // The best batch for these texts (on the same session), not only section 1's.
        let mut rate = 0f64;
        for b in [16usize, 32, 64] {
            let (r, _) = timed(dur / 2, b, |_| {
                let chunk: Vec<String> = (0..b).map(|_| uniform()).collect();
                raw.embed(&chunk, sorted);
            });
            rate = rate.max(r);
        }
        raw_rates.push(rate);
        let (_, lat) = timed(dur / 2, 1, |_| raw1.embed(&[uniform()], None));
        raw_p50.push(pct(&lat, 0.5));
        for (c, &(clients, depth)) in cells.iter().enumerate() {
            // About `dur` of work at the raw rate (redis-benchmark counts requests, not time).
            let n = ((rate * dur.as_secs_f64()) as usize).max(clients * depth * 4);
            let out = std::process::Command::new("redis-benchmark")
                .args(["-p", &mport.to_string(), "-r", "100000000", "--csv"])
                .args(["-c", &clients.to_string(), "-P", &depth.to_string()])
                .args(["-n", &n.to_string(), "MEM.EMBED", BENCH_SENTENCE])
                .output()
                .unwrap();
            let csv = String::from_utf8_lossy(&out.stdout);
            let cols: Vec<f64> = csv
                .lines()
                .last()
                .unwrap_or_default()
                .split(',')
                .skip(1)
                .map(|v| v.trim_matches('"').parse().unwrap_or(f64::NAN))
                .collect();
            assert!(
                cols.len() >= 4 && cols[0] > 0.0,
                "redis-benchmark printed {csv:?}"
            );
            rates[c].push(cols[0]);
            p50s[c].push(cols[3]);
        }
    }
    println!(
        "\n## 3. The same, with redis-benchmark as the client (texts: \"{BENCH_SENTENCE}\"), {rounds} interleaved rounds; medians\n"
    );
    println!(
        "{:<44} {:>8} {:>14} {:>9}",
        "what", "batch", "sentences/s", "p50_ms"
    );
    let raw_rate = median(&mut raw_rates);
    let raw_one = median(&mut raw_p50);
    println!(
        "{:<44} {:>8} {:>14.1} {:>9}",
        "raw ORT, best of batch 16 / 32 / 64", "-", raw_rate, "-"
    );
    println!(
        "{:<44} {:>8} {:>14} {:>9.3}",
        "raw ORT level 3, spin on", 1, "-", raw_one
    );
    let mut best = 0f64;
    let mut one = 0f64;
    for (c, &(clients, depth)) in cells.iter().enumerate() {
        let rate = median(&mut rates[c]);
        let p50 = median(&mut p50s[c]);
        best = best.max(rate);
        if clients == 1 {
            one = p50;
        }
        println!(
            "{:<44} {:>8} {:>14.1} {:>9.3}",
            format!("redis-benchmark -c {clients} -P {depth} MEM.EMBED"),
            clients * depth,
            rate,
            p50
        );
    }
    println!();
    println!(
        "best throughput (redis-benchmark): memproxy {best:.1}/s vs best raw {raw_rate:.1}/s = {:.3}x (target >= 0.95x)",
        best / raw_rate
    );
    println!(
        "one sentence p50 (redis-benchmark): memproxy {one:.3} ms vs raw {raw_one:.3} ms = +{:.3} ms",
        one - raw_one
    );
}

/// The bench's model as memproxy loads it by default (level 3, spinning, `threads` intra-op
/// threads, 2,048 padded tokens a run), for the endpoint server.
fn served_model(threads: usize) -> openai::Served {
    let opts = memproxy::embed::onnx::Options {
        library: deps().join("lib/libonnxruntime.so"),
        intra_threads: threads,
        optimization: 3,
        spinning: true,
        batch_tokens: 2048,
    };
    let model = memproxy::embed::onnx::OnnxModel::load(&model_dir(), &opts).unwrap();
    std::sync::Arc::new(std::sync::Mutex::new(
        Box::new(model) as Box<dyn memproxy::embed::Model>
    ))
}

fn raw_name(level: u8, spinning: bool, sorted: Option<usize>) -> String {
    format!(
        "raw ORT level {level}, spin {}{}",
        if spinning { "on" } else { "off" },
        if sorted.is_some() { ", sorted" } else { "" }
    )
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Run `op` (which embeds `batch` texts starting at its argument) for `dur`: texts/s, latencies.
fn timed(dur: Duration, batch: usize, mut op: impl FnMut(usize)) -> (f64, Vec<Duration>) {
    let start = Instant::now();
    let mut lat = Vec::new();
    let mut n = 0;
    while start.elapsed() < dur {
        let t = Instant::now();
        op(n);
        lat.push(t.elapsed());
        n += batch;
    }
    lat.sort();
    (n as f64 / start.elapsed().as_secs_f64(), lat)
}

fn row(what: &str, batch: usize, rate: f64, lat: &[Duration]) {
    println!(
        "{:<44} {:>8} {:>14.1} {:>9.3} {:>9.3}",
        what,
        batch,
        rate,
        pct(lat, 0.5),
        pct(lat, 0.99)
    );
}

/// memproxy's own defaults, except a queue deep enough for the pipelined cell.
fn write_config() -> String {
    let path =
        std::env::temp_dir().join(format!("memproxy-bench-embed-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        format!(
            "embed_queue = 4096\n{}",
            std::env::var("EMBED_EXTRA")
                .unwrap_or_default()
                .replace(";", "\n")
        ),
    )
    .unwrap();
    path.display().to_string()
}

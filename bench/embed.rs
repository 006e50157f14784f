//! Embedding throughput and latency: raw ONNX Runtime (this process, the same model file, the
//! same thread count, tokenising as memproxy does) beside memproxy's MEM.EMBED (the release
//! binary, over loopback), in one run.
//!
//! usage: cargo bench --bench embed   (BENCH_SECONDS per cell, default 3; EMBED_THREADS, default 2)

#[path = "common.rs"]
mod common;

use std::borrow::Cow;
use std::time::Instant;

use common::*;
use memproxy::embed::tokenize::TextTokenizer;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionInputValue};
use ort::value::Tensor;

fn main() {
    let dur = duration_from_env("BENCH_SECONDS", 3.0);
    let threads: usize = std::env::var("EMBED_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let dir = deps().join("model/all-MiniLM-L6-v2");
    let env = ort::init_from(deps().join("lib/libonnxruntime.so"))
        .unwrap()
        .build()
        .unwrap();
    let mut session = Session::builder(&env)
        .unwrap()
        .with_optimization_level(GraphOptimizationLevel::Level1)
        .unwrap()
        .with_intra_threads(threads)
        .unwrap()
        .commit_from_file(dir.join("model.onnx"))
        .unwrap();
    let tok = TextTokenizer::load(&dir).unwrap();
    let mut raw_run = |texts: &[&str]| {
        let b = tok.encode(texts).unwrap();
        let shape = [b.rows as i64, b.cols as i64];
        let feed: Vec<(Cow<str>, SessionInputValue)> = vec![
            (
                "input_ids".into(),
                Tensor::from_array((shape, b.ids)).unwrap().into(),
            ),
            (
                "attention_mask".into(),
                Tensor::from_array((shape, b.mask)).unwrap().into(),
            ),
            (
                "token_type_ids".into(),
                Tensor::from_array((shape, b.type_ids)).unwrap().into(),
            ),
        ];
        let out = session.run(feed).unwrap();
        let (_, data) = out[0].try_extract_tensor::<f32>().unwrap();
        assert_eq!(data.len(), texts.len() * 384);
    };

    println!(
        "# embedding: all-MiniLM-L6-v2 fp32, {threads} intra-op threads, {} s per cell",
        dur.as_secs_f64()
    );
    println!(
        "{:<28} {:>8} {:>14} {:>9} {:>9}",
        "what", "batch/c", "sentences/s", "p50_ms", "p99_ms"
    );
    let texts: Vec<String> = (0..4096).map(sentence).collect();
    let mut raw_best = 0f64;
    let mut raw_p50 = 0f64;
    for batch in [1usize, 8, 32, 64] {
        let start = Instant::now();
        let mut lat = Vec::new();
        let mut n = 0;
        while start.elapsed() < dur {
            let chunk: Vec<&str> = (0..batch)
                .map(|i| texts[(n + i) % texts.len()].as_str())
                .collect();
            let t = Instant::now();
            raw_run(&chunk);
            lat.push(t.elapsed());
            n += batch;
        }
        lat.sort();
        let rate = n as f64 / start.elapsed().as_secs_f64();
        raw_best = raw_best.max(rate);
        if batch == 1 {
            raw_p50 = pct(&lat, 0.5);
        }
        println!(
            "{:<28} {:>8} {:>14.1} {:>9.3} {:>9.3}",
            "raw ORT session",
            batch,
            rate,
            pct(&lat, 0.5),
            pct(&lat, 0.99)
        );
    }
    drop(session);

    let (_redis, rport) = start_redis(&[]);
    let (_proxy, mport) = start_memproxy(rport, &["--config", &write_config(threads)]);
    let mut best = 0f64;
    let mut p50_1 = 0f64;
    for clients in [1usize, 8, 32] {
        let (rate, lat) = load(
            clients,
            dur,
            |_| connect(mport),
            |con, i| {
                // Distinct texts: the cache must not help.
                let v: Vec<f64> = redis::cmd("MEM.EMBED")
                    .arg(format!("{} #{clients}", sentence(i)))
                    .query(con)
                    .unwrap();
                assert_eq!(v.len(), 384);
            },
        );
        best = best.max(rate);
        if clients == 1 {
            p50_1 = pct(&lat, 0.5);
        }
        println!(
            "{:<28} {:>8} {:>14.1} {:>9.3} {:>9.3}",
            "memproxy MEM.EMBED",
            clients,
            rate,
            pct(&lat, 0.5),
            pct(&lat, 0.99)
        );
    }
    println!();
    println!(
        "best throughput: memproxy {best:.1}/s vs raw {raw_best:.1}/s = {:.3}x (target >= 0.95x)",
        best / raw_best
    );
    println!("single-sentence p50: memproxy {p50_1:.3} ms vs raw {raw_p50:.3} ms = +{:.3} ms (target <= +0.3 ms)", p50_1 - raw_p50);
}

fn write_config(threads: usize) -> String {
    let path =
        std::env::temp_dir().join(format!("memproxy-bench-embed-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        format!("embed_threads = {threads}\nembed_queue = 4096\n"),
    )
    .unwrap();
    path.display().to_string()
}

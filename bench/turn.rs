//! MEM.TURN latency and turns/s at 1, 8 and 32 concurrent clients (one thread each), beside the
//! Python baseline (bench/turn_baseline.py: the guide's flow with client-side embedding) on the
//! same Redis and model file, in one run; and MEM.TURN on the compact storage layout (a Redis and
//! memproxy of its own) beside the guide layout's. The baseline's virtualenv (redis-py, onnxruntime from the
//! cached wheel, tokenizers, numpy) is made in the deps dir on first use.
//!
//! usage: cargo build --release && cargo bench --bench turn   (BENCH_SECONDS per cell, default 5;
//!        BENCH_CONFIG, a memproxy config file to try instead of the defaults)

#[path = "common.rs"]
mod common;

use std::process::Command;

use common::*;
use redis::Value;

fn python() -> String {
    let venv = deps().join("bench-venv");
    let py = venv.join("bin/python");
    if !py.exists() {
        let ok = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap()
            .success();
        assert!(ok, "python3 -m venv failed");
        let wheel = deps().join("wheels/onnxruntime-1.32.0-cp311-cp311-manylinux_2_28_x86_64.whl");
        let ok = Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "redis==5.2.1",
                "tokenizers==0.22.1",
                "numpy==2.4.6",
            ])
            .arg(&wheel)
            .status()
            .unwrap()
            .success();
        assert!(ok, "pip install of the baseline's packages failed");
    }
    py.display().to_string()
}

fn main() {
    let dur = duration_from_env("BENCH_SECONDS", 5.0);
    let py = python();
    let (_redis, rport) = start_redis(&[]);
    let (_proxy, mport) = start_memproxy_bench_config(rport);
    let (_credis, crport) = start_redis(&[]);
    let (_cproxy, cport) = match std::env::var("BENCH_CONFIG") {
        Ok(c) => start_memproxy(crport, &["--config", &c, "--storage", "compact"]),
        Err(_) => start_memproxy(crport, &["--storage", "compact"]),
    };
    let mut ccon = connect(cport);
    for (i, s) in (0..200).map(|i| (i, sentence(i + 5000))) {
        if i % 2 == 0 {
            let _: Value = redis::cmd("MEM.REMEMBER")
                .arg(s)
                .arg("USER")
                .arg("bench-mp")
                .query(&mut ccon)
                .unwrap();
        }
    }
    let mut con = connect(mport);
    let _: Value = redis::cmd("MEM.INFO").query(&mut con).unwrap();
    for (i, s) in (0..200).map(|i| (i, sentence(i + 5000))) {
        let _: Value = redis::cmd("MEM.REMEMBER")
            .arg(s)
            .arg("USER")
            .arg(if i % 2 == 0 { "bench-mp" } else { "benchpy" })
            .query(&mut con)
            .unwrap();
    }
    let env = ort_env();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut raw = raw_session(env, 3, true, cores);
    println!("# MEM.TURN vs the guide's flow in Python (redis-py + onnxruntime, client-side embedding, the same session options: level all, {cores} threads, spinning), {} s per cell, interleaved", dur.as_secs_f64());
    println!(
        "{:<30} {:>7} {:>10} {:>9} {:>9}",
        "what", "clients", "turns/s", "p50_ms", "p99_ms"
    );
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut compact = Vec::new();
    let turn_cell = |port: u16, clients: usize| {
        load(
            clients,
            dur,
            |_| connect(port),
            |c, i| {
                let thread = format!("mp-{clients}-{}", i / 1_000_000);
                let _: Value = redis::cmd("MEM.TURN")
                    .arg(thread)
                    .arg("user")
                    .arg(format!("{} [mp {clients}]", sentence(i)))
                    .arg("USER")
                    .arg("bench-mp")
                    .query(c)
                    .unwrap();
            },
        )
    };
    for clients in [1usize, 8, 32] {
        let (rate, lat) = turn_cell(mport, clients);
        println!(
            "{:<30} {:>7} {:>10.1} {:>9.3} {:>9.3}",
            "memproxy MEM.TURN",
            clients,
            rate,
            pct(&lat, 0.5),
            pct(&lat, 0.99)
        );
        ours.push((rate, pct(&lat, 0.5)));
        let (crate_, clat) = turn_cell(cport, clients);
        println!(
            "{:<30} {:>7} {:>10.1} {:>9.3} {:>9.3}",
            "memproxy MEM.TURN, compact",
            clients,
            crate_,
            pct(&clat, 0.5),
            pct(&clat, 0.99)
        );
        compact.push(crate_);
        let out = Command::new(&py)
            .arg(root().join("bench/turn_baseline.py"))
            .arg(rport.to_string())
            .arg(deps().join("model/all-MiniLM-L6-v2"))
            .arg(dur.as_secs_f64().to_string())
            .arg(clients.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "baseline failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        let (c, rate, p50, p99) = (
            v["clients"].as_u64().unwrap(),
            v["turns_per_s"].as_f64().unwrap(),
            v["p50_ms"].as_f64().unwrap(),
            v["p99_ms"].as_f64().unwrap(),
        );
        println!(
            "{:<30} {:>7} {:>10.1} {:>9.3} {:>9.3}",
            "python baseline (guide flow)", c, rate, p50, p99
        );
        theirs.push((rate, p50));
    }
    // The model's own ceiling on these texts: the best raw configuration of the embed benchmark.
    // The same texts as memproxy's 32-client cell.
    let texts: Vec<String> = (0..4096)
        .map(|i| format!("{} [mp 32]", sentence((i % 32) * 1_000_000 + i / 32)))
        .collect();
    let start = std::time::Instant::now();
    let mut n = 0;
    while start.elapsed() < dur {
        let chunk: Vec<String> = (0..32)
            .map(|k| texts[(n + k) % texts.len()].clone())
            .collect();
        raw.embed(&chunk, Some(2048));
        n += 32;
    }
    let raw_rate = n as f64 / start.elapsed().as_secs_f64();
    println!(
        "{:<30} {:>7} {:>10.1} {:>9} {:>9}",
        "raw ORT, batch 32 sorted", "-", raw_rate, "-", "-"
    );
    println!();
    for (i, clients) in [1, 8, 32].iter().enumerate() {
        println!(
            "{clients:>2} clients: turns/s {:.2}x the baseline, {:.2}x the raw model; p50 {:.2}x the baseline",
            ours[i].0 / theirs[i].0,
            ours[i].0 / raw_rate,
            ours[i].1 / theirs[i].1
        );
    }
    println!(
        "the model's ceiling: raw {raw_rate:.1} texts/s = {:.2}x the baseline's best turns/s (one embedding a turn: no flow beats it)",
        raw_rate / theirs.iter().map(|t| t.0).fold(0f64, f64::max)
    );
    for (i, clients) in [1, 8, 32].iter().enumerate() {
        println!(
            "{clients:>2} clients: the compact layout's MEM.TURN {:.2}x the guide layout's turns/s",
            compact[i] / ours[i].0
        );
    }
    println!("targets: >= 1.5x the baseline's turns/s at 8 clients; the compact layout >= 1.0x the guide's");
}

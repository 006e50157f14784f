//! Soak: 1,000 concurrent client connections for SOAK_SECONDS (default 60) on loopback, mixing
//! passthrough GET/SET with MEM.RECALL and MEM.REMEMBER, each client pausing THINK_MS (default 50)
//! between requests. Reports requests served, errors by kind, latency per verb (p50, p99, max, and
//! how many took over 500 ms, the `redis` crate's default response timeout; the clients here wait
//! up to 10 s, so a stall shows as an error), memproxy's RSS at start / peak / end and its open
//! file descriptors after the clients have gone.
//!
//! usage: cargo bench --bench soak

#[path = "common.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn main() {
    let secs = duration_from_env("SOAK_SECONDS", 60.0);
    let think = Duration::from_millis(
        std::env::var("THINK_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(50),
    );
    let clients: usize = std::env::var("SOAK_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let (_redis, rport) = start_redis(&["--maxclients", "20000"]);
    let (proxy, mport) = start_memproxy_bench_config(rport);
    let pid = proxy.0.id();
    let mut con = connect(mport);
    for i in 0..200 {
        let _: Value = redis::cmd("MEM.REMEMBER")
            .arg(sentence(i))
            .arg("USER")
            .arg("soak")
            .query(&mut con)
            .unwrap();
    }
    drop(con);
    let rss_start = rss_kib(pid);
    let served = Arc::new(AtomicU64::new(0));
    let errors: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let latencies: Arc<Mutex<BTreeMap<&'static str, Vec<Duration>>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(rss_start));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let start = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for c in 0..clients {
            let (served, errors, latencies) = (served.clone(), errors.clone(), latencies.clone());
            tasks.push(tokio::spawn(async move {
                let client = redis::Client::open(format!("redis://127.0.0.1:{mport}")).unwrap();
                let config = redis::AsyncConnectionConfig::new()
                    .set_response_timeout(Some(Duration::from_secs(10)));
                let mut con = loop {
                    match client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                    {
                        Ok(c) => break c,
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                };
                let mut i = c;
                // Bounded in time and in count.
                while start.elapsed() < secs && i < c + 100_000 {
                    let mut cmd;
                    match i % 100 {
                        0..=44 => {
                            cmd = redis::cmd("SET");
                            cmd.arg(format!("soak:{}", i % 5000)).arg(i);
                        }
                        45..=89 => {
                            cmd = redis::cmd("GET");
                            cmd.arg(format!("soak:{}", i % 5000));
                        }
                        90..=98 => {
                            cmd = redis::cmd("MEM.RECALL");
                            cmd.arg(sentence(i % 300)).arg("USER").arg("soak");
                        }
                        _ => {
                            cmd = redis::cmd("MEM.REMEMBER");
                            cmd.arg(format!("{} [soak {i}]", sentence(i)))
                                .arg("USER")
                                .arg("soak");
                        }
                    }
                    let verb = match i % 100 {
                        0..=44 => "SET",
                        45..=89 => "GET",
                        90..=98 => "MEM.RECALL",
                        _ => "MEM.REMEMBER",
                    };
                    let asked = Instant::now();
                    let outcome = cmd.query_async::<Value>(&mut con).await;
                    latencies
                        .lock()
                        .unwrap()
                        .entry(verb)
                        .or_default()
                        .push(asked.elapsed());
                    match outcome {
                        Ok(Value::ServerError(e)) => {
                            *errors
                                .lock()
                                .unwrap()
                                .entry(format!(
                                    "{} {}",
                                    e.code(),
                                    e.details().unwrap_or("").split(':').next().unwrap_or("")
                                ))
                                .or_default() += 1
                        }
                        Ok(_) => {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            // Whether in the first 5 s (every connection's first MEM.* arriving
                            // at once) or later.
                            let when = if start.elapsed() < Duration::from_secs(5) {
                                "in the first 5 s"
                            } else {
                                "later"
                            };
                            *errors
                                .lock()
                                .unwrap()
                                .entry(format!("client-side: {:?} ({verb}, {when}): {e}", e.kind()))
                                .or_default() += 1
                        }
                    }
                    i += 1;
                    tokio::time::sleep(think).await;
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    drop(rt);
    let peak_kib = peak.load(Ordering::Relaxed).max(rss_kib(pid));
    // Connections close asynchronously; poll until the proxy has released them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fds(pid) > 64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    println!(
        "# soak: {clients} connections, {elapsed:.1} s, {} ms think time",
        think.as_millis()
    );
    println!(
        "requests served: {} ({:.0}/s)",
        served.load(Ordering::Relaxed),
        served.load(Ordering::Relaxed) as f64 / elapsed
    );
    let errs = errors.lock().unwrap();
    if errs.is_empty() {
        println!("errors: none");
    }
    for (k, n) in errs.iter() {
        println!("errors {k}: {n}");
    }
    println!(
        "{:<13} {:>9} {:>8} {:>8} {:>8} {:>10}",
        "verb", "requests", "p50_ms", "p99_ms", "max_ms", "over_500ms"
    );
    for (verb, lat) in latencies.lock().unwrap().iter_mut() {
        lat.sort();
        println!(
            "{:<13} {:>9} {:>8.2} {:>8.2} {:>8.1} {:>10}",
            verb,
            lat.len(),
            pct(lat, 0.5),
            pct(lat, 0.99),
            lat.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
            lat.iter()
                .filter(|d| **d > Duration::from_millis(500))
                .count()
        );
    }
    println!(
        "memproxy RSS: start {} MiB, peak {} MiB, end {} MiB",
        rss_start / 1024,
        peak_kib / 1024,
        rss_kib(pid) / 1024
    );
    println!("memproxy open fds after the clients left: {}", fds(pid));
}

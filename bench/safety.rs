//! What one client can cost the upstream and the proxy, side by side with the alternative.
//!
//! 1. Erasure: FORGET_N (default 100,000) memories of one user are erased through
//!    `MEM.FORGET USER u` (time-bounded steps) while another client PINGs Redis directly; then the
//!    same scope is erased again the way a single script would do it (one EVAL over the whole
//!    scope, as memproxy did before). Prints the erasure time and the other client's PING
//!    p50 / p99 / max during each.
//! 2. A client pipelines PIPE_MB (default 200) MB of SETs without reading while another client
//!    keeps sending GETs through the proxy: prints memproxy's RSS (start / peak / end), Redis's
//!    peak client output buffer, and the other client's p50 / p99, then the same flood sent to
//!    Redis directly for comparison.
//!
//! usage: cargo build --release && cargo bench --bench safety

#[path = "common.rs"]
mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// PING Redis directly until `stop`; returns the sorted latencies.
fn pinger(port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Duration>> {
    std::thread::spawn(move || {
        let mut c = connect(port);
        let mut lat = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            // A Redis busy with a long script answers BUSY: the PING waits until it gets PONG.
            let t = Instant::now();
            while redis::cmd("PING").query::<String>(&mut c).is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
            lat.push(t.elapsed());
            std::thread::sleep(Duration::from_millis(1));
        }
        lat.sort();
        lat
    })
}

fn load_memories(port: u16, user: &str, n: usize) {
    let mut d = connect(port);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for chunk in 0..n.div_ceil(1000) {
        let mut pipe = redis::pipe();
        for i in chunk * 1000..((chunk + 1) * 1000).min(n) {
            let v: Vec<String> = (0..384)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    format!("{:.4}", (seed % 2000) as f64 / 1000.0 - 1.0)
                })
                .collect();
            pipe.cmd("JSON.SET")
                .arg(format!("agent:mem:b{i:011x}"))
                .arg("$")
                .arg(format!(
                    r#"{{"id":"b{i:011x}","user":"{user}","namespace":"default","kind":"semantic","source_thread":"","text":"fact number {i}","embedding":[{}],"created_ts":1.0,"hit_count":0}}"#,
                    v.join(",")
                ))
                .ignore();
        }
        pipe.query::<()>(&mut d).unwrap();
    }
    // Wait for the index to hold them all.
    loop {
        let info: Value = redis::cmd("FT.INFO")
            .arg("agentmem:idx")
            .query(&mut d)
            .unwrap();
        let flat = match &info {
            Value::Array(a) => a.clone(),
            _ => vec![],
        };
        let docs = flat
            .chunks(2)
            .find(|p| {
                matches!(&p[0], Value::SimpleString(s) if s == "num_docs")
                    || matches!(&p[0], Value::BulkString(b) if b == b"num_docs")
            })
            .and_then(|p| match &p[1] {
                Value::Int(i) => Some(*i as usize),
                Value::BulkString(b) => String::from_utf8_lossy(b).parse().ok(),
                Value::SimpleString(s) => s.parse().ok(),
                Value::Double(d) => Some(*d as usize),
                _ => None,
            })
            .unwrap_or(0);
        if docs >= n {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The erasure as one script over the whole scope (what memproxy did before batching).
const ONE_SCRIPT: &str = r#"
local deleted = 0
while true do
  local r = redis.call('FT.SEARCH', KEYS[1], ARGV[1], 'NOCONTENT', 'LIMIT', 0, 1000, 'DIALECT', 2)
  if #r < 2 then break end
  for i = 2, #r do deleted = deleted + redis.call('DEL', r[i]) end
end
return deleted
"#;

fn erasure() {
    let n = env_usize("FORGET_N", 100_000);
    let (_redis, rport) = start_redis(&[]);
    let (_proxy, mport) = start_memproxy(rport, &[]);
    let mut m = connect(mport);
    let _: Value = redis::cmd("MEM.INFO").query(&mut m).unwrap(); // creates the index
    println!("\n## Erasure of {n} memories, another client's PING during it\n");
    println!("| erasure | deleted | seconds | PING p50 ms | PING p99 ms | PING max ms | PINGs |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for way in [
        "MEM.FORGET USER (cursor + 2 ms steps)",
        "one script (before)",
    ] {
        load_memories(rport, "eraser", n);
        let stop = Arc::new(AtomicBool::new(false));
        let p = pinger(rport, stop.clone());
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        let deleted: i64 = if way.starts_with("MEM") {
            redis::cmd("MEM.FORGET")
                .arg("USER")
                .arg("eraser")
                .query(&mut m)
                .unwrap()
        } else {
            let mut d = connect(rport);
            redis::cmd("EVAL")
                .arg(ONE_SCRIPT)
                .arg(1)
                .arg("agentmem:idx")
                .arg("@user:{eraser}")
                .query(&mut d)
                .unwrap()
        };
        let secs = t.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let lat = p.join().unwrap();
        println!(
            "| {way} | {deleted} | {secs:.2} | {:.3} | {:.3} | {:.3} | {} |",
            pct(&lat, 0.5),
            pct(&lat, 0.99),
            pct(&lat, 1.0),
            lat.len()
        );
    }
}

fn flood(target_port: u16, redis_port: u16, proxy_pid: Option<u32>, mb: usize) {
    let mut req = Vec::new();
    let one = b"*3\r\n$3\r\nSET\r\n$8\r\nflood-kk\r\n$64\r\n0123456789012345678901234567890123456789012345678901234567890123\r\n";
    while req.len() < 4 << 20 {
        req.extend_from_slice(one);
    }
    let per = req.len();
    let rounds = (mb << 20) / per;
    let total_requests = rounds * (per / one.len());
    let rss_start = proxy_pid.map(rss_kib).unwrap_or(0);
    let peak_rss = Arc::new(AtomicU64::new(rss_start));
    let peak_obuf = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak_rss, peak_obuf, stop) = (peak_rss.clone(), peak_obuf.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(pid) = proxy_pid {
                    peak_rss.fetch_max(rss_kib(pid), Ordering::Relaxed);
                }
                let mut d = connect(redis_port);
                let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut d).unwrap();
                let omem: u64 = list
                    .lines()
                    .filter_map(|l| {
                        l.split(' ')
                            .find_map(|f| f.strip_prefix("omem="))
                            .and_then(|v| v.parse::<u64>().ok())
                    })
                    .max()
                    .unwrap_or(0);
                peak_obuf.fetch_max(omem, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let other = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c = connect(target_port);
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let _: Option<String> = redis::cmd("GET").arg("other-key").query(&mut c).unwrap();
                lat.push(t.elapsed());
                std::thread::sleep(Duration::from_millis(2));
            }
            lat.sort();
            lat
        })
    };
    let t = Instant::now();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", target_port)).unwrap();
    for _ in 0..rounds {
        s.write_all(&req).unwrap();
    }
    let wrote = t.elapsed().as_secs_f64();
    let rss_written = proxy_pid.map(rss_kib).unwrap_or(0);
    // Now read every reply.
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0usize;
    while got < total_requests * 5 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got += n;
    }
    let all = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let lat = other.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let rss_end = proxy_pid.map(rss_kib).unwrap_or(0);
    let path = if proxy_pid.is_some() {
        "memproxy"
    } else {
        "direct"
    };
    let rss = if proxy_pid.is_some() {
        format!(
            "{} / {} / {} / {}",
            rss_start / 1024,
            rss_written / 1024,
            peak_rss.load(Ordering::Relaxed) / 1024,
            rss_end / 1024
        )
    } else {
        "—".into()
    };
    println!(
        "| {path} | {mb} | {wrote:.1} | {all:.1} | {rss} | {} | {:.3} | {:.3} |",
        peak_obuf.load(Ordering::Relaxed) >> 20,
        pct(&lat, 0.5),
        pct(&lat, 0.99)
    );
}

fn pipelining() {
    let mb = env_usize("PIPE_MB", 200);
    let (_redis, rport) = start_redis(&[]);
    let (proxy, mport) = start_memproxy(rport, &[]);
    println!("\n## A client pipelines {mb} MB of SETs without reading; another client GETs\n");
    println!("| path | MB | s to write | s to read all | memproxy RSS MiB start / after write / peak / end | Redis peak client obuf MiB | other GET p50 ms | other GET p99 ms |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    flood(mport, rport, Some(proxy.0.id()), mb);
    flood(rport, rport, None, mb);
}

fn main() {
    let which = std::env::var("SAFETY").unwrap_or_default();
    if which.is_empty() || which == "erasure" {
        erasure();
    }
    if which.is_empty() || which == "pipeline" {
        pipelining();
    }
}

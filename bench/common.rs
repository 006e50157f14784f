//! Shared by the benchmarks: start the bundled Redis and the release memproxy binary on free
//! ports, a corpus of agent-memory sentences, percentiles, and table printing. Everything runs on
//! loopback and stops by itself.

#![allow(dead_code)]

use std::borrow::Cow;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memproxy::embed::tokenize::{plan_runs, Batch, TextTokenizer, Tokens};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionInputValue};
use ort::value::Tensor;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn deps() -> PathBuf {
    memproxy::Config::default().deps_dir()
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn wait_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn start_redis(extra: &[&str]) -> (Proc, u16) {
    let port = free_port();
    let d = deps();
    let child = Command::new(d.join("bin/redis-server"))
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--loadmodule")
        .arg(d.join("lib/rejson.so"))
        .arg("--loadmodule")
        .arg(d.join("lib/redisearch.so"))
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (run scripts/setup.sh)");
    wait_port(port);
    (Proc(child), port)
}

/// The release memproxy binary in front of `redis_port`.
pub fn start_memproxy(redis_port: u16, extra: &[&str]) -> (Proc, u16) {
    let port = free_port();
    let bin = root().join("target/release/memproxy");
    assert!(bin.exists(), "build it first: cargo build --release");
    let child = Command::new(bin)
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--upstream",
            &format!("redis://127.0.0.1:{redis_port}"),
            "--log",
            "warn",
        ])
        .args(extra)
        .spawn()
        .expect("memproxy");
    wait_port(port);
    (Proc(child), port)
}

/// [`start_memproxy`] with the config file named by BENCH_CONFIG, if set (settings to try instead
/// of the defaults).
pub fn start_memproxy_bench_config(redis_port: u16) -> (Proc, u16) {
    match std::env::var("BENCH_CONFIG") {
        Ok(c) => start_memproxy(redis_port, &["--config", &c]),
        Err(_) => start_memproxy(redis_port, &[]),
    }
}

/// Resident memory of a process, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:")
                    .map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0))
            })
        })
        .unwrap_or(0)
}

pub fn connect(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap()
}

#[path = "sentences.rs"]
mod sentences;
#[allow(unused_imports)] // not every bench uses it
pub use sentences::sentence;

/// Percentile of sorted durations, in milliseconds.
pub fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

/// Run `clients` threads for `dur`, each calling `op(client, seq)` in a loop; returns (ops/s,
/// sorted latencies).
pub fn load<S: Send>(
    clients: usize,
    dur: Duration,
    setup: impl Fn(usize) -> S + Sync,
    op: impl Fn(&mut S, usize) + Sync,
) -> (f64, Vec<Duration>) {
    let start = Instant::now();
    let mut lat: Vec<Duration> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..clients)
            .map(|c| {
                let (setup, op) = (&setup, &op);
                s.spawn(move || {
                    let mut state = setup(c);
                    let mut lat = Vec::new();
                    let mut i = 0;
                    while start.elapsed() < dur {
                        let t = Instant::now();
                        op(&mut state, c * 1_000_000 + i);
                        lat.push(t.elapsed());
                        i += 1;
                    }
                    lat
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    lat.sort();
    (lat.len() as f64 / elapsed, lat)
}

pub fn duration_from_env(name: &str, default_secs: f64) -> Duration {
    Duration::from_secs_f64(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default_secs),
    )
}

/// A plain ONNX Runtime session on the model file, fed as a user would feed it.
pub struct Raw {
    pub session: Session,
    pub tok: TextTokenizer,
}

impl Raw {
    pub fn run(&mut self, b: &Batch) {
        let shape = [b.rows as i64, b.cols as i64];
        let feed: Vec<(Cow<str>, SessionInputValue)> = vec![
            (
                "input_ids".into(),
                Tensor::from_array((shape, b.ids.clone())).unwrap().into(),
            ),
            (
                "attention_mask".into(),
                Tensor::from_array((shape, b.mask.clone())).unwrap().into(),
            ),
            (
                "token_type_ids".into(),
                Tensor::from_array((shape, b.type_ids.clone()))
                    .unwrap()
                    .into(),
            ),
        ];
        let out = self.session.run(feed).unwrap();
        let (_, data) = out[0].try_extract_tensor::<f32>().unwrap();
        // Sentence embeddings, or token embeddings (a graph without pooling): 384 wide either way.
        assert!(!data.is_empty() && data.len().is_multiple_of(b.rows * 384));
    }

    /// One batch as given (padded to its longest), or sorted by length and cut into runs as
    /// memproxy cuts them (`plan_runs`, at most `budget` padded tokens a run).
    pub fn embed(&mut self, texts: &[String], sorted: Option<usize>) {
        let mut toks: Vec<Tokens> = texts.iter().map(|t| self.tok.tokens(t).unwrap()).collect();
        let pad = self.tok.pad_id();
        match sorted {
            None => self.run(&Batch::pad(&toks.iter().collect::<Vec<_>>(), pad)),
            Some(budget) => {
                toks.sort_by_key(|t| t.len());
                let lens: Vec<usize> = toks.iter().map(|t| t.len()).collect();
                for run in plan_runs(&lens, budget) {
                    let rows: Vec<&Tokens> = toks[run].iter().collect();
                    self.run(&Batch::pad(&rows, pad));
                }
            }
        }
    }
}

/// The model directory the benchmarks use: EMBED_MODEL, else the bundled fp32 graph.
pub fn model_dir() -> PathBuf {
    std::env::var_os("EMBED_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| deps().join("model/all-MiniLM-L6-v2"))
}

/// A raw session on [`model_dir`]: `level` 1 or 3, `threads` intra-op threads.
pub fn raw_session(
    env: &ort::environment::Environment,
    level: u8,
    spinning: bool,
    threads: usize,
) -> Raw {
    let dir = model_dir();
    let opt = if level == 1 {
        GraphOptimizationLevel::Level1
    } else {
        GraphOptimizationLevel::All
    };
    let session = Session::builder(env)
        .unwrap()
        .with_optimization_level(opt)
        .unwrap()
        .with_intra_threads(threads)
        .unwrap()
        .with_intra_op_spinning(spinning)
        .unwrap()
        .commit_from_file(dir.join("model.onnx"))
        .unwrap();
    Raw {
        session,
        tok: TextTokenizer::load(&dir).unwrap(),
    }
}

/// ONNX Runtime, loaded from the deps dir: memproxy's own environment (ONNX Runtime allows one
/// per process, and a bench may load memproxy's model beside its raw sessions).
pub fn ort_env() -> &'static ort::environment::Environment {
    memproxy::embed::onnx::environment(&deps().join("lib/libonnxruntime.so")).unwrap()
}

//! Model threads, dynamic batching, and their supervision.
//!
//! Each worker owns one model (an ORT session) on a dedicated OS thread, never on the tokio
//! reactor. A free worker takes everything queued, up to `max_batch`, and runs it as one batch.
//! When fewer are queued than its last batch had, it waits up to `max_wait` for that many: the
//! callers just answered are sending their next texts, and a batch of one costs almost as much
//! model time as a batch of eight short texts. A lone sequential caller never waits. Results go to the cache and
//! to every caller waiting for that text.
//!
//! Failures stay with the requests they hit: a panicking model run fails its batch and the worker
//! goes on; a run that outlasts the embedding deadline gets its worker *retired* — a replacement
//! with a freshly loaded model takes over the queue (when the pool knows how to load one), and the
//! stuck thread exits whenever its run returns.
//!
//! Two queues: the *foreground* (texts a caller is waiting on: questions, memories, turns) and the
//! *background* (the windows of long texts, `embed::windows`). A worker takes the foreground
//! first; a run holds either callers' texts or at most `max_batch / 8` windows, so a 100 KB
//! write's hundreds of windows never stand between another client and its embedding for more
//! than one short run; windows are not cached (nobody asks for a window's text again).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::cache::Cache;
use super::{EmbedError, Model, Vector};

pub struct Job {
    pub text: String,
    /// A long text's window (the background queue): not cached.
    pub background: bool,
}

/// Callers waiting for each text being embedded: identical concurrent requests share one run.
pub type InFlight =
    dashmap::DashMap<String, Vec<tokio::sync::oneshot::Sender<Result<Vector, EmbedError>>>>;

/// Loads a fresh model (for a replacement worker).
pub type Factory = Arc<dyn Fn() -> Result<Box<dyn Model>, EmbedError> + Send + Sync>;

/// Model runs and texts embedded, across workers.
#[derive(Default)]
pub struct Stats {
    pub batches: AtomicU64,
    pub texts: AtomicU64,
    /// Workers retired because a run outlasted the deadline.
    pub replaced: AtomicU64,
}

#[derive(Clone)]
pub struct Batching {
    pub max_batch: usize,
    pub max_wait: Duration,
}

/// One worker as the supervisor sees it.
struct Worker {
    /// When its current run started (ms since the pool's epoch), 0 when idle.
    busy_since: AtomicU64,
    /// Replaced: exit after the current run.
    retired: AtomicBool,
}

/// The workers and what they share.
pub struct Pool {
    rx: crossbeam_channel::Receiver<Job>,
    /// Long texts' windows: taken when the foreground is empty, a few per run.
    background: crossbeam_channel::Receiver<Job>,
    batching: Batching,
    cache: Arc<Cache>,
    pub stats: Arc<Stats>,
    inflight: Arc<InFlight>,
    factory: Option<Factory>,
    /// Where batch sizes are reported, once metrics exist.
    pub batch_sizes: std::sync::OnceLock<prometheus::Histogram>,
    workers: Mutex<Vec<Arc<Worker>>>,
    epoch: Instant,
    next_index: AtomicUsize,
}

impl Pool {
    pub fn new(
        rx: crossbeam_channel::Receiver<Job>,
        background: crossbeam_channel::Receiver<Job>,
        batching: Batching,
        cache: Arc<Cache>,
        inflight: Arc<InFlight>,
        factory: Option<Factory>,
    ) -> Arc<Pool> {
        Arc::new(Pool {
            rx,
            background,
            batching,
            cache,
            stats: Arc::new(Stats::default()),
            inflight,
            factory,
            batch_sizes: std::sync::OnceLock::new(),
            workers: Mutex::new(Vec::new()),
            epoch: Instant::now(),
            next_index: AtomicUsize::new(0),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Start a worker thread that owns `model`.
    pub fn spawn(self: &Arc<Pool>, model: Box<dyn Model>) {
        let me = Arc::new(Worker {
            busy_since: AtomicU64::new(0),
            retired: AtomicBool::new(false),
        });
        self.workers.lock().expect("workers").push(me.clone());
        let pool = self.clone();
        let index = self.next_index.fetch_add(1, Ordering::Relaxed);
        std::thread::Builder::new()
            .name(format!("embed-{index}"))
            .spawn(move || pool.work(model, &me))
            .expect("spawn embed worker");
    }

    /// Workers whose current run started more than half of `deadline` ago (a caller has just
    /// waited the whole deadline) are retired and, when the pool can load a model, replaced.
    pub fn replace_stuck(self: &Arc<Pool>, deadline: Duration) {
        let now = self.now_ms();
        let stuck: Vec<Arc<Worker>> = {
            let mut workers = self.workers.lock().expect("workers");
            let (stuck, live): (Vec<_>, Vec<_>) = workers.drain(..).partition(|w| {
                let since = w.busy_since.load(Ordering::Relaxed);
                since != 0 && now.saturating_sub(since) > deadline.as_millis() as u64 / 2
            });
            *workers = live;
            stuck
        };
        for w in stuck {
            w.retired.store(true, Ordering::Relaxed);
            self.stats.replaced.fetch_add(1, Ordering::Relaxed);
            tracing::error!("a model run outlasted the embedding deadline; replacing its worker");
            let Some(factory) = self.factory.clone() else {
                continue;
            };
            let pool = self.clone();
            // Loading takes a while: off the caller's thread.
            std::thread::spawn(move || match factory() {
                Ok(model) => pool.spawn(model),
                Err(e) => tracing::error!(error = %e, "could not load a replacement model"),
            });
        }
    }

    fn work(&self, mut model: Box<dyn Model>, me: &Worker) {
        let mut last_batch = 0;
        while !me.retired.load(Ordering::Relaxed) {
            // The foreground first; a window only when no caller's text waits.
            let first = match self.rx.try_recv() {
                Ok(j) => j,
                Err(_) => match self.background.try_recv() {
                    Ok(j) => j,
                    Err(_) => {
                        let got = crossbeam_channel::select! {
                            recv(self.rx) -> j => j,
                            recv(self.background) -> j => j,
                        };
                        let Ok(j) = got else { return };
                        j
                    }
                },
            };
            let windows = first.background;
            let mut jobs = vec![first];
            let b = &self.batching;
            while !windows && jobs.len() < b.max_batch {
                match self.rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    Err(_) => break,
                }
            }
            // The callers of the last batch are likely sending their next texts right now: wait
            // (at most max_wait) until as many are queued. A lone sequential caller never waits.
            if !windows && !b.max_wait.is_zero() && jobs.len() < last_batch {
                let deadline = Instant::now() + b.max_wait;
                while jobs.len() < last_batch.min(b.max_batch) {
                    match self.rx.recv_deadline(deadline) {
                        Ok(j) => jobs.push(j),
                        Err(_) => break,
                    }
                }
            }
            // No caller's text in this run: a few windows more, so the run stays short (a caller
            // arriving now waits for it, ~20 ms) and callers' texts never share a run with windows.
            if windows {
                while jobs.len() < (b.max_batch / 8).max(1) {
                    match self.background.try_recv() {
                        Ok(j) => jobs.push(j),
                        Err(_) => break,
                    }
                }
            }
            if !windows {
                last_batch = jobs.len();
            }
            let texts: Vec<&str> = jobs.iter().map(|j| j.text.as_str()).collect();
            self.stats.batches.fetch_add(1, Ordering::Relaxed);
            if let Some(h) = self.batch_sizes.get() {
                h.observe(texts.len() as f64);
            }
            self.stats
                .texts
                .fetch_add(texts.len() as u64, Ordering::Relaxed);
            me.busy_since.store(self.now_ms(), Ordering::Relaxed);
            // A panicking model run fails only the requests in it; the worker goes on.
            let run =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.embed(&texts)))
                    .unwrap_or_else(|p| {
                        let why = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        Err(EmbedError::Run(format!("the model run panicked: {why}")))
                    });
            me.busy_since.store(0, Ordering::Relaxed);
            self.deliver(&jobs, run);
        }
    }

    fn deliver(&self, jobs: &[Job], run: Result<Vec<Vec<f32>>, EmbedError>) {
        match run {
            Ok(vectors) => {
                for (job, v) in jobs.iter().zip(vectors) {
                    let v: Vector = v.into();
                    if !job.background {
                        self.cache.put(&job.text, v.clone());
                    }
                    for waiter in self.waiters(&job.text) {
                        let _ = waiter.send(Ok(v.clone()));
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, batch = jobs.len(), "embedding batch failed");
                for job in jobs {
                    for waiter in self.waiters(&job.text) {
                        let _ = waiter.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    fn waiters(&self, text: &str) -> Vec<tokio::sync::oneshot::Sender<Result<Vector, EmbedError>>> {
        self.inflight
            .remove(text)
            .map(|(_, w)| w)
            .unwrap_or_default()
    }
}

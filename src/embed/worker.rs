//! Model threads and dynamic batching.
//!
//! Each worker owns one model (an ORT session) on a dedicated OS thread, never on the tokio
//! reactor. A free worker takes everything queued, up to `max_batch`, and runs it as one batch;
//! it waits up to `max_wait` for more only when that is configured. Results go to the cache and
//! to every caller waiting for that text.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cache::Cache;
use super::{EmbedError, Model, Vector};

pub struct Job {
    pub text: String,
}

/// Callers waiting for each text being embedded: identical concurrent requests share one run.
pub type InFlight =
    dashmap::DashMap<String, Vec<tokio::sync::oneshot::Sender<Result<Vector, EmbedError>>>>;

/// Model runs and texts embedded, across workers.
#[derive(Default)]
pub struct Stats {
    pub batches: AtomicU64,
    pub texts: AtomicU64,
}

#[derive(Clone)]
pub struct Batching {
    pub max_batch: usize,
    pub max_wait: Duration,
}

pub fn spawn(
    index: usize,
    mut model: Box<dyn Model>,
    rx: crossbeam_channel::Receiver<Job>,
    b: Batching,
    cache: Arc<Cache>,
    stats: Arc<Stats>,
    inflight: Arc<InFlight>,
) {
    std::thread::Builder::new()
        .name(format!("embed-{index}"))
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut jobs = vec![first];
                while jobs.len() < b.max_batch {
                    match rx.try_recv() {
                        Ok(j) => jobs.push(j),
                        Err(_) => break,
                    }
                }
                if !b.max_wait.is_zero() {
                    let deadline = Instant::now() + b.max_wait;
                    while jobs.len() < b.max_batch {
                        match rx.recv_deadline(deadline) {
                            Ok(j) => jobs.push(j),
                            Err(_) => break,
                        }
                    }
                }
                let texts: Vec<&str> = jobs.iter().map(|j| j.text.as_str()).collect();
                stats.batches.fetch_add(1, Ordering::Relaxed);
                stats.texts.fetch_add(texts.len() as u64, Ordering::Relaxed);
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
                match run {
                    Ok(vectors) => {
                        for (job, v) in jobs.iter().zip(vectors) {
                            let v: Vector = v.into();
                            cache.put(&job.text, v.clone());
                            for waiter in inflight
                                .remove(&job.text)
                                .map(|(_, w)| w)
                                .unwrap_or_default()
                            {
                                let _ = waiter.send(Ok(v.clone()));
                            }
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, batch = texts.len(), "embedding batch failed");
                        for job in &jobs {
                            for waiter in inflight
                                .remove(&job.text)
                                .map(|(_, w)| w)
                                .unwrap_or_default()
                            {
                                let _ = waiter.send(Err(e.clone()));
                            }
                        }
                    }
                }
            }
        })
        .expect("spawn embed worker");
}

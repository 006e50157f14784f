//! Model threads and dynamic batching.
//!
//! Each worker owns one model (an ORT session) on a dedicated OS thread, never on the tokio
//! reactor. A free worker takes everything queued, up to `max_batch`, and runs it as one batch;
//! it waits up to `max_wait` for more only when that is configured. Results go to the cache and
//! back to each caller.

use std::time::{Duration, Instant};

use std::sync::Arc;

use super::cache::Cache;
use super::{EmbedError, Model, Vector};

pub struct Job {
    pub text: String,
    pub reply: tokio::sync::oneshot::Sender<Result<Vector, EmbedError>>,
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
                // Callers that gave up (client gone) need no work.
                jobs.retain(|j| !j.reply.is_closed());
                if jobs.is_empty() {
                    continue;
                }
                let texts: Vec<&str> = jobs.iter().map(|j| j.text.as_str()).collect();
                match model.embed(&texts) {
                    Ok(vectors) => {
                        for (job, v) in jobs.into_iter().zip(vectors) {
                            let v: Vector = v.into();
                            cache.put(&job.text, v.clone());
                            let _ = job.reply.send(Ok(v));
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, batch = texts.len(), "embedding batch failed");
                        for job in jobs {
                            let _ = job.reply.send(Err(e.clone()));
                        }
                    }
                }
            }
        })
        .expect("spawn embed worker");
}

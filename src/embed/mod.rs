//! Server-side text embedding.
//!
//! - [`Model`]: the narrow synchronous trait a backend implements (texts in, unit vectors out).
//! - [`onnx`]: the ONNX Runtime backend (all-MiniLM-L6-v2 by default), with [`tokenize`].
//! - [`locate`]: where the model comes from: a directory, or a Hugging Face id.
//! - [`worker`]: threads that own the models and batch what is queued.
//! - [`cache`]: a bounded LRU of embeddings keyed by exact text.
//!
//! [`Embedder`] is the cloneable handle the rest of memproxy uses: it answers from the cache or
//! queues the text for a worker, and fails at once with "embedder overloaded" when the bounded
//! queue is full, so a burst can never grow memory without bound.

pub mod cache;
pub mod locate;
pub mod onnx;
pub mod tokenize;
pub mod windows;
pub mod worker;

use std::sync::Arc;

use crate::config::Config;

/// A vector produced by the model, shared between the cache and its readers.
pub type Vector = Arc<[f32]>;

/// A synchronous embedding model. Implementations are owned by one worker thread.
pub trait Model: Send {
    /// Output dimension.
    fn dim(&self) -> usize;
    /// Unit-length vectors for `texts`, in order.
    fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmbedError {
    #[error("embedder overloaded: {0} requests queued, try again")]
    Overloaded(usize),
    #[error("embedder stopped")]
    Stopped,
    #[error("cannot load the model: {0}")]
    Load(String),
    #[error("embedding failed: {0}")]
    Run(String),
    #[error("embedding timed out after {0} ms")]
    Timeout(u64),
}

/// A window of a long text may wait this many times `embed_timeout_ms` (see `worker`).
pub const WINDOW_DEADLINE: u32 = 6;

/// Cloneable handle to the embedding workers.
#[derive(Clone)]
pub struct Embedder {
    queue: crossbeam_channel::Sender<worker::Job>,
    /// Long texts' windows (see `worker`).
    background: crossbeam_channel::Sender<worker::Job>,
    capacity: usize,
    cache: Arc<cache::Cache>,
    pool: Arc<worker::Pool>,
    inflight: Arc<worker::InFlight>,
    info: Arc<ModelInfo>,
    timeout: std::time::Duration,
}

/// What is known about the loaded model.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub name: String,
    pub path: String,
    pub dim: usize,
}

impl Embedder {
    /// Load the configured model in `embed_workers` threads and start serving.
    pub fn start(cfg: &Config) -> Result<Embedder, EmbedError> {
        let dir = locate::model_dir(&cfg.model_location(), &cfg.deps_dir())?;
        let lib = cfg.ort_library();
        let threads = if cfg.embed_threads == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            cfg.embed_threads
        };
        let opts = onnx::Options {
            library: lib,
            intra_threads: threads,
            optimization: cfg.embed_graph_optimization,
            spinning: cfg.embed_spinning,
            batch_tokens: cfg.embed_batch_tokens,
        };
        let load_dir = dir.clone();
        let factory: worker::Factory = Arc::new(move || {
            Ok(Box::new(onnx::OnnxModel::load(&load_dir, &opts)?) as Box<dyn Model>)
        });
        let mut models: Vec<Box<dyn Model>> = Vec::new();
        for _ in 0..cfg.embed_workers {
            models.push(factory()?);
        }
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let info = ModelInfo {
            name,
            path: dir.display().to_string(),
            dim: models[0].dim(),
        };
        Ok(Embedder::with_models(models, info, Some(factory), cfg))
    }

    /// Serve with the given models (one worker thread each); `factory` loads a replacement for a
    /// worker whose run outlasts the deadline (without one, the stuck worker is only retired).
    pub fn with_models(
        models: Vec<Box<dyn Model>>,
        info: ModelInfo,
        factory: Option<worker::Factory>,
        cfg: &Config,
    ) -> Embedder {
        let cache = Arc::new(cache::Cache::new(
            cfg.embed_cache_entries,
            cfg.embed_cache_bytes,
        ));
        let (tx, rx) = crossbeam_channel::bounded(cfg.embed_queue);
        let (btx, brx) = crossbeam_channel::bounded(cfg.embed_queue);
        let batching = worker::Batching {
            max_batch: cfg.embed_max_batch,
            max_wait: std::time::Duration::from_micros(cfg.embed_max_wait_us),
        };
        let inflight = Arc::new(worker::InFlight::new());
        let pool = worker::Pool::new(rx, brx, batching, cache.clone(), inflight.clone(), factory);
        for model in models {
            pool.spawn(model);
        }
        Embedder {
            queue: tx,
            background: btx,
            capacity: cfg.embed_queue,
            cache,
            pool,
            inflight,
            info: Arc::new(info),
            timeout: std::time::Duration::from_millis(cfg.embed_timeout_ms),
        }
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn cache(&self) -> &cache::Cache {
        &self.cache
    }

    /// (model runs, texts embedded) so far.
    pub fn batch_stats(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.pool.stats.batches.load(Relaxed),
            self.pool.stats.texts.load(Relaxed),
        )
    }

    /// Texts waiting for a worker.
    pub fn queue_depth(&self) -> usize {
        self.queue.len() + self.background.len()
    }

    /// Report the size of every model run to `hist`.
    pub fn observe_batches(&self, hist: prometheus::Histogram) {
        let _ = self.pool.batch_sizes.set(hist);
    }

    /// Workers replaced because a model run outlasted the deadline.
    pub fn workers_replaced(&self) -> u64 {
        self.pool
            .stats
            .replaced
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The embedding of `text`: from the cache, from a run already under way for the same text,
    /// or from a worker.
    pub async fn embed(&self, text: &str) -> Result<Vector, EmbedError> {
        self.embed_on(text, false).await
    }

    /// The embedding of one window of a long text (`windows`): queued behind every caller's
    /// text, taken a few at a time, not cached.
    pub async fn embed_window(&self, text: &str) -> Result<Vector, EmbedError> {
        self.embed_on(text, true).await
    }

    async fn embed_on(&self, text: &str, background: bool) -> Result<Vector, EmbedError> {
        if let Some(v) = self.cache.get(text) {
            return Ok(v);
        }
        let queue = if background {
            &self.background
        } else {
            &self.queue
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        match self.inflight.entry(text.to_owned()) {
            dashmap::Entry::Occupied(mut waiting) => waiting.get_mut().push(tx),
            dashmap::Entry::Vacant(slot) => {
                queue
                    .try_send(worker::Job {
                        text: text.to_owned(),
                        background,
                    })
                    .map_err(|e| match e {
                        crossbeam_channel::TrySendError::Full(_) => {
                            EmbedError::Overloaded(self.capacity)
                        }
                        crossbeam_channel::TrySendError::Disconnected(_) => EmbedError::Stopped,
                    })?;
                slot.insert(vec![tx]);
            }
        }
        // Every request has a deadline: a stuck model run fails its callers, not the proxy. A
        // window waits behind every caller's text and behind the windows queued before it (a
        // 100 KB text has ~400), so its deadline is WINDOW_DEADLINE times the caller's.
        let deadline = if background {
            self.timeout * WINDOW_DEADLINE
        } else {
            self.timeout
        };
        match tokio::time::timeout(deadline, rx).await {
            Ok(r) => r.map_err(|_| EmbedError::Stopped)?,
            Err(_) => {
                // Whoever asks for this text next queues afresh, and a worker stuck in a run
                // longer than the deadline is replaced.
                self.inflight.remove(text);
                self.pool.replace_stuck(self.timeout);
                Err(EmbedError::Timeout(deadline.as_millis() as u64))
            }
        }
    }

    /// Start embedding `text` in the background so that a later [`Embedder::embed`] finds it
    /// ready (MEM.* queued behind other requests of a pipeline still batch together).
    pub fn prefetch(&self, text: String) {
        if self.cache.contains(&text) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let _ = this.embed(&text).await;
        });
    }
}

/// L2-normalise in place (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 1e-12 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Cosine distance (1 - cosine similarity) of two vectors, as RediSearch's COSINE metric.
pub fn cosine_distance(a: &[f32], b: &[f32]) -> f64 {
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        dot += (*x as f64) * (*y as f64);
        na += (*x as f64) * (*x as f64);
        nb += (*y as f64) * (*y as f64);
    }
    1.0 - dot / (na.sqrt() * nb.sqrt()).max(1e-12)
}

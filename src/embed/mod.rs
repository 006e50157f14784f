//! Server-side text embedding.
//!
//! - [`Model`]: the narrow synchronous trait a backend implements (texts in, vectors out).
//! - [`onnx`]: the ONNX Runtime backend (all-MiniLM-L6-v2 by default), with [`tokenize`].
//! - [`layout`]: what the model directory says (pooling, normalisation, maximum length, query
//!   and document prompts), with the settings that override it.
//! - [`locate`]: where the model comes from: a directory, or a Hugging Face id.
//! - [`remote`]: an OpenAI-compatible embeddings endpoint instead of the local model
//!   (`embedder`), with retries, a deadline and a circuit breaker.
//! - [`worker`]: threads that own the models and batch what is queued.
//! - [`cache`]: a bounded LRU of embeddings keyed by the exact model input.
//!
//! [`Embedder`] is the cloneable handle the rest of memproxy uses: it answers from the cache or
//! queues the text for a worker, and fails at once with "embedder overloaded" when the bounded
//! queue is full, so a burst can never grow memory without bound. Every text is embedded in a
//! [`Role`]: a recall's question as a [`Role::Query`] ([`Embedder::embed_query`]), everything
//! stored as a [`Role::Document`] ([`Embedder::embed`]). The role's prompt is prepended to the
//! text, and the prompted text is what the cache, the in-flight table and the model see: the same
//! text as query and as document are two entries when the prompts differ, one when they agree.

pub mod cache;
pub mod layout;
pub mod locate;
pub mod onnx;
pub mod remote;
pub mod tokenize;
pub mod windows;
pub mod worker;

/// The sentence a model's identity is read from (the store keeps its embedding as the index's
/// model stamp).
pub const PROBE: &str = "memproxy model probe: the quick brown fox jumps over the lazy dog.";

use std::borrow::Cow;
use std::sync::Arc;

use crate::config::Config;

/// A vector produced by the model, shared between the cache and its readers.
pub type Vector = Arc<[f32]>;

/// A synchronous embedding model. Implementations are owned by one worker thread.
pub trait Model: Send {
    /// Output dimension.
    fn dim(&self) -> usize;
    /// Vectors for `texts` (prompts already prepended), in order; unit length unless the model
    /// says otherwise (`layout`).
    fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// What a text is embedded as: the model's query prompt or its document prompt goes before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// What is stored: memories, turns, their windows, the model probe.
    Document,
    /// What is searched with: a recall's question.
    Query,
}

/// The prompts of each role (empty: none).
#[derive(Debug, Clone, Default)]
pub struct Prompts {
    pub query: String,
    pub document: String,
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
    /// The embeddings endpoint failed: one line naming it and the cause (`remote`).
    #[error("{0}")]
    Remote(String),
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
    prompts: Arc<Prompts>,
    timeout: std::time::Duration,
    /// The embeddings endpoint, when it is the model (`remote`).
    endpoint: Option<Arc<remote::Endpoint>>,
}

/// What is known about the loaded model.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub name: String,
    pub path: String,
    pub dim: usize,
}

impl Embedder {
    /// Load the configured model in `embed_workers` threads and start serving (or, when
    /// `embedder` names an endpoint, ask it for the model probe: see [`Embedder::start_remote`]).
    pub fn start(cfg: &Config) -> Result<Embedder, EmbedError> {
        if let Some(settings) = remote::Settings::from_config(cfg)? {
            return Self::start_remote(cfg, settings);
        }
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
        let layout = layout::Layout::load(&dir, &layout::Overrides::from_config(cfg)?)?;
        tracing::info!(model = %dir.display(), "model layout: {}", layout.describe());
        let prompted = !layout.query_prompt.is_empty() || !layout.document_prompt.is_empty();
        if prompted && !layout.include_prompt {
            tracing::warn!(
                "the model's Pooling leaves prompt tokens out (include_prompt false); memproxy pools them with the text"
            );
        }
        if let Some(s) = layout.similarity.as_deref().filter(|s| *s != "cosine") {
            tracing::warn!(
                similarity = s,
                "the model is meant to be compared by {s}; memproxy's index measures cosine distance"
            );
        }
        let prompts = Prompts {
            query: layout.query_prompt.clone(),
            document: layout.document_prompt.clone(),
        };
        let load_dir = dir.clone();
        let factory: worker::Factory = Arc::new(move || {
            Ok(Box::new(onnx::OnnxModel::load_with_layout(
                &load_dir, &opts, &layout,
            )?) as Box<dyn Model>)
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
        Ok(Embedder::with_models(models, info, Some(factory), cfg).with_prompts(prompts))
    }

    /// Serve with an embeddings endpoint (`remote`) in `embed_workers` threads (each has one
    /// request in flight). The model probe ([`PROBE`], as a document) is asked for first: it
    /// tells the dimension, fails start-up with one line naming the endpoint when the endpoint
    /// cannot answer, and is cached for the index's model stamp.
    pub fn start_remote(cfg: &Config, settings: remote::Settings) -> Result<Embedder, EmbedError> {
        let endpoint = Arc::new(remote::Endpoint::new(settings));
        tracing::info!(endpoint = %endpoint.name(), "embeddings endpoint: {}", endpoint.describe());
        if cfg.model.is_some() {
            tracing::warn!("model is ignored: the embeddings endpoint embeds");
        }
        if cfg.pooling.is_some() || cfg.max_seq_length.is_some() {
            tracing::warn!(
                "pooling and max_seq_length apply to a local model; the endpoint's model pools and truncates as it does"
            );
        }
        // No model directory to read prompts from: the settings' only.
        let prompts = Prompts {
            query: cfg.query_prompt.clone().unwrap_or_default(),
            document: cfg.document_prompt.clone().unwrap_or_default(),
        };
        let probe = format!("{}{}", prompts.document, PROBE);
        let vector = endpoint.embed(&[&probe])?.remove(0);
        let ep = endpoint.clone();
        let factory: worker::Factory =
            Arc::new(move || Ok(Box::new(remote::RemoteModel::new(ep.clone())) as Box<dyn Model>));
        let mut models: Vec<Box<dyn Model>> = Vec::new();
        for _ in 0..cfg.embed_workers {
            models.push(factory()?);
        }
        let info = ModelInfo {
            name: endpoint.model_name(),
            path: endpoint.name().to_string(),
            dim: vector.len(),
        };
        tracing::info!(endpoint = %endpoint.name(), dim = info.dim, "the embeddings endpoint answers");
        let mut e = Embedder::with_models(models, info, Some(factory), cfg).with_prompts(prompts);
        e.cache.put(&probe, vector.into());
        e.endpoint = Some(endpoint);
        Ok(e)
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
            prompts: Arc::new(Prompts::default()),
            timeout: std::time::Duration::from_millis(cfg.embed_timeout_ms),
            endpoint: None,
        }
    }

    /// Use these prompts (models given to [`Embedder::with_models`] have none).
    pub fn with_prompts(mut self, prompts: Prompts) -> Embedder {
        self.prompts = Arc::new(prompts);
        self
    }

    /// The prompts prepended to each role's texts.
    pub fn prompts(&self) -> &Prompts {
        &self.prompts
    }

    /// What the model reads for `text` in `role`: the role's prompt, then the text. The cache
    /// (`cache()`) is keyed by it.
    pub fn model_input<'t>(&self, text: &'t str, role: Role) -> Cow<'t, str> {
        let prompt = match role {
            Role::Query => &self.prompts.query,
            Role::Document => &self.prompts.document,
        };
        if prompt.is_empty() {
            Cow::Borrowed(text)
        } else {
            Cow::Owned(format!("{prompt}{text}"))
        }
    }

    /// The query and the document prompt are the same (one embedding serves both roles).
    pub fn prompts_agree(&self) -> bool {
        self.prompts.query == self.prompts.document
    }

    /// Whether `text`'s embedding in `role` is cached (without counting a hit or a miss).
    pub fn is_cached(&self, text: &str, role: Role) -> bool {
        self.cache.contains(&self.model_input(text, role))
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The embeddings endpoint, when it is the model.
    pub fn endpoint(&self) -> Option<&remote::Endpoint> {
        self.endpoint.as_deref()
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

    /// The embedding of `text` as a document (what is stored): from the cache, from a run
    /// already under way for the same text, or from a worker.
    pub async fn embed(&self, text: &str) -> Result<Vector, EmbedError> {
        self.embed_as(text, Role::Document).await
    }

    /// The embedding of `text` as a query (a recall's question): the model's query prompt
    /// before it.
    pub async fn embed_query(&self, text: &str) -> Result<Vector, EmbedError> {
        self.embed_as(text, Role::Query).await
    }

    /// The embedding of `text` in `role`.
    pub async fn embed_as(&self, text: &str, role: Role) -> Result<Vector, EmbedError> {
        self.embed_on(&self.model_input(text, role), false).await
    }

    /// The embedding of one window of a long text (`windows`), as a document: queued behind
    /// every caller's text, taken a few at a time, not cached.
    pub async fn embed_window(&self, text: &str) -> Result<Vector, EmbedError> {
        self.embed_on(&self.model_input(text, Role::Document), true)
            .await
    }

    /// `text` is the model input (prompt included).
    async fn embed_on(&self, text: &str, background: bool) -> Result<Vector, EmbedError> {
        if let Some(v) = self.cache.get(text) {
            return Ok(v);
        }
        // An endpoint that keeps failing is not waited for (its breaker is open).
        if let Some(endpoint) = &self.endpoint {
            endpoint.fail_fast()?;
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
                let ms = deadline.as_millis() as u64;
                Err(match &self.endpoint {
                    Some(endpoint) => endpoint.timed_out(ms),
                    None => EmbedError::Timeout(ms),
                })
            }
        }
    }

    /// Start embedding `text` as a document in the background so that a later
    /// [`Embedder::embed`] finds it ready (MEM.* queued behind other requests of a pipeline still
    /// batch together).
    pub fn prefetch(&self, text: String) {
        self.prefetch_as(text, Role::Document)
    }

    /// [`Embedder::prefetch`] in `role`.
    pub fn prefetch_as(&self, text: String, role: Role) {
        let input = self.model_input(&text, role).into_owned();
        if self.cache.contains(&input) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let _ = this.embed_on(&input, false).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what it is given; a text's vector is (its length, 1).
    struct Echo(Arc<std::sync::Mutex<Vec<String>>>);

    impl Model for Echo {
        fn dim(&self) -> usize {
            2
        }
        fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            let mut seen = self.0.lock().unwrap();
            seen.extend(texts.iter().map(|t| t.to_string()));
            Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect())
        }
    }

    fn echo(prompts: Prompts) -> (Embedder, Arc<std::sync::Mutex<Vec<String>>>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let info = ModelInfo {
            name: "echo".into(),
            path: String::new(),
            dim: 2,
        };
        let e = Embedder::with_models(
            vec![Box::new(Echo(seen.clone()))],
            info,
            None,
            &Config::default(),
        )
        .with_prompts(prompts);
        (e, seen)
    }

    #[tokio::test]
    async fn embed_roles_prepend_their_prompt_and_are_cached_apart() {
        let (e, seen) = echo(Prompts {
            query: "query: ".into(),
            document: "passage: ".into(),
        });
        let d = e.embed("tea").await.unwrap();
        let q = e.embed_query("tea").await.unwrap();
        assert_eq!((d[0], q[0]), (12.0, 10.0));
        assert!(e.is_cached("tea", Role::Query) && e.is_cached("tea", Role::Document));
        assert!(!e.is_cached("coffee", Role::Query));
        // Both come from the cache now; a window is a document too.
        assert_eq!(e.embed_query("tea").await.unwrap()[0], 10.0);
        assert_eq!(e.embed_as("tea", Role::Document).await.unwrap()[0], 12.0);
        e.embed_window("a window").await.unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            ["passage: tea", "query: tea", "passage: a window"]
        );
        assert_eq!(e.model_input("x", Role::Query), "query: x");
    }

    #[tokio::test]
    async fn without_prompts_both_roles_share_one_run() {
        let (e, seen) = echo(Prompts::default());
        let d = e.embed("tea").await.unwrap();
        let q = e.embed_query("tea").await.unwrap();
        assert_eq!(d, q);
        assert_eq!(*seen.lock().unwrap(), ["tea"]);
        // Only a query prompt (bge-style): documents go bare.
        let (e, seen) = echo(Prompts {
            query: "Represent this sentence for searching relevant passages: ".into(),
            document: String::new(),
        });
        e.embed("tea").await.unwrap();
        e.embed_query("tea").await.unwrap();
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0], "tea");
        assert!(seen[1].starts_with("Represent") && seen[1].ends_with(": tea"));
    }
}

//! Prometheus metrics: what memproxy counts, in one registry.
//!
//! Requests and errors of MEM.* by verb and by the side at fault, latency histograms per verb,
//! connected clients, upstream connections lost, and — read from the embedder when scraped —
//! queue depth, batches and texts, cache hits and misses, replaced workers.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

use crate::embed::Embedder;

pub struct Metrics {
    registry: Registry,
    /// MEM.* requests by verb and outcome (`ok`, or the fault side: client, upstream, embedder,
    /// internal).
    pub requests: IntCounterVec,
    /// MEM.* latency by verb, seconds.
    pub latency: HistogramVec,
    pub clients: IntGauge,
    /// Client upstream connections that broke under a client.
    pub upstream_lost: IntCounter,
    /// Memories the background consolidator merged away.
    pub consolidated: IntCounter,
    /// Texts per model run.
    pub batch_size: Histogram,
    embed_queue: IntGauge,
    embed_batches: IntGauge,
    embed_texts: IntGauge,
    cache_hits: IntGauge,
    cache_misses: IntGauge,
    workers_replaced: IntGauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new_custom(Some("memproxy".into()), None).expect("registry");
        let requests = IntCounterVec::new(
            Opts::new("mem_requests_total", "MEM.* requests by verb and outcome"),
            &["verb", "outcome"],
        )
        .expect("metric");
        let latency = HistogramVec::new(
            HistogramOpts::new("mem_request_seconds", "MEM.* latency by verb").buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            &["verb"],
        )
        .expect("metric");
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("metric");
        let m = Metrics {
            clients: gauge("clients", "connected clients"),
            upstream_lost: IntCounter::new(
                "upstream_lost_total",
                "client upstream connections lost while in use",
            )
            .expect("metric"),
            consolidated: IntCounter::new(
                "consolidated_total",
                "memories the background consolidator merged into an older near-duplicate",
            )
            .expect("metric"),
            batch_size: Histogram::with_opts(
                HistogramOpts::new("embed_batch_size", "texts per model run")
                    .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
            )
            .expect("metric"),
            embed_queue: gauge("embed_queue_depth", "texts waiting for the model"),
            embed_batches: gauge("embed_batches", "model runs since start"),
            embed_texts: gauge("embed_texts", "texts embedded since start"),
            cache_hits: gauge("embed_cache_hits", "embedding cache hits since start"),
            cache_misses: gauge("embed_cache_misses", "embedding cache misses since start"),
            workers_replaced: gauge(
                "embed_workers_replaced",
                "model workers replaced after a run outlasted the deadline",
            ),
            requests,
            latency,
            registry,
        };
        for c in [
            Box::new(m.requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(m.latency.clone()),
            Box::new(m.clients.clone()),
            Box::new(m.upstream_lost.clone()),
            Box::new(m.consolidated.clone()),
            Box::new(m.batch_size.clone()),
            Box::new(m.embed_queue.clone()),
            Box::new(m.embed_batches.clone()),
            Box::new(m.embed_texts.clone()),
            Box::new(m.cache_hits.clone()),
            Box::new(m.cache_misses.clone()),
            Box::new(m.workers_replaced.clone()),
        ] {
            m.registry.register(c).expect("register");
        }
        m
    }

    /// The Prometheus text exposition, with the embedder's figures as of now.
    pub fn render(&self, embedder: &Embedder) -> String {
        let (hits, misses, _, _) = embedder.cache().stats();
        let (batches, texts) = embedder.batch_stats();
        self.embed_queue.set(embedder.queue_depth() as i64);
        self.embed_batches.set(batches as i64);
        self.embed_texts.set(texts as i64);
        self.cache_hits.set(hits as i64);
        self.cache_misses.set(misses as i64);
        self.workers_replaced
            .set(embedder.workers_replaced() as i64);
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding");
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

//! Every setting with its default, and where settings come from.
//!
//! Precedence: defaults < TOML file (`--config`) < environment (`MEMPROXY_<NAME>`) < flags. The
//! file puts settings in sections (`[server]`, `[upstream]`, `[write]`, `[limits]`, `[embed]`,
//! `[store]`, `[recall]`, `[consolidate]`, `[http]`; [`SECTIONS`] says which key is which
//! setting); a file of flat keys (the flags' names with `_` for `-`) still loads. Unknown keys
//! are an error. Modes are enums, so a wrong one fails at load with the values it could be;
//! everything else is validated once at start, with a message naming the setting.

use std::path::PathBuf;

use clap::Parser;
use serde::{Deserialize, Serialize};

/// Command-line flags. Every one is optional so that "not given" can fall through to the
/// environment (clap reads `MEMPROXY_…`), then the file, then the default.
#[derive(Debug, Default, Parser, Serialize)]
#[command(
    name = "memproxy",
    version,
    about = "Redis-protocol proxy that gives AI agents a memory"
)]
pub struct Flags {
    /// Without a subcommand: run the proxy.
    #[command(subcommand)]
    #[serde(skip)]
    pub command: Option<Sub>,
    /// TOML config file (keys as the flags, `_` for `-`).
    #[arg(long, global = true, env = "MEMPROXY_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:6380].
    #[arg(long, env = "MEMPROXY_LISTEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Upstream Redis URL; user, password and db go in the URL [default: redis://127.0.0.1:6379].
    #[arg(long, global = true, env = "MEMPROXY_UPSTREAM")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// Model: a directory with model.onnx and tokenizer.json, or a Hugging Face model id.
    #[arg(long, global = true, env = "MEMPROXY_MODEL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Pooling of the model's token embeddings: mean, cls, max, lasttoken, weightedmean or
    /// mean_sqrt_len_tokens (several joined by +) [default: the model's 1_Pooling/config.json,
    /// else mean].
    #[arg(long, global = true, env = "MEMPROXY_POOLING")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pooling: Option<String>,
    /// L2-normalise embeddings [default: whether the model's modules.json lists Normalize, else
    /// true].
    #[arg(long, global = true, env = "MEMPROXY_NORMALIZE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub normalize: Option<bool>,
    /// Tokens of a text the model reads [default: the model's sentence_bert_config.json, else 256].
    #[arg(long, global = true, env = "MEMPROXY_MAX_SEQ_LENGTH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_seq_length: Option<usize>,
    /// Prepended to a recall's question; "" for none [default: the model's
    /// config_sentence_transformers.json prompts].
    #[arg(long, global = true, env = "MEMPROXY_QUERY_PROMPT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_prompt: Option<String>,
    /// Prepended to what is remembered; "" for none [default: the model's
    /// config_sentence_transformers.json prompts].
    #[arg(long, global = true, env = "MEMPROXY_DOCUMENT_PROMPT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document_prompt: Option<String>,
    /// What embeds: `local` (the ONNX model of --model) or an OpenAI-compatible endpoint's base
    /// URL, `http(s)://host[:port]/path` (memproxy POSTs to `<base>/embeddings`; e.g.
    /// `https://api.openai.com/v1`, `http://127.0.0.1:8080/v1`) [default: local].
    #[arg(long, global = true, env = "MEMPROXY_EMBEDDER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder: Option<String>,
    /// The endpoint's model name, sent as `model` (required with an endpoint).
    #[arg(long, global = true, env = "MEMPROXY_EMBEDDER_MODEL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_model: Option<String>,
    /// The NAME of the environment variable holding the endpoint's key, sent as `Authorization:
    /// Bearer` (unset or empty: no key is sent) [default: OPENAI_API_KEY].
    #[arg(long, global = true, env = "MEMPROXY_EMBEDDER_API_KEY_ENV")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_api_key_env: Option<String>,
    /// Sent as `dimensions` (models that can shorten their vectors) [default: not sent].
    #[arg(long, global = true, env = "MEMPROXY_EMBEDDER_DIMENSIONS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_dimensions: Option<usize>,
    /// Most texts in one request to the endpoint [default: 64].
    #[arg(long, global = true, env = "MEMPROXY_EMBEDDER_BATCH")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_batch: Option<usize>,
    /// Deadline of one request to the endpoint, its retries included [default: 10000].
    #[arg(long, global = true, env = "MEMPROXY_EMBEDDER_TIMEOUT_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_timeout_ms: Option<u64>,
    /// Tries of one request (429, 5xx, connection errors are retried with backoff) [default: 4].
    #[arg(long, global = true, env = "MEMPROXY_EMBEDDER_MAX_TRIES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_max_tries: Option<u32>,
    /// Consecutive failed tries after which the endpoint is not asked for a cool-down [default: 5].
    #[arg(long, global = true, env = "MEMPROXY_EMBEDDER_BREAKER_FAILURES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_breaker_failures: Option<u32>,
    /// The cool-down; then one request probes the endpoint [default: 5000].
    #[arg(long, global = true, env = "MEMPROXY_EMBEDDER_BREAKER_COOLDOWN_MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_breaker_cooldown_ms: Option<u64>,
    /// Characters of a text (its prompt included) sent to the endpoint; the rest is cut
    /// [default: 4096].
    #[arg(long, global = true, env = "MEMPROXY_EMBEDDER_MAX_CHARS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_max_chars: Option<usize>,
    /// Path of libonnxruntime.so (else ORT_DYLIB_PATH, else the deps dir).
    #[arg(long, global = true, env = "MEMPROXY_ORT_LIBRARY")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ort_library: Option<PathBuf>,
    /// Where scripts/setup.sh put the dependencies [default: $MEMPROXY_DEPS or ~/.cache/memproxy].
    #[arg(long, global = true, env = "MEMPROXY_DEPS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deps_dir: Option<PathBuf>,
    /// Maximum concurrent client connections [default: 10000].
    #[arg(long, env = "MEMPROXY_MAX_CLIENTS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_clients: Option<usize>,
    /// Long-term memory index name [default: agentmem:idx].
    #[arg(long, env = "MEMPROXY_MEM_INDEX_NAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_index_name: Option<String>,
    /// Key prefix of memory documents [default: agent:mem:].
    #[arg(long, global = true, env = "MEMPROXY_MEM_KEY_PREFIX")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_key_prefix: Option<String>,
    /// Key prefix of session hashes [default: agent:session:].
    #[arg(long, env = "MEMPROXY_SESSION_KEY_PREFIX")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_key_prefix: Option<String>,
    /// Key prefix of event streams [default: agent:events:].
    #[arg(long, env = "MEMPROXY_EVENT_KEY_PREFIX")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_key_prefix: Option<String>,
    /// Session TTL in seconds, refreshed by every write [default: 3600].
    #[arg(long, env = "MEMPROXY_SESSION_TTL_SECONDS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_ttl_seconds: Option<u64>,
    /// Cosine distance under which MEM.REMEMBER dedups [default: 0.20].
    #[arg(long, env = "MEMPROXY_DEDUP_THRESHOLD")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedup_threshold: Option<f64>,
    /// Cosine distance beyond which `MODE vector` and `hybrid` drop vector hits [default: 0.55].
    #[arg(long, env = "MEMPROXY_RECALL_THRESHOLD")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall_threshold: Option<f64>,
    /// Recall mode when a MEM.RECALL / MEM.TURN names none [default: auto].
    #[arg(long, env = "MEMPROXY_RECALL_MODE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall_mode: Option<RecallMode>,
    /// Layout of the memory index memproxy creates: `guide` (JSON, FLOAT32: the redis.io guide's,
    /// shared with its demos) or `compact` (HASH, FLOAT16: about a quarter of the memory). An
    /// existing index keeps its own layout [default: guide].
    #[arg(long, global = true, env = "MEMPROXY_STORAGE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<Storage>,
    /// Replicas every MEM.* write waits for (WAIT) before it is acknowledged [default: 0].
    #[arg(long, env = "MEMPROXY_WRITE_REPLICAS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_replicas: Option<u32>,
    /// Every MEM.* write waits until the AOF has it (WAITAOF; the upstream needs appendonly)
    /// [default: false].
    #[arg(long, env = "MEMPROXY_WRITE_FSYNC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_fsync: Option<bool>,
    /// `redis+sentinel://` upstreams: the sentinels' own password (`requirepass` in their
    /// sentinel.conf), not Redis's [default: none].
    #[arg(long, env = "MEMPROXY_SENTINEL_PASSWORD")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentinel_password: Option<String>,
    /// `redis+sentinel://` upstreams: the sentinels' ACL user, with `sentinel_password`
    /// [default: default].
    #[arg(long, env = "MEMPROXY_SENTINEL_USER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentinel_user: Option<String>,
    /// The upstream is a Redis Cluster node: route by slot (true), never (false) [default:
    /// detected from the node at start].
    #[arg(long, env = "MEMPROXY_CLUSTER")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<bool>,
    /// Address of the HTTP listener (/metrics, /healthz, /readyz) [default: off].
    #[arg(long, env = "MEMPROXY_HTTP_LISTEN")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_listen: Option<String>,
    /// Serve the demo page and the guide demo's JSON routes on the HTTP listener [default: true].
    #[arg(long, env = "MEMPROXY_HTTP_DEMO")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_demo: Option<bool>,
    /// Serve MCP tools at /mcp on the HTTP listener [default: true].
    #[arg(long, env = "MEMPROXY_MCP")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<bool>,
    /// Bearer tokens MCP requires, comma-separated; `token=user` binds a token to one user
    /// [default: none: MCP open to whoever reaches the listener].
    #[arg(long, env = "MEMPROXY_MCP_TOKENS", value_delimiter = ',')]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_tokens: Option<Vec<String>>,
    /// Log format: text or json [default: text].
    #[arg(long, env = "MEMPROXY_LOG_FORMAT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<LogFormat>,
    /// Log filter, as RUST_LOG [default: info].
    #[arg(long, global = true, env = "MEMPROXY_LOG")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

/// The subcommands: each uses the same settings (`--upstream`, `--config`, `--model` …) as the
/// proxy.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Sub {
    /// Write memories as JSON lines, to stdout or --out (all of them, or a user's).
    Export {
        /// Only this user's memories.
        #[arg(long)]
        user: Option<String>,
        /// Only this namespace.
        #[arg(long)]
        ns: Option<String>,
        /// Only this kind (episodic or semantic).
        #[arg(long)]
        kind: Option<String>,
        /// Include each memory's embedding and the model's name.
        #[arg(long)]
        embeddings: bool,
        /// Write here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Move the configured index, when memproxy refuses its schema, to one it accepts: wait,
    /// baseline, build, verify, switch (resumes where an interrupted run stopped).
    Migrate {
        /// Return to the original index instead.
        #[arg(long)]
        rollback: bool,
        /// Stop after this step (baseline, built or verified), as an interruption would: for
        /// rehearsals and tests.
        #[arg(long)]
        stop_after: Option<String>,
    },
    /// Re-embed every stored memory with this memproxy's model (--model), then stamp the index
    /// with it. Safe to interrupt: run it again to resume.
    Reembed,
    /// Print the agent tools (the MCP tools: name, description, JSON schema of the arguments) as
    /// JSON, for function-calling agents; the Python SDK ships this output.
    Tools,
    /// Read JSON lines (as export writes them) from FILE or stdin and remember each: embedded
    /// by this memproxy's model, deduplicated, with its timestamps and hit count kept.
    Import {
        /// The file to read (default: stdin).
        file: Option<PathBuf>,
        /// Use the lines' own embeddings (`export --embeddings`) where their `model` is this
        /// memproxy's, instead of running the model for every line. The first 16 such lines and
        /// one in 64 after them are embedded anyway and compared; on a difference the rest of
        /// the file is re-embedded.
        #[arg(long)]
        trust_embeddings: bool,
    },
}

/// The mode of a recall that names none (`recall_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum RecallMode {
    Auto,
    Rank,
    Vector,
    Keyword,
    Hybrid,
}

impl RecallMode {
    pub fn name(self) -> &'static str {
        match self {
            RecallMode::Auto => "auto",
            RecallMode::Rank => "rank",
            RecallMode::Vector => "vector",
            RecallMode::Keyword => "keyword",
            RecallMode::Hybrid => "hybrid",
        }
    }
}

/// The layout of the memory index memproxy creates (`storage`); an existing index's own layout
/// is read from the index (`store::schema::check`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Storage {
    /// The redis.io agent-memory guide's: JSON documents, FLOAT32 vectors.
    Guide,
    /// HASH documents, FLOAT16 vector blobs, no offsets or highlighting in the text index.
    Compact,
}

impl Storage {
    pub fn name(self) -> &'static str {
        match self {
            Storage::Guide => "guide",
            Storage::Compact => "compact",
        }
    }
}

/// How RediSearch combines the scope filter with KNN (`recall_hybrid_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum HybridPolicy {
    /// memproxy counts the scope (stopping at 1,000): brute force up to there, HNSW batches above.
    Adaptive,
    /// RediSearch's planner.
    Auto,
    /// HNSW in batches, then the filter.
    Batches,
    /// Brute force over the filtered set.
    AdhocBf,
}

/// How log lines are written (`log_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    /// One JSON object per line.
    Json,
}

/// Where each setting lives in a settings file: `(section, key in the section, setting)`. A
/// file of flat keys (the setting's own name at the top level, as before sections) still loads.
pub const SECTIONS: &[(&str, &str, &str)] = &[
    ("server", "listen", "listen"),
    ("upstream", "url", "upstream"),
    ("embed", "model", "model"),
    ("embed", "pooling", "pooling"),
    ("embed", "normalize", "normalize"),
    ("embed", "max_seq_length", "max_seq_length"),
    ("embed", "query_prompt", "query_prompt"),
    ("embed", "document_prompt", "document_prompt"),
    ("embed", "embedder", "embedder"),
    ("embed", "embedder_model", "embedder_model"),
    ("embed", "embedder_api_key_env", "embedder_api_key_env"),
    ("embed", "embedder_dimensions", "embedder_dimensions"),
    ("embed", "embedder_batch", "embedder_batch"),
    ("embed", "embedder_timeout_ms", "embedder_timeout_ms"),
    ("embed", "embedder_max_tries", "embedder_max_tries"),
    (
        "embed",
        "embedder_breaker_failures",
        "embedder_breaker_failures",
    ),
    (
        "embed",
        "embedder_breaker_cooldown_ms",
        "embedder_breaker_cooldown_ms",
    ),
    ("embed", "embedder_max_chars", "embedder_max_chars"),
    ("embed", "ort_library", "ort_library"),
    ("embed", "deps_dir", "deps_dir"),
    ("server", "max_clients", "max_clients"),
    ("http", "listen", "http_listen"),
    ("http", "demo", "http_demo"),
    ("http", "mcp", "mcp"),
    ("http", "mcp_tokens", "mcp_tokens"),
    ("server", "log", "log"),
    ("server", "log_format", "log_format"),
    ("server", "shutdown_grace_ms", "shutdown_grace_ms"),
    ("server", "worker_threads", "worker_threads"),
    ("store", "mem_index_name", "mem_index_name"),
    ("store", "mem_key_prefix", "mem_key_prefix"),
    ("store", "storage", "storage"),
    ("store", "session_key_prefix", "session_key_prefix"),
    ("store", "event_key_prefix", "event_key_prefix"),
    ("store", "session_ttl_seconds", "session_ttl_seconds"),
    ("store", "dedup_threshold", "dedup_threshold"),
    ("recall", "threshold", "recall_threshold"),
    ("recall", "mode", "recall_mode"),
    ("recall", "auto_threshold", "recall_auto_threshold"),
    ("recall", "hit_threshold", "recall_hit_threshold"),
    ("recall", "relative_cutoff", "recall_relative_cutoff"),
    ("recall", "window_threshold", "recall_window_threshold"),
    ("recall", "min_standout", "recall_min_standout"),
    ("recall", "keyword_weight", "recall_keyword_weight"),
    ("recall", "time_weight", "recall_time_weight"),
    ("recall", "diversity", "recall_diversity"),
    ("recall", "recency_weight", "recall_recency_weight"),
    (
        "recall",
        "recency_half_life_days",
        "recall_recency_half_life_days",
    ),
    ("recall", "hit_weight", "recall_hit_weight"),
    ("recall", "candidates", "recall_candidates"),
    ("store", "episodic_ttl_seconds", "episodic_ttl_seconds"),
    (
        "consolidate",
        "interval_seconds",
        "consolidate_interval_seconds",
    ),
    ("consolidate", "threshold", "consolidate_threshold"),
    ("consolidate", "redis_share", "consolidate_redis_share"),
    ("store", "max_turns", "max_turns"),
    ("store", "events_max_len", "events_max_len"),
    ("recall", "default_k", "default_k"),
    ("recall", "hybrid_policy", "recall_hybrid_policy"),
    ("upstream", "op_timeout_ms", "op_timeout_ms"),
    ("write", "replicas", "write_replicas"),
    ("write", "fsync", "write_fsync"),
    ("upstream", "cluster", "cluster"),
    ("write", "wait_ms", "write_wait_ms"),
    ("store", "index_recheck_ms", "index_recheck_ms"),
    ("limits", "max_text_bytes", "max_text_bytes"),
    ("store", "bind_scope_to_acl_user", "bind_scope_to_acl_user"),
    ("upstream", "sentinel_password", "sentinel_password"),
    ("upstream", "sentinel_user", "sentinel_user"),
    ("upstream", "tls_ca_file", "tls_ca_file"),
    ("upstream", "tls_cert_file", "tls_cert_file"),
    ("upstream", "tls_key_file", "tls_key_file"),
    ("upstream", "tls_insecure", "tls_insecure"),
    ("limits", "max_request_bytes", "max_request_bytes"),
    ("limits", "max_request_args", "max_request_args"),
    ("limits", "client_buffer_bytes", "client_buffer_bytes"),
    ("embed", "timeout_ms", "embed_timeout_ms"),
    ("embed", "max_batch", "embed_max_batch"),
    ("embed", "batch_tokens", "embed_batch_tokens"),
    ("embed", "max_wait_us", "embed_max_wait_us"),
    ("embed", "queue", "embed_queue"),
    ("embed", "workers", "embed_workers"),
    ("embed", "threads", "embed_threads"),
    ("embed", "spinning", "embed_spinning"),
    ("embed", "graph_optimization", "embed_graph_optimization"),
    ("embed", "cache_entries", "embed_cache_entries"),
    ("embed", "cache_bytes", "embed_cache_bytes"),
];

/// The resolved settings. Field names are the flat keys (and the flags); a sectioned file puts
/// them in sections by [`SECTIONS`].
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub listen: String,
    pub upstream: String,
    pub model: Option<String>,
    /// Overrides of what the model's own files say (`embed::layout`); `None`: the files. The
    /// prompts: `Some("")` is no prompt.
    pub pooling: Option<String>,
    pub normalize: Option<bool>,
    pub max_seq_length: Option<usize>,
    pub query_prompt: Option<String>,
    pub document_prompt: Option<String>,
    /// `local` / `None`: the ONNX model of `model`; else an OpenAI-compatible endpoint's base
    /// URL (`embed::remote`).
    pub embedder: Option<String>,
    /// The endpoint's settings (`embed::remote`); unused by the local model.
    pub embedder_model: Option<String>,
    /// The name of the environment variable holding the endpoint's key (never the key).
    pub embedder_api_key_env: String,
    pub embedder_dimensions: Option<usize>,
    pub embedder_batch: usize,
    pub embedder_timeout_ms: u64,
    pub embedder_max_tries: u32,
    pub embedder_breaker_failures: u32,
    pub embedder_breaker_cooldown_ms: u64,
    pub embedder_max_chars: usize,
    pub ort_library: Option<PathBuf>,
    pub deps_dir: Option<PathBuf>,
    pub max_clients: usize,
    /// The HTTP listener (/metrics, /healthz, /readyz, the demo page, /mcp); `None`: off.
    pub http_listen: Option<String>,
    /// The demo page and the guide demo's routes on the HTTP listener.
    pub http_demo: bool,
    /// MCP at /mcp on the HTTP listener.
    pub mcp: bool,
    /// Bearer tokens for /mcp (`token` or `token=user`); empty: no token needed.
    pub mcp_tokens: Vec<String>,
    pub log: String,
    /// `text` or `json`.
    pub log_format: LogFormat,
    /// How long in-flight replies may take to finish after SIGINT/SIGTERM.
    pub shutdown_grace_ms: u64,
    /// Threads of the network runtime (0: one per core). The embedder has its own threads.
    pub worker_threads: usize,

    pub mem_index_name: String,
    pub mem_key_prefix: String,
    /// The layout of an index memproxy creates (`guide` or `compact`).
    pub storage: Storage,
    pub session_key_prefix: String,
    pub event_key_prefix: String,
    pub session_ttl_seconds: u64,
    pub dedup_threshold: f64,
    pub recall_threshold: f64,
    /// `auto`, `vector`, `keyword` or `hybrid`: the mode of a recall that names none.
    pub recall_mode: RecallMode,
    /// `MODE auto`'s gate: nothing is recalled unless the scope's nearest memory is within this
    /// cosine distance (`THRESHOLD` overrides it; chosen on the tuning parts of the recall
    /// evaluation; docs/RECALL.md).
    pub recall_auto_threshold: f64,
    /// `MODE auto` / `rank`, per hit: a memory farther than this cosine distance is not recalled
    /// (2: no per-hit cut-off; the gate decides).
    pub recall_hit_threshold: f64,
    /// `MODE auto` / `rank`: a memory whose similarity is more than this below the best one's is
    /// not recalled (0: off).
    pub recall_relative_cutoff: f64,
    /// `MODE auto`: a long text's later sentence window counts only within this cosine distance
    /// (a short window stands close to more questions than a whole memory does); farther, the
    /// memory is at its own embedding's distance (2: windows count as far as the cut-off).
    pub recall_window_threshold: f64,
    /// `MODE auto`: how far the nearest memory's similarity must stand above the scope's
    /// background (the similarity of the farthest of `recall_candidates` candidates; a scope with
    /// fewer memories has no background) for anything to be recalled (0: off).
    pub recall_min_standout: f64,
    /// `MODE auto` / `rank`: the most keyword evidence adds to a memory's similarity: this times
    /// the share of the question's rarity-weighted words the memory contains (rarity measured
    /// among the candidates, so it costs no query and works in scopes of any size).
    pub recall_keyword_weight: f64,
    /// `MODE auto` / `rank`: what a memory created inside the time window the question names
    /// ("yesterday", "last week", "in March", relative to `AT`) adds to its similarity.
    pub recall_time_weight: f64,
    /// `MODE auto` / `rank`: at most one hit per source thread until every thread among the
    /// candidates has one (a conversation's turns do not crowd out the other conversations).
    pub recall_diversity: bool,
    /// `MODE auto`: the most a brand-new memory gains over an old one, in similarity.
    pub recall_recency_weight: f64,
    /// `MODE auto`: the age in days at which the recency gain halves.
    pub recall_recency_half_life_days: f64,
    /// `MODE auto`: gain per doubling of a memory's hit count (0: off; on the evaluation set every
    /// weight tried cost recall: often-remembered facts, and a replaced home, push out the answer).
    pub recall_hit_weight: f64,
    /// `MODE auto`: nearest memories considered before ranking (at least K).
    pub recall_candidates: usize,
    pub episodic_ttl_seconds: u64,
    /// The background consolidator's period (0: off).
    pub consolidate_interval_seconds: u64,
    /// Its merge distance.
    pub consolidate_threshold: f64,
    /// The share of time it may keep Redis busy, in (0, 1].
    pub consolidate_redis_share: f64,
    pub max_turns: usize,
    pub events_max_len: usize,
    pub default_k: usize,
    /// How RediSearch combines the scope filter with KNN: `adaptive` (memproxy counts the scope,
    /// stopping at 1,000: brute force up to there, HNSW batches above), `auto` (RediSearch's
    /// planner), `batches` (HNSW in batches, then filter) or `adhoc_bf` (brute force over the
    /// filtered set).
    pub recall_hybrid_policy: HybridPolicy,
    /// Budget of one MEM.* upstream operation (pipeline or transaction).
    pub op_timeout_ms: u64,
    /// Replicas every MEM.* write waits for before it is acknowledged (0: none; REPLICAS n on a
    /// write verb overrides it).
    pub write_replicas: u32,
    /// Every MEM.* write waits for the AOF (WAITAOF; FSYNC on a write verb asks for it too).
    pub write_fsync: bool,
    /// Redis Cluster mode: `Some(true)` forces it, `Some(false)` rules it out, `None` asks the
    /// upstream node at start (`INFO cluster`).
    pub cluster: Option<bool>,
    /// How long a write waits for its replicas / AOF before it answers NOREPLICAS (at most 3/4 of
    /// `op_timeout_ms`, which bounds the whole upstream exchange).
    pub write_wait_ms: u64,
    /// How long a checked index (schema and model stamp) is trusted before one request checks
    /// it again, while the others go on.
    pub index_recheck_ms: u64,
    /// Longest text MEM.* accepts, in bytes.
    pub max_text_bytes: usize,
    /// A connection authenticated as ACL user U may only use `USER U`.
    pub bind_scope_to_acl_user: bool,
    /// `redis+sentinel://` upstreams: the sentinels' own password and ACL user (theirs, not
    /// Redis's, which go in the URL).
    pub sentinel_password: Option<String>,
    pub sentinel_user: Option<String>,
    /// `rediss://` upstreams: CA bundle (PEM) to verify the server with (default: system roots).
    pub tls_ca_file: Option<PathBuf>,
    /// `rediss://` upstreams: client certificate and key (PEM), for servers that ask for one.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// `rediss://` upstreams: accept any server certificate (development only).
    pub tls_insecure: bool,
    /// Largest single request a client may send, in bytes; beyond it the client gets a protocol
    /// error and is closed (Redis's own `proto-max-bulk-len` default).
    pub max_request_bytes: usize,
    /// Most arguments one request may have (Redis's own limit).
    pub max_request_args: usize,
    /// Bytes the proxy buffers per client in each direction before it stops reading that side:
    /// replies the client has not read stay in Redis's own (bounded, observable) output buffer,
    /// requests queued behind a running MEM.* stay in the client's socket.
    pub client_buffer_bytes: usize,
    /// Longest a MEM.* request waits for its embedding (queue and model run).
    pub embed_timeout_ms: u64,

    /// Most texts a worker takes from the queue at once.
    pub embed_max_batch: usize,
    /// Most padded tokens (texts × the longest) in one model run: a worker's texts are sorted by
    /// length and cut into runs within this budget, so short texts do not pay for a long one's padding.
    pub embed_batch_tokens: usize,
    /// Longest a worker waits for its last batch's callers to send again when fewer texts are
    /// queued than that batch had (0: take what is queued and go; a lone caller never waits).
    pub embed_max_wait_us: u64,
    /// Embedding requests that may wait; beyond it MEM.* answer "embedder overloaded".
    pub embed_queue: usize,
    /// Model threads (each owns a session).
    pub embed_workers: usize,
    /// ONNX Runtime intra-op threads per session (0: all cores).
    pub embed_threads: usize,
    /// Let ONNX Runtime's intra-op threads spin briefly instead of sleeping between parallel
    /// sections (on VMs where a thread wakeup is expensive this doubles throughput).
    pub embed_spinning: bool,
    /// ONNX Runtime graph optimisation level 0–3 (3: all; the bundled graph is written so that the
    /// extended fusions apply; a graph that fails at a level is loaded again at 1).
    pub embed_graph_optimization: u8,
    /// Embedding cache bounds.
    pub embed_cache_entries: usize,
    pub embed_cache_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:6380".into(),
            upstream: "redis://127.0.0.1:6379".into(),
            model: None,
            pooling: None,
            normalize: None,
            max_seq_length: None,
            query_prompt: None,
            document_prompt: None,
            embedder: None,
            embedder_model: None,
            embedder_api_key_env: "OPENAI_API_KEY".into(),
            embedder_dimensions: None,
            embedder_batch: 64,
            embedder_timeout_ms: 10_000,
            embedder_max_tries: 4,
            embedder_breaker_failures: 5,
            embedder_breaker_cooldown_ms: 5_000,
            embedder_max_chars: 4096,
            ort_library: None,
            deps_dir: None,
            max_clients: 10_000,
            http_listen: None,
            http_demo: true,
            mcp: true,
            mcp_tokens: Vec::new(),
            log: "info".into(),
            log_format: LogFormat::Text,
            shutdown_grace_ms: 5_000,
            worker_threads: 0,
            mem_index_name: "agentmem:idx".into(),
            mem_key_prefix: "agent:mem:".into(),
            storage: Storage::Guide,
            session_key_prefix: "agent:session:".into(),
            event_key_prefix: "agent:events:".into(),
            session_ttl_seconds: 3600,
            dedup_threshold: 0.20,
            recall_threshold: 0.55,
            recall_mode: RecallMode::Auto,
            recall_auto_threshold: 0.63,
            recall_hit_threshold: 2.0,
            recall_relative_cutoff: 0.20,
            recall_window_threshold: 0.45,
            recall_min_standout: 0.0,
            recall_keyword_weight: 0.8,
            recall_time_weight: 0.0,
            recall_diversity: true,
            recall_recency_weight: 0.0,
            recall_recency_half_life_days: 60.0,
            recall_hit_weight: 0.0,
            recall_candidates: 16,
            episodic_ttl_seconds: 7 * 24 * 3600,
            consolidate_interval_seconds: 0,
            consolidate_threshold: 0.20,
            consolidate_redis_share: 0.05,
            max_turns: 20,
            events_max_len: 1000,
            default_k: 5,
            recall_hybrid_policy: HybridPolicy::Adaptive,
            op_timeout_ms: 2_000,
            write_replicas: 0,
            write_fsync: false,
            cluster: None,
            write_wait_ms: 1_500,
            index_recheck_ms: 5_000,
            max_text_bytes: 1024 * 1024,
            bind_scope_to_acl_user: false,
            sentinel_password: None,
            sentinel_user: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_insecure: false,
            max_request_bytes: 512 * 1024 * 1024,
            max_request_args: 1024 * 1024,
            client_buffer_bytes: 1024 * 1024,
            embed_timeout_ms: 10_000,
            embed_max_batch: 32,
            embed_batch_tokens: 2048,
            embed_max_wait_us: 0,
            embed_queue: 1024,
            embed_workers: 1,
            embed_threads: 0,
            embed_spinning: true,
            embed_graph_optimization: 3,
            embed_cache_entries: 10_000,
            embed_cache_bytes: 64 * 1024 * 1024,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("config file {0}: {1}")]
    Parse(PathBuf, String),
    #[error("invalid setting {0}: {1}")]
    Invalid(&'static str, String),
}

impl Config {
    /// The wait a durable write may spend: `write_wait_ms`, within 3/4 of `op_timeout_ms`.
    pub fn write_wait(&self) -> u64 {
        self.write_wait_ms.min(self.op_timeout_ms * 3 / 4).max(1)
    }

    /// Merge defaults < file < environment and flags (clap already put flags over environment).
    pub fn load(flags: &Flags) -> Result<Config, ConfigError> {
        let mut merged = serde_json::to_value(Config::default()).expect("defaults serialise");
        if let Some(path) = &flags.config {
            let text =
                std::fs::read_to_string(path).map_err(|e| ConfigError::Read(path.clone(), e))?;
            let file: toml::Table = toml::from_str(&text)
                .map_err(|e| ConfigError::Parse(path.clone(), e.to_string()))?;
            let file = unsection(file).map_err(|e| ConfigError::Parse(path.clone(), e))?;
            let file = serde_json::to_value(file)
                .map_err(|e| ConfigError::Parse(path.clone(), e.to_string()))?;
            overlay(&mut merged, file);
        }
        overlay(
            &mut merged,
            serde_json::to_value(flags).expect("flags serialise"),
        );
        let cfg: Config = serde_json::from_value(merged).map_err(|e| {
            ConfigError::Parse(
                flags.config.clone().unwrap_or_else(|| "<flags>".into()),
                e.to_string(),
            )
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |k: &'static str, m: String| Err(ConfigError::Invalid(k, m));
        if self.listen.parse::<std::net::SocketAddr>().is_err()
            && !self.listen.contains(':')
            && !self.listen.starts_with('/')
        {
            return bad("listen", format!("{:?} is not host:port", self.listen));
        }
        if let Err(e) = self.upstream_addr() {
            return bad("upstream", e);
        }
        if !(self.consolidate_redis_share > 0.0 && self.consolidate_redis_share <= 1.0) {
            return bad(
                "consolidate_redis_share",
                format!("{} is not in (0, 1]", self.consolidate_redis_share),
            );
        }
        for (k, v) in [
            ("dedup_threshold", self.dedup_threshold),
            ("recall_threshold", self.recall_threshold),
            ("recall_auto_threshold", self.recall_auto_threshold),
            ("recall_hit_threshold", self.recall_hit_threshold),
            ("consolidate_threshold", self.consolidate_threshold),
        ] {
            if !(0.0..=2.0).contains(&v) {
                return bad(k, format!("{v} is not a cosine distance in [0, 2]"));
            }
        }
        for (k, v) in [
            ("recall_relative_cutoff", self.recall_relative_cutoff),
            ("recall_window_threshold", self.recall_window_threshold),
            ("recall_min_standout", self.recall_min_standout),
            ("recall_keyword_weight", self.recall_keyword_weight),
            ("recall_time_weight", self.recall_time_weight),
            ("recall_recency_weight", self.recall_recency_weight),
            ("recall_hit_weight", self.recall_hit_weight),
        ] {
            if !(0.0..=2.0).contains(&v) {
                return bad(k, format!("{v} is not in [0, 2]"));
            }
        }
        if self.recall_recency_half_life_days.is_nan() || self.recall_recency_half_life_days <= 0.0
        {
            return bad(
                "recall_recency_half_life_days",
                format!(
                    "{} is not a positive number of days",
                    self.recall_recency_half_life_days
                ),
            );
        }
        if self.write_wait_ms == 0 {
            return bad("write_wait_ms", "0 is not a number of milliseconds".into());
        }
        if self.write_replicas > 100 {
            return bad(
                "write_replicas",
                format!("{} is not in 0..=100", self.write_replicas),
            );
        }
        if !(1..=1000).contains(&self.recall_candidates) {
            return bad(
                "recall_candidates",
                format!("{} is not in 1..=1000", self.recall_candidates),
            );
        }
        for (k, v) in [
            ("mem_index_name", &self.mem_index_name),
            ("mem_key_prefix", &self.mem_key_prefix),
            ("session_key_prefix", &self.session_key_prefix),
            ("event_key_prefix", &self.event_key_prefix),
        ] {
            if v.is_empty() || v.chars().any(|c| c.is_whitespace() || c == '"') {
                return bad(
                    k,
                    format!("{v:?} must be non-empty without blanks or quotes"),
                );
            }
        }
        for (k, v) in [
            ("max_clients", self.max_clients),
            ("max_turns", self.max_turns),
            ("events_max_len", self.events_max_len),
            ("embed_max_batch", self.embed_max_batch),
            ("embed_batch_tokens", self.embed_batch_tokens),
            ("embed_queue", self.embed_queue),
            ("embed_workers", self.embed_workers),
            ("max_text_bytes", self.max_text_bytes),
            ("op_timeout_ms", self.op_timeout_ms as usize),
            ("index_recheck_ms", self.index_recheck_ms as usize),
            ("session_ttl_seconds", self.session_ttl_seconds as usize),
            ("episodic_ttl_seconds", self.episodic_ttl_seconds as usize),
            ("max_request_bytes", self.max_request_bytes),
            ("max_request_args", self.max_request_args),
            ("client_buffer_bytes", self.client_buffer_bytes),
            ("embed_timeout_ms", self.embed_timeout_ms as usize),
        ] {
            if v == 0 {
                return bad(k, "must be at least 1".into());
            }
        }
        for (k, v) in [
            ("session_ttl_seconds", self.session_ttl_seconds),
            ("episodic_ttl_seconds", self.episodic_ttl_seconds),
        ] {
            if v > i32::MAX as u64 {
                return bad(k, format!("{v} is more than {} seconds", i32::MAX));
            }
        }
        if !(1..=1000).contains(&self.default_k) {
            return bad(
                "default_k",
                format!("{} is not in 1..=1000", self.default_k),
            );
        }
        if let Some(a) = &self.http_listen {
            if !a.contains(':') {
                return bad("http_listen", format!("{a:?} is not host:port"));
            }
        }
        if self.embed_graph_optimization > 3 {
            return bad("embed_graph_optimization", "must be 0, 1, 2 or 3".into());
        }
        if let Some(p) = &self.pooling {
            if let Err(e) = Pooling::parse_list(p) {
                return bad("pooling", e);
            }
        }
        if self.max_seq_length == Some(0) {
            return bad("max_seq_length", "must be at least 1".into());
        }
        if let Err(e) = self.endpoint() {
            return bad("embedder", e);
        }
        if self.endpoint().ok().flatten().is_some()
            && self
                .embedder_model
                .as_deref()
                .is_none_or(|m| m.trim().is_empty())
        {
            return bad(
                "embedder_model",
                "an endpoint embedder needs the model name to send (e.g. text-embedding-3-small)"
                    .into(),
            );
        }
        // Upper case only: a key put here by mistake (keys have lower-case letters) is refused,
        // and never echoed.
        let key_env = &self.embedder_api_key_env;
        if key_env.is_empty()
            || key_env.starts_with(|c: char| c.is_ascii_digit())
            || !key_env
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            return bad(
                "embedder_api_key_env",
                "must be the NAME of an environment variable (A-Z, 0-9, _), e.g. OPENAI_API_KEY; the key itself goes in that variable".into(),
            );
        }
        for (k, v) in [
            ("embedder_batch", self.embedder_batch),
            ("embedder_timeout_ms", self.embedder_timeout_ms as usize),
            ("embedder_max_tries", self.embedder_max_tries as usize),
            (
                "embedder_breaker_failures",
                self.embedder_breaker_failures as usize,
            ),
            ("embedder_max_chars", self.embedder_max_chars),
            ("embedder_dimensions", self.embedder_dimensions.unwrap_or(1)),
        ] {
            if v == 0 {
                return bad(k, "must be at least 1".into());
            }
        }
        if self.embedder_batch > 2048 {
            return bad(
                "embedder_batch",
                format!(
                    "{} is more than 2048 (OpenAI's limit of inputs per request)",
                    self.embedder_batch
                ),
            );
        }
        Ok(())
    }

    /// The upstream's address, as `upstream` and the sentinel and TLS settings say.
    pub fn upstream_addr(&self) -> Result<crate::upstream::UpstreamAddr, String> {
        crate::upstream::UpstreamAddr::new(&crate::upstream::UpstreamSettings {
            url: self.upstream.clone(),
            sentinel_user: self.sentinel_user.clone(),
            sentinel_password: self.sentinel_password.clone(),
            tls_insecure: self.tls_insecure,
            tls_ca_file: self.tls_ca_file.clone(),
            tls_cert_file: self.tls_cert_file.clone(),
            tls_key_file: self.tls_key_file.clone(),
        })
    }

    /// The embeddings endpoint, when `embedder` names one (`None`: the local model); an error
    /// says why the setting is not one.
    pub fn endpoint(&self) -> Result<Option<url::Url>, String> {
        match self.embedder.as_deref().map(str::trim) {
            None | Some("") | Some("local") => Ok(None),
            Some(s) => parse_endpoint(s).map(Some),
        }
    }

    /// The dependency directory: configured, `$MEMPROXY_DEPS`, or `~/.cache/memproxy`.
    pub fn deps_dir(&self) -> PathBuf {
        self.deps_dir
            .clone()
            .or_else(|| std::env::var_os("MEMPROXY_DEPS").map(PathBuf::from))
            .unwrap_or_else(|| {
                let home = std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("."));
                home.join(".cache/memproxy")
            })
    }

    /// The model to load: configured, or the default model of the deps dir.
    pub fn model_location(&self) -> String {
        self.model.clone().unwrap_or_else(|| {
            self.deps_dir()
                .join("model/all-MiniLM-L6-v2")
                .display()
                .to_string()
        })
    }

    /// libonnxruntime: configured, `ORT_DYLIB_PATH`, or the deps dir.
    pub fn ort_library(&self) -> PathBuf {
        self.ort_library
            .clone()
            .or_else(|| std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from))
            .unwrap_or_else(|| self.deps_dir().join("lib/libonnxruntime.so"))
    }
}

/// A settings file's sections flattened to the settings' own names ([`SECTIONS`]); flat keys
/// at the top level pass as they are. A setting given twice, or an unknown key in a section, is
/// an error naming it.
fn unsection(file: toml::Table) -> Result<toml::Table, String> {
    let mut flat = toml::Table::new();
    let mut put = |name: &str, v: toml::Value, shown: String| {
        if flat.insert(name.to_string(), v).is_some() {
            return Err(format!(
                "{shown} is set twice (as a flat key and in its section)"
            ));
        }
        Ok(())
    };
    for (k, v) in file {
        let is_section = SECTIONS.iter().any(|(s, _, _)| *s == k);
        match v {
            toml::Value::Table(t) if is_section => {
                for (sk, sv) in t {
                    let Some((_, _, name)) =
                        SECTIONS.iter().find(|(s, key, _)| *s == k && *key == sk)
                    else {
                        let hint = SECTIONS
                            .iter()
                            .find(|(_, key, name)| *key == sk || *name == sk)
                            .map(|(s, key, _)| format!(" (did you mean [{s}] {key}?)"))
                            .unwrap_or_default();
                        return Err(format!("unknown setting `{sk}` in [{k}]{hint}"));
                    };
                    put(name, sv, format!("[{k}] {sk}"))?;
                }
            }
            v => {
                let shown = format!("`{k}`");
                put(&k, v, shown)?;
            }
        }
    }
    Ok(flat)
}

/// Values present in `top` replace those in `base`.
fn overlay(base: &mut serde_json::Value, top: serde_json::Value) {
    if let (Some(b), serde_json::Value::Object(t)) = (base.as_object_mut(), top) {
        for (k, v) in t {
            if !v.is_null() {
                b.insert(k, v);
            }
        }
    }
}

/// One way of pooling token embeddings (sentence-transformers' `Pooling` modes), in the order
/// sentence-transformers concatenates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pooling {
    /// The first token's embedding.
    Cls,
    /// The element-wise maximum over the text's tokens.
    Max,
    /// The mean over the text's tokens.
    Mean,
    /// The sum over the text's tokens divided by the square root of their count.
    MeanSqrtLen,
    /// The mean weighted by position (1, 2, …).
    WeightedMean,
    /// The last token of the text.
    LastToken,
}

/// `(name, its key in 1_Pooling/config.json, mode)`.
pub const POOLING_MODES: [(&str, &str, Pooling); 6] = [
    ("cls", "pooling_mode_cls_token", Pooling::Cls),
    ("max", "pooling_mode_max_tokens", Pooling::Max),
    ("mean", "pooling_mode_mean_tokens", Pooling::Mean),
    (
        "mean_sqrt_len_tokens",
        "pooling_mode_mean_sqrt_len_tokens",
        Pooling::MeanSqrtLen,
    ),
    (
        "weightedmean",
        "pooling_mode_weightedmean_tokens",
        Pooling::WeightedMean,
    ),
    ("lasttoken", "pooling_mode_lasttoken", Pooling::LastToken),
];

impl Pooling {
    pub fn name(self) -> &'static str {
        POOLING_MODES
            .iter()
            .find(|m| m.2 == self)
            .map_or("", |m| m.0)
    }

    /// A `pooling` setting: one mode (`mean`, `cls`, `max`, `lasttoken`, `weightedmean`,
    /// `mean_sqrt_len_tokens`) or several joined by `+` (concatenated), as sentence-transformers
    /// names them.
    pub fn parse_list(s: &str) -> Result<Vec<Pooling>, String> {
        let mut out = Vec::new();
        for part in s.split('+') {
            let p = part.trim().to_ascii_lowercase();
            let mode = match p.as_str() {
                "last_token" | "last" => Some(Pooling::LastToken),
                "mean_sqrt_len" => Some(Pooling::MeanSqrtLen),
                _ => POOLING_MODES.iter().find(|m| m.0 == p).map(|m| m.2),
            };
            match mode {
                Some(m) if !out.contains(&m) => out.push(m),
                Some(_) => {}
                None => {
                    return Err(format!(
                        "{part:?} is not a pooling mode (cls, mean, max, lasttoken, weightedmean, mean_sqrt_len_tokens; several joined by +)"
                    ))
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Modes joined by `+`, as sentence-transformers prints them.
    pub fn describe(modes: &[Pooling]) -> String {
        modes.iter().map(|m| m.name()).collect::<Vec<_>>().join("+")
    }
}

/// Check `embedder` as a base URL: `http://` or `https://`, a host, no credentials.
pub fn parse_endpoint(s: &str) -> Result<url::Url, String> {
    let example = "e.g. https://api.openai.com/v1 or http://127.0.0.1:8080/v1";
    let url = url::Url::parse(s).map_err(|e| {
        format!("{s:?} is neither local nor an endpoint's base URL ({example}): {e}")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{s:?}: write the endpoint's base URL with http:// or https:// ({example}); memproxy POSTs to <base>/embeddings"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{s:?} has no host ({example})"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "{}: no credentials in the URL; the key goes in the environment variable embedder_api_key_env names",
            endpoint_display(&url)
        ));
    }
    Ok(url)
}

/// The endpoint as errors and logs name it: scheme, host, port and path, without a trailing `/`
/// (nor the query string).
pub fn endpoint_display(url: &url::Url) -> String {
    let host = match url.port() {
        Some(p) => format!("{}:{p}", url.host_str().unwrap_or_default()),
        None => url.host_str().unwrap_or_default().to_string(),
    };
    format!(
        "{}://{host}{}",
        url.scheme(),
        url.path().trim_end_matches('/')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_config_file_states_the_defaults() {
        let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("conf/memproxy.toml");
        let flags = Flags {
            config: Some(file),
            ..Default::default()
        };
        let loaded = serde_json::to_value(Config::load(&flags).unwrap()).unwrap();
        assert_eq!(loaded, serde_json::to_value(Config::default()).unwrap());
    }

    #[test]
    fn precedence_and_validation() {
        let dir = std::env::temp_dir().join(format!("memproxy-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:7000\"\ndedup_threshold = 0.3\nmax_turns = 5\n",
        )
        .unwrap();
        let flags = Flags {
            config: Some(file.clone()),
            listen: Some("127.0.0.1:7001".into()),
            ..Default::default()
        };
        let c = Config::load(&flags).unwrap();
        assert_eq!(c.listen, "127.0.0.1:7001");
        assert_eq!(c.dedup_threshold, 0.3);
        assert_eq!(c.max_turns, 5);
        assert_eq!(c.recall_threshold, 0.55);

        std::fs::write(&file, "no_such_key = 1\n").unwrap();
        assert!(Config::load(&flags)
            .unwrap_err()
            .to_string()
            .contains("no_such_key"));
        std::fs::write(&file, "recall_threshold = 3.0\n").unwrap();
        assert!(Config::load(&flags)
            .unwrap_err()
            .to_string()
            .contains("recall_threshold"));

        // Sections: the same settings as flat keys; both kinds in one file; mistakes named.
        let flags = Flags {
            config: Some(file.clone()),
            ..Default::default()
        };
        std::fs::write(
            &file,
            "default_k = 7\n[recall]\nmode = \"vector\"\nthreshold = 0.4\n[upstream]\nurl = \"redis://h:1\"\n[limits]\nmax_text_bytes = 1000\n",
        )
        .unwrap();
        let c = Config::load(&flags).unwrap();
        assert_eq!(c.recall_mode, RecallMode::Vector);
        assert_eq!(c.recall_threshold, 0.4);
        assert_eq!(c.upstream, "redis://h:1");
        assert_eq!((c.max_text_bytes, c.default_k), (1000, 7));
        let err = |text: &str| {
            std::fs::write(&file, text).unwrap();
            Config::load(&flags).unwrap_err().to_string()
        };
        let e = err("[recall]\nrecall_mode = \"auto\"\n");
        assert!(
            e.contains("`recall_mode` in [recall]") && e.contains("[recall] mode"),
            "{e}"
        );
        let e = err("recall_mode = \"auto\"\n[recall]\nmode = \"rank\"\n");
        assert!(e.contains("set twice"), "{e}");
        let e = err("[recall]\nmode = \"nearest\"\n");
        assert!(e.contains("nearest") && e.contains("keyword"), "{e}");
        let e = err("[server]\nupstream = \"redis://h:1\"\n");
        assert!(e.contains("[upstream] url"), "{e}");
    }

    #[test]
    fn every_setting_has_one_place_in_a_section() {
        let defaults = serde_json::to_value(Config::default()).unwrap();
        let names: Vec<&String> = defaults.as_object().unwrap().keys().collect();
        for n in &names {
            let places = SECTIONS.iter().filter(|(_, _, f)| f == n).count();
            assert_eq!(places, 1, "{n} is in {places} sections");
        }
        assert_eq!(SECTIONS.len(), names.len());
        for (i, (s, k, _)) in SECTIONS.iter().enumerate() {
            assert!(
                !SECTIONS[..i].iter().any(|(s2, k2, _)| s2 == s && k2 == k),
                "[{s}] {k} twice"
            );
        }
    }
}

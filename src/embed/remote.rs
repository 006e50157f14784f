//! An OpenAI-compatible embeddings endpoint as the model (`embedder = "http(s)://…/v1"`): OpenAI,
//! Azure OpenAI's v1 API, text-embeddings-inference, Ollama, vLLM, LiteLLM.
//!
//! Each worker's [`RemoteModel`] sends its batch as `POST <base>/embeddings` with
//! `{"model", "input": [texts], "encoding_format": "float", "dimensions"?}` (at most
//! `embedder_batch` texts a request) and reads `data[i].embedding` by `data[i].index`. The key is
//! read once, at start, from the environment variable `embedder_api_key_env` names, and sent as
//! `Authorization: Bearer`; it is never logged, and any text the endpoint answers with has it
//! blanked out.
//!
//! A request has a deadline (`embedder_timeout_ms`) that covers all its tries. Connection errors,
//! timeouts, 408 and 5xx are tried again after an exponential backoff with jitter (100 ms, 200 ms,
//! … at most 2 s), a 429 after its `Retry-After` when the endpoint sends one (else the backoff);
//! at most `embedder_max_tries` tries, and no retry that the deadline would cut short (a
//! `Retry-After` beyond the deadline fails the request at once, saying so). Other answers (4xx, a
//! body that is not what the API says) are not retried.
//!
//! The workers share a circuit breaker: after `embedder_breaker_failures` consecutive failed tries
//! (connection errors, timeouts, 408, 5xx) the endpoint is not asked for
//! `embedder_breaker_cooldown_ms`: every text not cached fails at once, before it is queued
//! ([`Endpoint::fail_fast`]). Then one request probes (one try); its success closes the breaker,
//! its failure opens it for another cool-down.
//!
//! The dimension is learned from the answer to the model probe at start, which also fails
//! start-up (one line naming the endpoint and the cause) when the endpoint cannot answer: a
//! memproxy that cannot embed would refuse every MEM.* anyway, and the dimension is the index's.
//! From then on, every vector must have that dimension. Every error is one line that starts with
//! `embedder <endpoint>`, the endpoint written without its query string.

use std::io::Read;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{normalize, EmbedError, Model};
use crate::config::Config;

/// The first backoff; each retry doubles it, up to [`MAX_BACKOFF`].
const BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Most bytes of an answer read (64 texts × 3,072 floats as JSON are ~4 MB).
const MAX_BODY: u64 = 64 << 20;
/// Most characters of the endpoint's own words kept in an error.
const MAX_CAUSE: usize = 300;
/// Most characters of an error line after `embedder <endpoint> `.
const MAX_LINE: usize = 800;

use crate::config::endpoint_display;

/// `<base>/embeddings`, the base's query string kept (Azure's `?api-version=`).
fn embeddings_url(base: &url::Url) -> url::Url {
    let mut url = base.clone();
    let path = format!("{}/embeddings", base.path().trim_end_matches('/'));
    url.set_path(&path);
    url
}

/// What the endpoint is asked, and how.
#[derive(Clone)]
pub struct Settings {
    pub base: url::Url,
    pub model: String,
    /// The key (from the environment); `None`: no `Authorization` header.
    pub key: Option<String>,
    /// The variable the key was read from (named in errors, never the key).
    pub key_env: String,
    pub dimensions: Option<usize>,
    pub batch: usize,
    pub timeout: Duration,
    pub max_tries: u32,
    pub breaker_failures: u32,
    pub breaker_cooldown: Duration,
    pub max_chars: usize,
    pub normalize: bool,
}

impl Settings {
    /// The endpoint `cfg` names, if it names one (`None`: the local model).
    pub fn from_config(cfg: &Config) -> Result<Option<Settings>, EmbedError> {
        let Some(base) = cfg
            .endpoint()
            .map_err(|e| EmbedError::Load(format!("embedder: {e}")))?
        else {
            return Ok(None);
        };
        let key = std::env::var(&cfg.embedder_api_key_env)
            .ok()
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty());
        Ok(Some(Settings {
            base,
            model: cfg.embedder_model.clone().unwrap_or_default(),
            key,
            key_env: cfg.embedder_api_key_env.clone(),
            dimensions: cfg.embedder_dimensions,
            batch: cfg.embedder_batch.max(1),
            timeout: Duration::from_millis(cfg.embedder_timeout_ms.max(1)),
            max_tries: cfg.embedder_max_tries.max(1),
            breaker_failures: cfg.embedder_breaker_failures.max(1),
            breaker_cooldown: Duration::from_millis(cfg.embedder_breaker_cooldown_ms),
            max_chars: cfg.embedder_max_chars.max(1),
            normalize: cfg.normalize.unwrap_or(true),
        }))
    }
}

/// The endpoint, shared by every worker's [`RemoteModel`]: its HTTP agent (connections are
/// pooled), its breaker and the dimension learned from its first answer.
pub struct Endpoint {
    settings: Settings,
    url: url::Url,
    name: String,
    agent: ureq::Agent,
    breaker: Breaker,
    dim: OnceLock<usize>,
}

/// Why a try failed.
struct Failure {
    kind: Kind,
    cause: String,
    /// The endpoint's `Retry-After`.
    after: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Not reachable, timed out, 408 or 5xx: tried again; counts toward the breaker.
    Down,
    /// 429: tried again, after its Retry-After.
    Limited,
    /// Answered, and would answer the same again: not tried again.
    Final,
}

impl Failure {
    fn new(kind: Kind, cause: impl Into<String>) -> Failure {
        Failure {
            kind,
            cause: cause.into(),
            after: None,
        }
    }

    /// The words after `embedder <endpoint>`.
    fn describe(&self) -> String {
        match self.kind {
            Kind::Down => format!("unavailable: {}", self.cause),
            Kind::Limited => format!("rate limited: {}", self.cause),
            Kind::Final => self.cause.clone(),
        }
    }
}

/// An answer's body, as the API documents it (other fields ignored).
#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

impl Endpoint {
    pub fn new(settings: Settings) -> Endpoint {
        let agent = ureq::AgentBuilder::new()
            .redirects(0)
            .max_idle_connections_per_host(16)
            .user_agent(concat!("memproxy/", env!("CARGO_PKG_VERSION")))
            .build();
        Endpoint {
            url: embeddings_url(&settings.base),
            name: endpoint_display(&settings.base),
            agent,
            breaker: Breaker::new(settings.breaker_failures, settings.breaker_cooldown),
            dim: OnceLock::new(),
            settings,
        }
    }

    /// The endpoint as errors name it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The model's identity for the index's stamp and MEM.INFO: the model name the endpoint is
    /// sent, its dimensions when asked for, and the endpoint.
    pub fn model_name(&self) -> String {
        match self.settings.dimensions {
            Some(d) => format!("{} ({d} dimensions) at {}", self.settings.model, self.name),
            None => format!("{} at {}", self.settings.model, self.name),
        }
    }

    /// The dimension, once an answer has told it.
    pub fn dim(&self) -> Option<usize> {
        self.dim.get().copied()
    }

    /// What the start-up log says of the endpoint (never the key).
    pub fn describe(&self) -> String {
        let s = &self.settings;
        format!(
            "model {:?}{}, key {}, {} texts a request, deadline {} ms, {} tries, breaker after {} failures for {} ms, normalize {}",
            s.model,
            s.dimensions
                .map(|d| format!(", dimensions {d}"))
                .unwrap_or_default(),
            if s.key.is_some() {
                format!("from {}", s.key_env)
            } else {
                format!("none ({} unset)", s.key_env)
            },
            s.batch,
            s.timeout.as_millis(),
            s.max_tries,
            s.breaker_failures,
            s.breaker_cooldown.as_millis(),
            s.normalize
        )
    }

    /// An error naming the endpoint.
    fn error(&self, what: &str) -> EmbedError {
        EmbedError::Remote(format!("embedder {} {}", self.name, self.scrub(what)))
    }

    /// `s` on one line, at most [`MAX_LINE`] characters, with the key blanked out.
    fn scrub(&self, s: &str) -> String {
        let s: String = s
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        cut(&self.blank_key(&s), MAX_LINE)
    }

    /// `s` with the key replaced by `***`.
    fn blank_key(&self, s: &str) -> String {
        match self.settings.key.as_deref() {
            Some(k) => s.replace(k, "***"),
            None => s.to_string(),
        }
    }

    /// Fail at once while the breaker is open (a text not cached is then not even queued).
    pub fn fail_fast(&self) -> Result<(), EmbedError> {
        self.breaker.peek().map_err(|m| self.error(&m))
    }

    /// The answer of the caller's deadline passing first.
    pub fn timed_out(&self, ms: u64) -> EmbedError {
        self.error(&format!("timed out: no answer within {ms} ms"))
    }

    /// Vectors for `texts` (prompts already prepended), in order, `embedder_batch` a request.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.settings.batch) {
            out.extend(self.request(chunk)?);
        }
        Ok(out)
    }

    /// One request, tried as the module doc says.
    fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let s = &self.settings;
        let input: Vec<&str> = texts
            .iter()
            .map(|t| match t.char_indices().nth(s.max_chars) {
                Some((i, _)) => &t[..i],
                None => t,
            })
            .collect();
        let mut body = serde_json::json!({
            "model": s.model,
            "input": input,
            "encoding_format": "float",
        });
        if let Some(d) = s.dimensions {
            body["dimensions"] = d.into();
        }
        let body = serde_json::to_vec(&body).map_err(|e| self.error(&e.to_string()))?;
        let deadline = Instant::now() + s.timeout;
        let mut tries = 0u32;
        loop {
            let admitted = self.breaker.admit().map_err(|m| self.error(&m))?;
            tries += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            let mut failure = match self.try_once(&body, texts.len(), left) {
                Ok(vectors) => {
                    self.breaker.success(&self.name);
                    return Ok(vectors);
                }
                Err(f) => f,
            };
            failure.cause = self.scrub(&failure.cause);
            match failure.kind {
                Kind::Down => self.breaker.failure(&self.name, &failure.cause),
                // The endpoint answered: it is up.
                Kind::Limited | Kind::Final => self.breaker.success(&self.name),
            }
            let tried = if tries > 1 {
                format!(" ({tries} tries)")
            } else {
                String::new()
            };
            if failure.kind == Kind::Final || admitted == Admit::Probe || tries >= s.max_tries {
                return Err(self.error(&format!("{}{tried}", failure.describe())));
            }
            let wait = match failure.after {
                Some(after) => after,
                None => backoff(tries),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if wait >= left {
                let why = match failure.after {
                    Some(after) => format!(
                        "; it asks to retry after {} s, past the {} ms deadline",
                        after.as_secs_f64(),
                        s.timeout.as_millis()
                    ),
                    None => String::new(),
                };
                return Err(self.error(&format!("{}{why}{tried}", failure.describe())));
            }
            tracing::debug!(
                endpoint = %self.name,
                tries,
                cause = %failure.cause,
                "embeddings request failed; retrying in {wait:?}"
            );
            std::thread::sleep(wait);
        }
    }

    /// One HTTP exchange within `timeout` (what is left of the request's deadline).
    fn try_once(
        &self,
        body: &[u8],
        texts: usize,
        timeout: Duration,
    ) -> Result<Vec<Vec<f32>>, Failure> {
        // A try that times out has used up the request's deadline: say that one.
        let ms = self.settings.timeout.as_millis();
        let mut req = self
            .agent
            .request_url("POST", &self.url)
            .timeout(timeout)
            .set("Content-Type", "application/json")
            .set("Accept", "application/json");
        if let Some(k) = &self.settings.key {
            req = req.set("Authorization", &format!("Bearer {k}"));
        }
        match req.send_bytes(body) {
            // Redirects are not followed (the key would not go with them).
            Ok(resp) if !(200..300).contains(&resp.status()) => Err(Failure::new(
                Kind::Final,
                format!(
                    "answered {} {}{} (redirects are not followed: give the URL it points to)",
                    resp.status(),
                    resp.status_text(),
                    resp.header("location")
                        .map(|l| format!(" to {l}"))
                        .unwrap_or_default()
                ),
            )),
            Ok(resp) => {
                let mut bytes = Vec::new();
                resp.into_reader()
                    .take(MAX_BODY)
                    .read_to_end(&mut bytes)
                    .map_err(|e| Failure::new(Kind::Down, io_cause(&e, ms)))?;
                self.parse(&bytes, texts)
                    .map_err(|m| Failure::new(Kind::Final, m))
            }
            Err(ureq::Error::Status(code, resp)) => Err(self.status_failure(code, resp)),
            Err(ureq::Error::Transport(t)) => {
                Err(Failure::new(Kind::Down, transport_cause(&t, ms)))
            }
        }
    }

    /// An answer other than 2xx.
    fn status_failure(&self, code: u16, resp: ureq::Response) -> Failure {
        let after = resp.header("retry-after").and_then(retry_after);
        let status = format!("{code} {}", resp.status_text());
        let mut bytes = Vec::new();
        let _ = resp.into_reader().take(64 << 10).read_to_end(&mut bytes);
        // The key out before anything is cut, so no part of it is left.
        let said = api_message(self.blank_key(&String::from_utf8_lossy(&bytes)).as_bytes());
        let cause = if said.is_empty() {
            status
        } else {
            format!("{status}: {said}")
        };
        let kind = match code {
            429 => Kind::Limited,
            408 | 500..=599 => Kind::Down,
            _ => Kind::Final,
        };
        let cause = match code {
            401 | 403 => {
                let key = if self.settings.key.is_some() {
                    format!("the key from {}", self.settings.key_env)
                } else {
                    format!("no key: {} is not set", self.settings.key_env)
                };
                format!("refused the key: {cause} ({key})")
            }
            _ if kind == Kind::Final => format!("refused the request: {cause}"),
            _ => cause,
        };
        Failure { kind, cause, after }
    }

    /// The vectors of a 2xx answer, checked: one per text, each index once, the dimension.
    fn parse(&self, bytes: &[u8], texts: usize) -> Result<Vec<Vec<f32>>, String> {
        let answer: Answer = serde_json::from_slice(bytes).map_err(|e| {
            let body = self.blank_key(&String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]));
            format!(
                "answered what is not an embeddings list: {e} (body starts {:?})",
                cut(&body, 80)
            )
        })?;
        if answer.data.len() != texts {
            return Err(format!(
                "answered {} embeddings for {texts} texts",
                answer.data.len()
            ));
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; texts];
        for (i, item) in answer.data.into_iter().enumerate() {
            let at = item.index.unwrap_or(i);
            let Some(slot) = out.get_mut(at) else {
                return Err(format!("answered index {at} for {texts} texts"));
            };
            if slot.is_some() {
                return Err(format!("answered index {at} twice"));
            }
            *slot = Some(item.embedding);
        }
        let mut out: Vec<Vec<f32>> = out.into_iter().flatten().collect();
        let want = self
            .dim
            .get()
            .copied()
            .or(self.settings.dimensions)
            .unwrap_or_else(|| out.first().map_or(0, Vec::len));
        if want == 0 {
            return Err("answered empty vectors".into());
        }
        for v in &mut out {
            if v.len() != want {
                let whose = if self.dim.get().is_some() {
                    "the dimension it answered with first"
                } else if self.settings.dimensions.is_some() {
                    "embedder_dimensions"
                } else {
                    "the batch's first vector's"
                };
                return Err(format!(
                    "answered a vector of {} dimensions, expected {want} ({whose})",
                    v.len()
                ));
            }
            if v.iter().any(|x| !x.is_finite()) {
                return Err("answered a vector with a value that is not a finite number".into());
            }
            if self.settings.normalize {
                normalize(v);
            }
        }
        let _ = self.dim.set(want);
        Ok(out)
    }
}

/// The backoff before try `tries + 1`: 100 ms doubled each try, at most 2 s, with jitter (half
/// of it fixed, half random).
fn backoff(tries: u32) -> Duration {
    let full = BACKOFF
        .saturating_mul(1 << tries.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    full / 2 + full.mul_f64(rand::random::<f64>() / 2.0)
}

/// `Retry-After` in seconds (an HTTP date is not read: the backoff applies).
fn retry_after(v: &str) -> Option<Duration> {
    let secs: f64 = v.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// `s` cut after `n` characters (marked `…`).
fn cut(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The message of an error body, at most [`MAX_CAUSE`] characters: OpenAI's `{"error":
/// {"message"}}`, `{"error": "…"}`, `{"message"}`, `{"detail"}`, else the text itself.
fn api_message(bytes: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) {
        for m in [
            &v["error"]["message"],
            &v["error"],
            &v["message"],
            &v["detail"],
        ] {
            if let Some(s) = m.as_str() {
                return cut(s.trim(), MAX_CAUSE);
            }
        }
    }
    cut(String::from_utf8_lossy(bytes).trim(), MAX_CAUSE)
}

/// A transport error in a few words: `connection refused`, `timed out after 400 ms`, …
fn transport_cause(t: &ureq::Transport, ms: u128) -> String {
    let mut source = std::error::Error::source(t);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io_cause(io, ms);
        }
        source = s.source();
    }
    match t.kind() {
        ureq::ErrorKind::Dns => format!(
            "cannot resolve the host{}",
            t.message().map(|m| format!(": {m}")).unwrap_or_default()
        ),
        kind => match t.message() {
            Some(m) => format!("{kind}: {m}"),
            None => kind.to_string(),
        },
    }
}

fn io_cause(e: &std::io::Error, ms: u128) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => "connection refused".into(),
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => "connection reset".into(),
        K::TimedOut | K::WouldBlock => format!("timed out after {ms} ms"),
        K::UnexpectedEof => "connection closed before the answer".into(),
        _ => e.to_string(),
    }
}

/// Whether a try may go ahead.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Admit {
    /// The breaker is closed.
    Closed,
    /// The cool-down is over: this try probes (and is the only one in flight).
    Probe,
}

/// Consecutive failures open it for a cool-down; then one try probes.
struct Breaker {
    threshold: u32,
    cooldown: Duration,
    state: Mutex<BreakerState>,
}

#[derive(Default)]
struct BreakerState {
    failures: u32,
    open_until: Option<Instant>,
    probing: bool,
    last: String,
}

impl BreakerState {
    /// Why a try may not go ahead now, if it may not.
    fn refusal(&self, now: Instant) -> Option<String> {
        let until = self.open_until?;
        if now < until {
            return Some(format!(
                "unavailable: {} (not asked for another {} ms after {} failures in a row)",
                self.last,
                until.duration_since(now).as_millis().max(1),
                self.failures
            ));
        }
        self.probing.then(|| {
            format!(
                "unavailable: {} (a probe of the endpoint is under way)",
                self.last
            )
        })
    }
}

impl Breaker {
    fn new(threshold: u32, cooldown: Duration) -> Breaker {
        Breaker {
            threshold,
            cooldown,
            state: Mutex::new(BreakerState::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BreakerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take a try (the probe, once the cool-down is over), or why not.
    fn admit(&self) -> Result<Admit, String> {
        let mut s = self.lock();
        if let Some(why) = s.refusal(Instant::now()) {
            return Err(why);
        }
        if s.open_until.is_some() {
            s.probing = true;
            return Ok(Admit::Probe);
        }
        Ok(Admit::Closed)
    }

    /// Like `admit`, without taking the probe.
    fn peek(&self) -> Result<(), String> {
        match self.lock().refusal(Instant::now()) {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    fn success(&self, name: &str) {
        let mut s = self.lock();
        if s.open_until.is_some() {
            tracing::info!(endpoint = %name, "the embeddings endpoint answers again");
        }
        s.failures = 0;
        s.open_until = None;
        s.probing = false;
    }

    fn failure(&self, name: &str, cause: &str) {
        let mut s = self.lock();
        s.failures = s.failures.saturating_add(1);
        s.last = cause.to_string();
        if s.probing || s.failures >= self.threshold {
            if s.open_until.is_none() {
                tracing::warn!(
                    endpoint = %name,
                    failures = s.failures,
                    cause,
                    "the embeddings endpoint is failing; not asking it for {} ms",
                    self.cooldown.as_millis()
                );
            }
            s.open_until = Some(Instant::now() + self.cooldown);
            s.probing = false;
        }
    }
}

/// A worker's handle on the [`Endpoint`].
pub struct RemoteModel {
    endpoint: Arc<Endpoint>,
}

impl RemoteModel {
    pub fn new(endpoint: Arc<Endpoint>) -> RemoteModel {
        RemoteModel { endpoint }
    }
}

impl Model for RemoteModel {
    fn dim(&self) -> usize {
        self.endpoint.dim().unwrap_or(0)
    }

    fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.endpoint.embed(texts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_endpoint;

    #[test]
    fn base_urls() {
        let u = parse_endpoint("https://api.openai.com/v1/").unwrap();
        assert_eq!(endpoint_display(&u), "https://api.openai.com/v1");
        assert_eq!(
            embeddings_url(&u).as_str(),
            "https://api.openai.com/v1/embeddings"
        );
        let u = parse_endpoint("https://x.openai.azure.com/openai/v1?api-version=preview").unwrap();
        assert_eq!(endpoint_display(&u), "https://x.openai.azure.com/openai/v1");
        assert_eq!(
            embeddings_url(&u).as_str(),
            "https://x.openai.azure.com/openai/v1/embeddings?api-version=preview"
        );
        let u = parse_endpoint("http://127.0.0.1:8080").unwrap();
        assert_eq!(endpoint_display(&u), "http://127.0.0.1:8080");
        assert_eq!(
            embeddings_url(&u).as_str(),
            "http://127.0.0.1:8080/embeddings"
        );
        for bad in [
            "openai://api.openai.com/v1",
            "ftp://h/v1",
            "127.0.0.1:8080/v1",
            "https://user:sk-secret@h/v1",
        ] {
            let e = parse_endpoint(bad).unwrap_err();
            assert!(!e.contains("sk-secret"), "{e}");
        }
        assert!(parse_endpoint("openai://h/v1")
            .unwrap_err()
            .contains("http:// or https://"));
    }

    #[test]
    fn retry_after_and_backoff() {
        assert_eq!(retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(retry_after("-1"), None);
        for tries in 1..20 {
            let full = BACKOFF
                .saturating_mul(1 << (tries - 1).min(16))
                .min(MAX_BACKOFF);
            let b = backoff(tries);
            assert!(b >= full / 2 && b <= full, "{tries}: {b:?}");
        }
    }

    #[test]
    fn error_bodies() {
        assert_eq!(
            api_message(br#"{"error": {"message": "Incorrect API key", "type": "x"}}"#),
            "Incorrect API key"
        );
        assert_eq!(
            api_message(br#"{"error": "model not found"}"#),
            "model not found"
        );
        assert_eq!(api_message(br#"{"detail": "nope"}"#), "nope");
        assert_eq!(api_message(b"Bad Gateway\n"), "Bad Gateway");
    }

    /// An endpoint on a port nothing listens on.
    fn endpoint(threshold: u32, cooldown_ms: u64) -> Endpoint {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Endpoint::new(Settings {
            base: parse_endpoint(&format!("http://127.0.0.1:{port}/v1")).unwrap(),
            model: "m".into(),
            key: Some("sk-secret".into()),
            key_env: "K".into(),
            dimensions: None,
            batch: 2,
            timeout: Duration::from_millis(500),
            max_tries: 1,
            breaker_failures: threshold,
            breaker_cooldown: Duration::from_millis(cooldown_ms),
            max_chars: 100,
            normalize: true,
        })
    }

    #[test]
    fn answers_are_checked_and_ordered_by_index() {
        let e = endpoint(5, 1000);
        let two =
            br#"{"data": [{"index": 1, "embedding": [0, 2]}, {"index": 0, "embedding": [3, 4]}]}"#;
        let v = e.parse(two, 2).unwrap();
        assert_eq!(v, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        assert_eq!(e.dim(), Some(2));
        for (body, texts, want) in [
            (&b"not json"[..], 1, "not an embeddings list"),
            (br#"{"data": [{"embedding": [1, 0]}]}"#, 2, "1 embeddings for 2 texts"),
            (
                br#"{"data": [{"index": 0, "embedding": [1, 0]}, {"index": 0, "embedding": [1, 0]}]}"#,
                2,
                "index 0 twice",
            ),
            (br#"{"data": [{"index": 3, "embedding": [1, 0]}]}"#, 1, "index 3"),
            (br#"{"data": [{"embedding": [1, 0, 0]}]}"#, 1, "3 dimensions, expected 2"),
            (br#"{"data": [{"embedding": "AAAA"}]}"#, 1, "not an embeddings list"),
        ] {
            let err = e.parse(body, texts).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
        // The key never shows, the line is one.
        let err = e.error("refused the key: 401: Incorrect API key sk-secret\nprovided");
        let line = err.to_string();
        assert!(
            line.starts_with(&format!("embedder {} refused the key", e.name()))
                && !line.contains("sk-secret")
                && !line.contains('\n'),
            "{line}"
        );
    }

    #[test]
    fn breaker_opens_fails_fast_and_lets_one_probe() {
        let e = endpoint(2, 60);
        // Nothing listens: connection refused, one try a request (max_tries 1).
        let first = e.embed(&["a"]).unwrap_err().to_string();
        assert!(
            first.starts_with(&format!(
                "embedder {} unavailable: connection refused",
                e.name()
            )),
            "{first}"
        );
        assert!(e.fail_fast().is_ok(), "one failure does not open it");
        e.embed(&["a"]).unwrap_err();
        let fast = e.fail_fast().unwrap_err().to_string();
        assert!(fast.contains("not asked for another"), "{fast}");
        let t = Instant::now();
        assert!(e
            .embed(&["a"])
            .unwrap_err()
            .to_string()
            .contains("not asked"));
        assert!(t.elapsed() < Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(80));
        // The cool-down is over: one probe at a time.
        assert_eq!(e.breaker.admit(), Ok(Admit::Probe));
        assert!(e.breaker.admit().unwrap_err().contains("probe"));
        assert!(e.fail_fast().is_err());
        e.breaker.failure("x", "connection refused");
        assert!(e.fail_fast().unwrap_err().to_string().contains("not asked"));
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(e.breaker.admit(), Ok(Admit::Probe));
        e.breaker.success("x");
        assert_eq!(e.breaker.admit(), Ok(Admit::Closed));
        assert!(e.fail_fast().is_ok());
    }
}

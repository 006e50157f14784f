//! An OpenAI-compatible embeddings endpoint as the embedder (issue 39, points 2–4): a server in
//! this process (tests/common/openai.rs) serves the real all-MiniLM-L6-v2 over the API, so
//! distances through the endpoint equal the local model's; then the same server slow, failing,
//! malformed and dead, the key, start-up, and the index's model stamp.

mod common;
#[path = "common/openai.rs"]
mod openai;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use memproxy::embed::{cosine_distance, onnx, Model};
use memproxy::Config;
use openai::{Fault, Served, Server};

/// A variable no test sets: no key is sent.
const NO_KEY: &str = "MEMPROXY_TEST_NO_KEY";

/// The model of `dir` (under the deps dir's `model/`), loaded once for this process.
fn served(dir: &'static str) -> Served {
    static MODELS: OnceLock<Mutex<Vec<(&'static str, Served)>>> = OnceLock::new();
    let mut models = MODELS.get_or_init(Default::default).lock().unwrap();
    if let Some((_, m)) = models.iter().find(|(d, _)| *d == dir) {
        return m.clone();
    }
    let cfg = Config::default();
    let opts = onnx::Options {
        library: cfg.ort_library(),
        intra_threads: 2,
        optimization: 3,
        spinning: false,
        batch_tokens: 2048,
    };
    let m = onnx::OnnxModel::load(&deps().join("model").join(dir), &opts).unwrap();
    let m: Served = Arc::new(Mutex::new(Box::new(m) as Box<dyn Model>));
    models.push((dir, m.clone()));
    m
}

fn fp32() -> Served {
    served("all-MiniLM-L6-v2")
}

/// Everything memproxy logs in this process (debug and up), from the first call on.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("memproxy=debug,info")
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .try_init();
        buf
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A memproxy whose embedder is `server`, serving all-MiniLM-L6-v2, without a key.
fn endpoint_proxy(redis: &Redis, server: &Server, tune: impl FnOnce(&mut Config)) -> Proxy {
    logs();
    let base = server.base();
    Proxy::start(&redis.url(), |c| {
        c.embedder = Some(base);
        c.embedder_model = Some("all-MiniLM-L6-v2".into());
        c.embedder_api_key_env = NO_KEY.into();
        tune(c);
    })
}

fn mem_embed(con: &mut redis::Connection, args: &[&str]) -> Vec<f32> {
    let mut c = redis::cmd("MEM.EMBED");
    for a in args {
        c.arg(*a);
    }
    let v: Vec<f64> = c.query(con).unwrap();
    v.into_iter().map(|x| x as f32).collect()
}

fn dbsize(redis: &Redis) -> i64 {
    redis::cmd("DBSIZE").query(&mut direct(redis)).unwrap()
}

fn listed(con: &mut redis::Connection, user: &str) -> usize {
    items(&q(con, &["MEM.LIST", "USER", user])).len()
}

/// One error line: `ERR embedder <base> …`, containing `want`.
fn assert_line(e: &str, base: &str, want: &str) {
    assert!(
        e.starts_with(&format!("ERR embedder {base} ")) && e.contains(want) && !e.contains('\n'),
        "wanted one line naming {base} and saying {want:?}, got {e:?}"
    );
}

#[test]
fn endpoint_vectors_equal_the_local_models_and_the_guide_distance_holds() {
    let redis = Redis::start(&[]);
    let server = Server::start(fp32());
    let local = Proxy::start(&redis.url(), |_| {});
    let remote = endpoint_proxy(&redis, &server, |_| {});
    let (mut l, mut r) = (local.client(), remote.client());
    let seeds = tsv("redis-docs-seed-memories.tsv");
    let probes = tsv("seed-demo-probes.tsv");
    for text in seeds
        .iter()
        .map(|s| &s[1])
        .chain(probes.iter().map(|p| &p[0]))
    {
        let a = mem_embed(&mut l, &[text]);
        let b = mem_embed(&mut r, &[text]);
        assert_eq!(b.len(), 384);
        let d = cosine_distance(&a, &b);
        assert!(d <= 1e-6, "{text:?}: cosine distance {d}");
    }
    // What the local model remembered, the endpoint's same model recalls (the index's stamp
    // agrees), at the guide's distance.
    let user = unique("guide");
    for s in &seeds {
        q(
            &mut l,
            &["MEM.REMEMBER", &s[1], "USER", &user, "KIND", &s[0]],
        );
    }
    let hits = q(
        &mut r,
        &["MEM.RECALL", &probes[0][0], "USER", &user, "MODE", "vector"],
    );
    let top = &items(&hits)[0];
    assert!(as_str(get(top, "text")).starts_with(&probes[0][1]));
    let d = as_f64(get(top, "distance"));
    let reference: f64 = probes[0][2].parse().unwrap();
    assert!((d - reference).abs() <= 0.005, "{}: {d}", probes[0][0]);
    // MEM.INFO names the endpoint's model.
    let info = q(&mut r, &["MEM.INFO"]);
    assert_eq!(
        as_str(get(&info, "model")),
        format!("all-MiniLM-L6-v2 at {}", server.base())
    );
    assert_eq!(as_i64(get(&info, "dim")), 384);
    // Every request as the API says, no key sent (none set).
    for req in server.requests() {
        assert_eq!(req.body["model"], "all-MiniLM-L6-v2");
        assert_eq!(req.body["encoding_format"], "float");
        assert!(req.body.get("dimensions").is_none());
        assert!(req.body["input"].is_array());
        assert_eq!(req.authorization, None);
    }
}

#[test]
fn prompts_and_dimensions_reach_the_endpoint() {
    let redis = Redis::start(&[]);
    let server = Server::start(fp32());
    let proxy = endpoint_proxy(&redis, &server, |c| {
        c.query_prompt = Some("query: ".into());
        c.document_prompt = Some("passage: ".into());
        c.embedder_dimensions = Some(128);
        c.embedder_max_chars = 60;
    });
    let mut con = proxy.client();
    let q_vec = mem_embed(&mut con, &["Which tea?", "QUERY"]);
    let d_vec = mem_embed(&mut con, &["The user drinks green tea."]);
    assert_eq!((q_vec.len(), d_vec.len()), (128, 128));
    let inputs = server.inputs();
    assert!(
        inputs[0].starts_with("passage: memproxy model probe"),
        "{inputs:?}"
    );
    assert!(inputs.contains(&"query: Which tea?".to_string()));
    assert!(inputs.contains(&"passage: The user drinks green tea.".to_string()));
    assert!(server
        .requests()
        .iter()
        .all(|r| r.body["dimensions"] == 128));
    // The vector is the model's, of the prompted text, shortened and re-normalised.
    let mut want = fp32()
        .lock()
        .unwrap()
        .embed(&["query: Which tea?"])
        .unwrap()[0]
        .clone();
    want.truncate(128);
    memproxy::embed::normalize(&mut want);
    assert!(cosine_distance(&q_vec, &want) <= 1e-6);
    // A text is cut at embedder_max_chars characters, its prompt included.
    let long = "The user keeps a long list of teas: sencha, gyokuro, bancha, hojicha and matcha.";
    mem_embed(&mut con, &[long]);
    let sent = server.inputs().pop().unwrap();
    assert_eq!(
        sent,
        format!("passage: {long}")
            .chars()
            .take(60)
            .collect::<String>()
    );
    let info = q(&mut con, &["MEM.INFO"]);
    assert_eq!(as_i64(get(&info, "dim")), 128);
    assert!(as_str(get(&info, "model")).contains("(128 dimensions)"));
}

#[test]
fn a_slow_endpoint_fails_at_its_deadline_and_nothing_is_written() {
    let redis = Redis::start(&[]);
    let server = Server::start(fp32());
    let proxy = endpoint_proxy(&redis, &server, |c| c.embedder_timeout_ms = 300);
    let mut con = proxy.client();
    let user = unique("slow");
    q(
        &mut con,
        &["MEM.REMEMBER", "The user plays the cello.", "USER", &user],
    );
    let keys = dbsize(&redis);
    server.always(Some(Fault::Delay(Duration::from_secs(2))));
    let t = Instant::now();
    let e = err(
        &mut con,
        &["MEM.REMEMBER", "The user likes slow jazz.", "USER", &user],
    );
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    assert_line(&e, &server.base(), "unavailable: timed out after 300 ms");
    let e = err(&mut con, &["MEM.RECALL", "What music?", "USER", &user]);
    assert_line(&e, &server.base(), "timed out");
    assert_eq!(listed(&mut con, &user), 1);
    assert_eq!(dbsize(&redis), keys, "nothing written");
    // Ordinary commands are not held up.
    assert_eq!(as_str(&q(&mut con, &["PING"])), "PONG");
    server.always(None);
    q(
        &mut con,
        &["MEM.REMEMBER", "The user likes slow jazz.", "USER", &user],
    );
    assert_eq!(listed(&mut con, &user), 2);
}

#[test]
fn a_failing_endpoint_is_retried() {
    let redis = Redis::start(&[]);
    let server = Server::start(fp32());
    let proxy = endpoint_proxy(&redis, &server, |c| {
        c.embedder_max_tries = 3;
        c.embedder_breaker_failures = 20;
    });
    let base = server.base();
    let mut con = proxy.client();
    let user = unique("retry");
    let boom = r#"{"error": {"message": "boom"}}"#.to_string();
    server.fail_next(&[
        Fault::Status(500, None, boom.clone()),
        Fault::Status(502, None, boom.clone()),
    ]);
    let before = server.requests().len();
    q(
        &mut con,
        &["MEM.REMEMBER", "The user runs on Sundays.", "USER", &user],
    );
    assert_eq!(
        server.requests().len() - before,
        3,
        "two failures, then the answer"
    );
    assert_eq!(listed(&mut con, &user), 1);

    // 429 with Retry-After: asked again after it.
    server.fail_next(&[Fault::Status(429, Some("1".into()), boom.clone())]);
    let before = server.requests().len();
    let t = Instant::now();
    assert_eq!(mem_embed(&mut con, &["rate limited once"]).len(), 384);
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(server.requests().len() - before, 2);

    // A Retry-After past the deadline fails at once, saying so.
    server.fail_next(&[Fault::Status(429, Some("3600".into()), boom.clone())]);
    let t = Instant::now();
    let e = err(&mut con, &["MEM.EMBED", "rate limited for an hour"]);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_line(&e, &base, "rate limited: 429 Too Many Requests: boom");
    assert!(e.contains("retry after 3600 s"), "{e}");

    // 5xx on every try: the tries are counted, and nothing is written.
    server.always(Some(Fault::Status(503, None, "overloaded".into())));
    let before = server.requests().len();
    let e = err(
        &mut con,
        &["MEM.REMEMBER", "The user swims.", "USER", &user],
    );
    assert_line(
        &e,
        &base,
        "unavailable: 503 Service Unavailable: overloaded (3 tries)",
    );
    assert_eq!(server.requests().len() - before, 3);
    assert_eq!(listed(&mut con, &user), 1);
    server.always(None);
}

#[test]
fn a_malformed_endpoint_answers_one_line_and_writes_nothing() {
    let redis = Redis::start(&[]);
    let server = Server::start(fp32());
    let proxy = endpoint_proxy(&redis, &server, |_| {});
    let base = server.base();
    let mut con = proxy.client();
    let user = unique("malformed");
    q(
        &mut con,
        &["MEM.REMEMBER", "The user owns a kayak.", "USER", &user],
    );
    let keys = dbsize(&redis);
    let cases = [
        (
            Fault::Body("<html>not json</html>".into()),
            "answered what is not an embeddings list",
        ),
        (Fault::Fewer, "answered 0 embeddings for 1 texts"),
        (
            Fault::Dim(512),
            "answered a vector of 512 dimensions, expected 384",
        ),
        (
            Fault::Status(
                400,
                None,
                r#"{"error": {"message": "maximum context length is 8192 tokens"}}"#.into(),
            ),
            "refused the request: 400 Bad Request: maximum context length is 8192 tokens",
        ),
        (
            Fault::Status(404, None, r#"{"error": "model not found"}"#.into()),
            "refused the request: 404 Not Found: model not found",
        ),
    ];
    for (i, (fault, want)) in cases.into_iter().enumerate() {
        server.fail_next(&[fault]);
        let before = server.requests().len();
        let text = format!("The user owns {i} canoes.");
        let e = err(&mut con, &["MEM.REMEMBER", &text, "USER", &user]);
        assert_line(&e, &base, want);
        assert_eq!(server.requests().len() - before, 1, "not retried: {want}");
    }
    server.fail_next(&[Fault::Dim(10)]);
    let e = err(&mut con, &["MEM.RECALL", "Any boats?", "USER", &user]);
    assert_line(&e, &base, "expected 384");
    assert_eq!(listed(&mut con, &user), 1);
    assert_eq!(dbsize(&redis), keys, "nothing written");
}

#[test]
fn a_dead_endpoint_trips_the_breaker_and_ordinary_commands_pass() {
    let redis = Redis::start(&[]);
    let mut server = Server::start(fp32());
    let port = server.addr.port();
    let base = server.base();
    let proxy = endpoint_proxy(&redis, &server, |c| {
        c.embedder_max_tries = 2;
        c.embedder_breaker_failures = 3;
        c.embedder_breaker_cooldown_ms = 500;
    });
    let mut con = proxy.client();
    let user = unique("dead");
    q(
        &mut con,
        &["MEM.REMEMBER", "The user bakes bread.", "USER", &user],
    );
    let keys = dbsize(&redis);
    server.kill();

    let e = err(
        &mut con,
        &["MEM.REMEMBER", "The user bakes rye.", "USER", &user],
    );
    assert_line(&e, &base, "unavailable: connection refused");
    // The third failure in a row opens the breaker.
    let e = err(&mut con, &["MEM.EMBED", "rye"]);
    assert_line(&e, &base, "connection refused");
    // From now on every MEM.* that needs an embedding fails fast.
    for args in [
        vec!["MEM.EMBED", "fast"],
        vec!["MEM.RECALL", "Any bread?", "USER", &user],
        vec!["MEM.REMEMBER", "The user bakes spelt.", "USER", &user],
        vec![
            "MEM.TURN",
            "t-dead",
            "user",
            "I bake spelt now.",
            "USER",
            &user,
        ],
    ] {
        let t = Instant::now();
        let e = err(&mut con, &args);
        let took = t.elapsed();
        assert!(took < Duration::from_millis(50), "{args:?} took {took:?}");
        assert_line(
            &e,
            &base,
            "unavailable: connection refused (not asked for another",
        );
    }
    // Ordinary commands pass through; nothing was written.
    assert_eq!(as_str(&q(&mut con, &["PING"])), "PONG");
    let key = unique("plain");
    q(&mut con, &["SET", &key, "v"]);
    assert_eq!(as_str(&q(&mut con, &["GET", &key])), "v");
    q(&mut con, &["DEL", &key]);
    assert_eq!(listed(&mut con, &user), 1);
    assert_eq!(dbsize(&redis), keys);

    // Back on the same port: after the cool-down one request probes, and MEM.* work again.
    let _server = Server::start_on(port, fp32());
    eventually("the endpoint to be asked again", || {
        redis::cmd("MEM.EMBED")
            .arg("back again")
            .query::<Vec<f64>>(&mut con)
            .is_ok()
    });
    q(
        &mut con,
        &["MEM.REMEMBER", "The user bakes rye.", "USER", &user],
    );
    assert_eq!(listed(&mut con, &user), 2);
}

#[test]
fn the_key_reaches_the_endpoint_and_never_an_error_or_a_log() {
    let var = format!("MEMPROXY_TEST_KEY_{}", std::process::id());
    let key = format!("sk-test-{}-do-not-print", std::process::id());
    std::env::set_var(&var, &key);
    let redis = Redis::start(&[]);
    let server = Server::start(fp32());
    let proxy = endpoint_proxy(&redis, &server, |c| c.embedder_api_key_env = var.clone());
    let mut con = proxy.client();
    mem_embed(&mut con, &["keyed"]);
    let bearer = format!("Bearer {key}");
    assert!(server
        .requests()
        .iter()
        .all(|r| r.authorization.as_deref() == Some(bearer.as_str())));
    // A refused key: the endpoint's words, without the key.
    let said = format!(
        r#"{{"error": {{"message": "Incorrect API key provided: {key}. Find yours at example.com"}}}}"#
    );
    server.fail_next(&[Fault::Status(401, None, said)]);
    let e = err(&mut con, &["MEM.EMBED", "refused"]);
    assert_line(
        &e,
        &server.base(),
        "refused the key: 401 Unauthorized: Incorrect API key provided: ***.",
    );
    assert!(e.contains(&var) && !e.contains(&key), "{e}");
    // A 500 that echoes the request's headers, retried and logged at debug.
    server.fail_next(&[
        Fault::Status(500, None, format!("echo: Authorization: Bearer {key}")),
        Fault::Status(500, None, format!("echo: Authorization: Bearer {key}")),
        Fault::Status(500, None, format!("echo: Authorization: Bearer {key}")),
        Fault::Status(500, None, format!("echo: Authorization: Bearer {key}")),
    ]);
    let e = err(&mut con, &["MEM.EMBED", "echoed"]);
    assert!(e.contains("Bearer ***") && !e.contains(&key), "{e}");
    let logs = String::from_utf8_lossy(&logs().lock().unwrap()).into_owned();
    assert!(
        logs.contains("embeddings endpoint") && logs.contains(&format!("key from {var}")),
        "the start-up line is captured: {logs}"
    );
    assert!(logs.contains("retrying"), "the retries are logged: {logs}");
    assert!(!logs.contains(&key), "the key is in the logs");
}

/// Run the binary with `args` and the environment `env` until it exits (at most 30 s): (success,
/// stderr).
fn run_binary(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_memproxy"));
    c.args(args)
        .env("MEMPROXY_DEPS", deps())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("memproxy {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn start_fails_with_one_line_naming_an_unreachable_endpoint() {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let key = "sk-start-do-not-print";
    let (ok, stderr) = run_binary(
        &[
            "--embedder",
            &base,
            "--embedder-model",
            "m",
            "--embedder-api-key-env",
            "MEMPROXY_TEST_START_KEY",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "redis://127.0.0.1:1",
        ],
        &[("MEMPROXY_TEST_START_KEY", key)],
    );
    assert!(!ok);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("Error:"))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert!(
        line.starts_with(&format!(
            "Error: embedder {base} unavailable: connection refused"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains(key), "{stderr}");
    // Settings that are not an endpoint, or an endpoint without a model, are refused by name.
    for (args, want) in [
        (
            vec![
                "--embedder",
                "openai://127.0.0.1:1/v1",
                "--embedder-model",
                "m",
            ],
            "http:// or https://",
        ),
        (
            vec!["--embedder", "http://127.0.0.1:1/v1"],
            "embedder_model",
        ),
        (
            vec![
                "--embedder",
                "http://127.0.0.1:1/v1",
                "--embedder-model",
                "m",
                "--embedder-api-key-env",
                "sk-a-key-itself",
            ],
            "embedder_api_key_env",
        ),
    ] {
        let (ok, stderr) = run_binary(&args, &[]);
        assert!(!ok && stderr.contains(want), "{args:?}: {stderr}");
        assert!(!stderr.contains("sk-a-key-itself"), "{stderr}");
    }
}

#[test]
fn the_model_stamp_covers_the_endpoint_and_reembed_moves_the_index() {
    let redis = Redis::start(&[]);
    let mut d = direct(&redis);
    let local = Proxy::start(&redis.url(), |c| c.index_recheck_ms = 100);
    let mut a = local.client();
    let mut ids = Vec::new();
    for t in [
        "The user is allergic to peanuts.",
        "The user prefers tea.",
        "The user lives in Lisbon.",
    ] {
        ids.push(as_str(get(&q(&mut a, &["MEM.REMEMBER", t]), "id")));
    }
    // Another model behind an endpoint (the int8 export: its probe is ~1e-3 away).
    let server = Server::start(served("all-MiniLM-L6-v2-int8"));
    let base = server.base();
    let other = endpoint_proxy(&redis, &server, |c| {
        c.embedder_model = Some("all-MiniLM-L6-v2-int8".into());
        c.index_recheck_ms = 100;
    });
    let mut b = other.client();
    let e = err(&mut b, &["MEM.RECALL", "Any food allergies?"]);
    assert!(
        e.contains("memproxy reembed")
            && e.contains("'all-MiniLM-L6-v2'")
            && e.contains(&format!("'all-MiniLM-L6-v2-int8 at {base}'")),
        "{e}"
    );
    q(&mut b, &["SET", "plain", "1"]);
    assert_eq!(as_str(&q(&mut b, &["GET", "plain"])), "1");

    let (ok, log) = run_binary(
        &[
            "reembed",
            "--upstream",
            &redis.url(),
            "--embedder",
            &base,
            "--embedder-model",
            "all-MiniLM-L6-v2-int8",
            "--embedder-api-key-env",
            NO_KEY,
        ],
        &[],
    );
    assert!(ok, "{log}");
    assert!(log.contains("3 memories examined, 3 re-embedded"), "{log}");
    let stamp: String = redis::cmd("HGET")
        .arg("agentmem:idx:model")
        .arg("name")
        .query(&mut d)
        .unwrap();
    assert_eq!(stamp, format!("all-MiniLM-L6-v2-int8 at {base}"));
    reembedded(
        &mut b,
        &mut a,
        "the endpoint's proxy",
        "the local proxy",
        &ids[0],
    );
}

//! A small OpenAI-compatible embeddings server on 127.0.0.1 (`POST /v1/embeddings`), serving a
//! real model run in this process, with faults to order: for tests/remote_embedder.rs and
//! bench/embed.rs (which includes this file by path).
//!
//! It answers the way the API documents: `{"object": "list", "data": [{"object": "embedding",
//! "index", "embedding"}], "model", "usage"}`, the items in reverse order (clients must read
//! `index`); `dimensions` shortens the vectors and re-normalises them (as OpenAI's text-embedding-3
//! models do). It records every request (its `Authorization` header and JSON body).

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use memproxy::embed::Model;

/// The model served, shared by the servers of one process.
pub type Served = Arc<Mutex<Box<dyn Model>>>;

/// What the server does instead of answering normally.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer this status, with `Retry-After` when given, and this body.
    Status(u16, Option<String>, String),
    /// Wait this long, then answer normally.
    Delay(Duration),
    /// Answer 200 with this body.
    Body(String),
    /// Answer one embedding fewer than asked for.
    Fewer,
    /// Answer vectors of this many dimensions (cut short, or padded with zeros).
    Dim(usize),
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Request {
    pub authorization: Option<String>,
    pub body: serde_json::Value,
}

#[derive(Default)]
struct Behaviour {
    /// Used one per request, first in first out.
    once: VecDeque<Fault>,
    /// Used for every request while set (after `once` is empty).
    always: Option<Fault>,
}

struct Shared {
    model: Served,
    behaviour: Mutex<Behaviour>,
    requests: Mutex<Vec<Request>>,
}

pub struct Server {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Serve `model` on a free port.
    pub fn start(model: Served) -> Server {
        Server::start_on(0, model)
    }

    /// Serve `model` on `port` (0: a free one), e.g. again on the port of a killed server.
    pub fn start_on(port: u16, model: Served) -> Server {
        let shared = Arc::new(Shared {
            model,
            behaviour: Mutex::new(Behaviour::default()),
            requests: Mutex::new(Vec::new()),
        });
        let std_listener = bind(port);
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
                let app = axum::Router::new()
                    .route("/v1/embeddings", axum::routing::post(embeddings))
                    .with_state(state);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        Server {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The base URL memproxy is given: `http://127.0.0.1:<port>/v1`.
    pub fn base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The next requests get these faults, one each.
    pub fn fail_next(&self, faults: &[Fault]) {
        self.shared
            .behaviour
            .lock()
            .unwrap()
            .once
            .extend(faults.iter().cloned());
    }

    /// Every request gets this fault (None: answer normally).
    pub fn always(&self, fault: Option<Fault>) {
        self.shared.behaviour.lock().unwrap().always = fault;
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The texts of every request so far, in order.
    pub fn inputs(&self) -> Vec<String> {
        self.requests()
            .iter()
            .flat_map(|r| inputs(&r.body))
            .collect()
    }

    /// Stop: from now on connections to its port are refused.
    pub fn kill(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A listener on `port`, retried a while when the port is still held (a server just killed).
fn bind(port: u16) -> std::net::TcpListener {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match std::net::TcpListener::bind(("127.0.0.1", port)) {
            Ok(l) => return l,
            Err(e) if std::time::Instant::now() > deadline => panic!("bind {port}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn inputs(body: &serde_json::Value) -> Vec<String> {
    match &body["input"] {
        serde_json::Value::String(s) => vec![s.clone()],
        serde_json::Value::Array(a) => a
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .collect(),
        _ => Vec::new(),
    }
}

async fn embeddings(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let body: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return error(400, &format!("invalid JSON: {e}")),
    };
    shared.requests.lock().unwrap().push(Request {
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body: body.clone(),
    });
    let fault = {
        let mut b = shared.behaviour.lock().unwrap();
        b.once.pop_front().or_else(|| b.always.clone())
    };
    match &fault {
        Some(Fault::Status(code, after, text)) => {
            let mut r = (StatusCode::from_u16(*code).unwrap(), text.clone()).into_response();
            r.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/json"));
            if let Some(a) = after {
                r.headers_mut()
                    .insert("retry-after", HeaderValue::from_str(a).unwrap());
            }
            return r;
        }
        Some(Fault::Delay(d)) => tokio::time::sleep(*d).await,
        Some(Fault::Body(text)) => return (StatusCode::OK, text.clone()).into_response(),
        _ => {}
    }
    let texts = inputs(&body);
    if texts.is_empty() || body["model"].as_str().is_none_or(str::is_empty) {
        return error(400, "model and input are required");
    }
    let dimensions = body["dimensions"].as_u64().map(|d| d as usize);
    let model = shared.model.clone();
    let run = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        model.lock().unwrap().embed(&refs)
    })
    .await
    .unwrap();
    let mut vectors = match run {
        Ok(v) => v,
        Err(e) => return error(500, &e.to_string()),
    };
    for v in &mut vectors {
        if let Some(d) = dimensions.filter(|d| *d < v.len()) {
            v.truncate(d);
            memproxy::embed::normalize(v);
        }
        if let Some(Fault::Dim(d)) = fault {
            v.resize(d, 0.0);
        }
    }
    if let Some(Fault::Fewer) = fault {
        vectors.pop();
    }
    let data: Vec<serde_json::Value> = vectors
        .iter()
        .enumerate()
        .rev()
        .map(|(i, v)| serde_json::json!({"object": "embedding", "index": i, "embedding": v}))
        .collect();
    axum::Json(serde_json::json!({
        "object": "list",
        "data": data,
        "model": body["model"],
        "usage": {"prompt_tokens": 0, "total_tokens": 0},
    }))
    .into_response()
}

fn error(code: u16, message: &str) -> Response {
    (
        StatusCode::from_u16(code).unwrap(),
        axum::Json(
            serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}}),
        ),
    )
        .into_response()
}

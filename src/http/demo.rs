//! The demo page at `/` and the JSON routes of the redis.io agent-memory guide's demo server, on
//! the HTTP listener: `GET /state`, `POST /turn`, `/new_thread`, `/reset`, `/drop_memory`, with the
//! guide's form fields (`text`, `user`, `namespace`, `kind` incl. `skip`, `role`, `threshold`) and
//! reply fields (`recalled`, `deduped`, `memory_id`, `existing_distance`, `kind`, timings; `index`,
//! `thread_id`, `session`, `memories`, `events`), so the guide's own page also works against it.
//! memproxy adds `mode`, `user`/`namespace` switching and `projection` (the scope's memories in
//! two dimensions, with the last query and its threshold).
//!
//! Every route is a sequence of MEM.* verbs run through [`Verbs`] (one upstream connection per
//! request); the projection reads embeddings from the embedder (cached) and does the geometry,
//! nothing else.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::engine::Engine;
use crate::error::{Fault, MemError};
use crate::mem::verbs::{VerbError, Verbs};

/// The guide's eight example memories (`kind<TAB>text`), seeded by `/reset`.
const SEED: &str = include_str!("seed-memories.tsv");
const PAGE: &str = include_str!("page.html");
/// Memories `/state` lists and projects.
const STATE_MEMORIES: usize = 200;

#[derive(Default)]
pub struct Demo {
    /// The current thread of each user and namespace (as the guide's server keeps one).
    threads: Mutex<HashMap<String, String>>,
    /// The last query of each user and namespace, with its threshold, for the picture.
    last: Mutex<HashMap<String, (String, f64)>>,
}

#[derive(Clone)]
struct Ctx {
    engine: Arc<Engine>,
    demo: Arc<Demo>,
}

pub fn routes(engine: Arc<Engine>) -> Router {
    let ctx = Ctx {
        engine,
        demo: Arc::default(),
    };
    Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/state", get(state))
        .route("/turn", post(turn))
        .route("/new_thread", post(new_thread))
        .route("/reset", post(reset))
        .route("/drop_memory", post(drop_memory))
        .with_state(ctx)
}

/// The guide's form fields; every one optional here, validated by the verbs.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Form {
    text: Option<String>,
    user: Option<String>,
    namespace: Option<String>,
    kind: Option<String>,
    role: Option<String>,
    threshold: Option<Value>,
    mode: Option<String>,
    thread_id: Option<String>,
    id: Option<String>,
    memory_id: Option<String>,
    /// `turn` (default) or `goal`: the guide's "Set as goal" sets the session's goal, recalls,
    /// and writes no memory.
    action: Option<String>,
}

impl Form {
    fn user(&self) -> String {
        self.user
            .clone()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "default".into())
    }
    fn namespace(&self) -> String {
        self.namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into())
    }
    fn key(&self) -> String {
        format!("{}\u{0}{}", self.user(), self.namespace())
    }
    fn scope(&self) -> Vec<String> {
        vec!["USER".into(), self.user(), "NS".into(), self.namespace()]
    }
}

/// A JSON body or a form body: the guide's page posts forms, scripts post JSON.
async fn body(req: axum::extract::Request) -> Result<Form, Response> {
    let form_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    let bytes = axum::body::to_bytes(req.into_body(), 1024 * 1024)
        .await
        .map_err(|e| bad(format!("cannot read the body: {e}")))?;
    if bytes.is_empty() {
        return Ok(Form::default());
    }
    if form_type {
        serde_urlencoded::from_bytes(&bytes).map_err(|e| bad(format!("bad form: {e}")))
    } else {
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("bad JSON body: {e}")))
    }
}

fn bad(msg: String) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({ "error": msg }))).into_response()
}

/// A verb's error by fault: 400 for the caller's, 503 for Redis's or the model's, 500 for ours.
fn failed(e: VerbError) -> Response {
    let code = match e.fault {
        Fault::Client => StatusCode::BAD_REQUEST,
        Fault::Upstream | Fault::Embedder => StatusCode::SERVICE_UNAVAILABLE,
        Fault::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (code, Json(json!({ "error": e.line }))).into_response()
}

/// One request's verbs, on one upstream connection.
struct Call<'e> {
    verbs: Verbs<'e>,
    demo: &'e Demo,
}

impl Ctx {
    async fn open(&self) -> Result<Call<'_>, Response> {
        Ok(Call {
            verbs: Verbs::open(&self.engine, None).await.map_err(failed)?,
            demo: &self.demo,
        })
    }
}

impl Call<'_> {
    async fn run(&mut self, args: Vec<String>) -> Result<Value, Response> {
        self.verbs.run(args).await.map_err(failed)
    }

    /// The current thread of the form's scope, made when there is none.
    async fn thread(&mut self, f: &Form) -> Result<String, Response> {
        if let Some(t) = f.thread_id.clone().filter(|t| !t.is_empty()) {
            self.demo.threads.lock().unwrap().insert(f.key(), t.clone());
            return Ok(t);
        }
        if let Some(t) = self.demo.threads.lock().unwrap().get(&f.key()) {
            return Ok(t.clone());
        }
        self.new_thread(f).await
    }

    async fn new_thread(&mut self, f: &Form) -> Result<String, Response> {
        let v = self
            .run(vec![
                "MEM.SESSION".into(),
                "NEW".into(),
                "USER".into(),
                f.user(),
            ])
            .await?;
        let t = v["thread"].as_str().unwrap_or_default().to_string();
        self.demo.threads.lock().unwrap().insert(f.key(), t.clone());
        Ok(t)
    }
}

async fn state(State(c): State<Ctx>, Query(f): Query<Form>) -> Response {
    match state_json(&c, &f).await {
        Ok(v) => Json(v).into_response(),
        Err(r) => r,
    }
}

async fn state_json(ctx: &Ctx, f: &Form) -> Result<Value, Response> {
    let mut c = ctx.open().await?;
    let thread = c.thread(f).await?;
    let index = c.run(vec!["MEM.INFO".into()]).await?;
    let session = c
        .run(vec![
            "MEM.SESSION".into(),
            "GET".into(),
            thread.clone(),
            "USER".into(),
            f.user(),
        ])
        .await?;
    let mut list = vec!["MEM.LIST".into()];
    list.extend(f.scope());
    list.extend(["LIMIT".into(), "0".into(), STATE_MEMORIES.to_string()]);
    let memories = c.run(list).await?;
    let events = c
        .run(vec![
            "MEM.EVENTS".into(),
            thread.clone(),
            "COUNT".into(),
            "50".into(),
            "USER".into(),
            f.user(),
        ])
        .await?;
    let last = c.demo.last.lock().unwrap().get(&f.key()).cloned();
    let projection = projection(&ctx.engine, &memories, last.as_ref()).await;
    let cfg = ctx.engine.config();
    let mut index = index;
    if let Some(o) = index.as_object_mut() {
        // The guide's index panel: its name, the session TTL, the thresholds, what runs it.
        o.entry("index_name")
            .or_insert_with(|| json!(ctx.engine.store.keys.index));
        o.insert("session_ttl_seconds".into(), json!(cfg.session_ttl_seconds));
        o.insert("dedup_threshold".into(), json!(cfg.dedup_threshold));
        o.insert(
            "default_recall_threshold".into(),
            json!(cfg.recall_threshold),
        );
        o.insert(
            "stack_label".into(),
            json!("memproxy: MEM.* verbs over RedisJSON + RediSearch"),
        );
    }
    Ok(json!({
        "index": index,
        "thread_id": thread,
        "session": with_guide_fields(&session),
        "memories": with_guide_fields(&memories),
        "events": with_guide_fields(&events),
        // As the guide: /turn fills the recalled panel; /state leaves it empty.
        "recalled": [],
        "user": f.user(),
        "namespace": f.namespace(),
        "projection": projection,
    }))
}

async fn turn(State(c): State<Ctx>, req: axum::extract::Request) -> Response {
    let f = match body(req).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    match turn_json(&c, &f).await {
        Ok(v) => Json(v).into_response(),
        Err(r) => r,
    }
}

async fn turn_json(ctx: &Ctx, f: &Form) -> Result<Value, Response> {
    let start = Instant::now();
    let text = f.text.clone().unwrap_or_default();
    if text.trim().is_empty() {
        return Err(bad("text is required".into()));
    }
    let goal = match f
        .action
        .as_deref()
        .unwrap_or("")
        .to_ascii_lowercase()
        .as_str()
    {
        "" | "turn" => false,
        "goal" => true,
        other => return Err(bad(format!("action '{other}' is not turn or goal"))),
    };
    let mut c = ctx.open().await?;
    let thread = c.thread(f).await?;
    let role = f
        .role
        .clone()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| "user".into());
    let kind = f
        .kind
        .clone()
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| "episodic".into())
        .to_ascii_lowercase();
    let threshold = match &f.threshold {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(other) => return Err(bad(format!("threshold {other} is not a number"))),
    };
    let mode = f.mode.clone().filter(|m| !m.is_empty());
    let mut recall_opts = Vec::new();
    if let Some(t) = &threshold {
        recall_opts.extend(["THRESHOLD".into(), t.clone()]);
    }
    if let Some(m) = &mode {
        recall_opts.extend(["MODE".into(), m.clone()]);
    }
    // The embedding first (timed as the guide's embed_ms); the verb then finds it cached. A
    // text over the limit is left to the verb, which refuses it before any model run.
    let t0 = Instant::now();
    if text.len() <= ctx.engine.config().max_text_bytes {
        ctx.engine
            .embedder
            .embed(&text)
            .await
            .map_err(|e| failed(MemError::Embedder(e.to_string()).into()))?;
    }
    let embed_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let t1 = Instant::now();
    let (out, write_skipped) = if goal {
        // As the guide: the goal set (the session made when it is gone), recall, no memory.
        let set = vec![
            "MEM.SESSION".into(),
            "GOAL".into(),
            thread.clone(),
            text.clone(),
            "USER".into(),
            f.user(),
        ];
        match c.verbs.run(set).await {
            Ok(_) => {}
            // Only a thread that is gone is started again: another user's is refused as it is.
            Err(e) if e.line.contains(crate::mem::session::NO_SESSION) => {
                c.run(vec![
                    "MEM.SESSION".into(),
                    "START".into(),
                    thread.clone(),
                    "USER".into(),
                    f.user(),
                    "GOAL".into(),
                    text.clone(),
                ])
                .await?;
            }
            Err(e) => return Err(failed(e)),
        }
        let mut recall = vec!["MEM.RECALL".into(), text.clone()];
        recall.extend(f.scope());
        recall.extend(recall_opts);
        let recalled = c.run(recall).await?;
        (json!({ "recalled": recalled }), true)
    } else {
        let mut args = vec!["MEM.TURN".into(), thread.clone(), role, text.clone()];
        args.extend(f.scope());
        args.extend(["REMEMBER".into(), kind.clone()]);
        args.extend(recall_opts);
        (c.run(args).await?, kind == "skip")
    };
    let verb_ms = t1.elapsed().as_secs_f64() * 1000.0;
    // The circle is the cut-off the recall used: THRESHOLD, else its mode's own.
    let cfg = ctx.engine.config();
    let auto = mode
        .as_deref()
        .unwrap_or(cfg.recall_mode.name())
        .eq_ignore_ascii_case("auto");
    let drawn = threshold
        .as_deref()
        .and_then(|t| t.parse().ok())
        .unwrap_or(if auto {
            cfg.recall_auto_threshold
        } else {
            cfg.recall_threshold
        });
    c.demo.last.lock().unwrap().insert(f.key(), (text, drawn));
    let remembered = &out["remembered"];
    Ok(json!({
        "thread_id": thread,
        "turn_count": out["turn_count"],
        "recalled": with_guide_fields(&out["recalled"]),
        "write_skipped": write_skipped,
        "deduped": remembered["deduped"].as_i64() == Some(1),
        "memory_id": remembered["id"],
        "existing_distance": remembered["distance"],
        "kind": if write_skipped { Value::Null } else { json!(kind) },
        "event": out["event"],
        // Recall and the write are one script on the upstream: its time is recall_ms.
        "embed_ms": embed_ms,
        "recall_ms": verb_ms,
        "write_ms": 0.0,
        "timings": { "total_ms": start.elapsed().as_secs_f64() * 1000.0 },
    }))
}

/// The guide's names beside memproxy's on listed items: `ttl_seconds` (null without a TTL) for
/// memories and sessions, `event_id` for events.
fn with_guide_fields(items: &Value) -> Value {
    let one = |m: &Value| {
        let mut m = m.clone();
        if let Some(o) = m.as_object_mut() {
            if let Some(ttl) = o.get("ttl").and_then(Value::as_i64) {
                o.insert(
                    "ttl_seconds".into(),
                    if ttl >= 0 { json!(ttl) } else { Value::Null },
                );
            }
            if let Some(id) = o.get("id").cloned().filter(|_| o.contains_key("action")) {
                o.insert("event_id".into(), id);
            }
        }
        m
    };
    match items {
        Value::Array(a) => Value::Array(a.iter().map(one).collect()),
        Value::Object(_) => one(items),
        other => other.clone(),
    }
}

async fn new_thread(State(c): State<Ctx>, req: axum::extract::Request) -> Response {
    let f = match body(req).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let go = async {
        let mut c = c.open().await?;
        c.new_thread(&f).await
    };
    match go.await {
        Ok(t) => Json(json!({ "thread_id": t })).into_response(),
        Err(r) => r,
    }
}

/// Forget the scope's memories, seed the guide's examples, start a new thread.
async fn reset(State(c): State<Ctx>, req: axum::extract::Request) -> Response {
    let f = match body(req).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let go = async {
        let mut c = c.open().await?;
        let mut forget = vec!["MEM.FORGET".into()];
        forget.extend(f.scope());
        let forgotten = c.run(forget).await?;
        let mut seeded = 0;
        for line in SEED.lines().filter(|l| !l.trim().is_empty()) {
            let (kind, text) = line.split_once('\t').unwrap_or(("semantic", line));
            let mut a = vec!["MEM.REMEMBER".into(), text.into()];
            a.extend(f.scope());
            a.extend(["KIND".into(), kind.into()]);
            c.run(a).await?;
            seeded += 1;
        }
        c.demo.last.lock().unwrap().remove(&f.key());
        let thread = c.new_thread(&f).await?;
        Ok::<_, Response>(
            json!({ "ok": true, "forgotten": forgotten, "seeded": seeded, "thread_id": thread }),
        )
    };
    match go.await {
        Ok(v) => Json(v).into_response(),
        Err(r) => r,
    }
}

async fn drop_memory(State(c): State<Ctx>, req: axum::extract::Request) -> Response {
    let f = match body(req).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let Some(id) =
        f.id.clone()
            .or(f.memory_id.clone())
            .filter(|i| !i.is_empty())
    else {
        return bad("memory_id is required".into());
    };
    let go = async {
        let mut c = c.open().await?;
        c.run(vec!["MEM.FORGET".into(), id.clone()]).await
    };
    // The guide's demo answers these two fields.
    match go.await {
        Ok(n) => Json(json!({ "deleted": n == json!(1), "memory_id": id })).into_response(),
        Err(r) => r,
    }
}

/// The scope's memories in two dimensions. Without a query: their first two principal
/// components. With the last query: each memory at its true cosine distance from the query (the
/// centre), in the direction of its principal components, so the threshold is an exact circle.
async fn projection(engine: &Engine, memories: &Value, last: Option<&(String, f64)>) -> Value {
    let items = memories.as_array().cloned().unwrap_or_default();
    let mut vecs = Vec::new();
    let mut ids = Vec::new();
    for m in &items {
        let text = m["text"].as_str().unwrap_or_default();
        if let Ok(v) = engine.embedder.embed(text).await {
            vecs.push(v);
            ids.push((m["id"].clone(), text.to_string()));
        }
    }
    if vecs.is_empty() {
        return json!({ "points": [], "query": null });
    }
    let dim = vecs[0].len();
    let n = vecs.len() as f32;
    let mean: Vec<f32> = (0..dim)
        .map(|j| vecs.iter().map(|v| v[j]).sum::<f32>() / n)
        .collect();
    let centred: Vec<Vec<f32>> = vecs
        .iter()
        .map(|v| v.iter().zip(&mean).map(|(x, m)| x - m).collect())
        .collect();
    let pc1 = component(&centred, None);
    let pc2 = component(&centred, Some(&pc1));
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let query = match last {
        // Embedded as the recall's question was.
        Some((text, _)) => engine.embedder.embed_query(text).await.ok(),
        None => None,
    };
    let points: Vec<Value> = centred
        .iter()
        .zip(&vecs)
        .zip(&ids)
        .map(|((c, v), (id, text))| {
            let (x, y) = (dot(c, &pc1), dot(c, &pc2));
            match &query {
                Some(q) => {
                    let d = crate::embed::cosine_distance(q, v);
                    let a = y.atan2(x) as f64;
                    json!({ "id": id, "text": text, "x": d * a.cos(), "y": d * a.sin(), "distance": d })
                }
                None => json!({ "id": id, "text": text, "x": x, "y": y, "distance": null }),
            }
        })
        .collect();
    json!({
        "points": points,
        "query": last.map(|(t, th)| json!({ "text": t, "threshold": th })),
        "layout": if query.is_some() { "polar" } else { "pca" },
    })
}

/// The leading principal direction of `rows` (orthogonal to `not` when given), by power
/// iteration on XᵀX.
fn component(rows: &[Vec<f32>], not: Option<&[f32]>) -> Vec<f32> {
    let dim = rows[0].len();
    let mut v: Vec<f32> = (0..dim).map(|i| 1.0 + (i % 7) as f32 * 0.1).collect();
    for _ in 0..60 {
        let mut next = vec![0f32; dim];
        for r in rows {
            let p: f32 = r.iter().zip(&v).map(|(a, b)| a * b).sum();
            next.iter_mut().zip(r).for_each(|(n, x)| *n += p * x);
        }
        if let Some(o) = not {
            let p: f32 = next.iter().zip(o).map(|(a, b)| a * b).sum();
            next.iter_mut().zip(o).for_each(|(n, x)| *n -= p * x);
        }
        crate::embed::normalize(&mut next);
        v = next;
    }
    v
}

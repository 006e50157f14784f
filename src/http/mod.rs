//! The optional HTTP listener (`--http-listen`): `/metrics` (Prometheus), `/healthz` (the process
//! is up), `/readyz` (upstream reachable, model loaded, index usable), the demo page and the
//! guide demo's routes ([`demo`], unless `http_demo = false`) and MCP at `/mcp` ([`mcp`], unless
//! `mcp = false`). Served with axum on the same runtime as the proxy. The demo and MCP run MEM.*
//! verbs through [`crate::mem::verbs`], the entry point Redis clients reach.

pub mod demo;
pub mod mcp;

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::engine::Engine;

pub fn router(engine: Arc<Engine>) -> Router {
    let cfg = engine.config().clone();
    let mut r = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(engine.clone());
    if cfg.http_demo {
        r = r.merge(demo::routes(engine.clone()));
    }
    if cfg.mcp {
        use rmcp::transport::streamable_http_server::{
            session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
        };
        let tools = mcp::MemTools { engine };
        let mut sc = StreamableHttpServerConfig::default();
        // The listener's own address decides who reaches it; any Host it is reached by is fine.
        sc.allowed_hosts = Vec::new();
        let service: StreamableHttpService<mcp::MemTools, LocalSessionManager> =
            StreamableHttpService::new(move || Ok(tools.clone()), Default::default(), sc);
        let tokens = Arc::new(cfg.mcp_tokens.clone());
        let door = axum::middleware::from_fn(move |req, next| bearer(tokens.clone(), req, next));
        r = r.merge(Router::new().nest_service("/mcp", service).layer(door));
    }
    r
}

/// MCP's door: with tokens configured, `Authorization: Bearer <token>` must name one; the
/// token's bound user (`token=user`) travels with the request as [`mcp::Principal`].
async fn bearer(
    tokens: Arc<Vec<String>>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if tokens.is_empty() {
        req.extensions_mut().insert(mcp::Principal(None));
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let found = given.and_then(|g| {
        tokens.iter().find_map(|t| {
            let (tok, user) = match t.split_once('=') {
                Some((tok, user)) => (tok, Some(user.to_string())),
                None => (t.as_str(), None),
            };
            constant_time_eq(tok.as_bytes(), g.as_bytes()).then_some(user)
        })
    });
    match found {
        Some(user) => {
            req.extensions_mut().insert(mcp::Principal(user));
            next.run(req).await
        }
        None => (
            StatusCode::UNAUTHORIZED,
            [("www-authenticate", "Bearer")],
            "missing or unknown bearer token\n",
        )
            .into_response(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn metrics(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    (
        [("content-type", "text/plain; version=0.0.4")],
        engine.metrics.render(&engine.embedder),
    )
}

async fn readyz(State(engine): State<Arc<Engine>>) -> impl IntoResponse {
    // The model is loaded once the engine exists; the upstream must answer now, and the index
    // be usable.
    let check = async {
        engine.store.ping().await?;
        engine.store.ready().await
    };
    match check.await {
        Ok(()) => (
            StatusCode::OK,
            format!("ready (storage {})\n", engine.store.storage().name()),
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", e.line()),
        ),
    }
}

/// Serve until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    engine: Arc<Engine>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    if let Err(e) = axum::serve(listener, router(engine))
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::error!(error = %e, "HTTP listener failed");
    }
}

//! The optional HTTP listener (`--http-listen`): `/metrics` (Prometheus), `/healthz` (the process
//! is up) and `/readyz` (upstream reachable, model loaded, index usable). Served with axum on the
//! same runtime as the proxy.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::engine::Engine;

pub fn router(engine: Arc<Engine>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(engine)
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
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
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

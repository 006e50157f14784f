use anyhow::Context;
use clap::Parser;
use memproxy::config::{Config, Flags};

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let cfg = Config::load(&flags).context("configuration")?;
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if cfg.worker_threads > 0 {
        rt.worker_threads(cfg.worker_threads);
    }
    rt.enable_all()
        .build()
        .context("tokio runtime")?
        .block_on(serve(cfg))
}

async fn serve(cfg: Config) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(&cfg.log).context("log filter")?;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    if cfg.log_format == "json" {
        logs.json().init();
    } else {
        logs.init();
    }
    let upstream = redact(&cfg.upstream);
    memproxy::run(cfg, shutdown_signal(), |bound| {
        let hint = match &bound {
            memproxy::server::Bound::Tcp(a) => format!("redis-cli -h {} -p {}", a.ip(), a.port()),
            memproxy::server::Bound::Unix(p) => format!("redis-cli -s {}", p.display()),
        };
        tracing::info!(addr = %bound, %upstream, "memproxy ready; connect with: {hint}");
    })
    .await
}

/// The upstream URL without its password, for logs.
fn redact(url: &str) -> String {
    match url
        .split_once("://")
        .and_then(|(s, rest)| rest.rsplit_once('@').map(|(cred, host)| (s, cred, host)))
    {
        Some((scheme, cred, host)) => {
            let user = cred.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_string(),
    }
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("signal received");
}

use anyhow::Context;
use clap::Parser;
use memproxy::config::{Config, Flags, Sub};

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let cfg = Config::load(&flags).context("configuration")?;
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if cfg.worker_threads > 0 {
        rt.worker_threads(cfg.worker_threads);
    }
    let rt = rt.enable_all().build().context("tokio runtime")?;
    logging(&cfg, flags.command.is_some())?;
    match flags.command {
        None => rt.block_on(serve(cfg)),
        // Needs neither Redis nor the model.
        Some(Sub::Tools) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&memproxy::http::mcp::catalog())?
            );
            Ok(())
        }
        Some(sub) => rt.block_on(subcommand(cfg, sub)),
    }
}

/// Logs go to stderr (stdout is export's); a subcommand logs warnings only unless --log says.
fn logging(cfg: &Config, quiet: bool) -> anyhow::Result<()> {
    let level = if quiet && cfg.log == "info" {
        "warn"
    } else {
        &cfg.log
    };
    let filter = tracing_subscriber::EnvFilter::try_new(level).context("log filter")?;
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    if cfg.log_format == memproxy::config::LogFormat::Json {
        logs.json().init();
    } else {
        logs.init();
    }
    Ok(())
}

async fn subcommand(cfg: Config, sub: Sub) -> anyhow::Result<()> {
    let engine = memproxy::engine::Engine::start(std::sync::Arc::new(cfg))
        .await
        .context("start")?;
    match sub {
        Sub::Export {
            user,
            ns,
            kind,
            embeddings,
            out,
        } => {
            let kind = match kind {
                None => None,
                Some(k) => Some(
                    memproxy::store::Kind::parse(&k)
                        .with_context(|| format!("unknown kind '{k}' (episodic or semantic)"))?,
                ),
            };
            let sel = memproxy::ops::export::Selection {
                user,
                namespace: ns,
                kind,
                embeddings,
            };
            let n = match out {
                Some(path) => {
                    let file = std::fs::File::create(&path)
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    let mut w = std::io::BufWriter::new(file);
                    memproxy::ops::export::export(&engine, &sel, &mut w).await?
                }
                None => {
                    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
                    memproxy::ops::export::export(&engine, &sel, &mut w).await?
                }
            };
            eprintln!("export: {n} memories");
        }
        Sub::Migrate {
            rollback,
            stop_after,
        } => {
            if rollback {
                memproxy::ops::migrate::rollback(&engine).await?;
                eprintln!("migrate: rolled back to the original index");
                return Ok(());
            }
            if let Some(s) = &stop_after {
                anyhow::ensure!(
                    memproxy::ops::migrate::STEPS[..3].contains(&s.as_str()),
                    "--stop-after takes baseline, built or verified"
                );
            }
            let bar = progress_bar();
            let mut report = |what: &str, done: usize, total: usize| match &bar {
                Some(b) => {
                    b.set_message(what.to_string());
                    b.set_length(total as u64);
                    b.set_position(done as u64);
                }
                None => eprintln!("migrate: {what}: {done}/{total}"),
            };
            let done = memproxy::ops::migrate::migrate(&engine, stop_after.as_deref(), &mut report)
                .await?;
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            for (index, step) in done {
                eprintln!("migrate: {index} at step {step}");
            }
        }
        Sub::Tools => unreachable!("main prints the tools without starting an engine"),
        Sub::Reembed => {
            let bar = progress_bar();
            let mut last = 0;
            let done = memproxy::ops::reembed::reembed(&engine, |examined, total| match &bar {
                Some(b) => {
                    b.set_length(total.max(examined) as u64);
                    b.set_position(examined as u64);
                }
                None if examined >= last + 1000 || examined == total => {
                    last = examined;
                    eprintln!("reembed: {examined} of {total} memories examined");
                }
                None => {}
            })
            .await?;
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            eprintln!(
                "reembed: {} memories examined, {} re-embedded; the index is stamped with this model",
                done.examined, done.rewritten
            );
        }
        Sub::Import {
            file,
            trust_embeddings,
        } => {
            let report = match file {
                Some(path) => {
                    let f = std::fs::File::open(&path)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    let f = std::io::BufReader::new(f);
                    memproxy::ops::export::import(&engine, f, trust_embeddings).await?
                }
                None => {
                    let stdin = std::io::stdin().lock();
                    memproxy::ops::export::import(&engine, stdin, trust_embeddings).await?
                }
            };
            for (line, e) in &report.failed {
                eprintln!("import: line {line}: {e}");
            }
            if trust_embeddings {
                eprintln!(
                    "import: {} embeddings used from the file, {} compared with the model",
                    report.reused, report.checked
                );
                if let Some(line) = report.mismatch {
                    eprintln!(
                        "import: line {line}: the file's embedding differs from this model's; the lines after it were embedded by the model"
                    );
                }
            }
            let (runs, texts) = engine.embedder.batch_stats();
            eprintln!(
                "import: {} written, {} deduplicated onto existing memories, {} failed; the model embedded {texts} texts in {runs} runs",
                report.written,
                report.deduped,
                report.failed.len()
            );
            if !report.failed.is_empty() {
                anyhow::bail!("{} lines were not imported", report.failed.len());
            }
        }
    }
    Ok(())
}

/// A progress bar when stderr is a terminal; `None`: plain progress lines.
fn progress_bar() -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} ({eta} left)")
                .expect("template"),
        );
        b
    })
}

async fn serve(cfg: Config) -> anyhow::Result<()> {
    let upstream = redact(&cfg.upstream);
    memproxy::run(cfg, shutdown_signal(), |bound| {
        let hint = match &bound {
            memproxy::proxy::server::Bound::Tcp(a) => {
                format!("redis-cli -h {} -p {}", a.ip(), a.port())
            }
            memproxy::proxy::server::Bound::Unix(p) => format!("redis-cli -s {}", p.display()),
        };
        tracing::info!(addr = %bound, %upstream, "memproxy ready; connect with: {hint}");
    })
    .await?;
    Ok(())
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

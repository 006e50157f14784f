//! Server-side embedding with the real all-MiniLM-L6-v2 from the deps dir (issue 3).

mod common;

use common::*;
use memproxy::embed::{cosine_distance, onnx, Model};
use memproxy::Config;
use std::time::Duration;

struct Reference {
    text: String,
    embedding: Vec<f32>,
}

fn references() -> Vec<Reference> {
    std::fs::read_to_string(data("minilm-reference.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Reference {
                text: v["text"].as_str().unwrap().to_string(),
                embedding: v["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect(),
            }
        })
        .collect()
}

fn mem_embed(con: &mut redis::Connection, text: &str) -> Vec<f32> {
    let v: Vec<f64> = redis::cmd("MEM.EMBED").arg(text).query(con).unwrap();
    v.into_iter().map(|x| x as f32).collect()
}

fn load(dir: &str) -> onnx::OnnxModel {
    load_with(dir, 1, 2048)
}

fn load_with(dir: &str, optimization: u8, batch_tokens: usize) -> onnx::OnnxModel {
    let cfg = Config::default();
    let opts = onnx::Options {
        library: cfg.ort_library(),
        intra_threads: 2,
        optimization,
        spinning: false,
        batch_tokens,
    };
    onnx::OnnxModel::load(&deps().join("model").join(dir), &opts).unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

#[test]
fn fp32_matches_reference_vectors_through_mem_embed() {
    let mut con = shared().proxy.client();
    for r in references() {
        let got = mem_embed(&mut con, &r.text);
        assert_eq!(got.len(), 384);
        let cos = 1.0 - cosine_distance(&got, &r.embedding);
        assert!(
            cos >= 0.99999,
            "cosine {cos} for {:?}",
            &r.text[..r.text.len().min(60)]
        );
    }
}

#[test]
fn int8_weights_match_reference_vectors() {
    let mut m = load("all-MiniLM-L6-v2-int8");
    assert_eq!(
        m.dim(),
        384,
        "dimension read from the model (token embeddings, pooled here)"
    );
    let refs = references();
    let texts: Vec<&str> = refs.iter().map(|r| r.text.as_str()).collect();
    let got = m.embed(&texts).unwrap();
    for (r, g) in refs.iter().zip(got) {
        let cos = 1.0 - cosine_distance(&g, &r.embedding);
        assert!(
            cos >= 0.998,
            "int8 cosine {cos} for {:?}",
            &r.text[..r.text.len().min(60)]
        );
    }
}

#[test]
fn guide_walkthrough_distances() {
    let mut con = shared().proxy.client();
    let seeds: Vec<(String, Vec<f32>)> = tsv("redis-docs-seed-memories.tsv")
        .into_iter()
        .map(|r| (r[1].clone(), mem_embed(&mut con, &r[1])))
        .collect();
    for probe in tsv("seed-demo-probes.tsv") {
        let q = mem_embed(&mut con, &probe[0]);
        let reference: f64 = probe[2].parse().unwrap();
        if probe[1].starts_with('(') {
            for (text, v) in &seeds {
                assert!(
                    cosine_distance(&q, v) > 0.8,
                    "{:?} too close to {text:?}",
                    probe[0]
                );
            }
        } else {
            let (_, v) = seeds
                .iter()
                .find(|(t, _)| t.starts_with(&probe[1]))
                .unwrap();
            let d = cosine_distance(&q, v);
            assert!(
                (d - reference).abs() <= 0.005,
                "{:?}: distance {d}, reference {reference}",
                probe[0]
            );
        }
    }
}

#[test]
fn batch_equals_one_by_one() {
    let mut m = load("all-MiniLM-L6-v2");
    let refs = references();
    let texts: Vec<&str> = refs.iter().map(|r| r.text.as_str()).collect();
    let batch = m.embed(&texts).unwrap();
    for (t, b) in texts.iter().zip(&batch) {
        let one = &m.embed(&[t]).unwrap()[0];
        let max = max_abs_diff(one, b);
        assert!(max <= 1e-5, "batch differs by {max} for {t:?}");
    }
}

/// The fp32 graph is written so that ONNX Runtime's extended and all levels fuse it (Attention,
/// LayerNormalization, BiasGelu); every level gives the reference vectors within 1e-5 per
/// component, in one batch of mixed lengths cut into runs by a small token budget.
#[test]
fn every_optimisation_level_gives_the_reference_vectors() {
    let refs = references();
    let texts: Vec<&str> = refs.iter().map(|r| r.text.as_str()).collect();
    for level in [0u8, 1, 2, 3] {
        let mut m = load_with("all-MiniLM-L6-v2", level, 64);
        assert_eq!(m.optimization(), level, "the graph runs at level {level}");
        let got = m.embed(&texts).unwrap();
        for (r, g) in refs.iter().zip(&got) {
            let max = max_abs_diff(g, &r.embedding);
            assert!(
                max <= 1e-5,
                "level {level}: differs by {max} for {:?}",
                &r.text[..r.text.len().min(60)]
            );
        }
    }
}

#[test]
fn concurrent_embeds_on_many_connections() {
    let refs = std::sync::Arc::new(references());
    let handles: Vec<_> = (0..16)
        .map(|c| {
            let refs = refs.clone();
            std::thread::spawn(move || {
                let mut con = shared().proxy.client();
                // 4 per connection, pipelined: 64 in flight across 16 connections.
                let mut pipe = redis::pipe();
                let picks: Vec<usize> = (0..4).map(|i| (c * 4 + i) % refs.len()).collect();
                for &i in &picks {
                    pipe.cmd("MEM.EMBED").arg(format!("{} ", refs[i].text));
                }
                let got: Vec<Vec<f64>> = pipe.query(&mut con).unwrap();
                for (&i, v) in picks.iter().zip(got) {
                    let v: Vec<f32> = v.into_iter().map(|x| x as f32).collect();
                    assert!(1.0 - cosine_distance(&v, &refs[i].embedding) >= 0.9999);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn bad_texts_are_clear_errors() {
    let mut con = shared().proxy.client();
    assert_eq!(
        err(&mut con, &["MEM.EMBED", ""]),
        "ERR MEM.EMBED: text is empty"
    );
    assert_eq!(
        err(&mut con, &["MEM.EMBED", " \t\n "]),
        "ERR MEM.EMBED: text is empty"
    );
    assert_eq!(
        err(&mut con, &["MEM.EMBED"]),
        "ERR wrong number of arguments for 'mem.embed' command"
    );
    assert_eq!(
        err(&mut con, &["MEM.EMBED", "a", "b"]),
        "ERR wrong number of arguments for 'mem.embed' command"
    );
    let mut raw = shared().proxy.raw();
    raw.cmd(&[b"MEM.EMBED", b"caf\xe9"]);
    assert_eq!(
        raw.read_str(),
        "-ERR MEM.EMBED: text is not valid UTF-8\r\n"
    );
    // The connection is still usable.
    raw.cmd(&[b"MEM.PING"]);
    assert_eq!(raw.read_str(), "+PONG\r\n");
}

#[test]
fn long_text_is_truncated_not_rejected() {
    let mut con = shared().proxy.client();
    let head = "memory proxies embed text on the server side. ".repeat(40);
    let long = format!(
        "{head}{}",
        "tail words that fall beyond the window ".repeat(2700)
    );
    assert!(long.len() > 100_000);
    let v = mem_embed(&mut con, &long);
    // Only the first 256 tokens count: a different tail gives the same vector.
    let other = mem_embed(
        &mut con,
        &format!("{head}{}", "different ending entirely ".repeat(3000)),
    );
    assert!(cosine_distance(&v, &other) < 1e-5);
    // Over the configured limit (here 256 KiB) it is an error naming the limit.
    let huge = "x ".repeat(200_000);
    assert!(err(&mut con, &["MEM.EMBED", &huge]).contains("over the limit of 262144 bytes"));
}

#[test]
fn full_queue_answers_overloaded() {
    let proxy = Proxy::start(&shared().redis.url(), |c| {
        c.embed_queue = 1;
        c.embed_max_batch = 1;
        c.embed_threads = 1;
    });
    let results: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let proxy = &proxy;
                s.spawn(move || {
                    let mut con = proxy.client();
                    let mut pipe = redis::pipe();
                    for i in 0..8 {
                        pipe.cmd("MEM.EMBED").arg(format!(
                            "distinct text number {t} {i} {}",
                            "pad ".repeat(100)
                        ));
                    }
                    let vals: Vec<redis::Value> = pipe.ignore_errors().query(&mut con).unwrap();
                    vals.into_iter()
                        .map(|v| match v {
                            redis::Value::ServerError(e) => {
                                format!("{} {}", e.code(), e.details().unwrap_or(""))
                            }
                            _ => "ok".to_string(),
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(results.iter().any(|r| r == "ok"), "some succeed");
    let overloaded: Vec<&String> = results.iter().filter(|r| *r != "ok").collect();
    assert!(
        !overloaded.is_empty(),
        "a queue of 1 must overflow under 64 concurrent requests"
    );
    for r in overloaded {
        assert!(r.starts_with("ERR embedder overloaded"), "{r}");
    }
}

#[test]
fn hub_id_fails_fast_offline() {
    // A hub that refuses connections, so the test checks the same thing on every machine.
    std::env::set_var("HF_ENDPOINT", "http://127.0.0.1:9");
    let cfg = Config {
        model: Some("sentence-transformers/all-MiniLM-L6-v2".into()),
        deps_dir: Some(std::env::temp_dir().join(unique("hub"))),
        ..Config::default()
    };
    let start = std::time::Instant::now();
    let e = match memproxy::embed::Embedder::start(&cfg) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a model came from a hub that refuses connections"),
    };
    assert!(e.contains("pass --model DIR"), "{e}");
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
}

#[test]
fn cache_hits_skip_the_model() {
    // A proxy of its own: its counters count this test alone.
    let proxy = Proxy::start(&shared().redis.url(), |_| {});
    let mut con = proxy.client();
    let text = unique("cache me");
    let info = |con: &mut redis::Connection, f: &str| as_i64(get(&q(con, &["MEM.INFO"]), f));
    // The proxy's own start-up runs (the recall prototypes) come before any client's.
    let before = info(&mut con, "embed_texts");
    let a = mem_embed(&mut con, &text);
    let (hits, texts) = (
        info(&mut con, "embed_cache_hits"),
        info(&mut con, "embed_texts"),
    );
    assert_eq!(texts, before + 1);
    let b = mem_embed(&mut con, &text);
    assert_eq!(a, b);
    assert_eq!(info(&mut con, "embed_cache_hits"), hits + 1);
    assert_eq!(
        info(&mut con, "embed_texts"),
        texts,
        "the model did not run again"
    );
}

#[test]
fn model_directory_from_config() {
    let dir = deps().join("model/all-MiniLM-L6-v2-int8");
    let proxy = Proxy::start(&shared().redis.url(), |c| {
        c.model = Some(dir.display().to_string());
        c.mem_index_name = "int8:idx".into();
        c.mem_key_prefix = "int8:mem:".into();
    });
    let mut con = proxy.client();
    let info = q(&mut con, &["MEM.INFO"]);
    assert_eq!(as_str(get(&info, "model")), "all-MiniLM-L6-v2-int8");
    assert_eq!(as_i64(get(&info, "dim")), 384);
    let r = &references()[0];
    let v = mem_embed(&mut con, &r.text);
    assert!(1.0 - cosine_distance(&v, &r.embedding) >= 0.998);
}

/// A model that panics on one text and hangs on another, to show the worker survives both.
struct Faulty;

impl memproxy::embed::Model for Faulty {
    fn dim(&self) -> usize {
        3
    }
    fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, memproxy::embed::EmbedError> {
        if texts.iter().any(|t| t.contains("boom")) {
            panic!("model exploded");
        }
        if texts.iter().any(|t| t.contains("hang")) {
            std::thread::sleep(Duration::from_millis(3000));
        }
        Ok(texts.iter().map(|_| vec![1.0, 0.0, 0.0]).collect())
    }
}

#[test]
fn a_panicking_or_stuck_model_run_fails_only_its_requests() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let cfg = memproxy::Config {
            embed_timeout_ms: 1000,
            ..memproxy::Config::default()
        };
        let info = memproxy::embed::ModelInfo {
            name: "faulty".into(),
            path: String::new(),
            dim: 3,
        };
        let factory: memproxy::embed::worker::Factory =
            std::sync::Arc::new(|| Ok(Box::new(Faulty) as Box<dyn memproxy::embed::Model>));
        let e = memproxy::embed::Embedder::with_models(
            vec![Box::new(Faulty)],
            info,
            Some(factory),
            &cfg,
        );
        let err = e.embed("boom").await.unwrap_err().to_string();
        assert!(err.contains("panicked"), "{err}");
        assert_eq!(
            e.embed("fine").await.unwrap().len(),
            3,
            "the worker lives on"
        );
        let err = e.embed("hang").await.unwrap_err().to_string();
        assert!(err.contains("timed out"), "{err}");
        assert_eq!(e.workers_replaced(), 1);
        // The replacement serves while the stuck run (3 s) is still going.
        let start = std::time::Instant::now();
        assert_eq!(e.embed("after").await.unwrap().len(), 3);
        assert!(
            start.elapsed() < Duration::from_millis(1900),
            "served by the replacement, not after the stuck run: {:?}",
            start.elapsed()
        );
    });
}

/// A model that takes 5 ms a text and records the order in which texts were run.
struct Slow(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl memproxy::embed::Model for Slow {
    fn dim(&self) -> usize {
        3
    }
    fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, memproxy::embed::EmbedError> {
        std::thread::sleep(Duration::from_millis(5 * texts.len() as u64));
        let mut seen = self.0.lock().unwrap();
        seen.extend(texts.iter().map(|t| t.to_string()));
        Ok(texts.iter().map(|_| vec![1.0, 0.0, 0.0]).collect())
    }
}

/// The windows of a long text (hundreds for 100 KB) wait behind callers' texts: a question asked
/// while 200 windows are queued is embedded after at most one short run of windows, never in a
/// run with them, and windows are not cached.
#[test]
fn a_long_texts_windows_never_hold_up_a_callers_text() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let cfg = memproxy::Config::default();
        let info = memproxy::embed::ModelInfo {
            name: "slow".into(),
            path: String::new(),
            dim: 3,
        };
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let e = memproxy::embed::Embedder::with_models(
            vec![Box::new(Slow(seen.clone()))],
            info,
            None,
            &cfg,
        );
        let windows: Vec<String> = (0..200).map(|i| format!("window {i}")).collect();
        let bg = {
            let e = e.clone();
            let windows = windows.clone();
            tokio::spawn(async move {
                futures::future::join_all(windows.iter().map(|w| e.embed_window(w))).await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let start = std::time::Instant::now();
        e.embed("the caller's question").await.unwrap();
        let waited = start.elapsed();
        let order = seen.lock().unwrap().clone();
        let at = order
            .iter()
            .position(|t| t == "the caller's question")
            .unwrap();
        assert!(at < 40, "the question ran after {at} windows ({waited:?})");
        assert!(bg.await.unwrap().iter().all(|r| r.is_ok()));
        assert_eq!(seen.lock().unwrap().len(), 201);
        assert!(!e.cache().contains("window 7"), "windows are not cached");
        assert!(e.cache().contains("the caller's question"));
    });
}

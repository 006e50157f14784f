//! Any sentence-transformers export, read as its authors meant (issue 39, point 1): pooling,
//! normalisation, maximum length and query/document prompts come from the model directory's own
//! files, or from the settings that override them.
//!
//! The models are the project's own: `scripts/build_test_model.py` (numpy + onnx, in the deps
//! venv) writes a tiny random BERT that outputs token embeddings, in two directories (CLS-pooled,
//! normalised, e5-style prompts; mean-pooled, not normalised, no prompts), and the embeddings
//! numpy computes for each case in float64 from the same weights. Every vector memproxy returns
//! must be within 1e-5 of numpy's, element by element.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use memproxy::embed::layout::{Layout, Overrides, Pooling};
use memproxy::embed::{cosine_distance, onnx, Model};
use memproxy::Config;
use serde_json::Value;

const TOLERANCE: f32 = 1e-5;

/// The built models' directory and `reference.json`, once per test binary; `None` (and a
/// SKIPPED line) without the deps venv, which fails the test instead under CI=true.
fn built() -> Option<&'static (PathBuf, Value)> {
    static BUILT: OnceLock<Option<(PathBuf, Value)>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let python = deps().join("venv/bin/python");
            if !python.exists() {
                let why = format!(
                    "no {} with numpy and onnx (scripts/setup.sh makes it)",
                    python.display()
                );
                assert!(
                    std::env::var("CI").as_deref() != Ok("true"),
                    "model_layouts: {why}"
                );
                skipped("model_layouts", &why);
                return None;
            }
            // Under target/tmp, one directory a test process; those of finished ones are removed.
            let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
            for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("tiny-models-") {
                    if !Path::new("/proc").join(pid).exists() {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
            let out = root.join(format!("tiny-models-{}", std::process::id()));
            let run = std::process::Command::new(&python)
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/scripts/build_test_model.py"
                ))
                .arg(deps().join("model/all-MiniLM-L6-v2/tokenizer.json"))
                .arg(&out)
                .output()
                .unwrap();
            assert!(
                run.status.success(),
                "build_test_model.py: {}",
                String::from_utf8_lossy(&run.stderr)
            );
            let reference =
                serde_json::from_str(&std::fs::read_to_string(out.join("reference.json")).unwrap())
                    .unwrap();
            Some((out, reference))
        })
        .as_ref()
}

struct Case {
    name: String,
    model: PathBuf,
    settings: Value,
    query: bool,
    texts: Vec<String>,
    embeddings: Vec<Vec<f32>>,
}

fn cases(dir: &Path, reference: &Value) -> Vec<Case> {
    reference["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().unwrap().to_string(),
            model: dir.join(c["model"].as_str().unwrap()),
            settings: c["settings"].clone(),
            query: c["role"] == "query",
            texts: c["texts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_string())
                .collect(),
            embeddings: c["embeddings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| {
                    v.as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_f64().unwrap() as f32)
                        .collect()
                })
                .collect(),
        })
        .collect()
}

fn case<'a>(all: &'a [Case], name: &str) -> &'a Case {
    all.iter().find(|c| c.name == name).unwrap()
}

/// A proxy's settings for `model` with a case's overrides, on an index of its own.
fn configure(c: &mut Config, model: &Path, settings: &Value, index: &str) {
    c.model = Some(model.display().to_string());
    c.mem_index_name = format!("{index}:idx");
    c.mem_key_prefix = format!("{index}:mem:");
    c.pooling = settings["pooling"].as_str().map(str::to_string);
    c.normalize = settings["normalize"].as_bool();
    c.max_seq_length = settings["max_seq_length"].as_u64().map(|n| n as usize);
    c.query_prompt = settings["query_prompt"].as_str().map(str::to_string);
    c.document_prompt = settings["document_prompt"].as_str().map(str::to_string);
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dimension");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

fn assert_near(got: &[f32], want: &[f32], what: &str) {
    let d = max_abs_diff(got, want);
    assert!(d <= TOLERANCE, "{what}: max abs diff {d} from numpy");
}

fn mem_embed(con: &mut redis::Connection, text: &str, query: bool) -> Vec<f32> {
    let mut cmd = redis::cmd("MEM.EMBED");
    cmd.arg(text);
    if query {
        cmd.arg("QUERY");
    }
    let v: Vec<f64> = cmd.query(con).unwrap();
    v.into_iter().map(|x| x as f32).collect()
}

/// Every case through MEM.EMBED (one proxy per model and settings, the texts pipelined so that
/// they share padded batches), and through the model directly in one padded batch.
#[test]
fn every_case_matches_the_numpy_reference() {
    let Some((dir, reference)) = built() else {
        return;
    };
    let all = cases(dir, reference);
    let redis = Redis::start(&[]);
    let mut proxies: Vec<(PathBuf, Value, Proxy)> = Vec::new();
    for c in &all {
        let at = match proxies
            .iter()
            .position(|(m, s, _)| *m == c.model && *s == c.settings)
        {
            Some(i) => i,
            None => {
                let index = unique("layouts");
                let p = Proxy::start(&redis.url(), |cfg| {
                    configure(cfg, &c.model, &c.settings, &index)
                });
                proxies.push((c.model.clone(), c.settings.clone(), p));
                proxies.len() - 1
            }
        };
        let mut con = proxies[at].2.client();
        assert_eq!(as_i64(get(&q(&mut con, &["MEM.INFO"]), "dim")), 32);
        let mut pipe = redis::pipe();
        for t in &c.texts {
            pipe.cmd("MEM.EMBED").arg(t);
            if c.query {
                pipe.arg("QUERY");
            }
        }
        let got: Vec<Vec<f64>> = pipe.query(&mut con).unwrap();
        for ((t, g), want) in c.texts.iter().zip(got).zip(&c.embeddings) {
            let g: Vec<f32> = g.into_iter().map(|x| x as f32).collect();
            assert_near(&g, want, &format!("{} {t:?}", c.name));
        }
        // Asked again one by one: the same vectors, from the cache of the right role.
        let one = mem_embed(&mut con, &c.texts[0], c.query);
        assert_near(&one, &c.embeddings[0], &format!("{} (cached)", c.name));

        // The model alone, all texts in one padded batch (prompts prepended as the embedder does).
        let cfg = Config::default();
        let opts = onnx::Options {
            library: cfg.ort_library(),
            intra_threads: 1,
            optimization: 3,
            spinning: false,
            batch_tokens: 1 << 20,
        };
        let mut overrides = Config::default();
        configure(&mut overrides, &c.model, &c.settings, "unused");
        let layout = Layout::load(&c.model, &Overrides::from_config(&overrides).unwrap()).unwrap();
        let prompt = if c.query {
            &layout.query_prompt
        } else {
            &layout.document_prompt
        };
        let prompted: Vec<String> = c.texts.iter().map(|t| format!("{prompt}{t}")).collect();
        let mut model = onnx::OnnxModel::load_with_layout(&c.model, &opts, &layout).unwrap();
        assert_eq!(model.dim(), 32);
        let batch = model
            .embed(&prompted.iter().map(String::as_str).collect::<Vec<_>>())
            .unwrap();
        for ((t, g), want) in c.texts.iter().zip(batch).zip(&c.embeddings) {
            assert_near(&g, want, &format!("{} {t:?} (one batch)", c.name));
        }
    }
    // What the directories themselves say, as read.
    let cls = Layout::load(&dir.join("tiny-cls"), &Overrides::default()).unwrap();
    assert_eq!(cls.pooling, vec![Pooling::Cls]);
    assert!(cls.normalize);
    assert_eq!(cls.max_seq_length, 24);
    assert_eq!(
        (cls.query_prompt.as_str(), cls.document_prompt.as_str()),
        ("query: ", "passage: ")
    );
    let mean = Layout::load(&dir.join("tiny-mean"), &Overrides::default()).unwrap();
    assert_eq!(mean.pooling, vec![Pooling::Mean]);
    assert!(!mean.normalize);
    // Normalised or not, as each case says.
    for c in &all {
        let norm = c.embeddings[0].iter().map(|x| x * x).sum::<f32>().sqrt();
        let normalized = c.settings["normalize"]
            .as_bool()
            .unwrap_or(c.model.ends_with("tiny-cls"));
        assert_eq!(
            (norm - 1.0).abs() < 1e-4,
            normalized,
            "{}: norm {norm}",
            c.name
        );
    }
}

/// MEM.REMEMBER stores the document embedding (prompt "passage: "), windows included, in an
/// index of the model's dimension; MEM.EMBED QUERY is the question's embedding (prompt
/// "query: "), and a plain MEM.EMBED is not.
#[test]
fn remember_stores_documents_and_embed_query_is_the_question() {
    let Some((dir, reference)) = built() else {
        return;
    };
    let all = cases(dir, reference);
    let (doc, query) = (case(&all, "cls-document"), case(&all, "cls-query"));
    let redis = Redis::start(&[]);
    let mut d = direct(&redis);
    let index = unique("cls");
    let proxy = Proxy::start(&redis.url(), |c| {
        configure(c, &doc.model, &Value::Null, &index);
        // Random weights put unrelated texts close together: nothing may be deduplicated.
        c.dedup_threshold = 0.0;
    });
    let mut con = proxy.client();
    let user = unique("u");
    for (i, t) in doc.texts.iter().enumerate() {
        let id = as_str(get(&q(&mut con, &["MEM.REMEMBER", t, "USER", &user]), "id"));
        let stored: String = redis::cmd("JSON.GET")
            .arg(format!("{index}:mem:{id}"))
            .arg("$.embedding")
            .query(&mut d)
            .unwrap();
        let stored: Vec<Vec<f32>> = serde_json::from_str(&stored).unwrap();
        assert_near(&stored[0], &doc.embeddings[i], &format!("stored {t:?}"));
        let asked = mem_embed(&mut con, t, true);
        assert_near(&asked, &query.embeddings[i], &format!("QUERY {t:?}"));
        assert!(
            max_abs_diff(&asked, &stored[0]) > 1e-3,
            "the prompts differ"
        );
        assert_near(
            &mem_embed(&mut con, t, false),
            &doc.embeddings[i],
            &format!("MEM.EMBED {t:?}"),
        );
    }
    // A long text's windows are embedded (as documents) at the model's dimension too.
    let long = "The garden needs water every evening in summer. ".repeat(16);
    let id = as_str(get(
        &q(&mut con, &["MEM.REMEMBER", &long, "USER", &user]),
        "id",
    ));
    let windows: String = redis::cmd("JSON.GET")
        .arg(format!("{index}:mem:{id}"))
        .arg("$.windows")
        .query(&mut d)
        .unwrap();
    let windows: Vec<Vec<Vec<f32>>> = serde_json::from_str(&windows).unwrap();
    assert!(!windows[0].is_empty() && windows[0].iter().all(|w| w.len() == 32));
    let first = mem_embed(&mut con, memproxy::embed::windows::split(&long)[0], false);
    assert!(
        cosine_distance(&first, &windows[0][0]) < 1e-5,
        "the first window is a document"
    );
    assert!(
        err(&mut con, &["MEM.EMBED", "tea", "QUERY", "QUERY"]).contains("wrong number"),
        "QUERY once"
    );
}

/// MEM.RECALL's question is embedded with the query prompt: each hit's distance is the one
/// between the question's query embedding and the memory's document embedding.
#[test]
fn recall_asks_with_the_query_prompt() {
    let Some((dir, reference)) = built() else {
        return;
    };
    let all = cases(dir, reference);
    let (doc, query) = (case(&all, "cls-document"), case(&all, "cls-query"));
    let redis = Redis::start(&[]);
    let index = unique("recall");
    let proxy = Proxy::start(&redis.url(), |c| {
        configure(c, &doc.model, &Value::Null, &index);
        c.dedup_threshold = 0.0;
    });
    let mut con = proxy.client();
    let user = unique("u");
    let question = 2;
    for (_, t) in doc.texts.iter().enumerate().filter(|(i, _)| *i != question) {
        q(&mut con, &["MEM.REMEMBER", t, "USER", &user]);
    }
    let hits = q(
        &mut con,
        &[
            "MEM.RECALL",
            &doc.texts[question],
            "USER",
            &user,
            "MODE",
            "vector",
            "THRESHOLD",
            "2",
            "K",
            "10",
        ],
    );
    let hits = items(&hits);
    assert_eq!(hits.len(), doc.texts.len() - 1);
    let mut prompted_differs = false;
    for h in hits {
        let text = as_str(get(h, "text"));
        let i = doc.texts.iter().position(|t| *t == text).unwrap();
        let distance = as_f64(get(h, "distance"));
        let want = cosine_distance(&query.embeddings[question], &doc.embeddings[i]);
        assert!(
            (distance - want).abs() < 1e-4,
            "{text:?}: distance {distance}, query-to-document {want}"
        );
        let unprompted = cosine_distance(&doc.embeddings[question], &doc.embeddings[i]);
        prompted_differs |= (unprompted - want).abs() > 1e-3;
    }
    assert!(prompted_differs, "the query prompt moves the distances");
    // MEM.TURN: its recall asks with the query prompt, what it remembers is stored as a document.
    let turn = q(
        &mut con,
        &[
            "MEM.TURN",
            "t1",
            "user",
            &doc.texts[question],
            "USER",
            &user,
            "MODE",
            "vector",
            "THRESHOLD",
            "2",
            "K",
            "10",
            "REMEMBER",
            "semantic",
        ],
    );
    for h in items(get(&turn, "recalled")) {
        let i = doc
            .texts
            .iter()
            .position(|t| *t == as_str(get(h, "text")))
            .unwrap();
        let want = cosine_distance(&query.embeddings[question], &doc.embeddings[i]);
        assert!(
            (as_f64(get(h, "distance")) - want).abs() < 1e-4,
            "turn recall"
        );
    }
    let id = as_str(get(get(&turn, "remembered"), "id"));
    let stored: String = redis::cmd("JSON.GET")
        .arg(format!("{index}:mem:{id}"))
        .arg("$.embedding")
        .query(&mut direct(&redis))
        .unwrap();
    let stored: Vec<Vec<f32>> = serde_json::from_str(&stored).unwrap();
    assert!(
        cosine_distance(&stored[0], &doc.embeddings[question]) < 1e-5,
        "the turn's memory is a document"
    );
}

/// Settings that cannot hold are refused at start, naming the setting.
#[test]
fn impossible_settings_are_refused() {
    let Some((dir, _)) = built() else {
        return;
    };
    let mut cfg = Config::default();
    configure(
        &mut cfg,
        &dir.join("tiny-mean"),
        &serde_json::json!({"max_seq_length": 65}),
        "refused",
    );
    let e = memproxy::embed::Embedder::start(&cfg)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("max_position_embeddings 64"), "{e}");
    cfg.max_seq_length = None;
    cfg.pooling = Some("avg".into());
    let e = cfg.validate().unwrap_err().to_string();
    assert!(e.contains("pooling") && e.contains("avg"), "{e}");
}

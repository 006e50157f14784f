//! Recall quality on memproxy's own evaluation set (`bench/data/recall-eval.tsv`): 62 facts of
//! four users (with their age and hit count), 121 indirect questions, 31 unrelated questions (11
//! of them small talk), and the held-out questions of `recall-holdout.tsv`. For each mode and
//! setting it prints recall@1 and recall@3 (the expected fact first / among the first three),
//! how many unrelated questions recall anything, cross-user leaks (must be 0) and MEM.RECALL p50
//! beside MEM.EMBED p50 of the same questions.
//!
//! It also prints the cosine distances of the guide's walkthrough pairs (tests/data) beside the
//! published fp32 figures, so another model can be held against them.
//!
//! usage: cargo build --release && cargo bench --bench recall
//!        RECALL_MODEL=<model dir or id> for another model (every proxy gets `--model`), e.g.
//!        RECALL_MODEL=~/.cache/memproxy/model/all-MiniLM-L6-v2-int8

#[path = "common.rs"]
mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

struct Ask {
    /// 0: recall-eval.tsv (the set the defaults were chosen on), 1: recall-holdout.tsv.
    set: usize,
    user: String,
    fact: Option<String>,
    question: String,
}

fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    match v {
        Value::Array(a) => a
            .chunks(2)
            .find(|p| matches!(&p[0], Value::BulkString(b) if b == name.as_bytes()))
            .map(|p| &p[1]),
        Value::Map(m) => m
            .iter()
            .find(|(k, _)| matches!(k, Value::BulkString(b) if b == name.as_bytes()))
            .map(|(_, v)| v),
        _ => None,
    }
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        _ => String::new(),
    }
}

/// `--model` for RECALL_MODEL, with `rest` after it.
fn proxy_args<'a>(model: &'a Option<String>, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = model.iter().flat_map(|m| ["--model", m.as_str()]).collect();
    v.extend_from_slice(rest);
    v
}

fn main() {
    let data = std::fs::read_to_string(root().join("bench/data/recall-eval.tsv")).unwrap();
    let model = std::env::var("RECALL_MODEL").ok();
    let (_redis, rport) = start_redis(&[]);
    // BENCH_CONFIG: settings to try instead of the defaults (the main proxy's only).
    let bench_config = std::env::var("BENCH_CONFIG").ok();
    let main_args: Vec<&str> = bench_config
        .iter()
        .flat_map(|c| ["--config", c.as_str()])
        .collect();
    let (_proxy, mport) = start_memproxy(rport, &proxy_args(&model, &main_args));
    let mut con = connect(mport);
    println!(
        "# recall with {}",
        model
            .as_deref()
            .unwrap_or("the default model (all-MiniLM-L6-v2 fp32)")
    );
    guide_distances(&mut con);
    // fact id → memory id, and memory id → (user, fact id)
    let mut ids: HashMap<String, String> = HashMap::new();
    let mut asks = Vec::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let holdout = std::fs::read_to_string(root().join("bench/data/recall-holdout.tsv")).unwrap();
    let lines = data
        .lines()
        .map(|l| (0, l))
        .chain(holdout.lines().map(|l| (1, l)));
    for (set, line) in lines.filter(|(_, l)| !l.starts_with('#') && !l.is_empty()) {
        let cols: Vec<&str> = line.split('\t').collect();
        match cols[0] {
            "fact" => {
                let (user, fid, age, hits, text_) = (cols[1], cols[2], cols[3], cols[4], cols[5]);
                let age: f64 = age.parse().unwrap();
                let v: Value = redis::cmd("MEM.REMEMBER")
                    .arg(text_)
                    .arg("USER")
                    .arg(user)
                    .arg("KIND")
                    .arg("semantic")
                    .arg("NODEDUP")
                    .arg("CREATED")
                    .arg(now - age * 86400.0)
                    .arg("HITS")
                    .arg(hits)
                    .query(&mut con)
                    .unwrap();
                ids.insert(text(field(&v, "id")), fid.to_string());
            }
            "ask" | "none" => asks.push(Ask {
                set,
                user: cols[1].to_string(),
                fact: (cols[0] == "ask").then(|| cols[2].to_string()),
                question: cols[3].to_string(),
            }),
            _ => {}
        }
    }
    // Embed p50 of the same questions (fresh proxy cache is warmed by this, so recall below
    // measures search and ranking on top of a cached embedding — the embed column is the model).
    let mut embed_lat: Vec<Duration> = Vec::new();
    for a in &asks {
        let t = Instant::now();
        let _: Value = redis::cmd("MEM.EMBED")
            .arg(&a.question)
            .query(&mut con)
            .unwrap();
        embed_lat.push(t.elapsed());
    }
    embed_lat.sort();
    let configs: Vec<(&str, Vec<&str>)> = vec![
        ("**default: auto** (no options)", vec![]),
        (
            "auto, recency off (`recall_recency_weight = 0`)",
            vec!["NORECENCY"],
        ),
        (
            "vector, no cut-off (the raw embedding's ranking alone)",
            vec!["MODE", "vector", "THRESHOLD", "2"],
        ),
        (
            "vector, threshold 0.55 (the guide's)",
            vec!["MODE", "vector", "THRESHOLD", "0.55"],
        ),
        (
            "vector, threshold 0.65",
            vec!["MODE", "vector", "THRESHOLD", "0.65"],
        ),
        (
            "vector, threshold 0.75",
            vec!["MODE", "vector", "THRESHOLD", "0.75"],
        ),
        ("keyword (BM25, stopwords dropped)", vec!["MODE", "keyword"]),
        (
            "hybrid, threshold 0.55",
            vec!["MODE", "hybrid", "THRESHOLD", "0.55"],
        ),
        (
            "hybrid, threshold 0.75",
            vec!["MODE", "hybrid", "THRESHOLD", "0.75"],
        ),
    ];
    let count = |set: usize, fact: bool| {
        asks.iter()
            .filter(|a| a.set == set && a.fact.is_some() == fact)
            .count()
    };
    let (questions, unrelated) = (
        [count(0, true), count(1, true)],
        [count(0, false), count(1, false)],
    );
    println!(
        "\n## Recall on bench/data/recall-eval.tsv ({} facts, {} questions, {} unrelated) and the held-out recall-holdout.tsv ({} questions, {} unrelated)\n",
        ids.len(), questions[0], unrelated[0], questions[1], unrelated[1]
    );
    println!(
        "MEM.EMBED p50 of the same questions (fresh): {:.3} ms\n",
        pct(&embed_lat, 0.5)
    );
    // MEM.RECALL with the default settings on a fresh proxy (every question embedded by the
    // model): the figure to hold against MEM.EMBED's p50.
    {
        let (_fresh, fport) = start_memproxy(rport, &proxy_args(&model, &[]));
        let mut fresh = connect(fport);
        let mut lat = Vec::new();
        for a in &asks {
            let t = Instant::now();
            let _: Vec<Value> = redis::cmd("MEM.RECALL")
                .arg(&a.question)
                .arg("USER")
                .arg(&a.user)
                .query(&mut fresh)
                .unwrap();
            lat.push(t.elapsed());
        }
        lat.sort();
        println!(
            "MEM.RECALL p50 with the defaults, embedding not cached: {:.3} ms ({:.2}× MEM.EMBED)\n",
            pct(&lat, 0.5),
            pct(&lat, 0.5) / pct(&embed_lat, 0.5)
        );
    }
    println!("| mode and setting | recall@1 | recall@3 | unrelated with a hit | held out: recall@1 | recall@3 | unrelated with a hit | leaks | recall p50 ms (embedding cached) |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    // Proxies of their own on the same Redis: the recency gain off; the hit-count gain on.
    let (_plain, mut plain) = proxy_with(rport, &model, "recall_recency_weight = 0.0\n", &asks);
    let mut hit_gains: Vec<(f64, (Proc, redis::Connection))> = HIT_WEIGHTS
        .iter()
        .map(|w| {
            (
                *w,
                proxy_with(rport, &model, &format!("recall_hit_weight = {w}\n"), &asks),
            )
        })
        .collect();
    for (name, opts) in configs {
        let con = if opts == ["NORECENCY"] {
            &mut plain
        } else {
            &mut con
        };
        let opts: Vec<&str> = opts.into_iter().filter(|o| *o != "NORECENCY").collect();
        evaluate(con, &asks, &ids, &opts).print(name, questions, unrelated);
    }
    let hit_gain_rows = |gains: &mut [(f64, (Proc, redis::Connection))]| {
        for (w, (_, c)) in gains {
            evaluate(c, &asks, &ids, &[]).print(
                &format!("auto, hit-count gain on (`recall_hit_weight = {w}`)"),
                questions,
                unrelated,
            );
        }
    };
    hit_gain_rows(&mut hit_gains);

    // Busy scopes: each user also holds 448 memories of work chatter about other people ("My
    // manager approved the postmortem…", "The customer asked about restaurant suggestions that
    // avoid peanuts…": the facts' topics, never "The user"), so the candidates of `MODE auto`
    // are a small part of the scope. Printed for `recall_candidates` 8 (the default) beside 6, 10
    // and 20, on proxies of their own.
    let users: std::collections::BTreeSet<&str> = asks.iter().map(|a| a.user.as_str()).collect();
    for user in &users {
        let mut pipe = redis::pipe();
        for i in (0..512).filter(|i| i % 8 != 0) {
            pipe.cmd("MEM.REMEMBER")
                .arg(sentence(i))
                .arg("USER")
                .arg(*user)
                .arg("KIND")
                .arg("semantic")
                .arg("NODEDUP")
                .ignore();
        }
        let _: () = pipe.query(&mut con).unwrap();
    }
    println!("\nBusy scopes (each user + 448 memories of work chatter about other people), default `auto`:\n");
    println!("| recall_candidates | recall@1 | recall@3 | unrelated with a hit | held out: recall@1 | recall@3 | unrelated with a hit | leaks | recall p50 ms (embedding cached) |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    evaluate(&mut con, &asks, &ids, &["MODE", "vector", "THRESHOLD", "2"]).print(
        "vector, no cut-off (main proxy)",
        questions,
        unrelated,
    );
    evaluate(&mut con, &asks, &ids, &[]).print("auto (main proxy)", questions, unrelated);
    // The chatter is new and the facts are weeks old: what the recency gain costs here.
    evaluate(&mut plain, &asks, &ids, &[]).print(
        "auto, recency off (`recall_recency_weight = 0`)",
        questions,
        unrelated,
    );
    hit_gain_rows(&mut hit_gains);
    for candidates in [6usize, 8, 10, 20] {
        let (_p, mut c) = proxy_with(
            rport,
            &model,
            &format!("recall_candidates = {candidates}\n"),
            &asks,
        );
        let name = if candidates == 8 {
            "8 (default)".to_string()
        } else {
            candidates.to_string()
        };
        evaluate(&mut c, &asks, &ids, &[]).print(&name, questions, unrelated);
    }
}

/// Hit-count gains the table shows beside the default (off): `recall_hit_weight` ×
/// log2(1 + hit_count) is added to a candidate's score (the facts' `hits` column).
const HIT_WEIGHTS: [f64; 2] = [0.01, 0.03];

/// A proxy of its own on the same Redis with `config` (TOML lines) over the defaults, its
/// embedding cache warmed with every question so that its latency column is the search's.
fn proxy_with(
    rport: u16,
    model: &Option<String>,
    config: &str,
    asks: &[Ask],
) -> (Proc, redis::Connection) {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let conf =
        std::env::temp_dir().join(format!("memproxy-recall-{}-{n}.toml", std::process::id()));
    std::fs::write(&conf, config).unwrap();
    let (p, port) = start_memproxy(
        rport,
        &proxy_args(model, &["--config", conf.to_str().unwrap()]),
    );
    let mut c = connect(port);
    for a in asks {
        let _: Value = redis::cmd("MEM.EMBED")
            .arg(&a.question)
            .query(&mut c)
            .unwrap();
    }
    (p, c)
}

/// What one mode and setting scored: per set (tuning, held out) recall@1, recall@3 and
/// unrelated questions with a hit; hits of another user; recall latencies.
struct Scores {
    at1: [usize; 2],
    at3: [usize; 2],
    noise: [usize; 2],
    leaks: usize,
    lat: Vec<Duration>,
}

impl Scores {
    fn print(&self, name: &str, questions: [usize; 2], unrelated: [usize; 2]) {
        let p = |n: usize, of: usize| 100.0 * n as f64 / of as f64;
        println!(
            "| {name} | {:.1}% | {:.1}% | {} of {} | {:.1}% | {:.1}% | {} of {} | {} | {:.3} |",
            p(self.at1[0], questions[0]),
            p(self.at3[0], questions[0]),
            self.noise[0],
            unrelated[0],
            p(self.at1[1], questions[1]),
            p(self.at3[1], questions[1]),
            self.noise[1],
            unrelated[1],
            self.leaks,
            pct(&self.lat, 0.5)
        );
    }
}

/// Ask every question (K 3, with `opts`) and score the answers.
fn evaluate(
    con: &mut redis::Connection,
    asks: &[Ask],
    ids: &HashMap<String, String>,
    opts: &[&str],
) -> Scores {
    let mut s = Scores {
        at1: [0; 2],
        at3: [0; 2],
        noise: [0; 2],
        leaks: 0,
        lat: Vec::new(),
    };
    for a in asks {
        let mut c = redis::cmd("MEM.RECALL");
        c.arg(&a.question).arg("USER").arg(&a.user).arg("K").arg(3);
        for o in opts {
            c.arg(*o);
        }
        let t = Instant::now();
        let hits: Vec<Value> = c.query(con).unwrap();
        s.lat.push(t.elapsed());
        let got: Vec<(String, String)> = hits
            .iter()
            .map(|h| {
                (
                    text(field(h, "user")),
                    ids.get(&text(field(h, "id"))).cloned().unwrap_or_default(),
                )
            })
            .collect();
        s.leaks += got.iter().filter(|(u, _)| *u != a.user).count();
        match &a.fact {
            Some(f) => {
                if got.first().is_some_and(|(_, g)| g == f) {
                    s.at1[a.set] += 1;
                }
                if got.iter().any(|(_, g)| g == f) {
                    s.at3[a.set] += 1;
                }
            }
            None => {
                if !got.is_empty() {
                    s.noise[a.set] += 1;
                }
            }
        }
    }
    s.lat.sort();
    s
}

/// The guide's walkthrough probes against its seed memories: this model's cosine distance beside
/// the published fp32 figure.
fn guide_distances(con: &mut redis::Connection) {
    let embed = |con: &mut redis::Connection, t: &str| -> Vec<f64> {
        redis::cmd("MEM.EMBED").arg(t).query(con).unwrap()
    };
    let tsv = |name: &str| -> Vec<Vec<String>> {
        std::fs::read_to_string(root().join("tests/data").join(name))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect()
    };
    let seeds: Vec<(String, Vec<f64>)> = tsv("redis-docs-seed-memories.tsv")
        .into_iter()
        .map(|r| (r[1].clone(), embed(con, &r[1])))
        .collect();
    println!("\n| guide probe | nearest seed | distance | published (fp32) |");
    println!("| --- | --- | --- | --- |");
    for p in tsv("seed-demo-probes.tsv") {
        let q = embed(con, &p[0]);
        let (text, d) = seeds
            .iter()
            .map(|(t, v)| (t, 1.0 - q.iter().zip(v).map(|(a, b)| a * b).sum::<f64>()))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap();
        println!(
            "| {} | {} | {d:.4} | {} |",
            p[0],
            &text[..text.len().min(40)],
            p[2]
        );
    }
}

//! Recall quality on memproxy's own evaluation set (`bench/data/recall-eval.tsv`): 62 facts of
//! four users, 121 indirect questions, 20 unrelated questions. For each mode and setting it prints
//! recall@1 and recall@3 (the expected fact first / among the first three), how many unrelated
//! questions recall anything, cross-user leaks (must be 0) and MEM.RECALL p50 beside MEM.EMBED
//! p50 of the same questions.
//!
//! usage: cargo build --release && cargo bench --bench recall

#[path = "common.rs"]
mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

struct Ask {
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

fn main() {
    let data = std::fs::read_to_string(root().join("bench/data/recall-eval.tsv")).unwrap();
    let (_redis, rport) = start_redis(&[]);
    let (_proxy, mport) = start_memproxy(rport, &[]);
    let mut con = connect(mport);
    let mut d = connect(rport);
    // fact id → memory id, and memory id → (user, fact id)
    let mut ids: HashMap<String, String> = HashMap::new();
    let mut asks = Vec::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for line in data
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let cols: Vec<&str> = line.split('\t').collect();
        match cols[0] {
            "fact" => {
                let (user, fid, age, text_) = (cols[1], cols[2], cols[3], cols[4]);
                let v: Value = redis::cmd("MEM.REMEMBER")
                    .arg(text_)
                    .arg("USER")
                    .arg(user)
                    .arg("KIND")
                    .arg("semantic")
                    .arg("NODEDUP")
                    .query(&mut con)
                    .unwrap();
                let id = text(field(&v, "id"));
                let age: f64 = age.parse().unwrap();
                let _: () = redis::cmd("JSON.SET")
                    .arg(format!("agent:mem:{id}"))
                    .arg("$.created_ts")
                    .arg(now - age * 86400.0)
                    .query(&mut d)
                    .unwrap();
                ids.insert(id, fid.to_string());
            }
            "ask" | "none" => asks.push(Ask {
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
        ("default (no options)", vec![]),
    ];
    let questions = asks.iter().filter(|a| a.fact.is_some()).count();
    let unrelated = asks.len() - questions;
    println!("\n## Recall on bench/data/recall-eval.tsv ({} facts, {questions} questions, {unrelated} unrelated)\n", ids.len());
    println!(
        "MEM.EMBED p50 of the same questions (fresh): {:.3} ms\n",
        pct(&embed_lat, 0.5)
    );
    println!("| mode and setting | recall@1 | recall@3 | unrelated with a hit | leaks | recall p50 ms (embedding cached) |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (name, opts) in configs {
        let (mut at1, mut at3, mut noise, mut leaks) = (0, 0, 0, 0);
        let mut lat = Vec::new();
        for a in &asks {
            let mut c = redis::cmd("MEM.RECALL");
            c.arg(&a.question).arg("USER").arg(&a.user).arg("K").arg(3);
            for o in &opts {
                c.arg(*o);
            }
            let t = Instant::now();
            let hits: Vec<Value> = c.query(&mut con).unwrap();
            lat.push(t.elapsed());
            let got: Vec<(String, String)> = hits
                .iter()
                .map(|h| {
                    (
                        text(field(h, "user")),
                        ids.get(&text(field(h, "id"))).cloned().unwrap_or_default(),
                    )
                })
                .collect();
            leaks += got.iter().filter(|(u, _)| *u != a.user).count();
            match &a.fact {
                Some(f) => {
                    if got.first().is_some_and(|(_, g)| g == f) {
                        at1 += 1;
                    }
                    if got.iter().any(|(_, g)| g == f) {
                        at3 += 1;
                    }
                }
                None => {
                    if !got.is_empty() {
                        noise += 1;
                    }
                }
            }
        }
        lat.sort();
        println!(
            "| {name} | {:.1}% | {:.1}% | {noise} of {unrelated} | {leaks} | {:.3} |",
            100.0 * at1 as f64 / questions as f64,
            100.0 * at3 as f64 / questions as f64,
            pct(&lat, 0.5)
        );
    }
}

//! Recall quality on sets of different voices, each split into a tuning part and a held-out part
//! (docs/RECALL.md says how each was split and what was looked at while choosing):
//!
//! - `facts`: memproxy's own third-person set (`bench/data/recall-eval.tsv` is the tuning part,
//!   the questions of `recall-holdout.tsv` the held-out part), superseded facts included;
//! - `facts, busy`: the same facts, each user's scope also holding 448 memories of work chatter;
//! - `first person`: `bench/data/recall-first-person.tsv`, users' own turns and questions, split
//!   by user;
//! - `agent notes`: `bench/data/recall-agent-notes.tsv`, an agent's own terse notes (how-tos,
//!   decisions, key: value, superseded notes), split by user;
//! - `long texts`: the first-person memories, each after a long assistant answer (LongMemEval's,
//!   1,500–4,000 bytes), so the fact sits past the model's 256-token window;
//! - `LongMemEval-S`: 20 public questions, every turn of their ~50-session haystacks remembered;
//!   a hit counts when it comes from an evidence session. Alternate questions are held out.
//! - `LongMemEval, pooled`: LongMemEval's other questions (abstention ones aside) with only their
//!   evidence sessions, 25 questions' sessions to a scope, so each question's sessions sit among
//!   the others'; every turn remembered; even pools tune, odd pools are held out.
//!   `scripts/bench-data.sh` fetches both (PyPI, pinned); without them these sets are skipped.
//!
//! For every set it asks the questions once in raw form (MODE vector without a cut-off, MODE
//! auto's own candidates from a proxy with every part of its rule off, MODE keyword; 20 each) and chooses, on the tuning parts only, the one KNN cut-off that does best
//! (the baseline) and MODE auto's constants. Then it asks every question through MEM.RECALL
//! for each row — the default, the baselines, other modes — and prints the held-out parts
//! first: recall@1/3/5, unrelated questions with a hit, wrong hits beside the right one at K 3,
//! cross-user leaks and p50.
//!
//! usage: cargo build --release && scripts/bench-data.sh && cargo bench --bench recall
//!        RECALL_MODEL=<model dir> for another model (every proxy gets `--model`)

#[path = "common.rs"]
mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use common::*;
use redis::Value;

/// Which part of a set a question belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Part {
    Tuning,
    HeldOut,
}

struct Question {
    part: Part,
    user: String,
    /// Labels of the right memories (fact id or session id); empty: unrelated, nothing should
    /// come back.
    right: Vec<String>,
    text: String,
}

/// One evaluation set: its questions, and the label of each memory id it wrote.
struct Set {
    name: &'static str,
    questions: Vec<Question>,
    labels: HashMap<String, String>,
}

/// A hit as the bench sees it.
#[derive(Clone, Debug)]
struct Got {
    id: String,
    user: String,
    distance: f64,
    score: f64,
    created: f64,
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

fn num(v: Option<&Value>) -> f64 {
    match v {
        Some(Value::Double(d)) => *d,
        Some(Value::Int(i)) => *i as f64,
        other => text(other).parse().unwrap_or(f64::NAN),
    }
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `--model` for RECALL_MODEL, with `rest` after it.
fn proxy_args<'a>(model: &'a Option<String>, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = model.iter().flat_map(|m| ["--model", m.as_str()]).collect();
    v.extend_from_slice(rest);
    v
}

fn tsv(path: &str) -> Vec<Vec<String>> {
    std::fs::read_to_string(root().join(path))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// A memory to remember: user, label, age in days, hit count, text.
type Row = (String, String, f64, i64, String);

/// A set of fact rows (`fact_rows`), remembered.
fn fact_set(
    con: &mut redis::Connection,
    name: &'static str,
    rows: &[(Part, Vec<String>)],
    user: &dyn Fn(&str) -> String,
    wrap: &dyn Fn(usize, &str) -> String,
) -> Set {
    let (m, questions) = fact_rows(rows, user, wrap);
    let labels = remember_all(con, &m);
    Set {
        name,
        questions,
        labels,
    }
}

/// A set's rows, split by user: `tuning` users' rows are the tuning part, the others held out.
fn by_user(path: &str, tuning: &[&str]) -> Vec<(Part, Vec<String>)> {
    tsv(path)
        .into_iter()
        .map(|r| {
            let part = if tuning.contains(&r[1].as_str()) {
                Part::Tuning
            } else {
                Part::HeldOut
            };
            (part, r)
        })
        .collect()
}

/// Remember `(user, label, age_days, hits, text)` rows in pipelines; returns id → label.
fn remember_all(con: &mut redis::Connection, rows: &[Row]) -> HashMap<String, String> {
    let t = now();
    let mut labels = HashMap::new();
    // 64 at a time: a deeper pipeline of long turns outlasts the embedding deadline on a busy machine.
    for chunk in rows.chunks(64) {
        let mut pipe = redis::pipe();
        for (user, _, age, hits, text_) in chunk {
            pipe.cmd("MEM.REMEMBER")
                .arg(text_)
                .arg("USER")
                .arg(user)
                .arg("NODEDUP")
                .arg("CREATED")
                .arg(t - age * 86400.0)
                .arg("HITS")
                .arg(*hits);
        }
        let replies: Vec<Value> = pipe.query(con).unwrap();
        for ((_, label, ..), r) in chunk.iter().zip(&replies) {
            labels.insert(text(field(r, "id")), label.clone());
        }
    }
    labels
}

/// A row file of the facts' format (`fact` / `ask` / `none`) as memories and questions;
/// `part` says which part a row's question belongs to, `user` renames users, `wrap` rewrites a
/// memory's text.
fn fact_rows(
    rows: &[(Part, Vec<String>)],
    user: &dyn Fn(&str) -> String,
    wrap: &dyn Fn(usize, &str) -> String,
) -> (Vec<Row>, Vec<Question>) {
    let mut memories = Vec::new();
    let mut questions = Vec::new();
    for (part, cols) in rows {
        match cols[0].as_str() {
            "fact" => memories.push((
                user(&cols[1]),
                cols[2].clone(),
                cols[3].parse().unwrap(),
                cols[4].parse().unwrap(),
                wrap(memories.len(), &cols[5]),
            )),
            "ask" | "none" => questions.push(Question {
                part: *part,
                user: user(&cols[1]),
                right: if cols[0] == "ask" {
                    vec![cols[2].clone()]
                } else {
                    Vec::new()
                },
                text: cols[3].clone(),
            }),
            _ => {}
        }
    }
    (memories, questions)
}

/// LongMemEval-S's questions, from `scripts/bench-data.sh`'s folder (unique by id, sorted).
fn longmemeval() -> Option<Vec<serde_json::Value>> {
    let dir = deps().join("data/longmemeval");
    if !dir.join(".complete").exists() {
        return None;
    }
    let mut by_id: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for f in std::fs::read_dir(&dir).ok()? {
        let path = f.ok()?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
        let items = match v {
            serde_json::Value::Array(a) => a,
            other => vec![other],
        };
        for q in items {
            if let Some(id) = q["question_id"].as_str() {
                by_id.entry(id.to_string()).or_insert(q);
            }
        }
    }
    Some(by_id.into_values().collect())
}

/// Even positions tune, odd ones are held out.
fn alternate(i: usize) -> Part {
    if i % 2 == 0 {
        Part::Tuning
    } else {
        Part::HeldOut
    }
}

/// Every non-empty turn of `q`'s sessions not yet `seen`, as memories of `user` labelled with their
/// session's id and aged from `asked` (both days of `lme_day`).
fn lme_turns(
    q: &serde_json::Value,
    user: &str,
    asked: f64,
    seen: &mut HashSet<String>,
    m: &mut Vec<Row>,
) {
    let sessions = q["haystack_sessions"].as_array().unwrap();
    let sids = q["haystack_session_ids"].as_array().unwrap();
    let dates = q["haystack_dates"].as_array().unwrap();
    for ((s, sid), date) in sessions.iter().zip(sids).zip(dates) {
        let sid = sid.as_str().unwrap();
        if !seen.insert(sid.to_string()) {
            continue;
        }
        let age = (asked - lme_day(date.as_str().unwrap_or(""))).max(0.0);
        for t in s.as_array().unwrap() {
            let c = t["content"].as_str().unwrap_or("");
            if !c.trim().is_empty() {
                m.push((user.to_string(), sid.to_string(), age, 0, c.to_string()));
            }
        }
    }
}

/// LongMemEval question `q`, asked by `user`: any turn of an evidence session answers it.
fn lme_question(q: &serde_json::Value, user: String, part: Part) -> Question {
    Question {
        part,
        user,
        right: q["answer_session_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect(),
        text: q["question"].as_str().unwrap().to_string(),
    }
}

/// LongMemEval's 500 questions with their evidence sessions only (`longmemeval_oracle.json`).
fn longmemeval_oracle() -> Option<Vec<serde_json::Value>> {
    let dir = deps().join("data/longmemeval-oracle");
    if !dir.join(".complete").exists() {
        return None;
    }
    let text = std::fs::read_to_string(dir.join("longmemeval_oracle.json")).ok()?;
    let mut all: Vec<serde_json::Value> = serde_json::from_str(&text).ok()?;
    all.sort_by(|a, b| a["question_id"].as_str().cmp(&b["question_id"].as_str()));
    Some(all)
}

/// Questions of `LongMemEval, pooled` sharing one scope.
const POOL: usize = 25;

/// "2023/05/20 (Sat) 02:21" as days since an epoch of its own (only differences are used).
fn lme_day(s: &str) -> f64 {
    let d: Vec<f64> = s
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.parse().ok())
        .collect();
    if d.len() < 3 {
        return 0.0;
    }
    // Days from a civil date (Howard Hinnant's algorithm); hours and minutes as a fraction.
    let (y, m, day) = (d[0] as i64, d[1] as i64, d[2] as i64);
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146097 + doe) as f64;
    days + d.get(3).copied().unwrap_or(0.0) / 24.0 + d.get(4).copied().unwrap_or(0.0) / 1440.0
}

fn main() {
    let model = std::env::var("RECALL_MODEL").ok();
    let (_redis, rport) = start_redis(&[]);
    let (_proxy, mport) = start_memproxy(rport, &proxy_args(&model, &[]));
    let mut con = connect(mport);
    println!(
        "# recall with {}",
        model
            .as_deref()
            .unwrap_or("the default model (all-MiniLM-L6-v2 fp32)")
    );
    guide_distances(&mut con);

    let mut sets: Vec<Set> = Vec::new();
    // Facts: recall-eval.tsv is the tuning part, recall-holdout.tsv's questions the held-out.
    let facts: Vec<(Part, Vec<String>)> = tsv("bench/data/recall-eval.tsv")
        .into_iter()
        .map(|r| (Part::Tuning, r))
        .chain(
            tsv("bench/data/recall-holdout.tsv")
                .into_iter()
                .map(|r| (Part::HeldOut, r)),
        )
        .collect();
    let same = |u: &str| u.to_string();
    let plain = |_: usize, t: &str| t.to_string();
    sets.push(fact_set(&mut con, "facts", &facts, &same, &plain));
    // The same facts in busy scopes.
    let busy = |u: &str| format!("busy-{u}");
    let (mut m, questions) = fact_rows(&facts, &busy, &plain);
    let users: HashSet<String> = m.iter().map(|r| r.0.clone()).collect();
    for u in &users {
        for i in (0..512).filter(|i| i % 8 != 0) {
            m.push((u.clone(), "-".into(), 1.0, 0, sentence(i)));
        }
    }
    let labels = remember_all(&mut con, &m);
    sets.push(Set {
        name: "facts, busy",
        questions,
        labels,
    });
    // First person: sam and priya tune, leo and nora are held out.
    let first = by_user("bench/data/recall-first-person.tsv", &["sam", "priya"]);
    sets.push(fact_set(&mut con, "first person", &first, &same, &plain));
    // Agent notes: kai and mara tune, omar and lin are held out.
    let notes = by_user("bench/data/recall-agent-notes.tsv", &["kai", "mara"]);
    let notes_user = |u: &str| format!("notes-{u}");
    sets.push(fact_set(
        &mut con,
        "agent notes",
        &notes,
        &notes_user,
        &plain,
    ));
    let lme = longmemeval();
    match &lme {
        None => println!(
            "\n(skipped: `long texts` and `LongMemEval-S` need scripts/bench-data.sh's data)"
        ),
        Some(lme) => {
            // Long texts: each first-person memory after a long assistant answer.
            let answers: Vec<String> = lme
                .iter()
                .flat_map(|q| q["haystack_sessions"].as_array().unwrap().iter())
                .flat_map(|s| s.as_array().unwrap().iter())
                .filter(|t| t["role"] == "assistant")
                .filter_map(|t| t["content"].as_str())
                .filter(|c| (1500..4000).contains(&c.len()))
                .step_by(7)
                .map(str::to_string)
                .collect();
            let long_user = |u: &str| format!("long-{u}");
            let wrap =
                |i: usize, t: &str| format!("assistant: {}\nuser: {t}", answers[i % answers.len()]);
            sets.push(fact_set(&mut con, "long texts", &first, &long_user, &wrap));
            // LongMemEval-S: every turn, dated as the haystack dates it relative to the question.
            let mut m = Vec::new();
            let mut questions = Vec::new();
            for (i, q) in lme.iter().enumerate() {
                let id = q["question_id"].as_str().unwrap();
                let user = format!("lme-{id}");
                let asked = lme_day(q["question_date"].as_str().unwrap_or(""));
                lme_turns(q, &user, asked, &mut HashSet::new(), &mut m);
                questions.push(lme_question(q, user, alternate(i)));
            }
            let t = Instant::now();
            let labels = remember_all(&mut con, &m);
            println!(
                "\n(LongMemEval-S: {} turns of {} questions remembered in {:.0} s)",
                m.len(),
                lme.len(),
                t.elapsed().as_secs_f64()
            );
            sets.push(Set {
                name: "LongMemEval-S",
                questions,
                labels,
            });
        }
    }
    match longmemeval_oracle() {
        None => println!("\n(skipped: `LongMemEval, pooled` needs scripts/bench-data.sh's data)"),
        Some(all) => {
            // LongMemEval's other questions (not the 20 above, not the 30 abstention ones, whose
            // answer is that nothing was said), sorted by id, in pools of POOL questions: a pool
            // is one scope holding every turn of its questions' evidence sessions, so each
            // question's sessions sit among the others' (~50 sessions, as in LongMemEval-S).
            // Even pools tune, odd pools are held out.
            let seen: HashSet<&str> = lme
                .iter()
                .flatten()
                .filter_map(|q| q["question_id"].as_str())
                .collect();
            let qs: Vec<&serde_json::Value> = all
                .iter()
                .filter(|q| {
                    let id = q["question_id"].as_str().unwrap_or("");
                    !id.ends_with("_abs") && !seen.contains(id)
                })
                .collect();
            let mut m = Vec::new();
            let mut questions = Vec::new();
            for (p, pool) in qs.chunks(POOL).enumerate() {
                let user = format!("lmo-{p}");
                let asked = pool
                    .iter()
                    .map(|q| lme_day(q["question_date"].as_str().unwrap_or("")))
                    .fold(f64::MIN, f64::max);
                let mut sessions_seen = HashSet::new();
                for q in pool {
                    lme_turns(q, &user, asked, &mut sessions_seen, &mut m);
                    questions.push(lme_question(q, user.clone(), alternate(p)));
                }
            }
            let t = Instant::now();
            let labels = remember_all(&mut con, &m);
            println!(
                "\n(LongMemEval, pooled: {} turns of {} questions in {} pools remembered in {:.0} s)",
                m.len(),
                qs.len(),
                qs.len().div_ceil(POOL),
                t.elapsed().as_secs_f64()
            );
            sets.push(Set {
                name: "LongMemEval, pooled",
                questions,
                labels,
            });
        }
    }
    for s in &sets {
        let n = |part: Part, answerable: bool| {
            s.questions
                .iter()
                .filter(|q| q.part == part && q.right.is_empty() != answerable)
                .count()
        };
        println!(
            "set `{}`: {} memories; tuning {} questions + {} unrelated, held out {} + {}",
            s.name,
            s.labels.len(),
            n(Part::Tuning, true),
            n(Part::Tuning, false),
            n(Part::HeldOut, true),
            n(Part::HeldOut, false)
        );
    }

    // The proxy's embedding cache warmed with every question (the evaluation below runs each
    // question several times; only the latency measurement at the end needs fresh texts).
    for s in &sets {
        for q in &s.questions {
            let _: Value = redis::cmd("MEM.EMBED")
                .arg(&q.text)
                .query(&mut con)
                .unwrap();
        }
    }

    // Raw candidates once, as MODE auto sees them (each memory at its nearest window: a proxy
    // with every part of the rule off and no cut-off), and the keyword side; 20 each.
    let off = std::env::temp_dir().join(format!("memproxy-recall-raw-{}.toml", std::process::id()));
    std::fs::write(
        &off,
        "recall_min_standout = 0.0\nrecall_relative_cutoff = 0.0\nrecall_recency_weight = 0.0\n\
         recall_hit_weight = 0.0\nrecall_keyword_weight = 0.0\nrecall_window_threshold = 2.0\n",
    )
    .unwrap();
    let off_path = off.display().to_string();
    let (_raw_proxy, raw_port) =
        start_memproxy(rport, &proxy_args(&model, &["--config", &off_path]));
    let mut raw_con = connect(raw_port);
    let raw: Vec<Vec<Raw>> = sets
        .iter()
        .map(|s| {
            s.questions
                .iter()
                .map(|q| {
                    let v = recall(
                        &mut con,
                        q,
                        &["MODE", "vector", "THRESHOLD", "2", "K", "20"],
                    )
                    .0;
                    let a = recall(
                        &mut raw_con,
                        q,
                        &["MODE", "auto", "THRESHOLD", "2", "K", "20"],
                    )
                    .0;
                    let k = recall(&mut con, q, &["MODE", "keyword", "K", "20"]).0;
                    (v, a, k)
                })
                .collect()
        })
        .collect();

    // The baseline's one cut-off, and MODE auto's constants, chosen on the tuning parts.
    // The baseline is plain KNN (first windows); MODE auto's rules see its own candidates.
    let tuning_on = |rule: &Rule, auto: bool| -> Vec<Metrics> {
        sets.iter()
            .zip(&raw)
            .map(|(s, r)| simulate(s, r, rule, Part::Tuning, auto))
            .collect()
    };
    let tuning = |rule: &Rule| tuning_on(rule, true);
    let cutoffs: Vec<f64> = (0..=40).map(|i| 0.50 + 0.01 * i as f64).collect();
    let knn = |t: f64| Rule {
        threshold: t,
        window: None,
        relative: None,
        standout: None,
        keyword: 0.0,
        recency: 0.0,
    };
    let (best_t, knn_tuning) = cutoffs
        .iter()
        .map(|t| (*t, tuning_on(&knn(*t), false)))
        .max_by(|a, b| utility(&a.1).total_cmp(&utility(&b.1)))
        .unwrap();
    println!("\n## Choosing on the tuning parts\n");
    println!(
        "Utility of a rule, summed over the sets' tuning parts: (recall@1 + recall@3 + recall@5) / 3 − share of unrelated questions with a hit − (wrong hits a question at K 3) / 3.\n"
    );
    println!(
        "Plain KNN, best single cut-off on the tuning parts: **{best_t:.2}** (utility {:.3}; at the guide's 0.55: {:.3}).",
        utility(&knn_tuning),
        utility(&tuning_on(&knn(0.55), false))
    );
    let mut candidates: Vec<(Rule, Vec<Metrics>)> = Vec::new();
    for (t, window) in cutoffs.iter().flat_map(|t| {
        [
            None,
            Some(0.40),
            Some(0.45),
            Some(0.50),
            Some(0.55),
            Some(0.60),
        ]
        .into_iter()
        .filter(move |w| w.is_none_or(|w| w < *t))
        .map(move |w| (t, w))
    }) {
        for relative in [None, Some(0.05), Some(0.08), Some(0.12), Some(0.16)] {
            for standout in [
                None,
                Some(0.02),
                Some(0.04),
                Some(0.06),
                Some(0.08),
                Some(0.10),
                Some(0.14),
            ] {
                for keyword in [0.0, 0.05, 0.1, 0.2] {
                    for recency in [0.0, 0.02, 0.05] {
                        let rule = Rule {
                            threshold: *t,
                            window,
                            relative,
                            standout,
                            keyword,
                            recency,
                        };
                        let m = tuning(&rule);
                        candidates.push((rule, m));
                    }
                }
            }
        }
    }
    // Only rules at least as good as the baseline on every tuning part and metric.
    let dominating: Vec<&(Rule, Vec<Metrics>)> = candidates
        .iter()
        .filter(|(_, m)| m.iter().zip(&knn_tuning).all(|(a, b)| a.at_least(b)))
        .collect();
    // The best utility; then, within SIMPLER_WITHIN of it, the rule with the fewest parts.
    let top = dominating
        .iter()
        .map(|c| utility(&c.1))
        .fold(f64::MIN, f64::max);
    let best = dominating
        .iter()
        .filter(|c| utility(&c.1) >= top - SIMPLER_WITHIN)
        .min_by(|a, b| {
            a.0.parts()
                .cmp(&b.0.parts())
                .then(utility(&b.1).total_cmp(&utility(&a.1)))
        })
        .map(|c| (c.0.clone(), utility(&c.1)));
    println!(
        "Rules tried: {}; at least as good as that baseline on every tuning part and metric: {}.",
        candidates.len(),
        dominating.len()
    );
    match &best {
        Some((r, u)) => println!(
            "Best utility {top:.3}; the simplest rule within {SIMPLER_WITHIN} of it: {} (utility {u:.3}).",
            r.describe()
        ),
        None => println!("None dominates the baseline."),
    }
    let compiled = Rule::compiled();
    println!(
        "The compiled-in default: {} (utility on the tuning parts {:.3}).\n",
        compiled.describe(),
        utility(&tuning(&compiled))
    );

    // Every row through MEM.RECALL.
    let t_best = format!("{best_t:.2}");
    let rows: Vec<(String, Vec<&str>)> = vec![
        ("**default** (no options)".into(), vec![]),
        (
            format!("vector, best tuning cut-off {t_best} (baseline)"),
            vec!["MODE", "vector", "THRESHOLD", &t_best],
        ),
        (
            "vector, 0.55 (the guide's)".into(),
            vec!["MODE", "vector", "THRESHOLD", "0.55"],
        ),
        (
            "vector, no cut-off".into(),
            vec!["MODE", "vector", "THRESHOLD", "2"],
        ),
        ("keyword (BM25)".into(), vec!["MODE", "keyword"]),
        (
            format!("hybrid (RRF), {t_best}"),
            vec!["MODE", "hybrid", "THRESHOLD", &t_best],
        ),
    ];
    let results: Vec<(String, Vec<[Metrics; 2]>)> = rows
        .iter()
        .map(|(name, opts)| {
            let per_set = sets.iter().map(|s| evaluate(&mut con, s, opts)).collect();
            (name.clone(), per_set)
        })
        .collect();
    for (part, title) in [
        (1, "held-out parts"),
        (0, "tuning parts (looked at while choosing)"),
    ] {
        println!("\n## Recall on the {title}\n");
        println!("| set | mode | recall@1 | recall@3 | recall@5 | unrelated with a hit | wrong hits beside the right one (K 3) | leaks | p50 ms |");
        println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for (i, s) in sets.iter().enumerate() {
            for (name, per_set) in &results {
                per_set[i][part].print(s.name, name);
            }
        }
        if part == 1 {
            // The default against the baseline on every held-out part and metric.
            let worse: Vec<&str> = sets
                .iter()
                .enumerate()
                .filter(|(i, _)| !results[0].1[*i][1].at_least(&results[1].1[*i][1]))
                .map(|(_, s)| s.name)
                .collect();
            println!(
                "\nDefault at least as good as the baseline on every held-out metric: {}",
                if worse.is_empty() {
                    "yes".to_string()
                } else {
                    format!("**no** ({})", worse.join(", "))
                }
            );
        }
    }
    // Latency: every distinct question once, as a fresh text on two fresh proxies — MEM.EMBED on
    // one, MEM.RECALL with the defaults on the other — interleaved, so the machine's noise hits
    // both alike and no call finds its text's embedding cached (a question repeated across sets
    // would otherwise be a cache hit and make the embed look ~10x cheaper than it is).
    let (_fresh, fport) = start_memproxy(rport, &proxy_args(&model, &[]));
    let (_fresh_embed, eport) = start_memproxy(rport, &proxy_args(&model, &[]));
    let mut fresh = connect(fport);
    let mut fresh_embed = connect(eport);
    let mut seen = HashSet::new();
    let (mut lat, mut embed_lat) = (Vec::new(), Vec::new());
    for s in &sets {
        for q in s.questions.iter().filter(|q| seen.insert(q.text.clone())) {
            let t = Instant::now();
            let _: Value = redis::cmd("MEM.EMBED")
                .arg(&q.text)
                .query(&mut fresh_embed)
                .unwrap();
            embed_lat.push(t.elapsed());
            let t = Instant::now();
            recall(&mut fresh, q, &[]);
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    embed_lat.sort();
    let embed_p50 = pct(&embed_lat, 0.5);
    println!(
        "\nOver the {} distinct questions, each a fresh text: MEM.EMBED p50 {embed_p50:.3} ms; \
         MEM.RECALL p50 with the defaults {:.3} ms (**{:.2}×** MEM.EMBED; recall − embed {:.3} ms)",
        lat.len(),
        pct(&lat, 0.5),
        pct(&lat, 0.5) / embed_p50,
        pct(&lat, 0.5) - embed_p50
    );
}

/// MEM.RECALL `q` with `opts` (K 3 unless given): the hits and the time it took.
fn recall(con: &mut redis::Connection, q: &Question, opts: &[&str]) -> (Vec<Got>, Duration) {
    let mut c = redis::cmd("MEM.RECALL");
    c.arg(&q.text).arg("USER").arg(&q.user);
    if !opts.contains(&"K") {
        c.arg("K").arg(3);
    }
    for o in opts {
        c.arg(*o);
    }
    let t = Instant::now();
    let hits: Vec<Value> = c.query(con).unwrap();
    let took = t.elapsed();
    let got = hits
        .iter()
        .map(|h| Got {
            id: text(field(h, "id")),
            user: text(field(h, "user")),
            distance: num(field(h, "distance")),
            score: num(field(h, "score")),
            created: num(field(h, "created_ts")),
        })
        .collect();
    (got, took)
}

/// What one mode scored on one part of a set.
#[derive(Clone, Default, Debug)]
struct Metrics {
    questions: usize,
    unrelated: usize,
    at1: usize,
    at3: usize,
    at5: usize,
    noise: usize,
    wrong: usize,
    leaks: usize,
    lat: Vec<Duration>,
}

impl Metrics {
    fn rate(n: usize, of: usize) -> f64 {
        if of == 0 {
            0.0
        } else {
            n as f64 / of as f64
        }
    }

    /// Score the answers to one question: `k3` at K 3, `k5` at K 5, as labels and users.
    fn add(&mut self, q: &Question, k3: &[(String, String)], k5: &[(String, String)]) {
        self.leaks += k3.iter().chain(k5).filter(|(u, _)| *u != q.user).count();
        if q.right.is_empty() {
            self.unrelated += 1;
            self.noise += usize::from(!k3.is_empty());
            return;
        }
        self.questions += 1;
        let right = |(_, l): &(String, String)| q.right.contains(l);
        self.at1 += usize::from(k3.first().is_some_and(right));
        self.at3 += usize::from(k3.iter().any(right));
        self.at5 += usize::from(k5.iter().any(right));
        self.wrong += k3.iter().filter(|h| !right(h)).count();
    }

    /// No worse on any metric (recall, unrelated hits, wrong hits, leaks).
    fn at_least(&self, b: &Metrics) -> bool {
        self.at1 >= b.at1
            && self.at3 >= b.at3
            && self.at5 >= b.at5
            && self.noise <= b.noise
            && self.wrong <= b.wrong
            && self.leaks <= b.leaks
    }

    fn utility(&self) -> f64 {
        let q = self.questions;
        (Self::rate(self.at1, q) + Self::rate(self.at3, q) + Self::rate(self.at5, q)) / 3.0
            - Self::rate(self.noise, self.unrelated)
            - Self::rate(self.wrong, q) / 3.0
    }

    fn print(&self, set: &str, mode: &str) {
        let p = |n: usize| 100.0 * Self::rate(n, self.questions);
        let p50 = if self.lat.is_empty() {
            "–".to_string()
        } else {
            format!("{:.2}", pct(&self.lat, 0.5))
        };
        println!(
            "| {set} | {mode} | {:.1}% | {:.1}% | {:.1}% | {} of {} | {:.2} | {} | {p50} |",
            p(self.at1),
            p(self.at3),
            p(self.at5),
            self.noise,
            self.unrelated,
            Self::rate(self.wrong, self.questions),
            self.leaks
        );
    }
}

fn utility(per_set: &[Metrics]) -> f64 {
    per_set.iter().map(Metrics::utility).sum()
}

/// Ask every question of `s` through MEM.RECALL with `opts`, at K 3 and K 5: metrics of the
/// tuning part and of the held-out part.
fn evaluate(con: &mut redis::Connection, s: &Set, opts: &[&str]) -> [Metrics; 2] {
    let mut m = [Metrics::default(), Metrics::default()];
    let label = |g: Vec<Got>| -> Vec<(String, String)> {
        g.into_iter()
            .map(|h| (h.user, s.labels.get(&h.id).cloned().unwrap_or_default()))
            .collect()
    };
    for q in &s.questions {
        let (k3, took) = recall(con, q, opts);
        let mut k5opts = opts.to_vec();
        k5opts.extend(["K", "5"]);
        let (k5, _) = recall(con, q, &k5opts);
        let part = &mut m[usize::from(q.part == Part::HeldOut)];
        part.lat.push(took);
        part.add(q, &label(k3), &label(k5));
    }
    for p in &mut m {
        p.lat.sort();
    }
    m
}

/// MODE auto's rule, for choosing its constants without a proxy per setting: the vector
/// candidates within `threshold` (cosine distance) and, with `relative`, within that much of
/// the best one's similarity, ordered by similarity + `keyword` × the candidate's BM25 score
/// over the query's best BM25 score + `recency` × 0.5^(age / 60 days). The same formula as
/// `store::memory::Store::rank` (the rows through MEM.RECALL are what counts).
#[derive(Clone, Debug)]
struct Rule {
    threshold: f64,
    /// A later sentence window counts only within this distance (`recall_window_threshold`).
    window: Option<f64>,
    relative: Option<f64>,
    standout: Option<f64>,
    keyword: f64,
    recency: f64,
}

impl Rule {
    /// Moving parts besides the cut-off (fewer wins a tie).
    fn parts(&self) -> usize {
        usize::from(self.relative.is_some())
            + usize::from(self.window.is_some())
            + usize::from(self.standout.is_some())
            + usize::from(self.keyword > 0.0)
            + usize::from(self.recency > 0.0)
    }

    /// The default's constants as memproxy's `Config` has them.
    fn compiled() -> Rule {
        let c = memproxy::Config::default();
        Rule {
            threshold: c.recall_auto_threshold,
            window: Some(c.recall_window_threshold).filter(|w| *w < c.recall_auto_threshold),
            relative: Some(c.recall_relative_cutoff).filter(|r| *r > 0.0),
            standout: Some(c.recall_min_standout).filter(|r| *r > 0.0),
            keyword: c.recall_keyword_weight,
            recency: c.recall_recency_weight,
        }
    }

    fn describe(&self) -> String {
        format!(
            "cut-off {:.2}, window cut-off {}, relative cut-off {}, stand-out {}, keyword weight {}, recency weight {}",
            self.threshold,
            self.window.map_or("none".to_string(), |w| format!("{w:.2}")),
            self.relative
                .map_or("none".to_string(), |r| format!("{r:.2}")),
            self.standout
                .map_or("none".to_string(), |r| format!("{r:.2}")),
            self.keyword,
            self.recency
        )
    }

    /// The ranked memories for one question from its raw candidates, at most `k`.
    fn apply(&self, vector: &[Got], keyword: &[Got], k: usize, now: f64) -> Vec<Got> {
        let top_kw = keyword.iter().map(|h| h.score).fold(0.0, f64::max);
        // The scope's background: the farthest of a full set of candidates.
        let sims: Vec<f64> = vector
            .iter()
            .take(RAW_CANDIDATES)
            .map(|h| 1.0 - h.distance)
            .collect();
        if let (Some(m), true) = (self.standout, sims.len() == RAW_CANDIDATES) {
            if sims[0] - sims[RAW_CANDIDATES - 1] < m {
                return Vec::new();
            }
        }
        let within: Vec<&Got> = vector
            .iter()
            .take(RAW_CANDIDATES)
            .filter(|h| h.distance <= self.threshold)
            .collect();
        let best = within
            .iter()
            .map(|h| 1.0 - h.distance)
            .fold(f64::MIN, f64::max);
        let mut scored: Vec<(f64, Got)> = within
            .into_iter()
            .filter(|h| self.relative.is_none_or(|r| 1.0 - h.distance >= best - r))
            .map(|h| {
                let kw = keyword.iter().find(|x| x.id == h.id).map_or(0.0, |x| {
                    if top_kw > 0.0 {
                        x.score / top_kw
                    } else {
                        0.0
                    }
                });
                let age = ((now - h.created) / 86400.0).max(0.0);
                let s =
                    1.0 - h.distance + self.keyword * kw + self.recency * 0.5f64.powf(age / 60.0);
                (s, h.clone())
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored.into_iter().take(k).map(|(_, h)| h).collect()
    }
}

/// Utility a rule with fewer moving parts may give up and still be chosen.
const SIMPLER_WITHIN: f64 = 0.02;

/// Candidates MODE auto considers (the proxy's `recall_candidates`).
const RAW_CANDIDATES: usize = 8;

/// Metrics of `rule` on one part of a set, from the raw candidates.
/// One question's raw candidates: plain KNN (`MODE vector`), MODE auto's own candidates (each
/// memory at its nearest window, nothing cut), and the keyword side.
type Raw = (Vec<Got>, Vec<Got>, Vec<Got>);

fn simulate(s: &Set, raw: &[Raw], rule: &Rule, part: Part, auto: bool) -> Metrics {
    let t = now();
    let mut m = Metrics::default();
    for (q, (plain, candidates, k)) in s.questions.iter().zip(raw) {
        if q.part != part {
            continue;
        }
        let windowed;
        let v = match (auto, rule.window) {
            (false, _) => plain,
            (true, None) => candidates,
            (true, Some(w)) => {
                windowed = within_windows(candidates, plain, w);
                &windowed
            }
        };
        let label = |g: Vec<Got>| -> Vec<(String, String)> {
            g.into_iter()
                .map(|h| (h.user, s.labels.get(&h.id).cloned().unwrap_or_default()))
                .collect()
        };
        m.add(
            q,
            &label(rule.apply(v, k, 3, t)),
            &label(rule.apply(v, k, 5, t)),
        );
    }
    m
}

/// MODE auto's candidates with a window cut-off: a memory nearer by a later window than by its
/// own embedding (plain KNN's distance for it) keeps the window's distance only within `w`;
/// farther, it is at its own embedding's distance, or gone when plain KNN's 20 did not have it.
fn within_windows(auto: &[Got], plain: &[Got], w: f64) -> Vec<Got> {
    let mut out: Vec<Got> = auto
        .iter()
        .filter_map(|h| {
            let own = plain.iter().find(|p| p.id == h.id).map(|p| p.distance);
            let by_window = own.is_none_or(|d| h.distance < d - 1e-6);
            match (by_window && h.distance > w, own) {
                (false, _) => Some(h.clone()),
                (true, Some(d)) => Some(Got {
                    distance: d,
                    ..h.clone()
                }),
                (true, None) => None,
            }
        })
        .collect();
    out.sort_by(|a, b| a.distance.total_cmp(&b.distance));
    out
}

/// The guide's walkthrough probes against its seed memories: this model's cosine distance beside
/// the published fp32 figure.
fn guide_distances(con: &mut redis::Connection) {
    let embed = |con: &mut redis::Connection, t: &str| -> Vec<f64> {
        redis::cmd("MEM.EMBED").arg(t).query(con).unwrap()
    };
    let seeds: Vec<(String, Vec<f64>)> = tsv("tests/data/redis-docs-seed-memories.tsv")
        .into_iter()
        .map(|r| (r[1].clone(), embed(con, &r[1])))
        .collect();
    println!("\n| guide probe | nearest seed | distance | published (fp32) |");
    println!("| --- | --- | --- | --- |");
    for p in tsv("tests/data/seed-demo-probes.tsv") {
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

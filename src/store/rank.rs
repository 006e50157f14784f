//! `MODE auto`'s two decisions, as pure functions over the candidates a KNN search found (the
//! proxy and the recall benchmark run this same code):
//!
//! 1. **The gate**: is the question about this scope at all? Yes when the nearest candidate is
//!    within the gate distance (`THRESHOLD`; `recall_auto_threshold`). `MODE rank` skips it.
//! 2. **The ranking**: which K candidates come back, in which order. Each candidate scores
//!    `similarity + keyword · rarity overlap + time · window match + recency · decay + hits ·
//!    log2(1 + hit_count)`; optional per-hit cut-offs (absolute and relative to the best) drop
//!    candidates; with diversity, at most one hit per source thread until every thread has had
//!    its turn.
//!
//! Rarity is measured over the candidates themselves (inverse document frequency among them),
//! so it costs no query to Redis and works in scopes of any size: a word every candidate shares
//! says nothing, a name or number only one of them has says a lot. docs/RECALL.md has the formula
//! and the measurements behind each term.

use std::collections::{HashMap, HashSet};

use super::when;

/// The ranking's constants (from the settings; the benchmark tries others).
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// The gate: the nearest candidate must be within this cosine distance (2: no gate).
    pub gate: f64,
    /// Per hit: at most this distance (2: no cut-off).
    pub hit_threshold: f64,
    /// Per hit: within this much similarity of the best candidate (0: none).
    pub relative: f64,
    /// Weight of the rarity-weighted share of the question's words a candidate contains.
    pub keyword: f64,
    /// Weight of a match with the time window the question names ("last week", "in March").
    pub time: f64,
    /// Weight of recency: `0.5^(age_days / half_life_days)`.
    pub recency: f64,
    pub half_life_days: f64,
    /// Weight of `log2(1 + hit_count)`.
    pub hits: f64,
    /// At most one hit per source thread, until every thread among the candidates has one.
    pub diversity: bool,
}

impl Params {
    /// The settings' ranking, with `gate` as the gate (a recall's THRESHOLD).
    pub fn of(c: &crate::config::Config, gate: f64) -> Params {
        Params {
            gate,
            hit_threshold: c.recall_hit_threshold,
            relative: c.recall_relative_cutoff,
            keyword: c.recall_keyword_weight,
            time: c.recall_time_weight,
            recency: c.recall_recency_weight,
            half_life_days: c.recall_recency_half_life_days,
            hits: c.recall_hit_weight,
            diversity: c.recall_diversity,
        }
    }
}

/// One candidate, as the KNN search found it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub distance: f64,
    pub text: &'a str,
    pub thread: Option<&'a str>,
    pub created_ts: Option<f64>,
    pub hit_count: i64,
}

/// Words that carry no evidence of their own.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "been",
    "before",
    "being",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "each",
    "for",
    "from",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "him",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "just",
    "me",
    "mine",
    "more",
    "most",
    "much",
    "my",
    "no",
    "not",
    "now",
    "of",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "out",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "to",
    "too",
    "under",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "user",
    "user's",
    "users",
    "tell",
    "know",
    "remember",
    "said",
    "say",
    "like",
    "get",
    "got",
    "ever",
    "many",
    "one",
    "thing",
    "things",
    "something",
    "anything",
    "let",
    "may",
    "might",
    "must",
    "shall",
    "yes",
];

/// At most this many of the question's words count (a 10 KB question costs no more than this).
const MAX_QUERY_TERMS: usize = 32;
/// A candidate's words are read from its first this many characters (a 100 KB memory would
/// otherwise be tokenised whole on every recall that finds it).
const MAX_TEXT_CHARS: usize = 20_000;

/// `text` cut to its first `MAX_TEXT_CHARS` characters.
fn head(text: &str) -> &str {
    match text.char_indices().nth(MAX_TEXT_CHARS) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// The words of `text` that can be evidence: lowercased letters and digits, no stopwords, a
/// plural's `s` dropped; numbers count from one digit, words from three letters.
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for w in text
        .split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .map(|w| w.trim_matches('\''))
        .filter(|w| !w.is_empty())
    {
        let w = w.to_lowercase();
        let w = w.strip_suffix("'s").unwrap_or(&w);
        let numeric = w.chars().all(|c| c.is_ascii_digit());
        if (!numeric && w.chars().count() < 3) || STOPWORDS.contains(&w) {
            continue;
        }
        let w = match w.strip_suffix('s') {
            Some(stem) if !numeric && stem.chars().count() >= 3 && !stem.ends_with('s') => stem,
            _ => w,
        };
        out.push(w.to_string());
    }
    out
}

/// For each candidate, the share of the question's rarity it contains: `Σ idf(w) over the
/// question's words it has / Σ idf(w) over all the question's words`, with `idf(w) =
/// ln((n + 1) / (df(w) + 0.5))` among the `n` candidates (0 for a word most of them share).
pub fn rarity_overlap(question: &str, texts: &[&str]) -> Vec<f64> {
    let mut q: Vec<String> = terms(question);
    let mut seen = HashSet::new();
    q.retain(|w| seen.insert(w.clone()));
    q.truncate(MAX_QUERY_TERMS);
    if q.is_empty() || texts.is_empty() {
        return vec![0.0; texts.len()];
    }
    let docs: Vec<HashSet<String>> = texts
        .iter()
        .map(|t| terms(head(t)).into_iter().collect())
        .collect();
    let n = texts.len() as f64;
    let idf: HashMap<&str, f64> = q
        .iter()
        .map(|w| {
            let df = docs.iter().filter(|d| d.contains(w)).count() as f64;
            (w.as_str(), ((n + 1.0) / (df + 0.5)).ln().max(0.0))
        })
        .collect();
    let total: f64 = idf.values().sum();
    if total <= 0.0 {
        return vec![0.0; texts.len()];
    }
    docs.iter()
        .map(|d| {
            q.iter()
                .filter(|w| d.contains(*w))
                .map(|w| idf[w.as_str()])
                .sum::<f64>()
                / total
        })
        .collect()
}

/// The gate: does the question touch the scope? (The nearest candidate within `gate`.)
pub fn gate_passes(candidates: &[Candidate<'_>], p: &Params) -> bool {
    candidates
        .iter()
        .map(|c| c.distance)
        .fold(f64::INFINITY, f64::min)
        <= p.gate
}

/// What the ranking knows of each candidate besides its distance: the share of the question's
/// rarity it contains, and how well its creation time matches the time window the question
/// names. Computed once a question (the benchmark ranks the same features under many settings).
#[derive(Debug, Clone, Default)]
pub struct Features {
    pub overlap: Vec<f64>,
    pub in_window: Vec<f64>,
}

impl Features {
    pub fn of(question: &str, at: f64, candidates: &[Candidate<'_>]) -> Features {
        let texts: Vec<&str> = candidates.iter().map(|c| c.text).collect();
        let window = when::window(question, at);
        Features {
            overlap: rarity_overlap(question, &texts),
            in_window: candidates
                .iter()
                .map(|c| match (window, c.created_ts) {
                    (Some(w), Some(t)) => w.weight(t),
                    _ => 0.0,
                })
                .collect(),
        }
    }
}

/// The ranking: indices of at most `k` candidates with their scores, best first. `at` is the
/// question's own time (unix seconds) for time phrases and recency. The gate is not applied here.
pub fn rank(
    question: &str,
    at: f64,
    candidates: &[Candidate<'_>],
    k: usize,
    p: &Params,
) -> Vec<(usize, f64)> {
    let features = if p.keyword > 0.0 || p.time > 0.0 {
        Features::of(question, at, candidates)
    } else {
        Features::default()
    };
    rank_with(&features, at, candidates, k, p)
}

/// [`rank`] with the question's features already computed (missing ones count 0).
pub fn rank_with(
    f: &Features,
    at: f64,
    candidates: &[Candidate<'_>],
    k: usize,
    p: &Params,
) -> Vec<(usize, f64)> {
    if candidates.is_empty() || k == 0 {
        return Vec::new();
    }
    let similarity = |c: &Candidate<'_>| 1.0 - c.distance;
    let best = candidates.iter().map(similarity).fold(f64::MIN, f64::max);
    let feature = |v: &Vec<f64>, i: usize| v.get(i).copied().unwrap_or(0.0);
    let mut scored: Vec<(usize, f64)> = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.distance <= p.hit_threshold)
        .filter(|(_, c)| p.relative <= 0.0 || similarity(c) >= best - p.relative)
        .map(|(i, c)| {
            let age_days = c.created_ts.map_or(0.0, |t| ((at - t) / 86_400.0).max(0.0));
            let mut score = similarity(c)
                + p.keyword * feature(&f.overlap, i)
                + p.time * feature(&f.in_window, i);
            if p.recency > 0.0 {
                score += p.recency * 0.5f64.powf(age_days / p.half_life_days);
            }
            if p.hits > 0.0 {
                score += p.hits * (1.0 + c.hit_count.max(0) as f64).log2();
            }
            (i, score)
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if !p.diversity {
        scored.truncate(k);
        return scored;
    }
    // One per thread first (a memory without a thread is a thread of its own), then the rest in
    // score order, if there are fewer threads than K.
    let mut threads = HashSet::new();
    let mut first: Vec<(usize, f64)> = Vec::new();
    let mut rest: Vec<(usize, f64)> = Vec::new();
    for s in scored {
        let fresh = match candidates[s.0].thread {
            Some(t) => threads.insert(t),
            None => true,
        };
        if fresh && first.len() < k {
            first.push(s);
        } else {
            rest.push(s);
        }
    }
    first.extend(rest.into_iter().take(k.saturating_sub(first.len())));
    first.truncate(k);
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            gate: 0.63,
            hit_threshold: 2.0,
            relative: 0.0,
            keyword: 0.0,
            time: 0.0,
            recency: 0.0,
            half_life_days: 60.0,
            hits: 0.0,
            diversity: false,
        }
    }

    fn cand<'a>(distance: f64, text: &'a str, thread: Option<&'a str>) -> Candidate<'a> {
        Candidate {
            distance,
            text,
            thread,
            created_ts: None,
            hit_count: 0,
        }
    }

    #[test]
    fn terms_drop_stopwords_and_plurals_keep_numbers() {
        assert_eq!(
            terms("What did the user's 2 dogs eat at Café Zürich in 2023?"),
            ["2", "dog", "eat", "café", "zürich", "2023"]
        );
        assert!(terms("the of and is ? !!!").is_empty());
        assert!(terms("").is_empty());
    }

    #[test]
    fn rare_words_count_more_than_shared_ones() {
        let texts = [
            "I walked the dog in the park",
            "The dog likes the park near Quimby street",
            "I bought a park bench",
        ];
        let o = rarity_overlap("Where is Quimby park?", &texts);
        assert!(o[1] > o[0] && o[1] > o[2], "{o:?}");
        assert_eq!(rarity_overlap("the of", &texts), vec![0.0; 3]);
        assert!(rarity_overlap("x", &[]).is_empty());
    }

    #[test]
    fn the_gate_looks_at_the_nearest_candidate_only() {
        let p = params();
        assert!(gate_passes(
            &[cand(0.9, "a", None), cand(0.6, "b", None)],
            &p
        ));
        assert!(!gate_passes(&[cand(0.64, "a", None)], &p));
        assert!(!gate_passes(&[], &p));
    }

    #[test]
    fn ranking_orders_by_similarity_and_keeps_k() {
        let c = [
            cand(0.5, "a", None),
            cand(0.3, "b", None),
            cand(0.9, "c", None),
        ];
        let r = rank("q", 0.0, &c, 2, &params());
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 0]);
        let cut = Params {
            hit_threshold: 0.4,
            ..params()
        };
        assert_eq!(rank("q", 0.0, &c, 3, &cut).len(), 1);
        let rel = Params {
            relative: 0.25,
            ..params()
        };
        assert_eq!(rank("q", 0.0, &c, 3, &rel).len(), 2);
    }

    #[test]
    fn diversity_takes_one_per_thread_first() {
        let c = [
            cand(0.1, "a", Some("s1")),
            cand(0.2, "b", Some("s1")),
            cand(0.3, "c", Some("s2")),
            cand(0.4, "d", None),
        ];
        let p = Params {
            diversity: true,
            ..params()
        };
        let order = |k| {
            rank("q", 0.0, &c, k, &p)
                .iter()
                .map(|x| x.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(order(3), [0, 2, 3]);
        // Fewer threads than K: the rest follow in score order.
        assert_eq!(order(4), [0, 2, 3, 1]);
    }

    #[test]
    fn keyword_evidence_lifts_a_rare_match() {
        let c = [
            cand(0.40, "The user likes hiking in the hills", None),
            cand(0.42, "The user's cousin Ottavio lives in Turin", None),
        ];
        let p = Params {
            keyword: 0.1,
            ..params()
        };
        let r = rank("When is Ottavio visiting?", 0.0, &c, 2, &p);
        assert_eq!(r[0].0, 1);
    }

    #[test]
    fn a_time_phrase_favours_memories_from_then() {
        let at = 1_710_504_000.0; // 2024-03-15T12:00:00Z
        let day = 86_400.0;
        let mut a = cand(0.40, "went to a concert", None);
        a.created_ts = Some(at - 60.0 * day);
        let mut b = cand(0.42, "went to a concert", None);
        b.created_ts = Some(at - 1.0 * day);
        let p = Params {
            time: 0.1,
            ..params()
        };
        assert_eq!(rank("what did I do yesterday?", at, &[a, b], 1, &p)[0].0, 1);
        assert_eq!(rank("what did I do?", at, &[a, b], 1, &p)[0].0, 0);
    }

    #[test]
    fn a_long_candidate_is_read_to_its_head_only() {
        let long = format!("{} zebra", "word ".repeat(MAX_TEXT_CHARS));
        assert_eq!(head(&long).chars().count(), MAX_TEXT_CHARS);
        assert_eq!(head("ünïcode"), "ünïcode");
        assert_eq!(rarity_overlap("zebra", &[&long, "a zebra"]), vec![0.0, 1.0]);
    }

    #[test]
    fn hostile_questions_rank_without_panicking() {
        let c = [cand(0.4, "text", Some("t")), cand(0.5, "", None)];
        let p = Params {
            keyword: 0.2,
            time: 0.2,
            recency: 0.1,
            diversity: true,
            ..params()
        };
        let long = "ago last ".repeat(1200);
        for q in [
            "",
            "!!!",
            "the of and",
            "3000 years ago",
            "last Smarch",
            &long,
        ] {
            assert_eq!(rank(q, f64::NAN, &c, 5, &p).len(), 2);
            assert_eq!(rank(q, 0.0, &c, 5, &p).len(), 2);
        }
    }
}

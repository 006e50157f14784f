//! Long-term memory: remember (dedup or write), recall (vector, keyword, hybrid), forget, list.

use redis::Value;
use serde_json::json;

use super::keyspace::{cmd, Keyspace, Kind, Scope, Spec};
use super::rank;
use super::scripts::push_spec;
use super::{now_ts, Site, Store};
use crate::error::ok;
use crate::error::{MemError, MemResult};
use crate::resp::read::{array, field, flat, float, int, text, ttl_from_pttl};
use crate::upstream::Link;

/// Tries at a fresh id when a new memory's key already exists (48 random bits: a collision is
/// rare, but at millions of memories not negligible, and it must never overwrite).
pub const ID_TRIES: usize = 5;

/// Keys one cursor page of an erasure reads.
pub const FORGET_PAGE: usize = 500;

/// Redis time one erasure step aims at: the step size adapts to stay near it (deleting a
/// document costs about 1 ms of HNSW upkeep on small machines).
pub const FORGET_STEP: std::time::Duration = std::time::Duration::from_millis(2);

/// The keys of one FT.AGGREGATE … LOAD 1 @__key WITHCURSOR page, and the cursor (0: done), in
/// either protocol's shape: RESP2 `[[total, [__key, k], …], cursor]`, RESP3
/// `[{results: [{extra_attributes: {__key: k}}, …], …}, cursor]`.
fn cursor_page(reply: &Value) -> (Vec<String>, i64) {
    let a = array(reply);
    let cursor = a.get(1).and_then(int).unwrap_or(0);
    let mut keys = Vec::new();
    match a.first() {
        Some(Value::Map(_)) => {
            let m = flat(&a[0]);
            if let Some(results) = field(&m, "results") {
                for r in array(results) {
                    let r = flat(r);
                    if let Some(k) = field(&r, "extra_attributes")
                        .map(flat)
                        .and_then(|x| field(&x, "__key").and_then(text))
                    {
                        keys.push(k);
                    }
                }
            }
        }
        Some(rows) => {
            for row in array(rows).iter().skip(1) {
                if let Some(k) = field(array(row), "__key").and_then(text) {
                    keys.push(k);
                }
            }
        }
        None => {}
    }
    (keys, cursor)
}

/// The keys of a scope's memories, a page at a time: plain FT.AGGREGATE … WITHCURSOR, then
/// FT.CURSOR READ, on the client's own connection (so with the client's rights).
///
/// In cluster mode RediSearch (without its coordinator) cannot load documents, `__key`
/// included: the keys are read with FT.SEARCH … NOCONTENT, all of them before the first page is
/// handed out (the caller may delete as it goes, which would shift later offsets).
pub(crate) struct ScopeKeys {
    index: String,
    query: String,
    cursor: Option<i64>,
    /// Cluster mode: the keys read so far, handed out a page at a time.
    listed: Option<std::collections::VecDeque<String>>,
    cluster: bool,
}

impl ScopeKeys {
    /// The keys of `scope`'s memories; `None`: every memory in the index.
    pub(crate) fn new(keys: &Keyspace, scope: Option<&Scope>) -> ScopeKeys {
        let (index, query) = match scope {
            Some(s) => keys.scope_query(s),
            None => (keys.index.clone(), "*".to_string()),
        };
        ScopeKeys {
            index,
            query,
            cursor: None,
            listed: None,
            cluster: keys.tagged,
        }
    }

    /// Cluster mode: every key of the query, by FT.SEARCH NOCONTENT pages.
    async fn list_all(&self, link: &mut Link) -> MemResult<std::collections::VecDeque<String>> {
        let mut all = std::collections::VecDeque::new();
        let page = 1000;
        let mut offset = 0usize;
        loop {
            let reply = ok(link
                .call1(Keyspace::key_page(&self.index, &self.query, offset, page))
                .await?)?;
            let keys: Vec<String> = match &reply {
                Value::Map(_) => field(&flat(&reply), "results")
                    .map(|r| {
                        array(r)
                            .iter()
                            .filter_map(|row| field(&flat(row), "id").and_then(text))
                            .collect()
                    })
                    .unwrap_or_default(),
                _ => array(&reply).iter().skip(1).filter_map(text).collect(),
            };
            let n = keys.len();
            all.extend(keys);
            if n < page || offset + page >= 1_000_000 {
                return Ok(all);
            }
            offset += page;
        }
    }

    /// The next page of keys; `None` when the cursor is done.
    pub(crate) async fn next(&mut self, link: &mut Link) -> MemResult<Option<Vec<String>>> {
        if self.cluster {
            if self.listed.is_none() {
                self.listed = Some(self.list_all(link).await?);
            }
            let listed = self.listed.as_mut().expect("just listed");
            if listed.is_empty() {
                return Ok(None);
            }
            let n = listed.len().min(FORGET_PAGE);
            return Ok(Some(listed.drain(..n).collect()));
        }
        let request = match self.cursor {
            Some(0) => return Ok(None),
            None => Keyspace::key_cursor(&self.index, &self.query, FORGET_PAGE),
            Some(c) => Keyspace::key_cursor_read(&self.index, c, FORGET_PAGE),
        };
        let reply = ok(link.call1(request).await?)?;
        let (keys, cursor) = cursor_page(&reply);
        self.cursor = Some(cursor);
        Ok(Some(keys))
    }
}

/// A memory as stored, with its vector (for consolidation and export).
#[derive(Debug, Clone)]
pub struct Stored {
    pub key: String,
    pub id: String,
    pub text: String,
    pub user: String,
    pub namespace: String,
    pub kind: String,
    pub source_thread: String,
    pub created_ts: Option<f64>,
    pub hit_count: i64,
    /// Milliseconds; -1: none.
    pub pttl: i64,
    pub embedding: Vec<f32>,
}

/// `b` as a netstring (`<len>:<bytes>`; see [`Store::memory_doc`]).
fn netstring(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(b.len().to_string().as_bytes());
    out.push(b':');
    out.extend_from_slice(b);
}

/// Keys one pipeline of [`Store::read_memories`] reads.
const READ_BATCH: usize = 200;

/// Which retrieval produced a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retrieval {
    Vector,
    Keyword,
    Hybrid,
    /// The gate (does the question touch the scope?), then the ranking of the nearest memories
    /// (`store::rank`); the default.
    Auto,
    /// `Auto`'s ranking without its gate: the K best-ranked memories, whatever their distance
    /// (search APIs that promise the n best items).
    Rank,
    /// `Auto`'s candidates found by a later window of a long text (a search side, never a mode;
    /// its hits are reported as `auto`).
    Windows,
}

impl From<crate::config::RecallMode> for Retrieval {
    fn from(m: crate::config::RecallMode) -> Retrieval {
        use crate::config::RecallMode;
        match m {
            RecallMode::Auto => Retrieval::Auto,
            RecallMode::Rank => Retrieval::Rank,
            RecallMode::Vector => Retrieval::Vector,
            RecallMode::Keyword => Retrieval::Keyword,
            RecallMode::Hybrid => Retrieval::Hybrid,
        }
    }
}

impl Retrieval {
    pub fn as_str(self) -> &'static str {
        match self {
            Retrieval::Vector => "vector",
            Retrieval::Keyword => "keyword",
            Retrieval::Hybrid => "hybrid",
            Retrieval::Auto | Retrieval::Windows => "auto",
            Retrieval::Rank => "rank",
        }
    }

    pub fn parse(s: &str) -> Option<Retrieval> {
        match s.to_ascii_lowercase().as_str() {
            "vector" => Some(Retrieval::Vector),
            "keyword" => Some(Retrieval::Keyword),
            "hybrid" => Some(Retrieval::Hybrid),
            "auto" => Some(Retrieval::Auto),
            "rank" => Some(Retrieval::Rank),
            _ => None,
        }
    }
}

/// One memory as MEM.RECALL and MEM.LIST return it.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub id: String,
    pub text: String,
    pub kind: String,
    pub user: String,
    pub namespace: String,
    pub source_thread: Option<String>,
    pub created_ts: Option<f64>,
    pub hit_count: Option<i64>,
    pub ttl: i64,
    pub distance: Option<f64>,
    pub score: Option<f64>,
    pub retrieval: Retrieval,
}

/// A memory to write.
pub struct NewMemory<'a> {
    pub text: &'a str,
    pub scope: &'a Scope,
    pub kind: Kind,
    /// Seconds; `None`: no expiry.
    pub ttl: Option<u64>,
    /// Dedup threshold; `None`: always write.
    pub dedup: Option<f64>,
    /// When it was learned (unix seconds); `None`: now.
    pub created_ts: Option<f64>,
    /// The uses it brings: a new memory's hit count; a dedup adds them, and 1, to the existing
    /// one's. `None`: 0.
    pub hits: Option<i64>,
    /// The embeddings of a long text's later windows (`embed::windows`); empty for most texts.
    pub windows: &'a [crate::embed::Vector],
}

#[derive(Debug, Clone, PartialEq)]
pub struct Remembered {
    pub id: String,
    pub deduped: bool,
    pub distance: Option<f64>,
    pub ttl: i64,
}

/// What to recall.
pub struct Recall<'a> {
    pub scope: &'a Scope,
    pub text: &'a str,
    pub vector: &'a [f32],
    pub k: usize,
    pub threshold: f64,
    pub mode: Retrieval,
    /// (keyword, vector) weights of the fusion.
    pub weights: (f64, f64),
    /// The question's own time (unix seconds): time phrases and recency count from it.
    pub at: f64,
}

/// Reciprocal rank fusion constant.
const RRF_K: f64 = 60.0;

/// How long an `adaptive` scope count is reused by later recalls of the scope (a scope that
/// grows past the brute-force limit meanwhile is brute-forced a little longer: still exact).
pub const SCOPE_SIZE_TTL: std::time::Duration = std::time::Duration::from_secs(10);
/// Scopes whose count is kept; beyond, the table starts again.
const SCOPE_SIZES_KEPT: usize = 10_000;

impl Store {
    /// The document of a new memory as the scripts take it: the guide's JSON, or in the compact
    /// layout the hash's fields as netstrings (`<len>:<bytes>`, field then value; each later
    /// window's vector as a field `#w`, written to a hash of its own by the script).
    pub(crate) fn memory_doc(
        &self,
        keys: &Keyspace,
        id: &str,
        m: &NewMemory<'_>,
        vector: &[f32],
    ) -> Vec<u8> {
        if keys.compact() {
            let mut doc = Vec::with_capacity(m.text.len() + 2 * vector.len() + 200);
            let ts = m.created_ts.unwrap_or_else(now_ts).to_string();
            let hits = m.hits.unwrap_or(0).to_string();
            let thread = m.scope.thread.clone().unwrap_or_default();
            for (f, v) in [
                ("text", m.text.as_bytes()),
                ("user", m.scope.user.as_bytes()),
                ("namespace", m.scope.namespace.as_bytes()),
                ("kind", m.kind.as_str().as_bytes()),
                ("source_thread", thread.as_bytes()),
                ("created_ts", ts.as_bytes()),
                ("hit_count", hits.as_bytes()),
                ("embedding", &keys.vector_blob(vector)),
            ] {
                netstring(&mut doc, f.as_bytes());
                netstring(&mut doc, v);
            }
            for w in m.windows {
                netstring(&mut doc, b"#w");
                netstring(&mut doc, &keys.vector_blob(w));
            }
            return doc;
        }
        let mut doc = json!({
            "id": id,
            "user": m.scope.user,
            "namespace": m.scope.namespace,
            "kind": m.kind.as_str(),
            "source_thread": m.scope.thread.clone().unwrap_or_default(),
            "text": m.text,
            "embedding": vector,
            "created_ts": m.created_ts.unwrap_or_else(now_ts),
            "hit_count": m.hits.unwrap_or(0),
        });
        if !m.windows.is_empty() {
            let w: Vec<&[f32]> = m.windows.iter().map(|v| &v[..]).collect();
            doc["windows"] = json!(w);
        }
        doc.to_string().into_bytes()
    }

    /// The scope a dedup check looks in: same user, namespace and kind (any thread).
    pub(crate) fn dedup_spec(&self, keys: &Keyspace, m: &NewMemory<'_>, vector: &[f32]) -> Spec {
        let scope = Scope {
            kind: Some(m.kind),
            thread: None,
            ..m.scope.clone()
        };
        keys.nearest(&scope, vector)
    }

    /// The script arguments of a remember after the doc: ttl, threshold, exact scope, what a
    /// dedup adds to the hit count, then the dedup spec when deduping.
    pub(crate) fn remember_args(
        &self,
        keys: &Keyspace,
        m: &NewMemory<'_>,
        vector: &[f32],
        args: &mut Vec<Vec<u8>>,
    ) {
        args.push(m.ttl.unwrap_or(0).to_string().into_bytes());
        args.push(m.dedup.unwrap_or(-1.0).to_string().into_bytes());
        args.push(m.scope.user.clone().into_bytes());
        args.push(m.scope.namespace.clone().into_bytes());
        args.push(m.kind.as_str().as_bytes().to_vec());
        args.push((1 + m.hits.unwrap_or(0)).to_string().into_bytes());
        if m.dedup.is_some() {
            push_spec(args, &self.dedup_spec(keys, m, vector));
        }
    }

    pub async fn remember(
        &self,
        link: &mut Link,
        m: &NewMemory<'_>,
        vector: &[f32],
    ) -> MemResult<Remembered> {
        indexed!(self, link, self.remember_once(link, m, vector).await)
    }

    async fn remember_once(
        &self,
        link: &mut Link,
        m: &NewMemory<'_>,
        vector: &[f32],
    ) -> MemResult<Remembered> {
        let site = self.site(link);
        for _ in 0..ID_TRIES {
            let id = self.keys.new_memory_id(&m.scope.user);
            let key = self.keys.memory(&id);
            let mut args = vec![self.memory_doc(&site.keys, &id, m, vector)];
            self.remember_args(&site.keys, m, vector, &mut args);
            let v = self
                .scripts
                .remember
                .run(
                    link,
                    std::slice::from_ref(&key),
                    &site.keys.rights_remember(&key),
                    args,
                )
                .await?;
            if let Some(r) = self.parse_remembered(&v)? {
                return Ok(r);
            }
        }
        Err(MemError::Internal("no free memory id after 5 tries".into()))
    }

    /// The remember script's reply; `None` when the new id collided (nothing was written).
    pub(crate) fn parse_remembered(&self, v: &Value) -> MemResult<Option<Remembered>> {
        let a = array(v);
        let status = a
            .first()
            .and_then(text)
            .ok_or_else(|| MemError::Internal(format!("remember script replied {v:?}")))?;
        if status == "collision" {
            return Ok(None);
        }
        let key = a.get(1).and_then(text).unwrap_or_default();
        Ok(Some(Remembered {
            id: self.keys.memory_id(&key).to_string(),
            deduped: status == "dedup",
            distance: a.get(2).and_then(float),
            ttl: ttl_from_pttl(a.get(3).and_then(int).unwrap_or(-1)),
        }))
    }

    /// The searches a recall needs: (retrieval, spec) for each side.
    pub(crate) fn recall_specs(&self, site: &Site, r: &Recall<'_>) -> Vec<(Retrieval, Spec)> {
        let keys = &site.keys;
        let mut specs = Vec::new();
        let large = self.scope_size_known(r.scope);
        if matches!(r.mode, Retrieval::Vector | Retrieval::Hybrid) {
            specs.push((Retrieval::Vector, keys.knn(r.scope, r.k, r.vector, large)));
        }
        if matches!(r.mode, Retrieval::Auto | Retrieval::Rank) {
            // The candidates (their texts carry the keyword evidence: no BM25 search needed).
            let c = r.k.max(self.config().recall_candidates);
            specs.push((Retrieval::Auto, keys.knn(r.scope, c, r.vector, large)));
            // Long texts' later windows, where the index has them: candidates by any part.
            if site.windows_indexed() {
                specs.push((
                    Retrieval::Windows,
                    keys.knn_windows(r.scope, c, r.vector, large),
                ));
            }
        }
        if matches!(r.mode, Retrieval::Keyword | Retrieval::Hybrid) {
            if let Some(s) = keys.keyword(r.scope, r.text, r.k) {
                specs.push((Retrieval::Keyword, s));
            }
        }
        specs
    }

    pub async fn recall(&self, link: &mut Link, r: &Recall<'_>) -> MemResult<Vec<Hit>> {
        let site = self.site(link);
        // The index's layout decides the query vector's encoding: checked first.
        self.ready_at(&site).await?;
        let specs = self.recall_specs(&site, r);
        if specs.is_empty() {
            return Ok(Vec::new());
        }
        indexed!(self, link, self.recall_once(link, r, &specs).await)
    }

    async fn recall_once(
        &self,
        link: &mut Link,
        r: &Recall<'_>,
        specs: &[(Retrieval, Spec)],
    ) -> MemResult<Vec<Hit>> {
        let sides: Vec<(&Spec, bool)> = specs.iter().map(|(_, s)| (s, true)).collect();
        let results = self.search(link, &r.scope.user, &sides).await?;
        self.fuse(&self.site(link), r, specs, &results)
    }

    /// What an `adaptive` count found for `scope` within the last [`SCOPE_SIZE_TTL`]: more
    /// memories than the brute-force limit, or not.
    fn scope_size_known(&self, scope: &Scope) -> Option<bool> {
        let known = self.scope_sizes.lock().expect("scope sizes");
        known
            .get(&scope.filter())
            .filter(|(at, _)| at.elapsed() < SCOPE_SIZE_TTL)
            .map(|(_, large)| *large)
    }

    /// Keep what the script's `adaptive` count decided for `scope` (its search result's 4th
    /// element), so the next recalls of the scope skip the count (~0.06 ms of Redis at 10k).
    fn note_scope_size(&self, scope: &Scope, result: &Value) {
        let large = match array(result).get(3).and_then(text).as_deref() {
            Some("BATCHES") => true,
            Some("ADHOC_BF") => false,
            _ => return,
        };
        let mut known = self.scope_sizes.lock().expect("scope sizes");
        if known.len() >= SCOPE_SIZES_KEPT {
            known.clear();
        }
        known.insert(scope.filter(), (std::time::Instant::now(), large));
    }

    /// Turn the raw search results into hits: thresholded vector hits, keyword hits, or their
    /// reciprocal rank fusion. In hybrid mode a failed vector side leaves the keyword side.
    pub(crate) fn fuse(
        &self,
        site: &Site,
        r: &Recall<'_>,
        specs: &[(Retrieval, Spec)],
        results: &[Value],
    ) -> MemResult<Vec<Hit>> {
        let mut vector_hits = None;
        let mut keyword_hits = None;
        let mut candidates = None;
        for ((side, _), result) in specs.iter().zip(results) {
            if matches!(side, Retrieval::Auto | Retrieval::Vector) {
                self.note_scope_size(r.scope, result);
            }
            let parsed = if matches!(side, Retrieval::Auto | Retrieval::Windows) {
                self.parse_rows(result, *side)
            } else {
                self.parse_search(result, *side, r.scope)
            };
            match (side, parsed) {
                (Retrieval::Vector, Ok(hits)) => {
                    vector_hits = Some(
                        hits.into_iter()
                            .filter(|h| h.distance.is_some_and(|d| d <= r.threshold))
                            .collect::<Vec<_>>(),
                    )
                }
                (Retrieval::Vector, Err(e)) if r.mode == Retrieval::Hybrid => {
                    tracing::warn!(error = %e, "hybrid recall: vector side failed, answering with the keyword side")
                }
                (Retrieval::Windows, Err(e)) => {
                    // The index lost its windows field (recreated by other code): first windows
                    // only until the index is checked again.
                    tracing::warn!(error = %e, "auto recall: the windows search failed, ranking first windows only");
                    site.windows
                        .store(false, std::sync::atomic::Ordering::Relaxed);
                    site.index_lost();
                }
                (_, Err(e)) => return Err(e),
                (Retrieval::Auto | Retrieval::Windows, Ok(hits)) => {
                    // The first windows' KNN and the later windows' KNN: each memory once, at
                    // its nearest window (a later window only within recall_window_threshold),
                    // nearest first.
                    let limit = self.config().recall_window_threshold;
                    let mut all: Vec<Hit> = candidates.take().unwrap_or_default();
                    for h in hits.into_iter().filter(|h| {
                        *side != Retrieval::Windows || h.distance.is_some_and(|d| d <= limit)
                    }) {
                        match all.iter_mut().find(|x| x.id == h.id) {
                            Some(x) if h.distance < x.distance => *x = h,
                            Some(_) => {}
                            None => all.push(h),
                        }
                    }
                    all.sort_by(|a, b| {
                        a.distance
                            .partial_cmp(&b.distance)
                            .unwrap_or(std::cmp::Ordering::Equal)
                    });
                    candidates = Some(all);
                }
                (_, Ok(hits)) => keyword_hits = Some(hits),
            }
        }
        match r.mode {
            Retrieval::Vector => Ok(vector_hits.unwrap_or_default()),
            Retrieval::Keyword => Ok(keyword_hits.unwrap_or_default()),
            Retrieval::Auto | Retrieval::Rank | Retrieval::Windows => {
                Ok(self.rank(r, candidates.unwrap_or_default()))
            }
            Retrieval::Hybrid => {
                let Some(vector_hits) = vector_hits else {
                    return Ok(keyword_hits.unwrap_or_default());
                };
                let (wk, wv) = r.weights;
                let mut fused: Vec<Hit> = Vec::new();
                for (weight, hits) in [(wv, vector_hits), (wk, keyword_hits.unwrap_or_default())] {
                    for (rank, hit) in hits.into_iter().enumerate() {
                        let add = weight / (RRF_K + rank as f64 + 1.0);
                        match fused.iter_mut().find(|h| h.id == hit.id) {
                            Some(h) => {
                                h.score = Some(h.score.unwrap_or(0.0) + add);
                                h.distance = h.distance.or(hit.distance);
                            }
                            None => fused.push(Hit {
                                score: Some(add),
                                retrieval: Retrieval::Hybrid,
                                ..hit
                            }),
                        }
                    }
                }
                fused.sort_by(|a, b| {
                    b.score
                        .partial_cmp(&a.score)
                        .unwrap_or(std::cmp::Ordering::Equal)
                });
                fused.truncate(r.k);
                Ok(fused)
            }
        }
    }

    /// `MODE auto` (the gate, then the ranking) and `MODE rank` (the ranking alone) over the
    /// candidates, each memory once at its nearest window, nearest first: `store::rank`. A hit
    /// keeps its `distance` and carries its `score`.
    fn rank(&self, r: &Recall<'_>, rows: Vec<Hit>) -> Vec<Hit> {
        let c = self.config();
        let candidates: Vec<Hit> = rows
            .into_iter()
            .filter(|h| h.distance.is_some())
            .filter(|h| {
                r.scope
                    .matches(&h.user, &h.namespace, &h.kind, h.source_thread.as_deref())
            })
            .take(c.recall_candidates.max(r.k))
            .collect();
        let mut params = rank::Params::of(c, r.threshold);
        if r.mode == Retrieval::Rank {
            // The K best-ranked, always: no gate and no per-hit cut-off of the settings; a
            // THRESHOLD given caps each hit's distance, as in the other modes.
            params.gate = 2.0;
            params.hit_threshold = r.threshold;
            params.relative = 0.0;
        }
        let view: Vec<rank::Candidate<'_>> = candidates
            .iter()
            .map(|h| rank::Candidate {
                distance: h.distance.unwrap_or(2.0),
                text: &h.text,
                thread: h.source_thread.as_deref(),
                created_ts: h.created_ts,
                hit_count: h.hit_count.unwrap_or(0),
            })
            .collect();
        if r.mode == Retrieval::Auto && !rank::gate_passes(&view, &params) {
            return Vec::new();
        }
        // Nothing stands out from the scope's background (the farthest of a full set of
        // candidates; a smaller scope has none to measure): nothing is recalled.
        let full = c.recall_candidates.max(r.k);
        if r.mode == Retrieval::Auto
            && c.recall_min_standout > 0.0
            && view.len() == full
            && full >= 2
            && view[full - 1].distance - view[0].distance < c.recall_min_standout
        {
            return Vec::new();
        }
        let retrieval = match r.mode {
            Retrieval::Rank => Retrieval::Rank,
            _ => Retrieval::Auto,
        };
        let order = rank::rank(r.text, r.at, &view, r.k, &params);
        let mut slots: Vec<Option<Hit>> = candidates.into_iter().map(Some).collect();
        order
            .into_iter()
            .filter_map(|(i, score)| {
                slots[i].take().map(|h| Hit {
                    score: Some(score),
                    retrieval,
                    ..h
                })
            })
            .collect()
    }

    /// One search() result of the Lua prelude: `{'ok', total, rows}` or `{'err', msg}`.
    pub(crate) fn parse_search(
        &self,
        v: &Value,
        side: Retrieval,
        scope: &Scope,
    ) -> MemResult<Vec<Hit>> {
        let mut hits = self.parse_rows(v, side)?;
        hits.retain(|h| scope.matches(&h.user, &h.namespace, &h.kind, h.source_thread.as_deref()));
        Ok(hits)
    }

    /// [`Store::parse_search`] without the exact scope check.
    fn parse_rows(&self, v: &Value, side: Retrieval) -> MemResult<Vec<Hit>> {
        let a = array(v);
        match a.first().and_then(text).as_deref() {
            Some("ok") => {}
            Some("err") => {
                let msg = a.get(1).and_then(text).unwrap_or_default();
                return Err(MemError::upstream(format!("search failed: {msg}")));
            }
            _ => return Err(MemError::Internal(format!("search script replied {v:?}"))),
        }
        let rows = a.get(2).map(array).unwrap_or_default();
        Ok(rows.iter().map(|row| self.hit(array(row), side)).collect())
    }

    fn hit(&self, row: &[Value], side: Retrieval) -> Hit {
        let key = row.first().and_then(text).unwrap_or_default();
        let fields = row.get(3).map(array).unwrap_or_default();
        let get = |name: &str| field(fields, name).and_then(text);
        let distance = field(fields, "distance").and_then(float);
        let score = match side {
            Retrieval::Vector | Retrieval::Auto => distance.map(|d| 1.0 - d),
            _ => row.get(2).and_then(float),
        };
        Hit {
            id: self.keys.memory_id(&key).to_string(),
            text: get("text").unwrap_or_default(),
            kind: get("kind").unwrap_or_default(),
            user: get("user").unwrap_or_default(),
            namespace: get("namespace").unwrap_or_default(),
            source_thread: get("source_thread").filter(|s| !s.is_empty()),
            created_ts: field(fields, "created_ts").and_then(float),
            hit_count: field(fields, "hit_count").and_then(int),
            ttl: ttl_from_pttl(row.get(1).and_then(int).unwrap_or(-1)),
            distance,
            score,
            retrieval: side,
        }
    }

    /// Delete one memory; with `owner`, only if it belongs to that user. Returns 1 or 0.
    pub async fn forget_id(
        &self,
        link: &mut Link,
        id: &str,
        owner: Option<&str>,
    ) -> MemResult<i64> {
        let key = self.keys.memory(id);
        let site = self.site(link);
        // The rights follow the index's layout: learn it if no request has yet (no index needed
        // to delete, so a failing check does not stop the forget).
        let _ = self.ready_at(&site).await;
        let args = vec![b"id".to_vec(), owner.unwrap_or("").as_bytes().to_vec()];
        let v = self
            .scripts
            .forget
            .run(
                link,
                std::slice::from_ref(&key),
                &site.keys.rights_forget_id(&key),
                args,
            )
            .await?;
        Ok(int(&v).unwrap_or(0))
    }

    /// Delete every memory of a scope without blocking Redis: a cursor reads the scope's keys a
    /// page at a time (plain FT.AGGREGATE / FT.CURSOR on the client's connection), and a script
    /// deletes the exact matches among them a few at a time, as many as fit in about
    /// [`FORGET_STEP`] (timed by the proxy: a script's clock is frozen). Returns how many were
    /// deleted; safe to run again after an interruption.
    pub async fn forget_scope(&self, link: &mut Link, scope: &Scope) -> MemResult<i64> {
        indexed!(self, link, self.forget_pages(link, scope).await)
    }

    async fn forget_pages(&self, link: &mut Link, scope: &Scope) -> MemResult<i64> {
        // An erasure on a master that no longer serves the user would find nothing to delete.
        self.follow_slot(link, &scope.user).await?;
        let site = self.site(link);
        let mut pages = ScopeKeys::new(&site.keys, Some(scope));
        let mut deleted = 0i64;
        let mut step = 4usize;
        while let Some(keys) = pages.next(link).await? {
            let mut rest: &[String] = &keys;
            while !rest.is_empty() {
                let mut args = vec![
                    b"keys".to_vec(),
                    scope.user.clone().into_bytes(),
                    scope.namespace.clone().into_bytes(),
                    step.to_string().into_bytes(),
                ];
                args.extend(rest.iter().take(step).map(|k| k.clone().into_bytes()));
                let started = std::time::Instant::now();
                let v = self
                    .scripts
                    .forget
                    .run(link, &[], &site.keys.rights_forget_scope(), args)
                    .await?;
                let took = started.elapsed();
                if took < FORGET_STEP / 2 {
                    step = (step * 2).min(256);
                } else if took > FORGET_STEP * 2 {
                    step = (step / 2).max(1);
                }
                let a = array(&v);
                deleted += a.first().and_then(int).unwrap_or(0);
                let examined = a.get(1).and_then(int).unwrap_or(0).max(1) as usize;
                rest = &rest[examined.min(rest.len())..];
            }
        }
        Ok(deleted)
    }

    /// The memories at `keys` (pipelined JSON.GET, or HGETALL in the compact layout, and PTTL on
    /// the client's connection, with its rights); keys that are gone or not memories (another
    /// writer's keys under the prefix, a long text's window) are left out.
    pub async fn read_memories(
        &self,
        link: &mut Link,
        keys: &[String],
        compact: bool,
    ) -> MemResult<Vec<Stored>> {
        let mut out = Vec::with_capacity(keys.len());
        for batch in keys.chunks(READ_BATCH) {
            let mut cmds = Vec::with_capacity(batch.len() * 2);
            for k in batch {
                cmds.push(if compact {
                    cmd(&["HGETALL", k])
                } else {
                    cmd(&["JSON.GET", k, "$"])
                });
                cmds.push(cmd(&["PTTL", k]));
            }
            let replies = link.call(&cmds).await?;
            for (k, pair) in batch.iter().zip(replies.chunks(2)) {
                let doc = match ok(pair[0].clone()) {
                    Ok(Value::Nil) => continue,
                    // Not a document of this layout (another writer's key under the prefix).
                    Err(MemError::Upstream(u)) if u.code.as_deref() == Some("WRONGTYPE") => {
                        continue
                    }
                    Ok(v) => v,
                    Err(e) => return Err(e),
                };
                let pttl = int(&ok(pair[1].clone())?).unwrap_or(-1);
                let stored = if compact {
                    self.stored_hash(k, &doc, pttl)
                } else {
                    self.stored_json(k, &doc, pttl)
                };
                out.extend(stored);
            }
        }
        Ok(out)
    }

    /// A memory from its JSON document (`JSON.GET key $`).
    fn stored_json(&self, k: &str, doc: &Value, pttl: i64) -> Option<Stored> {
        let doc = text(doc).unwrap_or_default();
        let Ok(serde_json::Value::Array(mut docs)) = serde_json::from_str(&doc) else {
            return None;
        };
        let d = docs.pop()?;
        let s = |f: &str| d.get(f).and_then(|v| v.as_str()).map(str::to_string);
        let embedding = d
            .get("embedding")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_f64().map(|f| f as f32))
                    .collect()
            })
            .unwrap_or_default();
        Some(self.stored(
            k,
            pttl,
            s,
            d.get("created_ts").and_then(|v| v.as_f64()),
            d.get("hit_count").and_then(|v| v.as_i64()),
            embedding,
        ))
    }

    /// A memory from its hash (`HGETALL key`, the compact layout); `None` for an empty hash and
    /// for a long text's window (a hash without `text`).
    fn stored_hash(&self, k: &str, doc: &Value, pttl: i64) -> Option<Stored> {
        let pairs = flat(doc);
        let raw = |f: &str| match field(&pairs, f) {
            Some(Value::BulkString(b)) => Some(b.as_slice()),
            _ => None,
        };
        let s = |f: &str| raw(f).map(|b| String::from_utf8_lossy(b).into_owned());
        raw("text")?;
        let num = |f: &str| s(f).and_then(|v| v.trim().parse::<f64>().ok());
        let embedding = raw("embedding")
            .and_then(super::keyspace::f16_vector)
            .unwrap_or_default();
        Some(self.stored(
            k,
            pttl,
            s,
            num("created_ts"),
            num("hit_count").map(|h| h as i64),
            embedding,
        ))
    }

    /// A memory read back, in either layout: `s` reads a text field.
    fn stored(
        &self,
        k: &str,
        pttl: i64,
        s: impl Fn(&str) -> Option<String>,
        created_ts: Option<f64>,
        hit_count: Option<i64>,
        embedding: Vec<f32>,
    ) -> Stored {
        let s = |f: &str| s(f).unwrap_or_default();
        Stored {
            key: k.to_string(),
            id: self.keys.memory_id(k).to_string(),
            text: s("text"),
            user: s("user"),
            namespace: s("namespace"),
            kind: s("kind"),
            source_thread: s("source_thread"),
            created_ts,
            hit_count: hit_count.unwrap_or(0),
            pttl,
            embedding,
        }
    }

    /// A page of a scope's memories, newest first.
    pub async fn list(
        &self,
        link: &mut Link,
        scope: &Scope,
        offset: usize,
        count: usize,
    ) -> MemResult<Vec<Hit>> {
        let spec = self.site(link).keys.list(scope, offset, count);
        let mut hits = indexed!(self, link, self.list_once(link, scope, &spec).await)?;
        for h in &mut hits {
            h.score = None;
        }
        Ok(hits)
    }

    async fn list_once(&self, link: &mut Link, scope: &Scope, spec: &Spec) -> MemResult<Vec<Hit>> {
        let results = self.search(link, &scope.user, &[(spec, true)]).await?;
        self.parse_search(
            results.first().unwrap_or(&Value::Nil),
            Retrieval::Keyword,
            scope,
        )
    }

    /// (num_docs, indexing failures) of the index.
    pub async fn index_stats(&self, link: &mut Link) -> MemResult<(i64, i64)> {
        if self.cluster().is_some() {
            return self.cluster_stats().await;
        }
        let cmd = Keyspace::index_info(&self.site(link).keys.index);
        let info = indexed!(self, link, ok(link.call1(cmd.clone()).await?))?;
        Ok(index_counts(&info))
    }

    /// Cluster mode: the sums over every master's index (read on memproxy's own connections:
    /// the client's connection reaches one master).
    async fn cluster_stats(&self) -> MemResult<(i64, i64)> {
        let (mut docs, mut failures) = (0, 0);
        for site in self.all_sites() {
            self.ready_at(&site).await?;
            let info = ok(self
                .admin_one(&site, Keyspace::index_info(&site.keys.index))
                .await?)?;
            let (d, f) = index_counts(&info);
            docs += d;
            failures += f;
        }
        Ok((docs, failures))
    }
}

/// (documents, indexing failures) of an FT.INFO reply.
fn index_counts(info: &Value) -> (i64, i64) {
    let info = flat(info);
    let docs = field(&info, "num_docs").and_then(int).unwrap_or(0);
    let failures = field(&info, "hash_indexing_failures")
        .and_then(int)
        .or_else(|| {
            field(&info, "Index Errors")
                .map(flat)
                .and_then(|e| field(&e, "indexing failures").and_then(int))
        })
        .unwrap_or(0);
    (docs, failures)
}

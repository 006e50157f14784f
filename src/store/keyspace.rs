//! Every key name and every query string memproxy sends, and the one escaping function they use.
//!
//! No user-supplied value reaches RediSearch without [`escape`]: TAG values and keyword terms get
//! a backslash before every ASCII character that is not a letter, a digit or `_` (space included),
//! which is RediSearch's full escape set and more, so no value can close a `{…}` tag, start a
//! wildcard or add a clause that widens a filter to another user's memories.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::{Config, HybridPolicy, Storage};

/// Fields returned for every memory (never the embedding). Not `id`: a memory's id is its key
/// without the prefix (what MEM.FORGET takes, and what the proxy keeps vectors by); a
/// document's own `id` field is whatever its writer put there.
pub const MEMORY_FIELDS: [&str; 7] = [
    "user",
    "namespace",
    "kind",
    "source_thread",
    "text",
    "created_ts",
    "hit_count",
];

/// Longest keyword query, in terms.
const MAX_TERMS: usize = 32;

/// How many more compact windows a windows KNN asks for than the memories it needs.
pub const WINDOW_FANOUT: usize = 8;

/// Nearest memories a dedup check looks at to find the nearest one of the exact scope.
pub const DEDUP_CANDIDATES: usize = 10;

/// RediSearch's default stopwords. They never enter a keyword query: RediSearch 2.10 crashes the
/// whole server on some unions of stopwords (`@text:(are|there|any)`), and they match nothing
/// anyway on an index with the default stopword list.
pub const STOPWORDS: [&str; 33] = [
    "a", "is", "the", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into",
    "it", "no", "not", "of", "on", "or", "such", "that", "their", "then", "there", "these", "they",
    "this", "to", "was", "will", "with",
];

/// A search spec: the FT.SEARCH arguments, index first.
pub type Spec = Vec<Vec<u8>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Episodic,
    Semantic,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Episodic => "episodic",
            Kind::Semantic => "semantic",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s.to_ascii_lowercase().as_str() {
            "episodic" => Some(Kind::Episodic),
            "semantic" => Some(Kind::Semantic),
            _ => None,
        }
    }
}

/// Whose memories a command may touch.
#[derive(Debug, Clone, PartialEq)]
pub struct Scope {
    pub user: String,
    pub namespace: String,
    pub kind: Option<Kind>,
    pub thread: Option<String>,
}

/// Backslash-escape every ASCII character that is not alphanumeric or `_`.
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        if c.is_ascii() && !c.is_ascii_alphanumeric() && c != '_' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Scope {
    /// The pre-filter: `@user:{…} @namespace:{…}` plus kind and thread when given. An empty
    /// namespace (MEM.FORGET USER without NS) means every namespace of the user.
    pub fn filter(&self) -> String {
        let mut f = format!("@user:{{{}}}", escape(&self.user));
        if !self.namespace.is_empty() {
            f.push_str(&format!(" @namespace:{{{}}}", escape(&self.namespace)));
        }
        if let Some(k) = self.kind {
            f.push_str(&format!(" @kind:{{{}}}", k.as_str()));
        }
        if let Some(t) = &self.thread {
            f.push_str(&format!(" @source_thread:{{{}}}", escape(t)));
        }
        f
    }
}

impl Scope {
    /// Exact match of a stored memory's scope. TAG queries alone are not enough: RediSearch
    /// compares TAGs case-insensitively unless the index says CASESENSITIVE, and splits them at
    /// `,`, so `@user:{alice}` also matches a memory of `ALICE` or of `alice,bob`.
    pub fn matches(&self, user: &str, namespace: &str, kind: &str, thread: Option<&str>) -> bool {
        user == self.user
            && (self.namespace.is_empty() || namespace == self.namespace)
            && self.kind.is_none_or(|k| k.as_str() == kind)
            && (self.thread.is_none() || self.thread.as_deref() == thread)
    }
}

/// `recall_hybrid_policy = "adaptive"` as it travels in a KNN query (the scripts replace it).
pub const ADAPTIVE: &str = " HYBRID_POLICY ADAPTIVE";

/// Key names and index name, from the configured prefixes.
#[derive(Debug, Clone)]
pub struct Keyspace {
    /// ` HYBRID_POLICY …` for KNN with a filter, or empty to let RediSearch choose. `ADAPTIVE` is
    /// memproxy's own: the scripts' `search()` (lua/prelude.lua) replaces it after counting the
    /// scope; every KNN spec built here runs through it.
    pub knn_policy: String,
    pub index: String,
    pub mem_prefix: String,
    pub session_prefix: String,
    pub event_prefix: String,
    /// Cluster mode: memory ids, session and event keys carry their user's hash tag
    /// (`agent:mem:{alice}:<id>`), so that all of a user's data shares one slot.
    pub tagged: bool,
    /// The index's layout: the setting until the index check reads the index's own.
    pub layout: Layout,
}

/// The layout of one memory index (`config::Storage`): set by the index check from the index
/// itself, read by every key, document and query built for it.
#[derive(Debug, Default)]
pub struct Layout(AtomicBool);

impl Layout {
    pub fn of(storage: Storage) -> Layout {
        Layout(AtomicBool::new(storage == Storage::Compact))
    }

    pub fn get(&self) -> Storage {
        if self.0.load(Ordering::Relaxed) {
            Storage::Compact
        } else {
            Storage::Guide
        }
    }

    pub fn set(&self, storage: Storage) {
        self.0.store(storage == Storage::Compact, Ordering::Relaxed);
    }
}

impl Clone for Layout {
    fn clone(&self) -> Layout {
        Layout::of(self.get())
    }
}

/// The compact layout keeps each later window of a long text as a HASH of its own beside the
/// memory, `<memory key>#w<n>` (n from 1), with the memory's scope tags and the vector in
/// `windows`; the memory's `window_count` says how many.
pub fn window_key(memory_key: &str, n: usize) -> String {
    format!("{memory_key}#w{n}")
}

impl Keyspace {
    pub fn new(cfg: &Config) -> Keyspace {
        Keyspace {
            knn_policy: match cfg.recall_hybrid_policy {
                HybridPolicy::Auto => String::new(),
                HybridPolicy::Adaptive => " HYBRID_POLICY ADAPTIVE".into(),
                HybridPolicy::Batches => " HYBRID_POLICY BATCHES".into(),
                HybridPolicy::AdhocBf => " HYBRID_POLICY ADHOC_BF".into(),
            },
            index: cfg.mem_index_name.clone(),
            mem_prefix: cfg.mem_key_prefix.clone(),
            session_prefix: cfg.session_key_prefix.clone(),
            event_prefix: cfg.event_key_prefix.clone(),
            tagged: false,
            layout: Layout::of(cfg.storage),
        }
    }

    /// Does this index keep memories as hashes (the compact layout)?
    pub fn compact(&self) -> bool {
        self.layout.get() == Storage::Compact
    }

    /// A vector as this index's vector fields take it: FLOAT32 (guide) or FLOAT16 (compact).
    pub fn vector_blob(&self, v: &[f32]) -> Vec<u8> {
        if self.compact() {
            f16_blob(v)
        } else {
            vector_blob(v)
        }
    }

    /// A fresh memory id for `user`: 12 hex digits, after `{<user's tag>}:` in cluster mode.
    pub fn new_memory_id(&self, user: &str) -> String {
        if self.tagged {
            format!(
                "{{{}}}:{}",
                crate::upstream::cluster::slot::user_tag(user),
                new_id()
            )
        } else {
            new_id()
        }
    }

    /// `thread` as it appears in session and event keys: `{<user's tag>}:thread` in cluster
    /// mode, the thread itself on one Redis.
    fn thread_part(&self, user: &str, thread: &str) -> String {
        if self.tagged {
            format!(
                "{{{}}}:{thread}",
                crate::upstream::cluster::slot::user_tag(user)
            )
        } else {
            thread.to_string()
        }
    }

    /// Cluster mode: a key in `user`'s slot (a memory key's prefix), declared by the scripts that
    /// read a scope without naming a key of it, so that Redis answers `MOVED` / `ASK` when that
    /// slot lives elsewhere now. None on one Redis (nothing to route; no key pattern to pass).
    pub fn route_key(&self, user: &str) -> Option<String> {
        self.tagged.then(|| {
            format!(
                "{}{{{}}}:",
                self.mem_prefix,
                crate::upstream::cluster::slot::user_tag(user)
            )
        })
    }

    pub fn memory(&self, id: &str) -> String {
        format!("{}{id}", self.mem_prefix)
    }

    /// The id of a memory key (the key itself if it lacks the prefix).
    pub fn memory_id<'a>(&self, key: &'a str) -> &'a str {
        key.strip_prefix(self.mem_prefix.as_str()).unwrap_or(key)
    }

    /// A thread's session hash (`user` matters only in cluster mode).
    pub fn session(&self, user: &str, thread: &str) -> String {
        format!("{}{}", self.session_prefix, self.thread_part(user, thread))
    }

    /// The index's model stamp (a hash beside the index, outside the memory prefix).
    pub fn model_stamp(&self) -> String {
        format!("{}:model", self.index)
    }

    /// A thread's event stream (`user` matters only in cluster mode).
    pub fn events(&self, user: &str, thread: &str) -> String {
        format!("{}{}", self.event_prefix, self.thread_part(user, thread))
    }

    fn spec(&self, query: String, tail: &[&str]) -> Spec {
        let mut s: Spec = vec![self.index.clone().into_bytes(), query.into_bytes()];
        s.extend(tail.iter().map(|a| a.as_bytes().to_vec()));
        s
    }

    fn with_return(spec: Spec, extra: &[&str]) -> Spec {
        let fields: Vec<&str> = MEMORY_FIELDS.iter().chain(extra).copied().collect();
        Self::returning(spec, &fields)
    }

    /// `spec` asking for `fields` only (`RETURN n …`), in query dialect 2.
    fn returning(mut spec: Spec, fields: &[&str]) -> Spec {
        spec.push(b"RETURN".to_vec());
        spec.push(fields.len().to_string().into_bytes());
        spec.extend(fields.iter().map(|f| f.as_bytes().to_vec()));
        spec.extend([b"DIALECT".to_vec(), b"2".to_vec()]);
        spec
    }

    /// KNN `k` within the scope (pre-filter in the same query), nearest first, up to LIMIT.
    fn knn_base(&self, scope: &Scope, k: usize, vector: &[f32]) -> Spec {
        self.knn_with(scope, k, vector, &self.knn_policy)
    }

    fn knn_with(&self, scope: &Scope, k: usize, vector: &[f32], policy: &str) -> Spec {
        self.knn_on("embedding", scope, k, vector, policy)
    }

    /// KNN on the vector field `field` (`embedding`, or `windows`: a memory's nearest window).
    fn knn_on(&self, field: &str, scope: &Scope, k: usize, vector: &[f32], policy: &str) -> Spec {
        let query = format!(
            "({})=>[KNN {k} @{field} $vec{policy} AS distance]",
            scope.filter()
        );
        let k = k.to_string();
        let mut s = self.spec(query, &[]);
        s.extend([
            b"PARAMS".to_vec(),
            b"2".to_vec(),
            b"vec".to_vec(),
            self.vector_blob(vector),
        ]);
        s.extend(
            ["SORTBY", "distance", "ASC", "LIMIT", "0", &k]
                .iter()
                .map(|a| a.as_bytes().to_vec()),
        );
        s
    }

    /// KNN `k` within the scope with every memory field and the distance (`MODE vector`, and
    /// `MODE auto`'s candidates, which the proxy ranks itself: `Store::rank`).
    ///
    /// `large`: what an earlier `adaptive` count found for this scope (more memories than the
    /// brute-force limit, or not), so the script need not count again; `None` to count.
    pub fn knn(&self, scope: &Scope, k: usize, vector: &[f32], large: Option<bool>) -> Spec {
        Self::with_return(
            self.knn_on("embedding", scope, k, vector, self.policy(large)),
            &["distance"],
        )
    }

    /// [`Keyspace::knn`] over the later windows of long texts (`$.windows[*]`): each memory at the
    /// distance of its nearest window. In the compact layout each window is a document of its
    /// own, so one long text could fill the K nearest: the KNN asks for [`WINDOW_FANOUT`] times as
    /// many, and the script keeps each memory's nearest window only, which gives the K memories
    /// the guide layout's KNN finds (unless one memory has more windows among the nearest).
    pub fn knn_windows(
        &self,
        scope: &Scope,
        k: usize,
        vector: &[f32],
        large: Option<bool>,
    ) -> Spec {
        let k = if self.compact() {
            (k * WINDOW_FANOUT).min(1000)
        } else {
            k
        };
        Self::with_return(
            self.knn_on("windows", scope, k, vector, self.policy(large)),
            &["distance"],
        )
    }

    fn policy(&self, large: Option<bool>) -> &str {
        match large {
            Some(large) if self.knn_policy == ADAPTIVE => {
                if large {
                    " HYBRID_POLICY BATCHES"
                } else {
                    " HYBRID_POLICY ADHOC_BF"
                }
            }
            _ => self.knn_policy.as_str(),
        }
    }

    /// KNN `k` within the scope with the distance and the scope fields, searching the HNSW graph
    /// in batches and filtering (consolidation asks once per memory of a scope: brute force over
    /// a large scope would make that N²).
    pub fn knn_brief_batches(&self, scope: &Scope, k: usize, vector: &[f32]) -> Spec {
        Self::brief(self.knn_with(scope, k, vector, " HYBRID_POLICY BATCHES"))
    }

    fn brief(s: Spec) -> Spec {
        Self::returning(
            s,
            &["distance", "user", "namespace", "kind", "source_thread"],
        )
    }

    /// The nearest memories of the scope with their scope fields (for dedup, which takes the
    /// nearest whose user, namespace and kind are exactly the scope's).
    pub fn nearest(&self, scope: &Scope, vector: &[f32]) -> Spec {
        Self::returning(
            self.knn_base(scope, DEDUP_CANDIDATES, vector),
            &["distance", "user", "namespace", "kind"],
        )
    }

    /// BM25 over `text` within the scope; `None` when the text has no searchable word.
    ///
    /// The query is built so that no input can reach RediSearch's query parser as syntax: words
    /// are runs of letters and digits, lower-cased, stopwords and one-letter words dropped,
    /// every remaining ASCII non-alphanumeric escaped, at most 32 distinct terms, each at most
    /// 64 bytes.
    pub fn keyword(&self, scope: &Scope, text: &str, k: usize) -> Option<Spec> {
        self.keyword_query(scope, text, k)
            .map(|s| Self::with_return(s, &[]))
    }

    fn keyword_query(&self, scope: &Scope, text: &str, k: usize) -> Option<Spec> {
        let terms = keyword_terms(text);
        if terms.is_empty() {
            return None;
        }
        let query = format!("(@text:({})) {}", terms.join("|"), scope.filter());
        let k = k.to_string();
        Some(self.spec(query, &["SCORER", "BM25", "WITHSCORES", "LIMIT", "0", &k]))
    }

    /// Cluster mode: a page of the keys `query` matches on `index` (FT.SEARCH … NOCONTENT: the
    /// module without its coordinator cannot load documents there).
    pub fn key_page(index: &str, query: &str, offset: usize, count: usize) -> Spec {
        cmd(&[
            "FT.SEARCH",
            index,
            query,
            "NOCONTENT",
            "LIMIT",
            &offset.to_string(),
            &count.to_string(),
            "DIALECT",
            "2",
        ])
    }

    /// One Redis: a cursor over the keys `query` matches on `index`, `count` a page.
    pub fn key_cursor(index: &str, query: &str, count: usize) -> Spec {
        cmd(&[
            "FT.AGGREGATE",
            index,
            query,
            "LOAD",
            "1",
            "@__key",
            "WITHCURSOR",
            "COUNT",
            &count.to_string(),
            "DIALECT",
            "2",
        ])
    }

    /// The next page of a [`Keyspace::key_cursor`].
    pub fn key_cursor_read(index: &str, cursor: i64, count: usize) -> Spec {
        cmd(&[
            "FT.CURSOR",
            "READ",
            index,
            &cursor.to_string(),
            "COUNT",
            &count.to_string(),
        ])
    }

    /// Every exact (user, namespace, kind) of `index` (FT.AGGREGATE … GROUPBY; one Redis).
    pub fn exact_scopes(index: &str) -> Spec {
        cmd(&[
            "FT.AGGREGATE",
            index,
            "*",
            "GROUPBY",
            "3",
            "@user",
            "@namespace",
            "@kind",
            "LIMIT",
            "0",
            "1000000",
            "DIALECT",
            "2",
        ])
    }

    /// Every user of `index` (FT.TAGVALS; a cluster master's index, which cannot group).
    pub fn users(index: &str) -> Spec {
        cmd(&["FT.TAGVALS", index, "user"])
    }

    /// How many of `keys` `index` holds (FT.SEARCH … INKEYS, no rows).
    pub fn count_in(index: &str, keys: &[String]) -> Spec {
        let n = keys.len().to_string();
        let mut args = vec!["FT.SEARCH", index, "*", "INKEYS", n.as_str()];
        args.extend(keys.iter().map(String::as_str));
        args.extend(["NOCONTENT", "LIMIT", "0", "0"]);
        cmd(&args)
    }

    /// `memproxy migrate`'s record for `index` (a hash), and the set of keys it copied.
    pub fn migration(index: &str) -> String {
        format!("{index}:migration")
    }

    /// See [`Keyspace::migration`].
    pub fn migration_copies(state: &str) -> String {
        format!("{state}:copies")
    }

    /// The index a migration of `index` builds (the configured name becomes its alias).
    pub fn migration_target(index: &str) -> String {
        format!("{index}.migrated")
    }

    /// A page of the keys under `prefix` (`SCAN cursor MATCH prefix* COUNT n`).
    pub fn prefix_scan(prefix: &str, cursor: &str, count: usize) -> Spec {
        let pattern = format!("{}*", glob_escape(prefix));
        cmd(&[
            "SCAN",
            cursor,
            "MATCH",
            &pattern,
            "COUNT",
            &count.to_string(),
        ])
    }

    /// `key` (under `from`) moved under the prefix `to`.
    pub fn under_prefix(key: &str, from: &str, to: &str) -> String {
        format!("{to}{}", key.strip_prefix(from).unwrap_or(key))
    }

    /// Whether the modules MEM.* need are loaded: `COMMAND INFO` of one command of each (a nil
    /// entry for a missing one).
    pub fn modules_present() -> Spec {
        cmd(&["COMMAND", "INFO", "FT.SEARCH", "JSON.SET"])
    }

    /// `FT.INFO index` (an alias is followed to its index).
    pub fn index_info(index: &str) -> Spec {
        cmd(&["FT.INFO", index])
    }

    /// `FT.CREATE` of memproxy's memory index over `prefix` (the schema: [`super::schema`]).
    pub fn index_create(index: &str, prefix: &str, dim: usize, layout: Storage) -> Spec {
        Self::index_create_with(&super::schema::create_args(index, prefix, dim, layout))
    }

    /// `FT.CREATE` with these arguments (an index's own, read back from `FT.INFO`: a rollback).
    pub fn index_create_with(args: &[String]) -> Spec {
        let mut c = cmd(&["FT.CREATE"]);
        c.extend(args.iter().map(|a| a.as_bytes().to_vec()));
        c
    }

    /// `FT.DROPINDEX index` (its documents stay).
    pub fn index_drop(index: &str) -> Spec {
        cmd(&["FT.DROPINDEX", index])
    }

    /// `FT.ALIASADD alias index`: the configured name reaches a migrated index.
    pub fn alias_add(alias: &str, index: &str) -> Spec {
        cmd(&["FT.ALIASADD", alias, index])
    }

    /// `FT.ALIASDEL alias`.
    pub fn alias_del(alias: &str) -> Spec {
        cmd(&["FT.ALIASDEL", alias])
    }

    /// The commands that write memory `m` at `key` as this layout keeps it (a JSON document with
    /// its windows inside, or a hash with a hash per window), with its TTL: `migrate` converting
    /// between layouts. The caller makes sure `key` and its windows do not exist.
    pub fn memory_write(
        layout: Storage,
        key: &str,
        m: &super::memory::Stored,
        windows: &[crate::embed::Vector],
    ) -> Vec<Spec> {
        let mut out = Vec::new();
        let mut all_keys = vec![key.to_string()];
        if layout == Storage::Compact {
            // A memory without a time (another writer's) gets 0: the compact layout lists
            // memories by `created_ts`, which its windows lack.
            let ts = m.created_ts.unwrap_or(0.0).to_string();
            let hits = m.hit_count.to_string();
            // The scope tags, on the memory and on each of its windows.
            let scope = [
                "user",
                &m.user,
                "namespace",
                &m.namespace,
                "kind",
                &m.kind,
                "source_thread",
                &m.source_thread,
            ];
            let mut h = cmd(&[
                "HSET",
                key,
                "text",
                &m.text,
                "hit_count",
                &hits,
                "created_ts",
                &ts,
            ]);
            h.extend(cmd(&scope));
            h.extend([b"embedding".to_vec(), f16_blob(&m.embedding)]);
            if !windows.is_empty() {
                h.extend([
                    b"window_count".to_vec(),
                    windows.len().to_string().into_bytes(),
                ]);
            }
            out.push(h);
            for (i, w) in windows.iter().enumerate() {
                let wk = window_key(key, i + 1);
                let mut h = cmd(&["HSET", &wk]);
                h.extend(cmd(&scope));
                h.extend([b"windows".to_vec(), f16_blob(w)]);
                out.push(h);
                all_keys.push(wk);
            }
        } else {
            let mut doc = serde_json::json!({
                "id": m.id,
                "user": m.user,
                "namespace": m.namespace,
                "kind": m.kind,
                "source_thread": m.source_thread,
                "text": m.text,
                "embedding": m.embedding,
                "created_ts": m.created_ts,
                "hit_count": m.hit_count,
            });
            if !windows.is_empty() {
                let w: Vec<&[f32]> = windows.iter().map(|v| &v[..]).collect();
                doc["windows"] = serde_json::json!(w);
            }
            out.push(cmd(&["JSON.SET", key, "$", &doc.to_string(), "NX"]));
        }
        if m.pttl > 0 {
            for k in &all_keys {
                out.push(cmd(&["PEXPIRE", k, &m.pttl.to_string()]));
            }
        }
        out
    }

    /// Set `field` of the hash `key` only if the key exists (`reembed`: a memory deleted meanwhile
    /// stays deleted). A one-line script, so it works on any Redis with scripting (HSETEX … FXX
    /// needs Redis 8).
    pub fn hset_existing(key: &str, field: &str, value: Vec<u8>) -> Spec {
        let mut c = cmd(&[
            "EVAL",
            "if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end return 0",
            "1",
            key,
            field,
        ]);
        c.push(value);
        c
    }

    /// The keys a [`Keyspace::memory_write`] of a memory with `windows` windows makes.
    pub fn memory_keys(layout: Storage, key: &str, windows: usize) -> Vec<String> {
        let mut keys = vec![key.to_string()];
        if layout == Storage::Compact {
            keys.extend((1..=windows).map(|n| window_key(key, n)));
        }
        keys
    }

    /// Whether `key` is a compact layout's window (`<memory key>#w<n>`).
    pub fn is_window_key(key: &str) -> bool {
        key.rsplit_once("#w")
            .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }

    /// The memories of an index only (in the compact layout its windows are documents too,
    /// without `created_ts`): the query a migration counts and samples with.
    pub fn memories_only(layout: Storage) -> &'static str {
        match layout {
            Storage::Compact => "@created_ts:[-inf +inf]",
            Storage::Guide => "*",
        }
    }

    /// A page of the scope's memories, newest first (in the compact layout, memories only: a
    /// long text's windows are documents of their own, without `created_ts`).
    pub fn list(&self, scope: &Scope, offset: usize, count: usize) -> Spec {
        let (o, c) = (offset.to_string(), count.to_string());
        let mut query = scope.filter();
        if self.compact() {
            query.push(' ');
            query.push_str(Self::memories_only(Storage::Compact));
        }
        Self::with_return(
            self.spec(query, &["SORTBY", "created_ts", "DESC", "LIMIT", &o, &c]),
            &[],
        )
    }

    /// Index and query of the scope, for erasure (the script pages through it itself, checking
    /// each match exactly before deleting it).
    pub fn scope_query(&self, scope: &Scope) -> (String, String) {
        (self.index.clone(), scope.filter())
    }
}

/// The searchable words of a text, as escaped query terms (see [`Keyspace::keyword`]).
pub fn keyword_terms(text: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() > 1 && w.len() <= 64)
    {
        let lower = word.to_lowercase();
        if STOPWORDS.contains(&lower.as_str()) {
            continue;
        }
        let w = escape(&lower);
        if !terms.contains(&w) && terms.len() < MAX_TERMS {
            terms.push(w);
        }
    }
    terms
}

/// A command (or script arguments) from its words.
pub fn cmd(args: &[&str]) -> Spec {
    args.iter().map(|a| a.as_bytes().to_vec()).collect()
}

/// The commands each operation runs, as the client's ACL user must be allowed to run them: the
/// scripts check every one with `redis.acl_check_cmd` before they do anything, and the same list
/// is checked before the model runs for a request.
impl Keyspace {
    /// Search the index and read a memory's TTL.
    pub fn rights_read(&self) -> Vec<Spec> {
        vec![
            cmd(&["FT.SEARCH", &self.index, "*"]),
            cmd(&["PTTL", &self.memory("0")]),
        ]
    }

    /// Write memory `key`, or bump another memory's hit count; set TTLs.
    pub fn rights_remember(&self, key: &str) -> Vec<Spec> {
        let mut r = self.rights_read();
        if self.compact() {
            r.extend([
                cmd(&["HSET", key, "f", "v"]),
                cmd(&["HINCRBY", key, "hit_count", "1"]),
            ]);
        } else {
            r.extend([
                cmd(&["JSON.SET", key, "$", "{}", "NX"]),
                cmd(&["JSON.NUMINCRBY", key, "$.hit_count", "1"]),
            ]);
        }
        r.push(cmd(&["EXPIRE", key, "1"]));
        r
    }

    /// Write a thread's session hash and event stream (and delete them).
    pub fn rights_session(&self, user: &str, thread: &str) -> Vec<Spec> {
        let (s, e) = (self.session(user, thread), self.events(user, thread));
        vec![
            cmd(&["HSET", &s, "f", "v"]),
            cmd(&["HINCRBY", &s, "f", "1"]),
            cmd(&["HGET", &s, "f"]),
            cmd(&["EXPIRE", &s, "1"]),
            cmd(&["DEL", &s]),
            cmd(&["XADD", &e, "*", "f", "v"]),
            cmd(&["EXPIRE", &e, "1"]),
            cmd(&["DEL", &e]),
        ]
    }

    /// A whole turn: recall, remember, session and event.
    pub fn rights_turn(&self, user: &str, thread: &str, key: &str) -> Vec<Spec> {
        let mut r = self.rights_remember(key);
        r.extend(self.rights_session(user, thread));
        r
    }

    /// Delete one memory (reading its owner first).
    pub fn rights_forget_id(&self, key: &str) -> Vec<Spec> {
        vec![self.read_field(key, "user"), cmd(&["DEL", key])]
    }

    /// Reading one field of the memory at `key`.
    fn read_field(&self, key: &str, name: &str) -> Spec {
        if self.compact() {
            cmd(&["HGET", key, name])
        } else {
            cmd(&["JSON.GET", key, &format!("$.{name}")])
        }
    }

    /// Merge memories into `kept`: read them, set the kept one's hit count and TTL, delete the
    /// rest.
    pub fn rights_consolidate(&self, kept: &str) -> Vec<Spec> {
        vec![
            self.read_field(kept, "user"),
            if self.compact() {
                cmd(&["HSET", kept, "hit_count", "1"])
            } else {
                cmd(&["JSON.SET", kept, "$.hit_count", "1"])
            },
            cmd(&["PTTL", kept]),
            cmd(&["PEXPIRE", kept, "1"]),
            cmd(&["PERSIST", kept]),
            cmd(&["DEL", kept]),
        ]
    }

    /// Delete a scope's memories (found by a cursor the client runs itself).
    pub fn rights_forget_scope(&self) -> Vec<Spec> {
        let key = self.memory("0");
        vec![self.read_field(&key, "user"), cmd(&["DEL", &key])]
    }
}

/// `s` with the glob characters of SCAN MATCH escaped.
pub fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A vector as RediSearch's FLOAT32 blob (little-endian).
pub fn vector_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A vector as RediSearch's FLOAT16 blob (IEEE half precision, little-endian; the compact layout).
pub fn f16_blob(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect()
}

/// A FLOAT16 blob read back (every number of it: a vector of another dimension keeps its own
/// length, so callers can tell); `None` for a blob of an odd size.
pub fn f16_vector(b: &[u8]) -> Option<Vec<f32>> {
    b.len().is_multiple_of(2).then(|| {
        b.chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect()
    })
}

/// A fresh memory id: 12 lowercase hex digits.
pub fn new_id() -> String {
    format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_neutralises_query_syntax() {
        assert_eq!(escape("alice"), "alice");
        assert_eq!(
            escape("alice} | @user:{bob"),
            "alice\\}\\ \\|\\ \\@user\\:\\{bob"
        );
        assert_eq!(escape("a*"), "a\\*");
        assert_eq!(escape("al?ce\\"), "al\\?ce\\\\");
        assert_eq!(escape("ålice"), "ålice");
        let s = Scope {
            user: "a b".into(),
            namespace: "n-1".into(),
            kind: Some(Kind::Semantic),
            thread: None,
        };
        assert_eq!(
            s.filter(),
            "@user:{a\\ b} @namespace:{n\\-1} @kind:{semantic}"
        );
    }

    #[test]
    fn keyword_terms() {
        let ks = Keyspace {
            knn_policy: String::new(),
            index: "i".into(),
            mem_prefix: "m:".into(),
            session_prefix: "s:".into(),
            event_prefix: "e:".into(),
            tagged: false,
            layout: Layout::default(),
        };
        let s = Scope {
            user: "u".into(),
            namespace: "n".into(),
            kind: None,
            thread: None,
        };
        let spec = ks
            .keyword(&s, "Hello, world! hello @xy:{zz} -q", 5)
            .unwrap();
        assert_eq!(
            String::from_utf8(spec[1].clone()).unwrap(),
            "(@text:(hello|world|xy|zz)) @user:{u} @namespace:{n}"
        );
        assert!(ks.keyword(&s, "*** ()", 5).is_none());
        // Nothing but stopwords (the pinned RediSearch crashes on their unions) and one-letter
        // words: no keyword query at all.
        assert!(ks.keyword(&s, "Are there any? Is it a ...", 5).is_some());
        assert_eq!(
            super::keyword_terms("Are there any? Is it a ..."),
            vec!["any"]
        );
        assert!(ks
            .keyword(&s, "are there? it is, to be or not to be", 5)
            .is_none());
        assert_eq!(new_id().len(), 12);
    }
}

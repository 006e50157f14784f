//! Consolidation: near-duplicate memories of one exact scope (user, namespace, kind) merged into
//! their oldest member, as the guide's "background consolidator" would.
//!
//! 1. The scope's keys, by cursor (`ScopeKeys`); their vectors and fields by pipelined
//!    `JSON.GET` (plain commands on the client's connection, with its rights).
//! 2. Each memory's nearest neighbours within its exact scope: KNN searches, a few per read-only
//!    script call, so no call holds Redis for long.
//! 3. Pairs within the threshold joined into groups (union–find), each ordered oldest first.
//! 4. Unless a dry run, one script per group: every member checked again (one that is gone or
//!    changed scope is left out), hit counts summed onto the oldest, the longest TTL kept, the
//!    others deleted — atomic per group, so a MEM.REMEMBER that runs meanwhile either reinforced
//!    a member before the merge (its hit is summed) or sees the merged memory after it.

use std::collections::HashMap;

use super::keyspace::{Kind, Scope};
use super::memory::{Retrieval, ScopeKeys};
use super::Store;
use crate::error::{MemError, MemResult};
use crate::resp::read::{array, int, text};
use crate::upstream::Link;

/// KNN searches per script call (each a few hundred µs of Redis time).
const SEARCHES_PER_CALL: usize = 8;
/// Neighbours each memory looks at.
const NEIGHBOURS: usize = 10;

/// One group merged (or that would be): the memory kept, the ones merged into it, and the kept
/// memory's hit count and TTL after the merge.
#[derive(Debug, Clone, PartialEq)]
pub struct Merge {
    pub kept: String,
    pub merged: Vec<String>,
    pub hit_count: i64,
    /// Seconds; -1: none.
    pub ttl: i64,
}

struct Member {
    key: String,
    id: String,
    namespace: String,
    kind: String,
    created: f64,
    hits: i64,
    pttl: i64,
    vector: Vec<f32>,
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

fn ttl_seconds(pttl: i64) -> i64 {
    if pttl < 0 {
        -1
    } else {
        (pttl + 999) / 1000
    }
}

impl Store {
    /// Merge the near-duplicates of `scope` (its namespace '' = each namespace on its own; its
    /// kind `None` = each kind on its own) within cosine distance `threshold`. `pace` in (0, 1]:
    /// the share of time it may keep Redis busy (after each script it waits so that its scripts
    /// take at most that share; 1: no waiting).
    pub async fn consolidate(
        &self,
        link: &mut Link,
        scope: &Scope,
        threshold: f64,
        dry_run: bool,
        pace: f64,
    ) -> MemResult<Vec<Merge>> {
        indexed!(
            self,
            link,
            self.consolidate_once(link, scope, threshold, dry_run, pace)
                .await
        )
    }

    async fn consolidate_once(
        &self,
        link: &mut Link,
        scope: &Scope,
        threshold: f64,
        dry_run: bool,
        pace: f64,
    ) -> MemResult<Vec<Merge>> {
        let breathe = |took: std::time::Duration| async move {
            if pace < 1.0 {
                tokio::time::sleep(took.mul_f64(1.0 / pace.max(0.001) - 1.0)).await;
            }
        };
        if !dry_run {
            // As every write: NOPERM before any work, not at the first group.
            self.precheck(
                link,
                &self
                    .site(link)
                    .keys
                    .rights_consolidate(&self.keys.memory("0")),
            )
            .await?;
        }
        self.follow_slot(link, &scope.user).await?;
        let site = self.site(link);
        let members = self.members(link, scope).await?;
        let index: HashMap<&str, usize> = members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id.as_str(), i))
            .collect();
        let mut parent: Vec<usize> = (0..members.len()).collect();
        for chunk in (0..members.len())
            .collect::<Vec<_>>()
            .chunks(SEARCHES_PER_CALL)
        {
            let specs: Vec<_> = chunk
                .iter()
                .map(|&i| {
                    let m = &members[i];
                    let exact = Scope {
                        user: scope.user.clone(),
                        namespace: m.namespace.clone(),
                        kind: Kind::parse(&m.kind),
                        thread: None,
                    };
                    site.keys.knn_brief_batches(&exact, NEIGHBOURS, &m.vector)
                })
                .collect();
            let started = std::time::Instant::now();
            let specs: Vec<_> = specs.iter().map(|s| (s, false)).collect();
            let results = self.search(link, &scope.user, &specs).await?;
            breathe(started.elapsed()).await;
            for (&i, result) in chunk.iter().zip(&results) {
                let m = &members[i];
                let exact = Scope {
                    user: scope.user.clone(),
                    namespace: m.namespace.clone(),
                    kind: Kind::parse(&m.kind),
                    thread: None,
                };
                for hit in self.parse_search(result, Retrieval::Vector, &exact)? {
                    let near = hit.distance.is_some_and(|d| d <= threshold);
                    if let (true, Some(&j)) = (near, index.get(hit.id.as_str())) {
                        let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                        if a != b {
                            parent[a] = b;
                        }
                    }
                }
            }
        }
        let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
        for i in 0..members.len() {
            let root = find(&mut parent, i);
            groups.entry(root).or_default().push(i);
        }
        let mut groups: Vec<Vec<usize>> = groups.into_values().filter(|g| g.len() > 1).collect();
        for g in &mut groups {
            g.sort_by(|&a, &b| {
                members[a]
                    .created
                    .total_cmp(&members[b].created)
                    .then_with(|| members[a].id.cmp(&members[b].id))
            });
        }
        groups.sort_by(|a, b| members[a[0]].id.cmp(&members[b[0]].id));
        let mut out = Vec::new();
        for g in groups {
            let kept = &members[g[0]];
            let merge = if dry_run {
                let longest = g
                    .iter()
                    .map(|&i| members[i].pttl)
                    .fold(kept.pttl, |acc, t| {
                        if acc == -1 || t == -1 {
                            -1
                        } else {
                            acc.max(t)
                        }
                    });
                Some(Merge {
                    kept: kept.id.clone(),
                    merged: g[1..].iter().map(|&i| members[i].id.clone()).collect(),
                    hit_count: g.iter().map(|&i| members[i].hits).sum(),
                    ttl: ttl_seconds(longest),
                })
            } else {
                let started = std::time::Instant::now();
                let m = self.merge(link, scope, &members, &g).await?;
                breathe(started.elapsed()).await;
                m
            };
            out.extend(merge);
        }
        Ok(out)
    }

    /// The scope's memories with their vectors (exact user; namespace and kind as the scope).
    async fn members(&self, link: &mut Link, scope: &Scope) -> MemResult<Vec<Member>> {
        let mut pages = ScopeKeys::new(&self.site(link).keys, Some(scope));
        let compact = self.site(link).keys.compact();
        let mut members = Vec::new();
        while let Some(keys) = pages.next(link).await? {
            for m in self.read_memories(link, &keys, compact).await? {
                if m.embedding.len() != self.dim
                    || !scope.matches(&m.user, &m.namespace, &m.kind, None)
                    || Kind::parse(&m.kind).is_none()
                {
                    continue;
                }
                members.push(Member {
                    created: m.created_ts.unwrap_or(f64::MAX),
                    hits: m.hit_count,
                    pttl: m.pttl,
                    key: m.key,
                    id: m.id,
                    namespace: m.namespace,
                    kind: m.kind,
                    vector: m.embedding,
                });
            }
        }
        Ok(members)
    }

    /// Merge one group (oldest first) in one script; `None` when its oldest member is gone.
    async fn merge(
        &self,
        link: &mut Link,
        scope: &Scope,
        members: &[Member],
        group: &[usize],
    ) -> MemResult<Option<Merge>> {
        let kept = &members[group[0]];
        let keys: Vec<String> = group.iter().map(|&i| members[i].key.clone()).collect();
        let args = vec![
            scope.user.clone().into_bytes(),
            kept.namespace.clone().into_bytes(),
            kept.kind.clone().into_bytes(),
        ];
        let v = self
            .scripts
            .consolidate
            .run(
                link,
                &keys,
                &self.site(link).keys.rights_consolidate(&kept.key),
                args,
            )
            .await?;
        let a = array(&v);
        if a.first().and_then(text).as_deref() == Some("skip") {
            return Ok(None);
        }
        let merged = a
            .first()
            .and_then(int)
            .ok_or_else(|| MemError::Internal(format!("consolidate script replied {v:?}")))?;
        if merged == 0 {
            return Ok(None);
        }
        Ok(Some(Merge {
            kept: kept.id.clone(),
            merged: group[1..].iter().map(|&i| members[i].id.clone()).collect(),
            hit_count: a.get(1).and_then(int).unwrap_or(0),
            ttl: ttl_seconds(a.get(2).and_then(int).unwrap_or(-1)),
        }))
    }
}

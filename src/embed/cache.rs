//! A bounded LRU of embeddings keyed by the exact model input (the role's prompt, then the text:
//! `Embedder::model_input`), shared by all connections.
//!
//! Bounded twice: by entries and by bytes (text plus vector), so neither many short texts nor a
//! few long ones can grow it past its budget. Hits skip the model entirely.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use lru::LruCache;

use super::Vector;

pub struct Cache {
    inner: Mutex<Inner>,
    max_bytes: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

struct Inner {
    lru: LruCache<String, Vector>,
    bytes: usize,
}

fn cost(text: &str, v: &Vector) -> usize {
    text.len() + v.len() * 4 + 64
}

impl Cache {
    pub fn new(max_entries: usize, max_bytes: usize) -> Cache {
        let cap = NonZeroUsize::new(max_entries.max(1)).expect("nonzero");
        Cache {
            inner: Mutex::new(Inner {
                lru: LruCache::new(cap),
                bytes: 0,
            }),
            max_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn get(&self, text: &str) -> Option<Vector> {
        let hit = self
            .inner
            .lock()
            .expect("cache lock")
            .lru
            .get(text)
            .cloned();
        let counter = if hit.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        hit
    }

    /// Whether `text` is cached (without counting a hit or a miss, or touching recency).
    pub fn contains(&self, text: &str) -> bool {
        self.inner.lock().expect("cache lock").lru.contains(text)
    }

    /// Forget `text`'s embedding (the next embed runs the model).
    pub fn remove(&self, text: &str) {
        let mut inner = self.inner.lock().expect("cache lock");
        if let Some(v) = inner.lru.pop(text) {
            inner.bytes -= cost(text, &v);
        }
    }

    pub fn put(&self, text: &str, v: Vector) {
        let c = cost(text, &v);
        if c > self.max_bytes {
            return;
        }
        let mut inner = self.inner.lock().expect("cache lock");
        if let Some((old_text, old)) = inner.lru.push(text.to_owned(), v) {
            inner.bytes -= cost(&old_text, &old);
        }
        inner.bytes += c;
        while inner.bytes > self.max_bytes {
            match inner.lru.pop_lru() {
                Some((t, v)) => inner.bytes -= cost(&t, &v),
                None => break,
            }
        }
    }

    /// (hits, misses, entries, bytes)
    pub fn stats(&self) -> (u64, u64, usize, usize) {
        let inner = self.inner.lock().expect("cache lock");
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
            inner.lru.len(),
            inner.bytes,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_by_entries_and_bytes() {
        let c = Cache::new(2, 1 << 20);
        for t in ["a", "b", "c"] {
            c.put(t, vec![0.0; 4].into());
        }
        assert!(c.get("a").is_none() && c.get("c").is_some());
        let c = Cache::new(100, 1000);
        for i in 0..10 {
            c.put(&i.to_string(), vec![0.0; 100].into());
        }
        let (_, _, n, bytes) = c.stats();
        assert!(bytes <= 1000 && n == 2, "{n} {bytes}");
    }
}

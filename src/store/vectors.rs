//! Memories' embeddings kept in the proxy by id, for `MODE auto`'s distinctiveness term
//! (`Store::rank`): a memory's vector is read from Redis (one `JSON.MGET` for the candidates
//! the cache lacks) the first time it is a candidate, and kept, bounded, in an LRU. A memory's
//! vector does not change under its id (re-embedding with another model needs a restart with
//! that model), so nothing here goes stale in a way that matters.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;

use crate::embed::Vector;

/// Vectors kept: 20,000 × 384 floats ≈ 31 MB.
pub const VECTORS_KEPT: usize = 20_000;

pub struct VectorCache {
    inner: Mutex<LruCache<String, Vector>>,
}

impl VectorCache {
    pub fn new(entries: usize) -> VectorCache {
        let cap = NonZeroUsize::new(entries.max(1)).expect("nonzero");
        VectorCache {
            inner: Mutex::new(LruCache::new(cap)),
        }
    }

    pub fn get(&self, id: &str) -> Option<Vector> {
        self.inner.lock().expect("vector cache").get(id).cloned()
    }

    pub fn put(&self, id: &str, v: Vector) {
        self.inner
            .lock()
            .expect("vector cache")
            .put(id.to_owned(), v);
    }
}

/// The mean of `vectors`, and each one's dot product with it: how much a candidate looks like
/// the others (a cluster of look-alike memories shares a high value).
pub fn likeness(vectors: &[Vector]) -> Vec<f64> {
    let Some(first) = vectors.first() else {
        return Vec::new();
    };
    let mut mean = vec![0f64; first.len()];
    for v in vectors {
        for (m, x) in mean.iter_mut().zip(v.iter()) {
            *m += *x as f64;
        }
    }
    let n = vectors.len() as f64;
    mean.iter_mut().for_each(|m| *m /= n);
    vectors
        .iter()
        .map(|v| v.iter().zip(&mean).map(|(x, m)| *x as f64 * m).sum())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn likeness_is_each_vectors_dot_with_the_mean() {
        let v: Vec<Vector> = vec![
            vec![1.0, 0.0].into(),
            vec![1.0, 0.0].into(),
            vec![0.0, 1.0].into(),
        ];
        let l = likeness(&v);
        // mean (2/3, 1/3): the two alike score 2/3, the odd one 1/3.
        assert!((l[0] - 2.0 / 3.0).abs() < 1e-9 && (l[1] - l[0]).abs() < 1e-9);
        assert!((l[2] - 1.0 / 3.0).abs() < 1e-9);
        assert!(likeness(&[]).is_empty());
    }

    #[test]
    fn bounded() {
        let c = VectorCache::new(2);
        for id in ["a", "b", "c"] {
            c.put(id, vec![0.0].into());
        }
        assert!(c.get("a").is_none() && c.get("c").is_some());
    }
}

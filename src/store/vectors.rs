//! Memories' embeddings kept in the proxy by id, for `MODE auto`'s ranking (`Store::rank`
//! computes the similarity to the ranking vector and the distinctiveness term from them, not
//! with a second search): a memory's vector is put here when this proxy writes it, else read
//! from Redis (`JSON.MGET` of the candidates the cache lacks) the first time it is a candidate,
//! and kept, bounded, in an LRU. A memory's vector does not change under its id (re-embedding
//! with another model needs a restart with that model), so nothing here goes stale in a way
//! that matters.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use lru::LruCache;

use crate::embed::Vector;

/// Vectors kept: 20,000 × 384 floats ≈ 31 MB.
pub const VECTORS_KEPT: usize = 20_000;

/// Vectors read with one `JSON.MGET`: RedisJSON formats each as ~8 KB of text, ~14 µs of Redis
/// time, so 64 hold the server about 1 ms.
pub const VECTORS_PER_READ: usize = 64;

pub struct VectorCache {
    inner: Mutex<LruCache<String, Vector>>,
    /// Vectors read from Redis since start (the cold path's count, in MEM.INFO).
    read: AtomicU64,
}

impl VectorCache {
    pub fn new(entries: usize) -> VectorCache {
        let cap = NonZeroUsize::new(entries.max(1)).expect("nonzero");
        VectorCache {
            inner: Mutex::new(LruCache::new(cap)),
            read: AtomicU64::new(0),
        }
    }

    /// Count `n` vectors read from Redis.
    pub fn note_read(&self, n: usize) {
        self.read.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// (vectors kept now, vectors read from Redis since start).
    pub fn stats(&self) -> (usize, u64) {
        let kept = self.inner.lock().expect("vector cache").len();
        (kept, self.read.load(Ordering::Relaxed))
    }

    pub fn get(&self, id: &str) -> Option<Vector> {
        self.inner.lock().expect("vector cache").get(id).cloned()
    }

    /// Whether `id`'s vector is kept (without touching its place in the LRU).
    pub fn contains(&self, id: &str) -> bool {
        self.inner.lock().expect("vector cache").contains(id)
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

/// The reply of `JSON.MGET … $.embedding` for one key, `[[x, y, …]]`, as floats; `None` for
/// anything else (a key without the field replies `[]`, a missing key nil). A cold recall reads
/// 8 of these (3,072 numbers): `fast_float2` parses them in half the time of `str::parse`.
pub fn parse_json_path_vector(t: &[u8]) -> Option<Vec<f32>> {
    let skip_space = |i: &mut usize| {
        while t.get(*i).is_some_and(u8::is_ascii_whitespace) {
            *i += 1;
        }
    };
    let expect = |i: &mut usize, c: u8| -> Option<()> {
        skip_space(i);
        (t.get(*i) == Some(&c)).then(|| *i += 1)
    };
    let mut i = 0;
    expect(&mut i, b'[')?;
    expect(&mut i, b'[')?;
    let mut out = Vec::with_capacity(384);
    loop {
        skip_space(&mut i);
        let (v, n): (f32, usize) = fast_float2::parse_partial(&t[i..]).ok()?;
        if !v.is_finite() {
            return None;
        }
        out.push(v);
        i += n;
        skip_space(&mut i);
        match t.get(i) {
            Some(b',') => i += 1,
            Some(b']') => break,
            _ => return None,
        }
    }
    expect(&mut i, b']')?;
    expect(&mut i, b']')?;
    skip_space(&mut i);
    (i == t.len()).then_some(out)
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
    fn json_path_vectors() {
        assert_eq!(
            parse_json_path_vector(b"[[0.5,-1e-3, 2]]"),
            Some(vec![0.5, -0.001, 2.0])
        );
        assert_eq!(
            parse_json_path_vector(b" [ [ 1 , 2 ] ] "),
            Some(vec![1.0, 2.0])
        );
        let bad: [&[u8]; 12] = [
            b"[]",
            b"[[]]",
            b"",
            b"[[1,x]]",
            b"[1,2]",
            b"nil",
            b"[[1,2]",
            b"[[1,2]]x",
            b"[[1,]]",
            b"[[1 2]]",
            b"[[inf]]",
            b"[[1e39]]",
        ];
        for b in bad {
            assert_eq!(
                parse_json_path_vector(b),
                None,
                "{}",
                String::from_utf8_lossy(b)
            );
        }
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

//! The query-vector cache: an LRU map from query text to its embedding, so a repeated query
//! costs a lookup instead of a forward pass.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Query vectors kept by default.
pub const EMBED_CACHE_ENTRIES: usize = 1024;

/// A small LRU map of query text to its vector.
pub struct EmbedCache {
    inner: Mutex<lru::LruCache<String, Arc<[f32]>>>,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl EmbedCache {
    pub fn new(entries: usize) -> EmbedCache {
        EmbedCache {
            inner: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(entries.max(1)).expect("at least one entry"),
            )),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn get(&self, q: &str) -> Option<Arc<[f32]>> {
        let v = self.lock().get(q).cloned();
        let c = if v.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        c.fetch_add(1, Ordering::Relaxed);
        v
    }

    pub fn put(&self, q: &str, v: Arc<[f32]>) {
        self.lock().put(q.to_string(), v);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, lru::LruCache<String, Arc<[f32]>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_cache_evicts_least_recently_used() {
        let c = EmbedCache::new(2);
        c.put("a", Arc::from(vec![1.0]));
        c.put("b", Arc::from(vec![2.0]));
        assert!(c.get("a").is_some()); // a is now most recent
        c.put("c", Arc::from(vec![3.0])); // evicts b
        assert!(c.get("b").is_none());
        assert_eq!(c.get("c").as_deref(), Some(&[3.0f32][..]));
        assert_eq!(c.len(), 2);
        assert_eq!(c.hits.load(Ordering::Relaxed), 2);
        assert_eq!(c.misses.load(Ordering::Relaxed), 1);
    }
}

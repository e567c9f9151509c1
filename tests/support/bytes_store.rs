//! A key-value service as a user would wrap one for `CasStore`, from the
//! crate's public API alone: bytes in a map, each with its expiry, read
//! and written with compare-and-swap. Nothing of `MemoryStore` is inside.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tower_sliding_window::{Clock, CompareAndSwap, ManualClock, StoreError};

/// Bytes and when they expire, by name.
type Rows = HashMap<String, (Vec<u8>, Duration)>;

/// Rows on a clock the test moves.
#[derive(Clone, Default)]
pub struct BytesMap {
    map: Arc<Mutex<Rows>>,
    clock: ManualClock,
    /// Writes refused because someone else wrote first.
    pub beaten: Arc<AtomicUsize>,
}

impl BytesMap {
    pub fn new(clock: ManualClock) -> Self {
        Self {
            clock,
            ..Self::default()
        }
    }

    /// The bytes under `name`, unless they expired.
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        let map = self.map.lock().unwrap();
        let now = self.clock.now();
        map.get(name)
            .filter(|(_, expires)| *expires > now)
            .map(|(bytes, _)| bytes.clone())
    }

    /// Every name held, expired or not.
    pub fn names(&self) -> Vec<String> {
        self.map.lock().unwrap().keys().cloned().collect()
    }
}

impl CompareAndSwap for BytesMap {
    async fn load(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.get(name))
    }

    async fn swap(
        &self,
        name: &str,
        old: Option<&[u8]>,
        new: Vec<u8>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let mut map = self.map.lock().unwrap();
        let now = self.clock.now();
        let current = map.get(name).filter(|(_, expires)| *expires > now);
        if current.map(|(bytes, _)| &bytes[..]) != old {
            self.beaten.fetch_add(1, Ordering::Relaxed);
            return Ok(false);
        }
        map.insert(name.to_owned(), (new, now + ttl));
        Ok(true)
    }
}

/// The same rows behind a service that answers later, as a remote one
/// does: each call yields to the runtime before it runs.
#[derive(Clone, Default)]
pub struct RemoteBytesMap(pub BytesMap);

impl CompareAndSwap for RemoteBytesMap {
    async fn load(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        tokio::task::yield_now().await;
        self.0.load(name).await
    }

    async fn swap(
        &self,
        name: &str,
        old: Option<&[u8]>,
        new: Vec<u8>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        tokio::task::yield_now().await;
        self.0.swap(name, old, new, ttl).await
    }
}

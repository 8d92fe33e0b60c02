//! Near cache: hot keys answered from this process's memory, invalidated by
//! Redis client tracking. Off unless `[near_cache] enabled = true`; the
//! guarantee and its limits are in docs/near-cache.md.
//!
//! * **Invalidation: `BCAST`, one connection per shard** ([`tracking`]).
//!   Each shard gets a dedicated connection (`HELLO 3`, `CLIENT TRACKING ON
//!   BCAST`) that receives an `invalidate` push for every key written on
//!   the shard, by anyone. We chose BCAST over `REDIRECT <id>` because
//!   REDIRECT ties every data connection (reconnected by the pipeline engine
//!   at any time) to the current id of the invalidation connection: each
//!   reconnect of either side opens a window in which reads are untracked,
//!   and closing it needs a handshake between the two. BCAST needs nothing
//!   from the data connections, so they stay RESP2 and untouched. Its cost
//!   is that every write on the shard is pushed to every proxy, cached key
//!   or not (one small frame per write per proxy); NOLOOP is moot (the
//!   tracking connection writes nothing).
//! * **Staleness check without locks** (this file). A process-wide array
//!   of atomic epochs, one per hash bucket of keys: an invalidation (a push
//!   from any shard, or a write through this proxy) bumps its key's bucket.
//!   Each shard's [`tracking::Tracking`] has a generation, bumped when its
//!   connection is lost or Redis pushes a null invalidation (flush, tracking
//!   table overflow), and by `flush_all`. An entry remembers both as they
//!   were when its read was *sent*; it is served only while both are
//!   unchanged. A fill whose snapshot has moved is dropped, which closes
//!   the race of an invalidation arriving while the read is in flight.
//! * **Store: one per worker thread** ([`store`]): a thread-local map, no
//!   lock and no cross-thread traffic on the hot path; invalidation never
//!   touches it (entries are checked against the epochs when read), so it
//!   needs no channel to every thread. The price: a hot key is cached
//!   once per thread, and `max_bytes` is split evenly over the threads.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use crate::metrics::Metrics;

pub mod store;
#[cfg(test)]
mod tests;
pub mod tracking;

pub use tracking::Tracking;

/// Epoch buckets: a write to one key invalidates the ~1/65536 of cached
/// keys that share its bucket, and nothing else.
const BUCKETS: usize = 1 << 16;

/// The process-wide part: the epochs and the metrics.
pub struct NearCache {
    epochs: Box<[AtomicU32]>,
    pub metrics: Arc<Metrics>,
    threads: usize,
}

static GLOBAL: OnceLock<NearCache> = OnceLock::new();

/// Turn the near cache on for this process (at startup, before the shards).
pub fn init(metrics: Arc<Metrics>, threads: usize) {
    let _ = GLOBAL.get_or_init(|| NearCache {
        epochs: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
        metrics,
        threads: threads.max(1),
    });
}

/// The near cache, if `init` was called.
#[inline]
pub fn get() -> Option<&'static NearCache> {
    GLOBAL.get()
}

/// A key's hash: picks its epoch bucket and its admission slot.
#[inline]
pub fn hash(key: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(key)
}

impl NearCache {
    #[inline]
    fn bucket(hash: u64) -> usize {
        (hash as usize) & (BUCKETS - 1)
    }

    #[inline]
    pub fn epoch(&self, hash: u64) -> u32 {
        self.epochs[Self::bucket(hash)].load(Ordering::Acquire)
    }

    /// `key` changed (or may have): no entry read before now is served.
    #[inline]
    pub fn invalidate(&self, key: &[u8]) {
        self.invalidate_hash(hash(key));
    }

    #[inline]
    pub fn invalidate_hash(&self, hash: u64) {
        self.epochs[Self::bucket(hash)].fetch_add(1, Ordering::AcqRel);
    }

    /// `max_bytes` for one worker thread's store.
    pub fn per_thread(&self, max_bytes: usize) -> usize {
        max_bytes / self.threads
    }
}

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
//!   or not (one small frame per write per proxy). `NOLOOP` only concerns
//!   the write-through sets the tracking connection itself sends (below).
//! * **Staleness check without locks** (this file). A process-wide array
//!   of atomic epochs, one per hash bucket of keys: an invalidation (a push
//!   from any shard, or a write through this proxy) bumps its key's bucket.
//!   Each shard's [`tracking::Tracking`] has a generation, bumped when its
//!   connection is lost or Redis pushes a null invalidation (flush, tracking
//!   table overflow), and by `flush_all`. An entry remembers both as they
//!   were when its read was *sent*; it is served only while both are
//!   unchanged. A fill whose snapshot has moved is dropped, which closes
//!   the race of an invalidation arriving while the read is in flight.
//! * **Monotonic reads across threads** (this file). Stores are per
//!   thread, so a read that misses on one thread can fetch a newer value
//!   than another thread still holds, before the invalidation arrives. So
//!   every get/gets/mg answer read from Redis leaves a fingerprint of the item
//!   (or of its absence) in a per-key-hash slot; when it differs from the
//!   last one there, the key's epoch bucket is bumped before the reply is
//!   written, dropping any older copy on every thread. A read that returns
//!   the same item as the last one bumps nothing, so threads reading an
//!   unchanged hot key do not evict each other. A fill takes the bump's
//!   new epoch only if the bucket had not moved since its read was sent.
//! * **Write-through** ([`store::Through`]). A plain `set` of a ring shard
//!   (relative or no exptime) is sent on the shard's tracking connection,
//!   which tracks with `NOLOOP`: Redis leaves a key out of that
//!   connection's pushes when the last write to it in an event-loop cycle
//!   was the connection's own, so the set's own push does not evict what
//!   it stored. Counting "expected own pushes" instead would be wrong:
//!   BCAST merges a cycle's writes of one key into one push, which can
//!   hide a foreign write right after ours. On STORED the key's bucket is
//!   bumped (dropping older copies on every thread) and this thread caches
//!   the item at the bump, if nothing moved the bucket since the set was
//!   dispatched; any other outcome just bumps. Dispatching it bumps
//!   nothing: other clients' reads while it is in flight are concurrent
//!   with it and may get the older copy. A session sends one only
//!   with nothing else in flight and waits for its reply before
//!   dispatching more, since it does not travel on the session's data
//!   connection.
//! * **Store: one per worker thread** ([`store`]): a thread-local map, no
//!   lock and no cross-thread traffic on the hot path; invalidation never
//!   touches it (entries are checked against the epochs when read), so it
//!   needs no channel to every thread. The price: a hot key is cached
//!   once per thread, and `max_bytes` is split evenly over the threads.
//! * **Miss coalescing** ([`coalesce`]): concurrent single-key misses of
//!   one key on one thread share one Redis read, under the same snapshot
//!   rule as a fill.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::metrics::Metrics;

pub mod coalesce;
pub mod store;
#[cfg(test)]
mod tests;
pub mod tracking;

pub use tracking::Tracking;

/// Epoch buckets (4 MiB): a write to one key, or a read that found another
/// item, invalidates the ~1/1,048,576 of cached keys that share its
/// bucket, and nothing else. (At 65,536 buckets, 100,000 hot keys shared
/// buckets enough for a zipf load's misses and sets to evict hot entries.)
const BUCKETS: usize = 1 << 20;
/// Fingerprint slots of the last item read per key hash (8 MiB): two keys
/// sharing a slot (and read in turn) keep dropping each other's entries.
const SEEN_SLOTS: usize = 1 << 20;

/// The process-wide part: the epochs, last-read fingerprints, the metrics.
pub struct NearCache {
    epochs: Box<[AtomicU32]>,
    seen: Box<[AtomicU64]>,
    pub metrics: Arc<Metrics>,
    threads: usize,
}

static GLOBAL: OnceLock<NearCache> = OnceLock::new();

/// Turn the near cache on for this process (at startup, before the shards).
pub fn init(metrics: Arc<Metrics>, threads: usize) {
    let _ = GLOBAL.get_or_init(|| NearCache {
        epochs: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
        seen: (0..SEEN_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        metrics,
        threads: threads.max(1),
    });
}

/// The near cache, if `init` was called.
#[inline]
pub fn get() -> Option<&'static NearCache> {
    GLOBAL.get()
}

/// What [`NearCache::observe`] compares: the item (flags, CAS, data) or
/// its absence, for one key hash. Never 0 (an unused slot).
pub fn fingerprint(hash: u64, item: Option<(u32, u64, &[u8])>) -> u64 {
    let fp = match item {
        Some((flags, cas, data)) => {
            twox_hash::XxHash3_64::oneshot(data)
                ^ cas.rotate_left(17)
                ^ u64::from(flags).rotate_left(41)
                ^ hash
        }
        None => hash ^ 0x9E37_79B9_7F4A_7C15,
    };
    fp | 1
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

    /// A get/gets of the key with `hash`, read from Redis (not from here),
    /// answered the item with `fingerprint` ([`fingerprint`]); its read was
    /// sent at epoch `ticket_epoch` if it may fill the cache. Drops every
    /// older copy of the key on every thread (see the module doc); returns
    /// the epoch to fill at, or `None` if the read may not fill.
    pub fn observe(&self, hash: u64, fingerprint: u64, ticket_epoch: Option<u32>) -> Option<u32> {
        let bucket = &self.epochs[Self::bucket(hash)];
        let seen = &self.seen[Self::seen_slot(hash)];
        if seen.swap(fingerprint, Ordering::AcqRel) == fingerprint {
            // The last read answered this item too, and bumped when it
            // changed to it: no copy older than it can still be served.
            return ticket_epoch.filter(|&e| bucket.load(Ordering::Acquire) == e);
        }
        match ticket_epoch {
            Some(e)
                if bucket
                    .compare_exchange(e, e.wrapping_add(1), Ordering::AcqRel, Ordering::Acquire)
                    .is_ok() =>
            {
                Some(e.wrapping_add(1))
            }
            _ => {
                bucket.fetch_add(1, Ordering::AcqRel);
                None
            }
        }
    }

    /// A write-through `set` of the key with `hash`, dispatched at epoch
    /// `ticket_epoch` (not bumped: older copies stay served while it is in
    /// flight), was stored and leaves the item
    /// with `fingerprint`: drop every older copy of the key on every thread
    /// (bump), and return the epoch to fill at, or `None` if something else
    /// was invalidated since the set was dispatched (then nothing fills).
    pub fn settle_own_write(&self, hash: u64, fingerprint: u64, ticket_epoch: u32) -> Option<u32> {
        let bucket = &self.epochs[Self::bucket(hash)];
        let next = ticket_epoch.wrapping_add(1);
        match bucket.compare_exchange(ticket_epoch, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // Bumped as it changed to this item (see `observe`).
                self.seen[Self::seen_slot(hash)].store(fingerprint, Ordering::Release);
                Some(next)
            }
            Err(_) => {
                bucket.fetch_add(1, Ordering::AcqRel);
                None
            }
        }
    }

    /// Bump the key's bucket; returns the epoch after the bump.
    #[inline]
    pub fn bump(&self, hash: u64) -> u32 {
        self.epochs[Self::bucket(hash)]
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1)
    }

    #[inline]
    fn seen_slot(hash: u64) -> usize {
        ((hash >> 32) as usize) & (SEEN_SLOTS - 1)
    }

    /// `max_bytes` for one worker thread's store.
    pub fn per_thread(&self, max_bytes: usize) -> usize {
        max_bytes / self.threads
    }
}

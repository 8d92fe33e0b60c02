//! The entries of one worker thread: a thread-local map bounded in bytes
//! (key + value + [`ENTRY_OVERHEAD`]), evicted oldest fill first, plus the
//! admission filter. No lock: only the thread's own sessions touch it.
//!
//! The map is keyed by the key's xxh3 hash, which every lookup computes
//! anyway (for its epoch bucket), through a pass-through hasher: a std
//! `HashMap<Bytes, _>` hashed every key a second time with SipHash (with
//! the key compare, ~0.5 % of the proxy's CPU on the near-cache hit path).
//! The entry keeps its key; a different key with the same 64-bit hash is a
//! miss, and its fill replaces the entry (a cache may drop anything).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use triomphe::ThinArc;

use super::{NearCache, Tracking};

/// Bytes counted per entry besides key and value: the item's header (its
/// reference count, length and [`Meta`]), the allocator's own (up to 16),
/// the map slot (a hash and a pointer, at hashbrown's 7/8 load) and the
/// eviction queue's record: 130 on 64-bit targets.
pub const ENTRY_OVERHEAD: usize = 2 * std::mem::size_of::<usize>()
    + std::mem::size_of::<Meta>()
    + 16
    + std::mem::size_of::<(u64, Cached)>() * 8 / 7
    + std::mem::size_of::<(u64, u64)>();
/// Admission slots per thread (a key's hash picks one).
const DOOR_SLOTS: usize = 4096;

/// The near cache's limits, as of the last config (re)load.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_bytes: usize,
    pub max_ttl: Duration,
    pub admit_reads: u32,
    pub admit_window: Duration,
    /// Misses of a key already being read wait for that read
    /// ([`super::coalesce`]).
    pub coalesce: bool,
}

/// What a read remembers from when it was sent, to fill the cache with its
/// reply only if nothing was invalidated meanwhile.
#[derive(Debug)]
pub struct Ticket {
    tracking: Arc<Tracking>,
    generation: u64,
    hash: u64,
    epoch: u32,
    sent: Instant,
}

impl Ticket {
    /// (tracking, generation, key hash, epoch) as of when the read was sent.
    pub(super) fn snapshot(&self) -> (&Arc<Tracking>, u64, u64, u32) {
        (&self.tracking, self.generation, self.hash, self.epoch)
    }
}

/// An item read from (or written to) Redis, as `get`/`gets` answer it: what
/// fills the cache.
#[derive(Debug, Clone)]
pub struct Hit {
    pub flags: u32,
    pub cas: u64,
    pub data: Bytes,
}

/// A cached item, as a hit hands it out: what the entry is checked
/// against, its key and its data in one allocation, behind the reference
/// count they share (a memcached item's layout). A hit on a store larger
/// than the CPU's caches costs mostly the cache lines it touches: the map
/// slot, then the key (to compare it), the count and the data. Kept in the
/// slot with key and data in allocations of their own (two `Bytes`, the
/// data's count in a third, made on its first clone) the lookup, the key
/// compare, the clone and the value's copy were ≈ 30 % of a hit's
/// user-space time; here the slot is a hash and a pointer, and the rest is
/// one run of lines (BENCHMARKS.md, "Near cache: one allocation per
/// item").
#[derive(Clone)]
pub struct Cached(ThinArc<Meta, u8>);

/// The fixed part of a [`Cached`] item: the answer's flags and CAS, and
/// what an entry is served under (see [`lookup`]).
struct Meta {
    flags: u32,
    key_len: u32,
    cas: u64,
    expires: Instant,
    /// The shard's tracking (compared by address) and its generation, and
    /// the key's epoch, as of when the read was sent.
    tracking: Arc<Tracking>,
    generation: u64,
    epoch: u32,
    /// Its fill's number: the eviction queue's records name it.
    id: u64,
}

impl std::fmt::Debug for Cached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cached")
            .field("flags", &self.flags())
            .field("cas", &self.cas())
            .field("len", &self.data().len())
            .finish_non_exhaustive()
    }
}

impl Cached {
    /// `None` only if the new allocation were shared (it never is).
    fn new(key: &[u8], data: &[u8], meta: Meta) -> Option<Cached> {
        // Zeroed, then two copies: a byte-wise iterator over key and data
        // (what `from_header_and_iter` takes) took 0.87 ms for a 1 MiB
        // item, a fill blocking its worker; this takes 0.04 ms.
        let len = key.len() + data.len();
        let mut item = ThinArc::from_header_and_iter(meta, std::iter::repeat_n(0, len));
        let copied = item.with_arc_mut(|arc| {
            let bytes = triomphe::Arc::get_mut(arc)?.slice_mut();
            let (k, d) = bytes.split_at_mut_checked(key.len())?;
            k.copy_from_slice(key);
            d.copy_from_slice(data);
            Some(())
        });
        copied.map(|()| Cached(item))
    }

    fn meta(&self) -> &Meta {
        &self.0.header.header
    }

    fn key_len(&self) -> usize {
        self.meta().key_len as usize
    }

    fn key(&self) -> &[u8] {
        self.0.slice.get(..self.key_len()).unwrap_or_default()
    }

    pub fn flags(&self) -> u32 {
        self.meta().flags
    }

    pub fn cas(&self) -> u64 {
        self.meta().cas
    }

    pub fn data(&self) -> &[u8] {
        self.0.slice.get(self.key_len()..).unwrap_or_default()
    }

    /// The data as `Bytes` sharing this item (one small allocation, no
    /// copy), for replies that keep several items (multi-key reads).
    pub fn into_data(self) -> Bytes {
        let start = self.key_len();
        Bytes::from_owner(self).slice(start..)
    }

    /// Served for a read of `key` from the shard `tracking` watches, at
    /// `generation` and `epoch`, made at `now`.
    fn serves(
        &self,
        key: &[u8],
        tracking: &Arc<Tracking>,
        generation: u64,
        epoch: u32,
        now: Instant,
    ) -> bool {
        let m = self.meta();
        self.key() == key
            && Arc::ptr_eq(&m.tracking, tracking)
            && m.generation == generation
            && m.epoch == epoch
            && now < m.expires
    }
}

impl AsRef<[u8]> for Cached {
    fn as_ref(&self) -> &[u8] {
        &self.0.slice
    }
}

/// A key's xxh3 hash, used as its own hash.
#[derive(Default)]
struct KeyHash(u64);

impl Hasher for KeyHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64`s are hashed here; this keeps any other input working.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

#[derive(Default)]
struct Store {
    /// By key hash ([`super::hash`]).
    map: HashMap<u64, Cached, BuildHasherDefault<KeyHash>>,
    /// Fill order (key hash, entry id); records of replaced or removed
    /// entries are skipped when popped.
    order: VecDeque<(u64, u64)>,
    bytes: usize,
    next_id: u64,
    /// (hash, last read) per admission slot; allocated on first use.
    door: Vec<(u64, Option<Instant>)>,
}

thread_local! {
    static STORE: RefCell<Store> = RefCell::new(Store::default());
}

fn size(key: &[u8], data: &[u8]) -> usize {
    key.len() + data.len() + ENTRY_OVERHEAD
}

/// The outcome of a lookup.
pub enum Lookup {
    Hit(Cached),
    /// Not served from here: read from Redis, and fill with the reply if
    /// there is a ticket.
    Miss(Option<Ticket>),
}

/// Look `key` up for a read of the shard that `tracking` watches, made at
/// `now` (the request's start: an entry live then is served).
pub fn lookup(
    near: &NearCache,
    tracking: &Arc<Tracking>,
    key: &[u8],
    limits: &Limits,
    now: Instant,
) -> Lookup {
    let hash = super::hash(key);
    let Some(generation) = tracking.current() else {
        return Lookup::Miss(None);
    };
    let epoch = near.epoch(hash);
    STORE.with(|s| {
        let mut s = s.borrow_mut();
        if let Some(e) = s.map.get(&hash) {
            if e.serves(key, tracking, generation, epoch, now) {
                near.metrics.near_cache.hit();
                return Lookup::Hit(e.clone());
            }
            let before = s.size();
            s.remove(hash);
            near.metrics.near_cache.resized(before, s.size());
        }
        near.metrics.near_cache.miss();
        let admitted = limits.admit_reads <= 1 || s.seen(hash, now, limits.admit_window);
        Lookup::Miss(admitted.then(|| Ticket {
            tracking: tracking.clone(),
            generation,
            hash,
            epoch,
            sent: now,
        }))
    })
}

/// A get/gets of `key` read from Redis (not from here) answered `item`
/// (with its PTTL in ms, `-1`: no expiry, when the read asked for it): drop
/// older copies on every thread ([`NearCache::observe`]), then cache the
/// item if the read has a `ticket` and nothing was invalidated since it
/// was sent. Call before the answer is written to the client.
pub fn answered(
    near: &NearCache,
    ticket: Option<Ticket>,
    key: &[u8],
    item: Option<&Hit>,
    pttl: Option<i64>,
    limits: &Limits,
) {
    let hash = ticket.as_ref().map_or_else(|| super::hash(key), |t| t.hash);
    let fp = super::fingerprint(hash, item.map(|h| (h.flags, h.cas, &h.data[..])));
    let epoch = near.observe(hash, fp, ticket.as_ref().map(|t| t.epoch));
    if let (Some(ticket), Some(epoch), Some(hit), Some(pttl)) = (ticket, epoch, item, pttl) {
        fill_at(near, ticket, epoch, key, hit, pttl, limits);
    }
}

/// The read of `ticket` answered `hit` with `pttl` ms left (`-1`: no
/// expiry): cache it unless something was invalidated since it was sent.
pub fn fill(near: &NearCache, ticket: Ticket, key: &[u8], hit: &Hit, pttl: i64, limits: &Limits) {
    answered(near, Some(ticket), key, Some(hit), Some(pttl), limits);
}

/// A plain `set` this proxy sends on the shard's invalidation connection
/// (write-through): if Redis stores it, this thread caches the item it
/// wrote. Made when the set is dispatched, at the key's current epoch
/// (older copies stay served while it is in flight, see
/// [`write_through`]); settled when its reply is rendered: [`Through::stored`]
/// bumps and fills at that bump only if nothing else moved the epoch
/// meanwhile; any other outcome (or dropping it unsettled: the client went
/// away, a timeout) just bumps, so a set whose outcome is unknown leaves no
/// entry and no older copy.
///
/// Why no invalidation push evicts the entry right after: the set goes out
/// on the tracking connection, which tracks with `NOLOOP`, so Redis pushes
/// nothing to it for a key whose last write in an event-loop cycle was
/// this connection's own; a write by anyone else after it (even in the same
/// cycle, which BCAST merges into one push) is pushed as usual.
#[derive(Debug)]
pub struct Through {
    ticket: Option<Ticket>,
    key: Bytes,
    /// The item as written, and how long it lives (`None`: no expiry).
    item: Hit,
    ttl: Option<Duration>,
}

/// Start a write-through set of `key` (see [`Through`]): `None` if the
/// shard's invalidations are not being received (then it is a plain write).
pub fn write_through(
    near: &NearCache,
    tracking: &Arc<Tracking>,
    key: Bytes,
    item: Hit,
    ttl: Option<Duration>,
) -> Option<Through> {
    let hash = super::hash(&key);
    // Generation first, as in `lookup`: a resume after it refuses the fill.
    let generation = tracking.current()?;
    // No bump at dispatch, unlike other writes: the session sending it
    // dispatches nothing until its reply, so only other clients' reads can
    // run meanwhile, and those are concurrent with the set: the previous
    // item is a right answer until Redis acknowledges it. Dropping it here
    // sent every read of a hot key to Redis (and to coalescing waits) for
    // the whole flight of each of its sets (BENCHMARKS.md, "Near cache:
    // where the tail comes from"). The reply's bump drops it.
    let epoch = near.epoch(hash);
    Some(Through {
        ticket: Some(Ticket {
            tracking: tracking.clone(),
            generation,
            hash,
            epoch,
            sent: Instant::now(),
        }),
        key,
        item,
        ttl,
    })
}

impl Through {
    /// The hash of the key written.
    pub fn hash(&self) -> u64 {
        self.ticket.as_ref().map_or(0, |t| t.hash)
    }

    /// Redis answered STORED: drop older copies everywhere, cache the item
    /// here. Call before the reply is written.
    pub fn stored(mut self, near: &NearCache, limits: &Limits) {
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        let item = &self.item;
        let fp = super::fingerprint(ticket.hash, Some((item.flags, item.cas, &item.data[..])));
        if let Some(epoch) = near.settle_own_write(ticket.hash, fp, ticket.epoch) {
            let pttl = self
                .ttl
                .map_or(-1, |t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
            fill_at(near, ticket, epoch, &self.key, item, pttl, limits);
        }
    }

    /// Not stored, or unknown: drop every copy. Call before the reply is
    /// written.
    pub fn failed(mut self, near: &NearCache) {
        if let Some(ticket) = self.ticket.take() {
            near.invalidate_hash(ticket.hash);
        }
    }
}

impl Drop for Through {
    fn drop(&mut self) {
        if let (Some(ticket), Some(near)) = (self.ticket.take(), super::get()) {
            near.invalidate_hash(ticket.hash);
        }
    }
}

/// [`fill`], at `epoch` (the ticket's, or the one [`NearCache::observe`]
/// moved it to).
fn fill_at(
    near: &NearCache,
    ticket: Ticket,
    epoch: u32,
    key: &[u8],
    hit: &Hit,
    pttl: i64,
    limits: &Limits,
) {
    if ticket.tracking.current() != Some(ticket.generation) || pttl == 0 || pttl < -1 {
        return;
    }
    // Counted from when the read was sent: the item expires no earlier.
    let ttl = match pttl {
        -1 => limits.max_ttl,
        p => limits.max_ttl.min(Duration::from_millis(p as u64)),
    };
    let cap = near.per_thread(limits.max_bytes);
    let Ok(key_len) = u32::try_from(key.len()) else {
        return;
    };
    if size(key, &hit.data) > cap {
        return;
    }
    STORE.with(|s| {
        let mut s = s.borrow_mut();
        let before = s.size();
        let hash = ticket.hash;
        let id = s.next_id + 1;
        let meta = Meta {
            flags: hit.flags,
            key_len,
            cas: hit.cas,
            expires: ticket.sent + ttl,
            tracking: ticket.tracking,
            generation: ticket.generation,
            epoch,
            id,
        };
        // A copy: keeping slices would pin the whole read buffers they
        // are in.
        let Some(item) = Cached::new(key, &hit.data, meta) else {
            return;
        };
        s.remove(hash);
        s.next_id = id;
        s.bytes += size(key, &hit.data);
        s.order.push_back((hash, id));
        s.map.insert(hash, item);
        near.metrics.near_cache.admission();
        while s.bytes > cap {
            let Some((old, old_id)) = s.order.pop_front() else {
                break;
            };
            if s.map.get(&old).is_some_and(|e| e.meta().id == old_id) {
                s.remove(old);
                near.metrics.near_cache.eviction();
            }
        }
        s.compact();
        near.metrics.near_cache.resized(before, s.size());
    });
}

impl Store {
    fn size(&self) -> (usize, usize) {
        (self.bytes, self.map.len())
    }

    fn remove(&mut self, hash: u64) {
        if let Some(e) = self.map.remove(&hash) {
            self.bytes -= size(e.key(), e.data());
        }
    }

    /// Records the read; true if the key was read before within `window`
    /// (the second read admits it).
    fn seen(&mut self, hash: u64, now: Instant, window: Duration) -> bool {
        if self.door.is_empty() {
            self.door = vec![(0, None); DOOR_SLOTS];
        }
        let slot = &mut self.door[(hash >> 48) as usize % DOOR_SLOTS];
        let again = slot.0 == hash && slot.1.is_some_and(|t| now.duration_since(t) <= window);
        *slot = (hash, Some(now));
        again
    }

    /// Drop queue records of entries no longer there, once they outnumber
    /// the live ones (keeps the queue O(entries)).
    fn compact(&mut self) {
        if self.order.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.order
                .retain(|(k, id)| map.get(k).is_some_and(|e| e.meta().id == *id));
        }
    }
}

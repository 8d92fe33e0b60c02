//! Miss coalescing (`[near_cache] coalesce_misses`): a single-key
//! `get`/`gets` that misses while another read of the same key is in
//! flight on the same worker thread waits for that read's answer instead
//! of sending its own, so a herd of clients missing one hot key costs one
//! Redis read per thread.
//!
//! * **Where flights live.** A flight (its waiters) is shared by its
//!   [`Lead`] and its waiters' [`Joined`] under a mutex that only they
//!   take, so it does not matter on which thread the leader's answer is
//!   handled (the runtime moves session tasks between worker threads).
//!   Finding a flight to join goes through a thread-local index (key hash
//!   to open flight): no lock shared by unrelated connections, and
//!   coalescing stays per thread.
//!
//! * **Who leads.** A read the near cache admits (sent as the fill
//!   transaction `translate::fill_read`, with a [`super::store::Ticket`])
//!   opens a *flight* for its
//!   key, holding the ticket's snapshot: the shard's tracking connection,
//!   its generation and the key's epoch bucket, as they were when the read
//!   was sent. Its [`Lead`] rides in the request's retrieval.
//! * **Who joins (the consistency rule).** Another miss of the key joins
//!   the flight only while the key's epoch and the shard's generation
//!   still equal the flight's snapshot. Every write through this proxy
//!   bumps the epoch when it is dispatched and again just before its reply
//!   is written, and every invalidation push bumps it too; so a read that
//!   starts after a write's reply (or after the push of a foreign write)
//!   sees a moved epoch and never gets the older flight's answer: it opens
//!   a flight of its own (the old one stays owed to its waiters). This is
//!   the rule that already decides whether a read may fill the cache, so
//!   docs/near-cache.md's guarantee is unchanged.
//! * **Answers.** When the leader's reply arrives (not when it is
//!   written: the leader's client may be behind on other replies) the
//!   leader first fills the cache with it, then sends each waiter a copy
//!   on the waiter's own reply channel, tagged with the waiter's request
//!   sequence number, exactly as a backend would: each waiting session
//!   slots it in its own request order. A backend error (down, timeout,
//!   connection lost) is handed on as it is, so each waiter answers the
//!   same `SERVER_ERROR` the leader does. (Why hand on the reply rather
//!   than park the waiter until the fill lands and look up again: a
//!   session already takes every answer as a `(seq, part)` message on its
//!   reply channel, so a waiter is one more such message and needs no new
//!   wake-up path; and a reply that does not fill, a miss or an item with a
//!   past TTL, still answers every waiter with one read.)
//! * **A lost leader.** If the leader's request ends without a reply (its
//!   client went away, its deadline passed), dropping the [`Lead`] tells
//!   each waiter to send its own read ([`REDISPATCH`]). Every waiter also
//!   keeps its own deadline, so none waits longer than its request's
//!   timeout whatever happens to the leader.
//! * **Session order.** A waiter's later requests go out on its own
//!   connection and could reach Redis before the leader's read. Reads of
//!   other keys do not care; a later write of the same key by the same
//!   session does, so dispatching it first takes the session's waiters of
//!   that key out of their flights and sends their own reads ahead of the
//!   write ([`leave`]); one whose flight is already gone is answered from
//!   a read Redis executed before the write, unless the flight was lost,
//!   and then it fails rather than read after its own write. A
//!   `flush_all` is a write of every key: it takes out all the session's
//!   waiters (left in, a later write of the key would send them after the
//!   flush).
//! * **Bounds.** At most [`MAX_WAITERS`] per flight (the next miss opens a
//!   new flight). A flight lives as long as its [`Lead`] (one pending
//!   request) and its waiters' requests. The index drops an entry when its
//!   leader lands on the index's thread, when a join or lead finds it
//!   landed, and in a sweep of landed entries whenever it has doubled
//!   since the last sweep: it holds at most about twice the flights in
//!   flight, plus [`SWEEP_FLOOR`].
//! * **Out of scope:** multi-key gets, `mg`, the RESP listener and keys
//!   served by the memcached side.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use super::store::Ticket;
use super::{NearCache, Tracking};
use crate::backend::{BackendError, BackendReply, Reply, ReplySender, ReplyTo};

/// Waiters one flight takes; a later miss of the key opens another flight.
pub const MAX_WAITERS: usize = 1024;
/// The `part` of a reply that tells a waiter its flight was lost: send
/// your own read.
pub const REDISPATCH: u32 = u32::MAX - 1;
/// Index entries below which no sweep runs.
const SWEEP_FLOOR: usize = 1024;

#[derive(Debug, Default)]
struct Flight {
    /// The key read (emptied when it lands: an index entry left behind
    /// must not pin the request buffer the key is a slice of).
    key: Bytes,
    waiters: Vec<ReplyTo>,
    /// Answered or lost: takes no more waiters.
    landed: bool,
}

type Shared = Arc<Mutex<Flight>>;

fn lock(flight: &Shared) -> MutexGuard<'_, Flight> {
    // Nothing panics while holding it; a poisoned flight is still whole.
    flight.lock().unwrap_or_else(|e| e.into_inner())
}

/// An open flight in the index, with the snapshot of its read.
struct Open {
    tracking: Arc<Tracking>,
    generation: u64,
    epoch: u32,
    flight: Shared,
}

#[derive(Default)]
struct Index {
    open: HashMap<u64, Open>,
    sweep_at: usize,
}

thread_local! {
    static INDEX: RefCell<Index> = RefCell::new(Index::default());
}

/// A leader's hold on its flight (in the read's retrieval). Dropped before
/// [`Lead::land`]: the waiters are told to read for themselves.
#[derive(Debug)]
pub struct Lead {
    hash: u64,
    flight: Shared,
    landed: bool,
}

/// A waiter's place in a flight (in the joined read's retrieval).
#[derive(Debug)]
pub struct Joined {
    hash: u64,
    flight: Shared,
    /// Its session dispatched a write of the key while it waited, and it
    /// could not be taken out of its flight: a lost flight is not re-read.
    pub overtaken: bool,
}

impl Joined {
    pub fn hash(&self) -> u64 {
        self.hash
    }
}

/// Open a flight for the read of `key` that `ticket` stands for. `None` if
/// another key with the same hash has one open (never shared).
pub fn lead(ticket: &Ticket, key: Bytes) -> Option<Lead> {
    let (tracking, generation, hash, epoch) = ticket.snapshot();
    INDEX.with(|index| {
        let mut index = index.borrow_mut();
        if let Some(old) = index.open.get(&hash) {
            let old = lock(&old.flight);
            if old.key != key && !old.landed {
                return None;
            }
        }
        let flight = Arc::new(Mutex::new(Flight {
            key,
            waiters: Vec::new(),
            landed: false,
        }));
        // A flight it replaces stays owed to its waiters by its own leader.
        index.open.insert(
            hash,
            Open {
                tracking: tracking.clone(),
                generation,
                epoch,
                flight: flight.clone(),
            },
        );
        index.sweep();
        Some(Lead {
            hash,
            flight,
            landed: false,
        })
    })
}

/// Join the open flight of `key` (read from the shard `tracking` watches)
/// if nothing was invalidated since its read was sent; `reply` is where
/// this read's answer goes.
pub fn join(
    near: &NearCache,
    tracking: &Arc<Tracking>,
    key: &[u8],
    reply: impl FnOnce() -> ReplyTo,
) -> Option<Joined> {
    INDEX.with(|index| {
        let mut index = index.borrow_mut();
        if index.open.is_empty() {
            return None;
        }
        let hash = super::hash(key);
        let open = index.open.get(&hash)?;
        let same_snapshot = Arc::ptr_eq(&open.tracking, tracking)
            && tracking.current() == Some(open.generation)
            && near.epoch(hash) == open.epoch;
        if !same_snapshot {
            return None;
        }
        let flight = open.flight.clone();
        let mut f = lock(&flight);
        if f.landed {
            drop(f);
            index.open.remove(&hash);
            return None;
        }
        if f.key != key || f.waiters.len() >= MAX_WAITERS {
            return None;
        }
        f.waiters.push(reply());
        drop(f);
        Some(Joined {
            hash,
            flight,
            overtaken: false,
        })
    })
}

/// Take the waiter of request `seq` on mailbox `tx` out of its flight: true
/// if it was still there (it must now send its own read), false if its
/// flight already answered it or was lost (the answer or [`REDISPATCH`]
/// is on its way).
pub fn leave(joined: &Joined, tx: &ReplySender, seq: u64) -> bool {
    let mut f = lock(&joined.flight);
    match f
        .waiters
        .iter()
        .position(|w| w.seq == seq && w.tx.same_mailbox(tx))
    {
        Some(i) => {
            f.waiters.swap_remove(i);
            true
        }
        None => false,
    }
}

impl Lead {
    /// The leader's read was answered (or failed): close the flight and
    /// return its waiters, to be sent [`answer`].
    pub fn land(mut self) -> Vec<ReplyTo> {
        self.landed = true;
        self.close()
    }

    fn close(&self) -> Vec<ReplyTo> {
        let waiters = {
            let mut f = lock(&self.flight);
            f.landed = true;
            f.key = Bytes::new();
            std::mem::take(&mut f.waiters)
        };
        // Out of this thread's index if it is still there (it is unless
        // the leader's task moved to another thread; then a sweep or the
        // next lead or join of the key drops it).
        INDEX.with(|index| {
            let mut index = index.borrow_mut();
            if index
                .open
                .get(&self.hash)
                .is_some_and(|o| Arc::ptr_eq(&o.flight, &self.flight))
            {
                index.open.remove(&self.hash);
            }
        });
        waiters
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        if self.landed {
            return;
        }
        for w in self.close() {
            w.tx.send(BackendReply {
                seq: w.seq,
                part: REDISPATCH,
                result: Err(BackendError::ConnectionLost),
            });
        }
    }
}

/// Send a waiter its copy of the leader's answer.
pub fn answer(waiter: ReplyTo, result: &Result<Reply, BackendError>) {
    waiter.tx.send(BackendReply {
        seq: waiter.seq,
        part: waiter.part,
        result: result.clone(),
    });
}

impl Index {
    /// Drop landed entries once the index has doubled since the last sweep.
    fn sweep(&mut self) {
        if self.open.len() < self.sweep_at.max(SWEEP_FLOOR) {
            return;
        }
        self.open.retain(|_, o| !lock(&o.flight).landed);
        self.sweep_at = 2 * self.open.len();
    }
}

/// Entries in this thread's index (tests).
#[cfg(test)]
pub(super) fn indexed() -> usize {
    INDEX.with(|index| index.borrow().open.len())
}

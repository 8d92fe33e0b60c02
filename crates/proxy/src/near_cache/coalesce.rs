//! Miss coalescing (`[near_cache] coalesce_misses`): a single-key
//! `get`/`gets` that misses while another read of the same key is in
//! flight on the same worker thread waits for that read's answer instead
//! of sending its own, so a herd of clients missing one hot key costs one
//! Redis read per thread.
//!
//! * **Who leads.** A read the near cache admits (sent as the peek
//!   meta-get, with a [`super::store::Ticket`]) opens a *flight* for its
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
//!   same `SERVER_ERROR` the leader does.
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
//!   and then it fails rather than read after its own write.
//! * **Bounds.** At most [`MAX_WAITERS`] per flight (the next miss opens a
//!   new flight). A flight lives exactly as long as its [`Lead`], which
//!   lives in one pending request; the map cannot outgrow the requests in
//!   flight on the thread.
//! * **Out of scope:** multi-key gets, `mg`, the RESP listener and keys
//!   served by the memcached side.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::store::Ticket;
use super::{NearCache, Tracking};
use crate::redis::{BackendError, BackendReply, Reply, ReplyTo};

/// Waiters one flight takes; a later miss of the key opens another flight.
pub const MAX_WAITERS: usize = 1024;
/// The `part` of a reply that tells a waiter its flight was lost: send
/// your own read.
pub const REDISPATCH: u32 = u32::MAX - 1;

struct Flight {
    id: u64,
    key: Bytes,
    tracking: Arc<Tracking>,
    generation: u64,
    epoch: u32,
    waiters: Vec<ReplyTo>,
}

#[derive(Default)]
struct Flights {
    /// The flight each key hash may be joined on.
    open: HashMap<u64, Flight>,
    /// Flights replaced by a newer one of their key (an invalidation
    /// moved the snapshot, or they were full): still owed to their
    /// waiters, no longer joinable.
    closed: Vec<Flight>,
    next_id: u64,
}

thread_local! {
    static FLIGHTS: RefCell<Flights> = RefCell::new(Flights::default());
}

/// A leader's hold on its flight (in the read's retrieval). Dropped before
/// [`Lead::land`]: the waiters are told to read for themselves.
#[derive(Debug)]
pub struct Lead {
    hash: u64,
    id: u64,
}

/// A waiter's place in a flight (in the joined read's retrieval).
#[derive(Debug, Clone, Copy)]
pub struct Joined {
    hash: u64,
    id: u64,
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
    FLIGHTS.with(|f| {
        let mut f = f.borrow_mut();
        if f.open.get(&hash).is_some_and(|old| old.key != key) {
            return None;
        }
        f.next_id += 1;
        let id = f.next_id;
        let flight = Flight {
            id,
            key,
            tracking: tracking.clone(),
            generation,
            epoch,
            waiters: Vec::new(),
        };
        if let Some(old) = f.open.insert(hash, flight) {
            if old.waiters.is_empty() {
                // Its leader finds nothing to do: nothing is owed.
            } else {
                f.closed.push(old);
            }
        }
        Some(Lead { hash, id })
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
    FLIGHTS.with(|f| {
        let mut f = f.borrow_mut();
        if f.open.is_empty() {
            return None;
        }
        let hash = super::hash(key);
        let flight = f.open.get_mut(&hash)?;
        let same_snapshot = || {
            Arc::ptr_eq(&flight.tracking, tracking)
                && tracking.current() == Some(flight.generation)
                && near.epoch(hash) == flight.epoch
        };
        if flight.key != key || flight.waiters.len() >= MAX_WAITERS || !same_snapshot() {
            return None;
        }
        flight.waiters.push(reply());
        Some(Joined {
            hash,
            id: flight.id,
            overtaken: false,
        })
    })
}

/// Take the waiter of request `seq` on channel `tx` out of its flight: true
/// if it was still there (it must now send its own read), false if its
/// flight already answered it or was lost (the answer or [`REDISPATCH`]
/// is on its way).
pub fn leave(joined: &Joined, tx: &mpsc::UnboundedSender<BackendReply>, seq: u64) -> bool {
    FLIGHTS.with(|f| {
        let mut f = f.borrow_mut();
        let f = &mut *f;
        let flight = match f.open.get_mut(&joined.hash) {
            Some(fl) if fl.id == joined.id => Some(fl),
            _ => f.closed.iter_mut().find(|fl| fl.id == joined.id),
        };
        let Some(flight) = flight else {
            return false;
        };
        match flight
            .waiters
            .iter()
            .position(|w| w.seq == seq && w.tx.same_channel(tx))
        {
            Some(i) => {
                flight.waiters.swap_remove(i);
                true
            }
            None => false,
        }
    })
}

impl Lead {
    /// The leader's read was answered (or failed): close the flight and
    /// return its waiters, to be sent [`answer`].
    pub fn land(mut self) -> Vec<ReplyTo> {
        let waiters = take(self.hash, self.id);
        self.id = 0;
        waiters
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        if self.id == 0 {
            return;
        }
        for w in take(self.hash, self.id) {
            let _ = w.tx.send(BackendReply {
                seq: w.seq,
                part: REDISPATCH,
                result: Err(BackendError::ConnectionLost),
            });
        }
    }
}

/// Send a waiter its copy of the leader's answer.
pub fn answer(waiter: ReplyTo, result: &Result<Reply, BackendError>) {
    let _ = waiter.tx.send(BackendReply {
        seq: waiter.seq,
        part: waiter.part,
        result: result.clone(),
    });
}

/// Remove flight `id` (open under `hash`, or closed); its waiters.
fn take(hash: u64, id: u64) -> Vec<ReplyTo> {
    FLIGHTS.with(|f| {
        let mut f = f.borrow_mut();
        if f.open.get(&hash).is_some_and(|fl| fl.id == id) {
            return f
                .open
                .remove(&hash)
                .map(|fl| fl.waiters)
                .unwrap_or_default();
        }
        match f.closed.iter().position(|fl| fl.id == id) {
            Some(i) => f.closed.swap_remove(i).waiters,
            None => Vec::new(),
        }
    })
}

/// Open and closed flights on this thread (tests).
#[cfg(test)]
pub(super) fn in_flight() -> (usize, usize) {
    FLIGHTS.with(|f| {
        let f = f.borrow();
        (f.open.len(), f.closed.len())
    })
}

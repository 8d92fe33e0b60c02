//! The ordered queue of a connection's requests, one entry per request in
//! the client's order, whatever protocol it speaks: backend replies fill
//! entries by sequence number, the front is written out once complete.
//!
//! It keeps the counts backpressure needs: entries still waiting on a
//! backend, reply bytes held, and the expected size of the next reply.

use std::collections::VecDeque;
use std::thread::LocalKey;

use tokio::time::Instant;

use super::pool::{self, QueuePool};
use crate::redis::route_pin;

/// Requests waiting on backends before the connection stops dispatching
/// (and reading from its client).
const MAX_WAITING: usize = 1024;
/// Reply bytes (estimated) a connection may have in flight on the backends
/// before it stops dispatching (and reading): connections share pipelined
/// backend connections, so this bounds how much of another client's reply
/// traffic one connection's requests can sit in front of.
const MAX_IN_FLIGHT_BYTES: usize = 4 * 1024 * 1024;
/// A new connection's guess of its next reply's size, until replies say
/// how large they are: its first batch puts at most
/// `MAX_IN_FLIGHT_BYTES / FIRST_REPLY_ESTIMATE` (4) requests in flight, so
/// a burst of reads of large values cannot sit in front of other clients'
/// replies; each smaller reply halves the guess, so a pipelining client of
/// small values reaches full depth within a few round trips.
const FIRST_REPLY_ESTIMATE: usize = 1024 * 1024;

/// What the engine needs of a protocol's queue entry.
pub trait Entry: Sized + 'static {
    /// Backend replies are still to come.
    fn is_waiting(&self) -> bool;
    /// When its missing replies are given up on (meaningful while waiting).
    fn deadline(&self) -> Instant;
    /// Bytes of backend replies it holds (for the slow-consumer limit).
    fn bytes(&self) -> usize;
    /// Give up on the missing replies: they are answered as timeouts.
    fn expire(&mut self);
    /// Write what came before, then close the connection.
    fn is_close(&self) -> bool;
    /// Its index into `metrics::COMMANDS`, if it counts as a request.
    fn command(&self) -> Option<usize>;
    /// When it was read (for the request latency histogram).
    fn started(&self) -> Instant;
    /// The thread's free list for queues of this entry type.
    fn pool() -> &'static LocalKey<QueuePool<Self>>;
}

/// The [`Entry`] methods every protocol's entry answers from the same
/// fields (`waiting`: replies still to come, `deadline`, `bytes`,
/// `started`), and `$entry`'s thread-local queue pool.
#[macro_export]
macro_rules! entry_basics {
    ($entry:ty) => {
        #[inline]
        fn is_waiting(&self) -> bool {
            self.waiting > 0
        }

        #[inline]
        fn deadline(&self) -> tokio::time::Instant {
            self.deadline
        }

        #[inline]
        fn bytes(&self) -> usize {
            self.bytes
        }

        #[inline]
        fn started(&self) -> tokio::time::Instant {
            self.started
        }

        fn pool() -> &'static std::thread::LocalKey<$crate::conn::pool::QueuePool<$entry>> {
            thread_local! {
                static POOL: $crate::conn::pool::QueuePool<$entry> =
                    std::cell::RefCell::new(Vec::new());
            }
            &POOL
        }
    };
}

pub struct Queue<E> {
    entries: VecDeque<E>,
    /// Sequence number of `entries[0]`.
    base_seq: u64,
    /// Entries still waiting on a backend.
    waiting: usize,
    /// Bytes of backend replies held by the entries.
    bytes: usize,
    /// Expected size of a reply: the largest recent one (halved by each
    /// smaller one), for `MAX_IN_FLIGHT_BYTES`.
    reply_estimate: usize,
    /// The Redis Cluster slot map the waiting entries were routed by (0:
    /// none), which the next ones are routed by too (`redis::route_pin`);
    /// with [`STALE`] set when one of them was routed by a map older than
    /// its cluster's current one: dispatch nothing more until they are
    /// answered. (One word: this struct is in every connection's state,
    /// whose size the idle-connection memory budget counts.)
    routed_by: u64,
}

/// The flag bit of `Queue::routed_by` (epochs stay far below it).
const STALE: u64 = 1 << 63;

impl<E: Entry> Default for Queue<E> {
    fn default() -> Self {
        Queue {
            entries: VecDeque::new(),
            base_seq: 0,
            waiting: 0,
            bytes: 0,
            reply_estimate: FIRST_REPLY_ESTIMATE,
            routed_by: 0,
        }
    }
}

impl<E: Entry> Queue<E> {
    /// Room for another backend request: few enough in flight, by count
    /// and by expected reply bytes (a slow reader's large replies must not
    /// fill the shared backend connections; it waits for its own instead).
    ///
    /// Also sets this thread's slot-map pin for the dispatch that follows
    /// (`redis::route_pin`): while entries wait, the next request is routed
    /// by their map; and once one was routed by a map older than its
    /// cluster's current one, none is dispatched until they are answered,
    /// so the session moves to the current map.
    #[inline]
    pub fn room(&self) -> bool {
        if self.waiting >= MAX_WAITING
            || self.waiting.saturating_mul(self.reply_estimate) >= MAX_IN_FLIGHT_BYTES
        {
            return false;
        }
        if self.waiting == 0 {
            route_pin::pin(0);
            return true;
        }
        if self.routed_by & STALE != 0 {
            return false;
        }
        route_pin::pin(self.routed_by);
        true
    }

    /// More queued than a client that reads its replies would have.
    pub fn over(&self, max_replies: usize, max_bytes: usize) -> bool {
        self.entries.len() > max_replies || self.bytes > max_bytes
    }

    /// Sequence number the next entry gets.
    #[inline]
    pub fn next_seq(&self) -> u64 {
        self.base_seq + self.entries.len() as u64
    }

    /// Sequence number of the entry at `index`.
    #[inline]
    pub fn seq_of(&self, index: usize) -> u64 {
        self.base_seq + index as u64
    }

    /// Sequence number of the entry last popped.
    pub fn last_popped_seq(&self) -> u64 {
        self.base_seq.wrapping_sub(1)
    }

    /// Index of the entry with sequence number `seq` (`None`: already
    /// answered, e.g. timed out).
    #[inline]
    pub fn index_of(&self, seq: u64) -> Option<usize> {
        seq.checked_sub(self.base_seq).map(|i| i as usize)
    }

    /// Queue an entry answered already.
    #[inline]
    pub fn push_ready(&mut self, entry: E) {
        self.entries.push_back(entry);
    }

    /// Queue an entry waiting on backends; returns its sequence number.
    #[inline]
    pub fn push_waiting(&mut self, entry: E) -> u64 {
        let seq = self.next_seq();
        let used = route_pin::used();
        if self.waiting == 0 {
            self.routed_by = 0;
        }
        // The epoch of the first waiting entry routed by a cluster map.
        if self.routed_by & !STALE == 0 {
            self.routed_by |= used.epoch;
        }
        if used.stale {
            self.routed_by |= STALE;
        }
        self.waiting += 1;
        self.entries.push_back(entry);
        seq
    }

    /// A reply of `size` bytes arrived: it sets the expected reply size.
    #[inline]
    pub fn note_reply(&mut self, size: usize) {
        self.reply_estimate = size.max(self.reply_estimate / 2);
    }

    /// An entry took `size` bytes of reply.
    #[inline]
    pub fn hold(&mut self, size: usize) {
        self.bytes += size;
    }

    /// An entry stopped waiting (its last reply came).
    #[inline]
    pub fn settled(&mut self) {
        self.waiting -= 1;
    }

    /// Take back the entry queued last, before any backend was sent its
    /// request (RESP: queued in a transaction instead, or answered by an
    /// error after all). Its sequence number is the next entry's.
    pub fn pop_back(&mut self) -> Option<E> {
        let entry = self.entries.pop_back()?;
        if entry.is_waiting() {
            self.waiting -= 1;
        }
        self.bytes -= entry.bytes();
        Some(entry)
    }

    /// Give up on every overdue entry's missing replies.
    pub fn expire_overdue(&mut self, now: Instant) {
        for entry in self.entries.iter_mut() {
            if !entry.is_waiting() {
                continue;
            }
            if entry.deadline() > now {
                break;
            }
            entry.expire();
            self.waiting -= 1;
        }
    }

    /// The deadline of the front entry, while it waits.
    #[inline]
    pub fn front_deadline(&self) -> Option<Instant> {
        self.entries
            .front()
            .filter(|e| e.is_waiting())
            .map(|e| e.deadline())
    }

    /// The front entry, once it has every reply.
    #[inline]
    pub fn pop_ready(&mut self) -> Option<E> {
        if self.entries.front()?.is_waiting() {
            return None;
        }
        let entry = self.entries.pop_front()?;
        self.base_seq += 1;
        self.bytes -= entry.bytes();
        Some(entry)
    }

    /// Drop every entry (after a close, or at the drain deadline); returns
    /// how many there were.
    pub fn clear(&mut self) -> usize {
        let n = self.entries.len();
        self.base_seq += n as u64;
        self.entries.clear();
        self.bytes = 0;
        self.waiting = 0;
        n
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    pub fn get(&self, index: usize) -> Option<&E> {
        self.entries.get(index)
    }

    #[inline]
    pub fn get_mut(&mut self, index: usize) -> Option<&mut E> {
        self.entries.get_mut(index)
    }

    #[inline]
    pub fn back_mut(&mut self) -> Option<&mut E> {
        self.entries.back_mut()
    }

    pub fn iter(&self) -> std::collections::vec_deque::Iter<'_, E> {
        self.entries.iter()
    }

    pub fn iter_mut(&mut self) -> std::collections::vec_deque::IterMut<'_, E> {
        self.entries.iter_mut()
    }

    /// Busy: storage from the thread's pool.
    pub fn take_storage(&mut self) {
        if self.entries.capacity() == 0 {
            self.entries = pool::take_queue(E::pool());
        }
    }

    /// Quiet: storage back to the thread's pool.
    pub fn give_storage(&mut self) {
        pool::give_queue(E::pool(), std::mem::take(&mut self.entries));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[derive(Debug)]
    struct Req {
        waiting: u32,
        deadline: Instant,
        bytes: usize,
        started: Instant,
        timed_out: bool,
    }

    impl Entry for Req {
        crate::entry_basics!(Req);

        fn expire(&mut self) {
            self.waiting = 0;
            self.timed_out = true;
        }

        fn is_close(&self) -> bool {
            false
        }

        fn command(&self) -> Option<usize> {
            None
        }
    }

    fn req(waiting: u32, deadline: Instant) -> Req {
        Req {
            waiting,
            deadline,
            bytes: 0,
            started: deadline,
            timed_out: false,
        }
    }

    #[test]
    fn replies_fill_entries_by_sequence_and_leave_in_order() {
        let now = Instant::now();
        let mut q = Queue::default();
        let a = q.push_waiting(req(1, now));
        q.push_ready(req(0, now));
        let c = q.push_waiting(req(1, now));
        assert_eq!((a, c), (0, 2));
        // The last one is answered first: nothing leaves before the first.
        let i = q.index_of(c).expect("queued");
        q.get_mut(i).expect("entry").waiting = 0;
        q.get_mut(i).expect("entry").bytes = 10;
        q.hold(10);
        q.settled();
        assert!(q.pop_ready().is_none());
        assert!(q.over(5, 9), "10 bytes held is over a 9-byte bound");
        let i = q.index_of(a).expect("queued");
        q.get_mut(i).expect("entry").waiting = 0;
        q.settled();
        for _ in 0..3 {
            assert!(q.pop_ready().is_some());
        }
        assert!(q.is_empty());
        assert!(!q.over(0, 0), "popping gives the bytes back");
        // A reply for an entry already gone finds nothing.
        assert_eq!(q.index_of(a), None);
        assert_eq!(q.next_seq(), 3);
    }

    #[test]
    fn the_window_closes_on_count_and_on_expected_reply_bytes() {
        let now = Instant::now();
        let mut q = Queue::default();
        // A new connection expects 1 MiB replies: 4 in flight at most.
        for _ in 0..4 {
            assert!(q.room());
            q.push_waiting(req(1, now));
        }
        assert!(!q.room());
        // Small replies shrink the estimate and open the window.
        for _ in 0..12 {
            q.note_reply(100);
        }
        assert!(q.room());
        while q.room() {
            q.push_waiting(req(1, now));
        }
        assert_eq!(q.len(), MAX_WAITING);
    }

    #[test]
    fn overdue_entries_expire_up_to_the_first_not_due() {
        let now = Instant::now();
        let mut q = Queue::default();
        q.push_waiting(req(1, now));
        q.push_waiting(req(2, now + Duration::from_secs(5)));
        q.push_waiting(req(1, now));
        assert_eq!(q.front_deadline(), Some(now));
        q.expire_overdue(now + Duration::from_millis(1));
        assert!(q.pop_ready().is_some_and(|r| r.timed_out));
        assert!(q.pop_ready().is_none(), "the second is not due");
        assert_eq!(q.front_deadline(), Some(now + Duration::from_secs(5)));
        assert_eq!(q.clear(), 2);
        assert!(q.room());
    }
}

//! A session's reply mailbox, on its worker thread.
//!
//! A session and the shard connections of its lane run on one worker
//! thread (`crate::workers`), so a reply almost always arrives on the
//! thread of the session it is for. Then it goes straight into the
//! session's queue in a table of this thread's (a `RefCell`, no atomic
//! operation) and wakes the session: no channel, no reference count per
//! request. It replaced a tokio `mpsc` channel per session (a sender clone
//! and drop, a send and a receive per backend request: 8–10 atomic
//! operations); measured, the proxy's user-space time per unpipelined
//! request fell by ≈ 0.3 µs (BENCHMARKS.md, "Reply mailboxes, A/B").
//!
//! A reply from another thread (a shared replica or invalidation
//! connection, a lane count that is not a multiple of the worker count)
//! goes into the home thread's inbox, under a lock, and the home's pump
//! task moves it into the session's queue. A thread with no home (the main
//! thread when there are workers; tests) gives its sessions channels
//! instead.
//!
//! A mailbox's slot is freed when its session goes quiet (nothing in
//! flight) and the slot's generation moves on: a late reply addressed to
//! the old generation (for a request that already timed out) is dropped,
//! as the session would have dropped it. The table keeps as many slots as
//! the thread ever had busy sessions at once (≈ 56 bytes each, reused);
//! a slot keeps a small reply queue's room, not a pipelined burst's.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use tokio::sync::{mpsc, Notify};

use super::BackendReply;

/// Replies a closed slot keeps room for (a pipelined burst's queue is
/// freed).
const KEEP_QUEUED: usize = 64;

/// Where a reply goes: a mailbox on some thread's table, or a channel.
#[derive(Debug, Clone)]
pub enum ReplySender {
    Local(LocalAddr),
    Channel(mpsc::UnboundedSender<BackendReply>),
}

/// A slot of a home's table, in one generation of the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalAddr {
    home: u32,
    slot: u32,
    gen: u32,
}

impl From<mpsc::UnboundedSender<BackendReply>> for ReplySender {
    fn from(tx: mpsc::UnboundedSender<BackendReply>) -> ReplySender {
        ReplySender::Channel(tx)
    }
}

impl ReplySender {
    /// Deliver `reply`; dropped if its mailbox is gone.
    pub fn send(&self, reply: BackendReply) {
        match self {
            ReplySender::Channel(tx) => {
                let _ = tx.send(reply);
            }
            ReplySender::Local(addr) => deliver(*addr, reply),
        }
    }

    /// Both send to the same mailbox or channel.
    pub fn same_mailbox(&self, other: &ReplySender) -> bool {
        match (self, other) {
            (ReplySender::Local(a), ReplySender::Local(b)) => a == b,
            (ReplySender::Channel(a), ReplySender::Channel(b)) => a.same_channel(b),
            _ => false,
        }
    }
}

/// One session's queue of replies.
#[derive(Default)]
struct Slot {
    gen: u32,
    replies: VecDeque<BackendReply>,
    waker: Option<Waker>,
}

/// A thread's table of mailboxes.
struct Home {
    id: u32,
    slots: Vec<Slot>,
    free: Vec<u32>,
}

/// Replies for a home's mailboxes sent from other threads.
#[derive(Default)]
struct Inbox {
    replies: Mutex<Vec<(LocalAddr, BackendReply)>>,
    notify: Notify,
}

thread_local! {
    static HOME: RefCell<Option<Home>> = const { RefCell::new(None) };
}

/// Every home's inbox, by id (`None` once its thread stopped).
static INBOXES: Mutex<Vec<Option<Arc<Inbox>>>> = Mutex::new(Vec::new());

fn inboxes() -> std::sync::MutexGuard<'static, Vec<Option<Arc<Inbox>>>> {
    INBOXES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Make this thread a home for its sessions' mailboxes. The returned pump
/// must run on this thread's runtime for as long as sessions do (it moves
/// replies sent from other threads in); the home ends with it.
pub fn install() -> impl Future<Output = ()> {
    let inbox = Arc::new(Inbox::default());
    let id = {
        let mut all = inboxes();
        all.push(Some(inbox.clone()));
        (all.len() - 1) as u32
    };
    HOME.with(|h| {
        *h.borrow_mut() = Some(Home {
            id,
            slots: Vec::new(),
            free: Vec::new(),
        });
    });
    pump(id, inbox)
}

async fn pump(id: u32, inbox: Arc<Inbox>) {
    // Off the registry when this future is dropped (its runtime stopping).
    struct Registered(u32);
    impl Drop for Registered {
        fn drop(&mut self) {
            if let Some(entry) = inboxes().get_mut(self.0 as usize) {
                *entry = None;
            }
        }
    }
    let _registered = Registered(id);
    let mut batch = Vec::new();
    loop {
        inbox.notify.notified().await;
        std::mem::swap(
            &mut batch,
            &mut inbox.replies.lock().unwrap_or_else(PoisonError::into_inner),
        );
        for (addr, reply) in batch.drain(..) {
            deliver(addr, reply);
        }
    }
}

/// Put `reply` in its mailbox: here if this thread is its home, else via
/// the home's inbox.
fn deliver(addr: LocalAddr, reply: BackendReply) {
    let mut reply = Some(reply);
    let waker = HOME
        .try_with(|h| {
            let mut h = h.try_borrow_mut().ok()?;
            let home = h.as_mut().filter(|home| home.id == addr.home)?;
            home.put(addr, reply.take()?)
        })
        .ok()
        .flatten();
    // Woken outside the table's borrow.
    if let Some(waker) = waker {
        waker.wake();
    }
    if let Some(reply) = reply {
        send_home(addr, reply);
    }
}

fn send_home(addr: LocalAddr, reply: BackendReply) {
    let Some(inbox) = inboxes().get(addr.home as usize).cloned().flatten() else {
        return; // its thread stopped, with its sessions
    };
    inbox
        .replies
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((addr, reply));
    inbox.notify.notify_one();
}

impl Home {
    /// Queue `reply` in its slot (dropped for a stale address); the waker
    /// to wake.
    fn put(&mut self, addr: LocalAddr, reply: BackendReply) -> Option<Waker> {
        let slot = self.slot(addr)?;
        slot.replies.push_back(reply);
        slot.waker.take()
    }

    fn open(&mut self) -> LocalAddr {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let gen = self.slots.get(slot as usize).map_or(0, |s| s.gen);
        LocalAddr {
            home: self.id,
            slot,
            gen,
        }
    }

    fn close(&mut self, addr: LocalAddr) {
        let Some(slot) = self.slot(addr) else {
            return;
        };
        slot.gen = slot.gen.wrapping_add(1);
        // A slot keeps a typical session's queue, not a burst's.
        if slot.replies.capacity() > KEEP_QUEUED {
            slot.replies = VecDeque::new();
        } else {
            slot.replies.clear();
        }
        slot.waker = None;
        self.free.push(addr.slot);
    }

    /// The slot at `addr`, if it is still in that generation.
    fn slot(&mut self, addr: LocalAddr) -> Option<&mut Slot> {
        self.slots
            .get_mut(addr.slot as usize)
            .filter(|s| s.gen == addr.gen)
    }
}

/// A session's receiving end: a slot in its thread's table, or (on a
/// thread with no home) a channel.
pub struct Mailbox {
    kind: Kind,
}

enum Kind {
    Local(LocalAddr),
    Channel {
        tx: mpsc::UnboundedSender<BackendReply>,
        rx: mpsc::UnboundedReceiver<BackendReply>,
    },
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Local(addr) => f.debug_tuple("Mailbox").field(addr).finish(),
            Kind::Channel { .. } => f.write_str("Mailbox(channel)"),
        }
    }
}

impl Mailbox {
    /// A slot in this thread's table if it is a home, else a channel.
    pub fn open() -> Mailbox {
        Mailbox::local().unwrap_or_else(Mailbox::channel)
    }

    /// A slot in this thread's table; `None` off a home.
    pub fn local() -> Option<Mailbox> {
        HOME.try_with(|h| h.try_borrow_mut().ok()?.as_mut().map(Home::open))
            .ok()
            .flatten()
            .map(|addr| Mailbox {
                kind: Kind::Local(addr),
            })
    }

    /// A channel, whatever the thread.
    pub fn channel() -> Mailbox {
        let (tx, rx) = mpsc::unbounded_channel();
        Mailbox {
            kind: Kind::Channel { tx, rx },
        }
    }

    pub fn sender(&self) -> ReplySender {
        match &self.kind {
            Kind::Local(addr) => ReplySender::Local(*addr),
            Kind::Channel { tx, .. } => ReplySender::Channel(tx.clone()),
        }
    }

    /// The next reply; `None` only for a channel whose senders are all gone
    /// (a mailbox slot never closes while it is open).
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<BackendReply>> {
        match &mut self.kind {
            Kind::Channel { rx, .. } => rx.poll_recv(cx),
            Kind::Local(addr) => with_slot(*addr, |slot| match slot.replies.pop_front() {
                Some(reply) => Poll::Ready(Some(reply)),
                None => {
                    if !slot.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        slot.waker = Some(cx.waker().clone());
                    }
                    Poll::Pending
                }
            })
            .unwrap_or(Poll::Ready(None)),
        }
    }

    pub async fn recv(&mut self) -> Option<BackendReply> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    pub fn try_recv(&mut self) -> Option<BackendReply> {
        match &mut self.kind {
            Kind::Channel { rx, .. } => rx.try_recv().ok(),
            Kind::Local(addr) => with_slot(*addr, |slot| slot.replies.pop_front()).flatten(),
        }
    }

    /// Nothing can still arrive: no reply is queued and no sender is out.
    /// Only a channel can tell (a mailbox slot's late replies are dropped
    /// once it is closed, so it is always reusable).
    pub fn is_quiet(&self) -> bool {
        match &self.kind {
            Kind::Local(_) => true,
            Kind::Channel { tx, rx } => tx.strong_count() == 1 && rx.is_empty(),
        }
    }

    /// A mailbox slot (the pool keeps only channels: a slot is as cheap
    /// to open again).
    pub fn is_local(&self) -> bool {
        matches!(self.kind, Kind::Local(_))
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        if let Kind::Local(addr) = self.kind {
            let _ = HOME.try_with(|h| {
                if let Some(home) = h
                    .try_borrow_mut()
                    .ok()
                    .as_deref_mut()
                    .and_then(Option::as_mut)
                {
                    home.close(addr);
                }
            });
        }
    }
}

fn with_slot<R>(addr: LocalAddr, f: impl FnOnce(&mut Slot) -> R) -> Option<R> {
    HOME.try_with(|h| {
        let mut h = h.try_borrow_mut().ok()?;
        h.as_mut()?.slot(addr).map(f)
    })
    .ok()
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendError, BackendReply};

    fn reply(seq: u64) -> BackendReply {
        BackendReply {
            seq,
            part: 0,
            result: Err(BackendError::Timeout),
        }
    }

    /// A home on this (test) thread, its pump on the test's runtime.
    fn home() {
        tokio::spawn(install());
    }

    #[tokio::test]
    async fn a_reply_from_this_thread_goes_straight_into_the_slot() {
        home();
        let mut mailbox = Mailbox::open();
        assert!(mailbox.is_local());
        let sender = mailbox.sender();
        assert!(matches!(sender, ReplySender::Local(_)));
        assert!(mailbox.try_recv().is_none());
        sender.send(reply(1));
        sender.send(reply(2));
        assert_eq!(mailbox.try_recv().map(|r| r.seq), Some(1));
        assert_eq!(mailbox.recv().await.map(|r| r.seq), Some(2));
    }

    #[tokio::test]
    async fn a_waiting_session_is_woken_by_a_reply() {
        home();
        let mut mailbox = Mailbox::open();
        let sender = mailbox.sender();
        let waiter = tokio::spawn(async move { mailbox.recv().await.map(|r| r.seq) });
        tokio::task::yield_now().await;
        sender.send(reply(7));
        assert_eq!(waiter.await.ok().flatten(), Some(7));
    }

    #[tokio::test]
    async fn a_closed_slot_drops_its_late_replies_and_its_next_owner_never_sees_them() {
        home();
        let old = Mailbox::open();
        let stale = old.sender();
        drop(old);
        let mut new = Mailbox::open();
        // The slot is reused, in its next generation.
        let (ReplySender::Local(a), ReplySender::Local(b)) = (&stale, &new.sender()) else {
            panic!("local mailboxes expected");
        };
        assert_eq!((a.slot, a.gen.wrapping_add(1)), (b.slot, b.gen));
        assert!(!stale.same_mailbox(&new.sender()));
        stale.send(reply(1));
        assert!(
            new.try_recv().is_none(),
            "a late reply reached another session"
        );
        new.sender().send(reply(2));
        assert_eq!(new.try_recv().map(|r| r.seq), Some(2));
    }

    #[tokio::test]
    async fn a_reply_from_another_thread_arrives_through_the_inbox() {
        home();
        let mut mailbox = Mailbox::open();
        let sender = mailbox.sender();
        std::thread::spawn(move || {
            for seq in 1..=3 {
                sender.send(reply(seq));
            }
        })
        .join()
        .expect("sender thread");
        let mut seqs = Vec::new();
        for _ in 0..3 {
            seqs.push(mailbox.recv().await.map(|r| r.seq));
        }
        assert_eq!(seqs, [Some(1), Some(2), Some(3)]);
    }

    #[tokio::test]
    async fn a_thread_without_a_home_gets_a_channel() {
        let mut mailbox = Mailbox::open();
        assert!(!mailbox.is_local());
        let sender = mailbox.sender();
        assert!(sender.same_mailbox(&mailbox.sender()));
        assert!(!mailbox.is_quiet(), "a sender is out");
        sender.send(reply(3));
        drop(sender);
        assert_eq!(mailbox.recv().await.map(|r| r.seq), Some(3));
        assert!(mailbox.is_quiet());
    }

    #[tokio::test]
    async fn a_closed_slot_does_not_keep_a_bursts_queue() {
        home();
        let mut mailbox = Mailbox::open();
        let sender = mailbox.sender();
        for seq in 0..1000 {
            sender.send(reply(seq));
        }
        while mailbox.try_recv().is_some() {}
        let ReplySender::Local(addr) = sender else {
            panic!("a local mailbox expected");
        };
        assert!(with_slot(addr, |s| s.replies.capacity()).unwrap_or(0) >= 1000);
        drop(mailbox);
        let next = Mailbox::open();
        let ReplySender::Local(reused) = next.sender() else {
            panic!("a local mailbox expected");
        };
        assert_eq!(reused.slot, addr.slot);
        let kept = with_slot(reused, |s| s.replies.capacity());
        assert!(kept.is_some_and(|c| c <= KEEP_QUEUED), "{kept:?}");
    }
}

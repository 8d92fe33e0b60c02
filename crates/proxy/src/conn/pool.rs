//! Per-thread free lists for what a connection needs only while it is
//! busy: read, write and command buffers, the pending queue's storage and
//! the reply mailbox (a channel, off the workers).
//!
//! A session gives these back the moment it goes quiet (nothing buffered or
//! in flight) and takes them again with its next input, so an idle
//! connection holds none of them, and a request/response client does not
//! allocate per request either. Freeing them instead would leave the heap
//! fragmented: chunks freed between the long-lived per-connection
//! allocations cannot be returned to the OS. Thread-local, so no lock is
//! shared across connections; each list is bounded.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::thread::LocalKey;

use bytes::BytesMut;

use crate::backend::Mailbox;

/// Entries kept per list and thread; more are freed. With
/// `MAX_KEPT_CAPACITY` this bounds the pool at ~6 MiB per worker thread.
const KEEP: usize = 64;
/// Buffers larger than this are freed rather than kept (one large request
/// must not pin its buffer for ever).
const MAX_KEPT_CAPACITY: usize = 32 * 1024;

/// What a buffer is for: each kind has its own list, so that a small read
/// buffer is not handed out where a command buffer of 4 KiB is wanted.
#[derive(Debug, Clone, Copy)]
pub enum Buffer {
    Read = 0,
    Write = 1,
    Command = 2,
}

#[derive(Default)]
struct Pool {
    buffers: [Vec<BytesMut>; 3],
    /// Channels (off the workers; a mailbox slot is not pooled).
    channels: Vec<Mailbox>,
}

/// A protocol's free list of queue storage (one per entry type: a
/// `thread_local!` cannot be generic). See [`entry_basics!`](crate::entry_basics).
pub type QueuePool<E> = RefCell<Vec<VecDeque<E>>>;

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool::default());
}

/// An empty buffer with room for at least `min` bytes.
pub fn take_buffer(kind: Buffer, min: usize) -> BytesMut {
    let reused = POOL.with(|p| p.borrow_mut().buffers[kind as usize].pop());
    match reused {
        Some(mut buf) => {
            buf.reserve(min);
            buf
        }
        None => BytesMut::with_capacity(min),
    }
}

/// Keep `buf` for another session (its contents are discarded).
pub fn give_buffer(kind: Buffer, mut buf: BytesMut) {
    let capacity = buf.capacity();
    if !(256..=MAX_KEPT_CAPACITY).contains(&capacity) {
        return;
    }
    buf.clear();
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let list = &mut p.buffers[kind as usize];
        if list.len() < KEEP {
            list.push(buf);
        }
    });
}

pub fn take_queue<E>(pool: &'static LocalKey<QueuePool<E>>) -> VecDeque<E> {
    pool.with(|p| p.borrow_mut().pop()).unwrap_or_default()
}

pub fn give_queue<E>(pool: &'static LocalKey<QueuePool<E>>, mut queue: VecDeque<E>) {
    if queue.capacity() == 0 || queue.capacity() > 1024 {
        return;
    }
    queue.clear();
    pool.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < KEEP {
            p.push(queue);
        }
    });
}

/// A mailbox slot on a worker; elsewhere a pooled channel.
pub fn take_mailbox() -> Mailbox {
    Mailbox::local()
        .or_else(|| POOL.with(|p| p.borrow_mut().channels.pop()))
        .unwrap_or_else(Mailbox::channel)
}

/// Keep a channel for another session, but only when no sender is still
/// out (a backend holding one could otherwise deliver a stale reply, tagged
/// with a sequence number, into another session): such a channel is handed
/// back to its session. A mailbox slot is closed (its late replies are
/// dropped).
pub fn give_mailbox(mailbox: Mailbox) -> Option<Mailbox> {
    if mailbox.is_local() {
        return None;
    }
    if !mailbox.is_quiet() {
        return Some(mailbox);
    }
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.channels.len() < KEEP {
            p.channels.push(mailbox);
        }
    });
    None
}

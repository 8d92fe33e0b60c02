//! Unsolicited frames for the client (RESP pub/sub messages): written when
//! no earlier request is waiting to be answered, and bounded like replies.
//!
//! A source (a task outside the connection) sends [`Push`]es on a bounded
//! channel; the engine takes them into [`Pushes`] as they come and writes
//! each once every request with a sequence number below its `after` has
//! been answered. So a push keeps its place among the replies its source
//! produced: a message a subscriber connection read before the reply to
//! the client's request `n` carries `after <= n` and is written before
//! that reply, one read after it carries `after = n + 1`.
//!
//! Pushes held count toward `server.max_pending_bytes`: a client that does
//! not read them is closed as a slow consumer, like one that does not read
//! its replies.

use std::collections::VecDeque;

use bytes::Bytes;
use tokio::sync::mpsc;

/// Pushes a source may have sent and the connection not yet taken: the
/// source waits beyond that (a subscriber connection stops reading its
/// shard), so memory stays bounded while the connection's task is busy.
pub const CHANNEL_CAPACITY: usize = 128;

/// One unsolicited frame.
#[derive(Debug)]
pub struct Push {
    /// Written once every request with a lower sequence number is answered.
    pub after: u64,
    /// The frame, encoded as RESP3 reads it: a push keeps its `>` until
    /// it is written, when it takes the form of the protocol the client
    /// speaks then ([`Protocol::push_type`](super::Protocol::push_type)).
    pub frame: Bytes,
    /// The source has failed: write the frame (an error), answer nothing
    /// after it, and close the connection.
    pub close: bool,
}

pub type PushSender = mpsc::Sender<Push>;

/// The connection's side of its push sources.
#[derive(Debug, Default)]
pub struct Pushes {
    tx: Option<PushSender>,
    rx: Option<mpsc::Receiver<Push>>,
    held: VecDeque<Push>,
    /// Bytes of the frames held.
    bytes: usize,
    /// The connection is closing: pushes are dropped.
    closed: bool,
    /// A source may push at any time: the connection stays busy (it waits
    /// on the channel, not only on its socket) and has no idle timeout.
    pub expecting: bool,
}

impl Pushes {
    /// The sender sources push on (the channel is made with the first).
    pub fn sender(&mut self) -> PushSender {
        if let Some(tx) = self.tx.as_ref() {
            return tx.clone();
        }
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        self.rx = Some(rx);
        self.tx = Some(tx.clone());
        tx
    }

    /// Take a push the source sent.
    pub fn hold(&mut self, push: Push) {
        if self.closed {
            return;
        }
        self.bytes += push.frame.len();
        self.held.push_back(push);
    }

    /// The next push to write, if every request before it is answered
    /// (`answered_below`: the sequence number of the first unanswered one).
    pub fn pop_due(&mut self, answered_below: u64) -> Option<Push> {
        if self.held.front()?.after > answered_below {
            return None;
        }
        let push = self.held.pop_front()?;
        self.bytes -= push.frame.len();
        Some(push)
    }

    /// Take every push already sent, without waiting.
    pub fn take_sent(&mut self) {
        while let Some(push) = self.rx.as_mut().and_then(|rx| rx.try_recv().ok()) {
            self.hold(push);
        }
    }

    /// The connection is closing: nothing more is written or expected.
    pub fn close(&mut self) {
        self.held.clear();
        self.bytes = 0;
        self.expecting = false;
        self.closed = true;
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Bytes held, for the slow-consumer limit.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn receiver(&mut self) -> Option<&mut mpsc::Receiver<Push>> {
        self.rx.as_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(after: u64, frame: &'static [u8], close: bool) -> Push {
        Push {
            after,
            frame: Bytes::from_static(frame),
            close,
        }
    }

    #[test]
    fn a_push_waits_for_the_requests_before_it() {
        let mut p = Pushes::default();
        p.hold(push(3, b"one", false));
        p.hold(push(5, b"three", false));
        assert_eq!(p.bytes(), 8);
        // Requests 0..=2 answered (the first unanswered is 3): the first is due.
        assert!(p.pop_due(2).is_none());
        assert_eq!(
            p.pop_due(3).map(|x| x.frame),
            Some(Bytes::from_static(b"one"))
        );
        // The next waits for request 4 to be answered, and keeps its order.
        assert!(p.pop_due(4).is_none());
        assert_eq!(p.bytes(), 5);
        assert!(p.pop_due(9).is_some());
        assert!(p.is_empty());
        assert_eq!(p.bytes(), 0);
    }

    #[test]
    fn sent_pushes_are_taken_without_waiting_and_dropped_once_closed() {
        let mut p = Pushes::default();
        let tx = p.sender();
        tx.try_send(push(0, b"a", false)).expect("send");
        tx.try_send(push(0, b"bc", false)).expect("send");
        p.take_sent();
        assert_eq!(p.bytes(), 3);
        // One channel for every source.
        let again = p.sender();
        again.try_send(push(0, b"d", true)).expect("send");
        p.close();
        assert!(p.is_empty());
        assert!(!p.expecting);
        p.take_sent();
        assert!(p.is_empty(), "a closed connection holds no more pushes");
    }
}

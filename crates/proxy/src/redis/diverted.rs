//! The keys of an ejected shard routed to other shards (see
//! `router::eject` for why and what is done with them).

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;

/// Diverted keys remembered per owner before falling back to a flush + scan.
pub const MAX_DIVERTED_KEYS: usize = 100_000;

/// The keys of one shard that were routed to another shard while it was
/// ejected. Only touched while a shard is ejected or rejoining (degraded
/// mode), so its lock is never taken on the normal request path.
#[derive(Debug, Default)]
pub struct Diverted {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Diverted since the last clean-up round.
    pending: DivertedKeys,
    /// Deleted everywhere before the owner last rejoined. A write routed
    /// to a fallback just before that may still have landed there after
    /// the delete; these are deleted from the other shards again before
    /// the owner's next ejection, when its keys would be read there.
    cleaned: DivertedKeys,
    /// The owner's last clean-up round has started: its writes are no
    /// longer diverted (they are refused until the ring takes the owner
    /// back), so nothing escapes that round.
    closed: bool,
}

/// A set of keys, or "too many to list".
#[derive(Debug, Default, Clone)]
pub struct DivertedKeys {
    pub keys: HashSet<Bytes>,
    /// More than `MAX_DIVERTED_KEYS` were diverted: the list is incomplete.
    pub overflowed: bool,
}

impl DivertedKeys {
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && !self.overflowed
    }

    fn insert(&mut self, key: &[u8]) {
        if self.overflowed || self.keys.contains(key) {
            return;
        }
        if self.keys.len() >= MAX_DIVERTED_KEYS {
            self.overflow();
            return;
        }
        self.keys.insert(Bytes::copy_from_slice(key));
    }

    pub fn merge(&mut self, other: DivertedKeys) {
        if self.overflowed || other.overflowed {
            return self.overflow();
        }
        self.keys.extend(other.keys);
        if self.keys.len() > MAX_DIVERTED_KEYS {
            self.overflow();
        }
    }

    fn overflow(&mut self) {
        self.overflowed = true;
        self.keys = HashSet::new();
    }
}

impl Diverted {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remember `key`, about to be written on a fallback; false when the
    /// owner is rejoining and the write must be refused instead.
    #[must_use]
    pub fn record(&self, key: &[u8]) -> bool {
        let mut s = self.state();
        if s.closed {
            return false;
        }
        s.pending.insert(key);
        true
    }

    /// The keys diverted since the last round, for a clean-up round.
    pub fn take(&self) -> DivertedKeys {
        std::mem::take(&mut self.state().pending)
    }

    /// `take` for the last round before the rejoin: from now on the
    /// owner's writes are refused, not diverted.
    pub fn close_and_take(&self) -> DivertedKeys {
        let mut s = self.state();
        s.closed = true;
        std::mem::take(&mut s.pending)
    }

    /// A round deleted `taken` everywhere.
    pub fn cleaned(&self, taken: DivertedKeys) {
        self.state().cleaned.merge(taken);
    }

    /// Put back what a failed round did not finish, and divert again (the
    /// owner stays ejected).
    pub fn restore(&self, taken: DivertedKeys) {
        let mut s = self.state();
        s.pending.merge(taken);
        s.closed = false;
    }

    /// Before an ejection: the keys whose copies the fallbacks may still
    /// hold from the previous one.
    pub fn take_cleaned(&self) -> DivertedKeys {
        std::mem::take(&mut self.state().cleaned)
    }

    /// Removing the fallbacks' copies failed: kept for the next attempt.
    pub fn sweep_failed(&self, copies: DivertedKeys) {
        self.state().cleaned.merge(copies);
    }

    /// The fallbacks' copies were removed; the owner is being ejected:
    /// divert its writes again. `unswept`: keys whose copies a shard that
    /// did not answer may still hold; they join the list, which a shard
    /// rejoining while the owner is out deletes on itself.
    pub fn ejecting(&self, unswept: Option<DivertedKeys>) {
        let mut s = self.state();
        s.closed = false;
        if let Some(keys) = unswept {
            s.pending.merge(keys);
        }
    }

    /// A copy of the keys diverted since the last round (for another
    /// shard's rejoin, which deletes them on itself).
    pub fn pending(&self) -> DivertedKeys {
        self.state().pending.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_each_key_once_and_overflows_to_a_flag() {
        let d = Diverted::default();
        assert!(d.record(b"a"));
        assert!(d.record(b"a"));
        assert!(d.record(b"b"));
        let taken = d.take();
        assert_eq!(taken.keys.len(), 2);
        assert!(!taken.overflowed);
        assert!(d.take().is_empty());

        for i in 0..=MAX_DIVERTED_KEYS {
            assert!(d.record(i.to_string().as_bytes()));
        }
        let taken = d.take();
        assert!(taken.overflowed && taken.keys.is_empty());
    }

    #[test]
    fn a_failed_clean_up_keeps_its_keys_and_diverts_again() {
        let d = Diverted::default();
        assert!(d.record(b"a"));
        let taken = d.close_and_take();
        assert!(!d.record(b"b"), "closed: refused");
        d.restore(taken);
        assert!(d.record(b"b"), "restored: diverted again");
        let back = d.take();
        assert_eq!(back.keys.len(), 2);
    }

    #[test]
    fn the_last_round_refuses_writes_until_the_next_ejection() {
        let d = Diverted::default();
        assert!(d.record(b"a"));
        let first = d.take();
        d.cleaned(first);
        assert!(d.record(b"b"));
        let last = d.close_and_take();
        d.cleaned(last);
        assert!(!d.record(b"c"), "rejoining or back: nothing is diverted");

        let copies = d.take_cleaned();
        assert_eq!(copies.keys.len(), 2, "every round's keys");
        d.sweep_failed(copies);
        assert!(!d.record(b"c"), "the copies are not removed yet");
        let copies = d.take_cleaned();
        assert_eq!(copies.keys.len(), 2, "kept for the retry");
        d.ejecting(None);
        assert!(d.record(b"c"));
        assert!(d.take_cleaned().is_empty());
        assert_eq!(d.pending().keys.len(), 1, "a copy");
        assert_eq!(d.take().keys.len(), 1);
    }

    #[test]
    fn keys_a_silent_shard_was_not_swept_of_join_the_list() {
        let d = Diverted::default();
        assert!(d.record(b"a"));
        let taken = d.close_and_take();
        d.cleaned(taken);
        let copies = d.take_cleaned();
        d.ejecting(Some(copies));
        assert!(d.record(b"b"));
        assert_eq!(d.take().keys.len(), 2);
    }
}

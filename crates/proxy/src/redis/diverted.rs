//! The keys of an ejected shard routed to other shards (see
//! `router::eject` for why and what is done with them).

use std::collections::HashSet;
use std::sync::Mutex;

use bytes::Bytes;

/// Diverted keys remembered per owner before falling back to a flush + scan.
pub const MAX_DIVERTED_KEYS: usize = 100_000;

/// The keys of one shard that were routed to another shard while it was
/// ejected. Only touched while a shard is ejected (degraded mode), so its
/// lock is never taken on the normal request path.
#[derive(Debug, Default)]
pub struct Diverted {
    keys: Mutex<DivertedKeys>,
}

#[derive(Debug, Default)]
pub struct DivertedKeys {
    pub keys: HashSet<Bytes>,
    /// More than `MAX_DIVERTED_KEYS` were diverted: the list is incomplete.
    pub overflowed: bool,
}

impl DivertedKeys {
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && !self.overflowed
    }
}

impl Diverted {
    pub fn record(&self, key: &[u8]) {
        let mut d = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if d.overflowed || d.keys.contains(key) {
            return;
        }
        if d.keys.len() >= MAX_DIVERTED_KEYS {
            d.overflowed = true;
            d.keys = HashSet::new();
            return;
        }
        d.keys.insert(Bytes::copy_from_slice(key));
    }

    pub fn take(&self) -> DivertedKeys {
        std::mem::take(&mut *self.keys.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Put back what a failed clean-up did not finish.
    pub fn restore(&self, taken: DivertedKeys) {
        let mut d = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        d.overflowed |= taken.overflowed;
        if d.overflowed {
            d.keys = HashSet::new();
        } else {
            d.keys.extend(taken.keys);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_each_key_once_and_overflows_to_a_flag() {
        let d = Diverted::default();
        d.record(b"a");
        d.record(b"a");
        d.record(b"b");
        let taken = d.take();
        assert_eq!(taken.keys.len(), 2);
        assert!(!taken.overflowed);
        assert!(d.take().is_empty());

        for i in 0..=MAX_DIVERTED_KEYS {
            d.record(i.to_string().as_bytes());
        }
        let taken = d.take();
        assert!(taken.overflowed && taken.keys.is_empty());
    }

    #[test]
    fn a_failed_clean_up_keeps_its_keys() {
        let d = Diverted::default();
        d.record(b"a");
        let taken = d.take();
        d.record(b"b");
        d.restore(taken);
        let back = d.take();
        assert_eq!(back.keys.len(), 2);
    }
}

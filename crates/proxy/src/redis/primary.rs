//! A Sentinel-managed shard's current primary: one address per master name,
//! read by every connect attempt of the shard's connections (data and
//! invalidation) and replaced by the Sentinel watcher (`super::sentinel`)
//! on a switch. A connection that went to an older address is closed as
//! soon as it changes ([`Primary::moved_from`]), so no request is served by
//! a demoted primary after the switch is known.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// The current primary of one Sentinel master.
#[derive(Debug)]
pub struct Primary {
    master: String,
    addr: watch::Sender<Arc<str>>,
    /// Switches followed since start (not the first address).
    changes: AtomicU64,
    /// The highest Sentinel `config-epoch` followed (`super::sentinel`);
    /// kept with the shard across reloads.
    pub(crate) epoch: Mutex<Option<u64>>,
}

/// A shard keeps its identity (and its live connections) across reloads by
/// its master name: the address is state, not configuration.
impl PartialEq for Primary {
    fn eq(&self, other: &Primary) -> bool {
        self.master == other.master
    }
}

impl Eq for Primary {}

impl Primary {
    /// `addr` may be empty: not known yet (connects fail until it is).
    pub fn new(master: &str, addr: &str) -> Primary {
        Primary {
            master: master.to_string(),
            addr: watch::Sender::new(Arc::from(addr)),
            changes: AtomicU64::new(0),
            epoch: Mutex::new(None),
        }
    }

    pub fn master(&self) -> &str {
        &self.master
    }

    /// The address connections go to now ("" before the first answer).
    pub fn current(&self) -> Arc<str> {
        self.addr.borrow().clone()
    }

    /// Replace the address; returns the old one if it changed.
    pub(crate) fn set(&self, addr: &str) -> Option<Arc<str>> {
        let mut old = None;
        self.addr.send_if_modified(|current| {
            if **current == *addr {
                return false;
            }
            old = Some(std::mem::replace(current, Arc::from(addr)));
            true
        });
        if old.as_deref().is_some_and(|o| !o.is_empty()) {
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
        old
    }

    /// Switches followed since start.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    /// Resolves once the address is no longer `addr`.
    pub async fn moved_from(&self, addr: &str) {
        // Subscribed before the comparison: a change in between is seen.
        let mut rx = self.addr.subscribe();
        loop {
            if **rx.borrow_and_update() != *addr {
                return;
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_after_the_connect_is_noticed() {
        let p = Arc::new(Primary::new("s1", "a:1"));
        assert_eq!(p.set("a:1"), None);
        let waiter = tokio::spawn({
            let p = p.clone();
            async move { p.moved_from("a:1").await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        assert_eq!(p.set("b:2").as_deref(), Some("a:1"));
        waiter.await.unwrap();
        // Already elsewhere: resolves at once.
        p.moved_from("a:1").await;
        assert_eq!(&*p.current(), "b:2");
    }
}

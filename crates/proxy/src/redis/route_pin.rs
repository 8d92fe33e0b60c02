//! One client's requests keep their order across a Redis Cluster slot-map
//! refresh.
//!
//! A request routed by the old map goes to the old node and comes back
//! `-MOVED`; it is re-sent to the new node on the session's lane. A later
//! request of the same client routed by the new map would go to the new
//! node directly, and could get there first (measured: about one run in
//! five of `cluster_redirect_order::cluster_moved_mid_pipeline_keeps_a_clients_order`
//! read a `get` before the `set` pipelined just before it).
//!
//! So while a session has requests waiting, its next ones are routed by the
//! map those were routed by (its *pin*): they go to the old node too, come
//! back `-MOVED` in order on the same connection, and are re-sent in that
//! order. Once nothing waits, the session routes by the current map again;
//! to get there, once a request of it was routed by a map older than its
//! cluster's current one, it dispatches nothing new until its waiting
//! requests are answered (`conn::Queue::room`).
//!
//! Each slot map has an epoch (process-wide, never 0). The session's queue
//! sets this thread's pin before each dispatch (`pin`), and the cluster's
//! `locate` routes by the pinned map while it keeps it (the last
//! [`KEPT_MAPS`]) and records the epoch it used and whether a newer map
//! exists (`used`), which the queue keeps for the requests that follow. A
//! session is driven by one thread and dispatches synchronously, so the
//! thread-local pin is the session's for the whole dispatch. Routing
//! outside a session's dispatch (a task, a reply's follow-up) may see
//! another session's pin: it then routes by an older map and follows the
//! `-MOVED`, which is slower, never wrong. Nothing is compared across
//! clusters: after a reload, the old generation's maps do not hold back
//! the new one's sessions.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Old maps a cluster keeps for pinned sessions.
pub const KEPT_MAPS: usize = 8;

/// The next map epoch (0 means "no map": ring placement or nothing routed).
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// What the routing of the dispatch under way did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    /// The epoch of the map it routed by (0: no cluster map).
    pub epoch: u64,
    /// That map is not its cluster's current one.
    pub stale: bool,
}

thread_local! {
    /// (pin for the dispatch under way, what its routing used).
    static ROUTE: Cell<(u64, Used)> = const {
        Cell::new((0, Used { epoch: 0, stale: false }))
    };
}

/// A new map's epoch.
pub fn next_epoch() -> u64 {
    NEXT_EPOCH.fetch_add(1, Ordering::Relaxed)
}

/// Before a dispatch: route by the map of `epoch` (0: the current map).
#[inline]
pub fn pin(epoch: u64) {
    ROUTE.with(|r| r.set((epoch, Used::default())));
}

/// The pin set for the dispatch under way.
#[inline]
pub fn pinned() -> u64 {
    ROUTE.with(|r| r.get().0)
}

/// A cluster routed by the map of `epoch` (`stale`: not its current one).
#[inline]
pub fn routed_by(epoch: u64, stale: bool) {
    ROUTE.with(|r| r.set((r.get().0, Used { epoch, stale })));
}

/// After a dispatch: what its routing used.
#[inline]
pub fn used() -> Used {
    ROUTE.with(|r| r.get().1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_and_what_was_used() {
        pin(7);
        assert_eq!((pinned(), used()), (7, Used::default()));
        routed_by(7, true);
        assert_eq!(
            used(),
            Used {
                epoch: 7,
                stale: true
            }
        );
        pin(0);
        assert_eq!((pinned(), used()), (0, Used::default()));
    }

    #[test]
    fn epochs_grow_from_one() {
        let a = next_epoch();
        let b = next_epoch();
        assert!(b > a && a > 0);
    }
}

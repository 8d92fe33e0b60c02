//! Whether a shard's near-cache entries may be served: its invalidation
//! connection (`crate::redis::tracking`) is up and tracking, and the
//! generation its entries were filled under.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Whether a shard's entries may be served, and the generation they need.
#[derive(Debug, Default)]
pub struct Tracking {
    live: AtomicBool,
    generation: AtomicU64,
}

impl Tracking {
    /// The generation reads may be cached under, or `None` while the
    /// shard's invalidations are not being received.
    #[inline]
    pub fn current(&self) -> Option<u64> {
        // Generation first: one read while tracking resumes is older than
        // the bump before `live`, so its fill is refused, never wrongly kept.
        let generation = self.generation.load(Ordering::Acquire);
        self.live.load(Ordering::Acquire).then_some(generation)
    }

    /// Drop every entry of this shard (flush, null invalidation).
    pub fn drop_all(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub fn lost(&self) {
        self.live.store(false, Ordering::Release);
        self.drop_all();
    }

    pub fn tracking_again(&self) {
        self.drop_all();
        self.live.store(true, Ordering::Release);
    }
}

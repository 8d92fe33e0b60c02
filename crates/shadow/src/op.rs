//! What a shadow write replicates: the resulting state of a key.

use bytes::Bytes;
use memshift_protocol::memcache::{Exptime, REALTIME_MAXDELTA};

/// When an item expires, as an **absolute unix time in seconds**.
///
/// Absolute, so time spent in the shadow queue does not stretch the TTL and
/// each sink converts once, at send time: Redis takes it as is (`EXPIREAT`);
/// memcached gets it back as relative seconds ([`Expiry::to_memcached`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Expiry {
    Never,
    /// Expires at this unix time (seconds). A time not after "now" means the
    /// item is already gone.
    At(u64),
}

/// The current unix time in seconds: memshift's one clock.
pub use memshift_protocol::memcache::unix_now;

impl Expiry {
    /// A memcached `exptime` as a client sent it, with memcached's rules
    /// ([`Exptime`]): 0 never expires, negative is already expired, up to
    /// 30 days is relative to now, more is an absolute unix time.
    pub fn from_memcached(exptime: i64, now_unix: u64) -> Expiry {
        Expiry::from_exptime(Exptime::new(exptime), now_unix)
    }

    /// A remaining TTL in seconds as `mg ... t` reports it (`-1` or `None`:
    /// no expiry).
    pub fn from_ttl(ttl_remaining: Option<i64>, now_unix: u64) -> Expiry {
        let exptime =
            ttl_remaining.map_or(Exptime::Never, |t| Exptime::from_remaining(t, now_unix));
        Expiry::from_exptime(exptime, now_unix)
    }

    /// The absolute deadline of `exptime` seen at `now_unix`.
    pub fn from_exptime(exptime: Exptime, now_unix: u64) -> Expiry {
        exptime.deadline(now_unix).map_or(Expiry::Never, Expiry::At)
    }

    /// True if the item would already be gone at `now_unix`.
    pub fn is_expired(&self, now_unix: u64) -> bool {
        matches!(*self, Expiry::At(t) if t <= now_unix)
    }

    /// Seconds left at `now_unix`: `None` for [`Expiry::Never`], `Some(0)` if
    /// expired.
    pub fn remaining(&self, now_unix: u64) -> Option<u64> {
        match *self {
            Expiry::Never => None,
            Expiry::At(t) => Some(t.saturating_sub(now_unix)),
        }
    }

    /// The `exptime` to send to memcached, or `None` if the item is already
    /// expired (send a delete instead). Relative seconds when they fit in 30
    /// days (immune to clock skew between us and the server), the absolute
    /// time otherwise (memcached's own rule for longer TTLs).
    pub fn to_memcached(&self, now_unix: u64) -> Option<u32> {
        match *self {
            Expiry::Never => Some(0),
            Expiry::At(t) if t <= now_unix => None,
            Expiry::At(t) => {
                let left = t - now_unix;
                if left <= REALTIME_MAXDELTA as u64 {
                    Some(left as u32)
                } else {
                    Some(u32::try_from(t).unwrap_or(u32::MAX))
                }
            }
        }
    }
}

/// One shadow write: the state the shadow backend should end up in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShadowOp {
    /// The key holds this value (any `set`/`add`/`replace`/`cas`/`append`/
    /// `incr`... whose result is known).
    Set {
        key: Bytes,
        flags: u32,
        expiry: Expiry,
        data: Bytes,
    },
    /// The key is gone, or its state is unknown (an `append` whose result the
    /// primary did not return): delete it so the shadow never serves a stale
    /// value.
    Delete { key: Bytes },
    /// Only the expiry changed.
    Touch { key: Bytes, expiry: Expiry },
    /// Everything is gone.
    FlushAll,
}

impl ShadowOp {
    pub fn key(&self) -> Option<&Bytes> {
        match self {
            ShadowOp::Set { key, .. } | ShadowOp::Delete { key } | ShadowOp::Touch { key, .. } => {
                Some(key)
            }
            ShadowOp::FlushAll => None,
        }
    }

    /// Label for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            ShadowOp::Set { .. } => "set",
            ShadowOp::Delete { .. } => "delete",
            ShadowOp::Touch { .. } => "touch",
            ShadowOp::FlushAll => "flush_all",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000;

    #[test]
    fn memcached_exptime_rules() {
        assert_eq!(Expiry::from_memcached(0, NOW), Expiry::Never);
        assert_eq!(Expiry::from_memcached(60, NOW), Expiry::At(NOW + 60));
        assert_eq!(
            Expiry::from_memcached(2_592_000, NOW),
            Expiry::At(NOW + 2_592_000)
        );
        assert_eq!(
            Expiry::from_memcached(2_592_001, NOW),
            Expiry::At(2_592_001)
        );
        assert!(Expiry::from_memcached(2_592_001, NOW).is_expired(NOW));
        assert!(Expiry::from_memcached(-1, NOW).is_expired(NOW));
        assert_eq!(
            Expiry::from_memcached(NOW as i64 + 100, NOW),
            Expiry::At(NOW + 100)
        );
    }

    #[test]
    fn back_to_memcached() {
        assert_eq!(Expiry::Never.to_memcached(NOW), Some(0));
        assert_eq!(Expiry::At(NOW).to_memcached(NOW), None);
        assert_eq!(Expiry::At(NOW - 5).to_memcached(NOW), None);
        assert_eq!(Expiry::At(NOW + 10).to_memcached(NOW), Some(10));
        let far = NOW + 40 * 24 * 3600;
        assert_eq!(Expiry::At(far).to_memcached(NOW), Some(far as u32));
        assert_eq!(Expiry::At(u64::MAX).to_memcached(NOW), Some(u32::MAX));
    }

    #[test]
    fn ttl_rules() {
        assert_eq!(Expiry::from_ttl(None, NOW), Expiry::Never);
        assert_eq!(Expiry::from_ttl(Some(-1), NOW), Expiry::Never);
        assert_eq!(Expiry::from_ttl(Some(30), NOW), Expiry::At(NOW + 30));
        assert_eq!(Expiry::At(NOW + 30).remaining(NOW), Some(30));
        assert_eq!(Expiry::At(NOW - 30).remaining(NOW), Some(0));
        assert_eq!(Expiry::Never.remaining(NOW), None);
    }
}

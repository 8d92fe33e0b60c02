//! memcached's `exptime` and the one clock memshift reads it against.
//!
//! memcached 1.6.18 (`realtime()` in memcached.c, checked live): 0 never
//! expires; negative is already expired; 1..=30 days ([`REALTIME_MAXDELTA`])
//! counts from now; anything larger is an absolute Unix time, already
//! expired when not after now. Text-protocol numbers reach here as memcached
//! reads them (`safe_strtol` keeps the low 32 bits, so `4294967295` is -1 and
//! `4294967296` is 0): see the parser.

use std::time::{SystemTime, UNIX_EPOCH};

/// Exptime values above this are absolute Unix times (memcached's
/// REALTIME_MAXDELTA, 30 days).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// The current Unix time in seconds (0 if the clock is before 1970).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An `exptime` as a client sent it, classified by memcached's rules.
/// Needs no clock: whether an absolute time is past is asked with one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exptime {
    /// 0: never expires.
    Never,
    /// Negative: already expired.
    Expired,
    /// 1..=[`REALTIME_MAXDELTA`]: seconds from now.
    Relative(u32),
    /// Above [`REALTIME_MAXDELTA`]: an absolute Unix time (possibly past).
    Absolute(u64),
}

impl Exptime {
    /// Classify a client's `exptime`.
    pub fn new(exptime: i64) -> Exptime {
        match exptime {
            0 => Exptime::Never,
            t if t < 0 => Exptime::Expired,
            // In 1..=REALTIME_MAXDELTA, so it fits.
            t if t <= REALTIME_MAXDELTA => Exptime::Relative(t as u32),
            t => Exptime::Absolute(t as u64),
        }
    }

    /// An item whose remaining time to live is `ttl` seconds at `now`, as
    /// memcached's `mg ... t` and Redis `TTL` report it (negative: none).
    pub fn from_remaining(ttl: i64, now: u64) -> Exptime {
        match u64::try_from(ttl) {
            Err(_) => Exptime::Never,
            Ok(ttl) => Exptime::Absolute(now.saturating_add(ttl)),
        }
    }

    /// The absolute Unix time the item expires at (`None`: never). An
    /// expired item's deadline is 0 or another time not after `now`.
    pub fn deadline(self, now: u64) -> Option<u64> {
        match self {
            Exptime::Never => None,
            Exptime::Expired => Some(0),
            Exptime::Relative(s) => Some(now.saturating_add(u64::from(s))),
            Exptime::Absolute(t) => Some(t),
        }
    }

    /// True if an item stored with this exptime at `now` is already gone
    /// (memcached expires an item once its time is not after the clock).
    pub fn is_expired(self, now: u64) -> bool {
        match self {
            Exptime::Never | Exptime::Relative(_) => false,
            Exptime::Expired => true,
            Exptime::Absolute(t) => t <= now,
        }
    }

    /// Seconds left at `now`: `None` when it never expires, `Some(0)` when
    /// already expired.
    pub fn remaining(self, now: u64) -> Option<u64> {
        self.deadline(now).map(|t| t.saturating_sub(now))
    }

    /// memcached's remaining-TTL number (`mg ... t`): -1 for never, else
    /// the seconds left (0 when expired).
    pub fn ttl(self, now: u64) -> i64 {
        self.remaining(now)
            .map_or(-1, |s| i64::try_from(s).unwrap_or(i64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000;

    #[test]
    fn classifies_like_memcached() {
        assert_eq!(Exptime::new(0), Exptime::Never);
        assert_eq!(Exptime::new(-1), Exptime::Expired);
        assert_eq!(Exptime::new(i64::MIN), Exptime::Expired);
        assert_eq!(Exptime::new(1), Exptime::Relative(1));
        assert_eq!(Exptime::new(2_592_000), Exptime::Relative(2_592_000));
        assert_eq!(Exptime::new(2_592_001), Exptime::Absolute(2_592_001));
        assert_eq!(Exptime::new(i64::MAX), Exptime::Absolute(i64::MAX as u64));
    }

    #[test]
    fn expired_at_the_boundaries() {
        // memcached 1.6.18, checked live: `set` with these exptimes then an
        // immediate `get`: 0, 2592000 and now+5 are served, -1, 2592001
        // and now are not.
        let now = NOW as i64;
        for (exptime, gone) in [
            (0, false),
            (-1, true),
            (1, false),
            (2_592_000, false),
            (2_592_001, true),
            (now, true),
            (now + 1, false),
            (i64::MAX, false),
            (i64::MIN, true),
        ] {
            assert_eq!(Exptime::new(exptime).is_expired(NOW), gone, "{exptime}");
            let remaining = Exptime::new(exptime).remaining(NOW);
            assert_eq!(remaining == Some(0), gone, "{exptime}");
        }
    }

    #[test]
    fn wrapped_32_bit_values() {
        // The parser keeps the low 32 bits of exptime, as memcached's
        // safe_strtol; live: 4294967295 → expired, 4294967296 → never,
        // 4294967297 → one second.
        let wrapped = |v: i64| Exptime::new(i64::from(v as i32));
        assert_eq!(wrapped(4_294_967_295), Exptime::Expired);
        assert_eq!(wrapped(4_294_967_296), Exptime::Never);
        assert_eq!(wrapped(4_294_967_297), Exptime::Relative(1));
        assert_eq!(wrapped(2_147_483_648), Exptime::Expired);
        assert_eq!(wrapped(2_147_483_647), Exptime::Absolute(2_147_483_647));
    }

    #[test]
    fn deadlines_and_ttls() {
        assert_eq!(Exptime::Never.deadline(NOW), None);
        assert_eq!(Exptime::Expired.deadline(NOW), Some(0));
        assert_eq!(Exptime::new(10).deadline(NOW), Some(NOW + 10));
        assert_eq!(Exptime::new(10).deadline(u64::MAX), Some(u64::MAX));
        assert_eq!(Exptime::new(NOW as i64 + 7).deadline(NOW), Some(NOW + 7));
        assert_eq!(Exptime::Never.ttl(NOW), -1);
        assert_eq!(Exptime::Expired.ttl(NOW), 0);
        assert_eq!(Exptime::new(2_592_000).ttl(NOW), 2_592_000);
        assert_eq!(Exptime::new(NOW as i64 + 40).ttl(NOW), 40);
        assert_eq!(Exptime::new(NOW as i64 - 40).ttl(NOW), 0);
        assert_eq!(Exptime::Absolute(u64::MAX).ttl(0), i64::MAX);
    }

    #[test]
    fn from_remaining_ttl() {
        assert_eq!(Exptime::from_remaining(-1, NOW), Exptime::Never);
        assert_eq!(Exptime::from_remaining(-2, NOW), Exptime::Never);
        assert_eq!(Exptime::from_remaining(0, NOW), Exptime::Absolute(NOW));
        assert!(Exptime::from_remaining(0, NOW).is_expired(NOW));
        assert_eq!(Exptime::from_remaining(5, NOW).remaining(NOW), Some(5));
        assert_eq!(
            Exptime::from_remaining(i64::MAX, u64::MAX).deadline(0),
            Some(u64::MAX)
        );
    }

    #[test]
    fn the_clock_is_unix_time() {
        // After 2023-11 and before the year 2100.
        let now = unix_now();
        assert!(now > NOW && now < 4_102_444_800);
    }
}

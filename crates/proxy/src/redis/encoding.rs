//! How a memcached item lives in Redis (see docs/storage.md).
//!
//! One Redis string per memcached key, the key bytes unchanged. The value is a
//! 13-byte header followed by the data:
//!
//! ```text
//! byte 0      format version (1)
//! bytes 1..5  flags, u32 big-endian
//! bytes 5..13 CAS unique, u64 big-endian
//! bytes 13..  the item's data
//! ```
//!
//! The TTL is the Redis key's own expiry. Keeping everything in one string
//! makes get and set one Redis command each (GET/MGET, SET with EX/EXAT).
//!
//! Format version 2 adds one byte after the CAS, the meta state (`STATE_*`
//! bits: stale, win token sent, fetched, key stored as base64). Only meta
//! commands write it (the anti-stampede tokens, `h`, `ms ... b`); every
//! reader accepts both versions, and any classic write produces version 1,
//! which is memcached's fresh item (no state).

use bytes::Bytes;

pub const FORMAT_VERSION: u8 = 1;
pub const HEADER_LEN: usize = 13;
/// Version 2: the version 1 header plus the meta state byte.
pub const FORMAT_VERSION_META: u8 = 2;
pub const HEADER_LEN_META: usize = 14;

/// `md ... I` (or `ms ... I` on a stale item): the item is stale.
pub const STATE_STALE: u8 = 1;
/// A win token (`W`) was handed out: later `mg`s get `Z`.
pub const STATE_TOKEN_SENT: u8 = 2;
/// An `mg` read the item (`h`).
pub const STATE_FETCHED: u8 = 4;
/// Stored with a base64 key (`ms ... b`): `mg ... k` prints it base64.
pub const STATE_KEY_BINARY: u8 = 8;

/// Build the header for an item.
pub fn header(flags: u32, cas: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0] = FORMAT_VERSION;
    h[1..5].copy_from_slice(&flags.to_be_bytes());
    h[5..13].copy_from_slice(&cas.to_be_bytes());
    h
}

/// The version 2 header (`state`: `STATE_*` bits).
pub fn header_meta(flags: u32, cas: u64, state: u8) -> [u8; HEADER_LEN_META] {
    let mut h = [0u8; HEADER_LEN_META];
    h[..HEADER_LEN].copy_from_slice(&header(flags, cas));
    h[0] = FORMAT_VERSION_META;
    h[HEADER_LEN] = state;
    h
}

/// A stored item, decoded without copying the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub flags: u32,
    pub cas: u64,
    /// `STATE_*` bits (0 for version 1).
    pub state: u8,
    pub data: Bytes,
}

/// Decode a stored value. `None` for values not written by memshift (too
/// short or another format version): they are treated as misses.
pub fn decode(value: &Bytes) -> Option<Item> {
    let h = value.get(..HEADER_LEN)?;
    let (state, len) = match h[0] {
        FORMAT_VERSION => (0, HEADER_LEN),
        FORMAT_VERSION_META => (*value.get(HEADER_LEN)?, HEADER_LEN_META),
        _ => return None,
    };
    let flags = u32::from_be_bytes([h[1], h[2], h[3], h[4]]);
    let cas = u64::from_be_bytes([h[5], h[6], h[7], h[8], h[9], h[10], h[11], h[12]]);
    Some(Item {
        flags,
        cas,
        state,
        data: value.slice(len..),
    })
}

/// Issues CAS uniques: 63-bit (clients such as spymemcached hold them in a
/// signed long), never 0, distinct for every modification. A splitmix64
/// sequence is a bijection of its counter, so values from one generator never
/// repeat; generators are seeded per session, so collisions across sessions
/// and proxies are as unlikely as a random 63-bit match.
#[derive(Debug, Clone)]
pub struct CasGenerator {
    state: u64,
}

impl CasGenerator {
    pub fn new(seed: u64) -> Self {
        CasGenerator { state: seed }
    }

    pub fn next_cas(&mut self) -> u64 {
        loop {
            self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let cas = z >> 1;
            if cas != 0 {
                return cas;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_any_flags_and_cas() {
        for (flags, cas) in [(0, 1), (u32::MAX, u64::MAX >> 1), (7, 12345)] {
            let mut v = header(flags, cas).to_vec();
            v.extend_from_slice(b"data");
            let item = decode(&Bytes::from(v)).expect("decodes");
            assert_eq!(item.flags, flags);
            assert_eq!(item.cas, cas);
            assert_eq!(&item.data[..], b"data");
        }
    }

    #[test]
    fn meta_header_round_trips_with_its_state() {
        let mut v = header_meta(9, 77, STATE_STALE | STATE_KEY_BINARY).to_vec();
        v.extend_from_slice(b"data");
        let item = decode(&Bytes::from(v)).expect("decodes");
        assert_eq!((item.flags, item.cas), (9, 77));
        assert_eq!(item.state, STATE_STALE | STATE_KEY_BINARY);
        assert_eq!(&item.data[..], b"data");
        // A version 2 value cut before its state byte is not an item.
        assert_eq!(
            decode(&Bytes::from(header(1, 2).map(|b| b.max(2)).to_vec())),
            None
        );
    }

    #[test]
    fn foreign_values_are_not_items() {
        assert_eq!(decode(&Bytes::from_static(b"hello")), None);
        let mut v = header(1, 2).to_vec();
        v[0] = 9;
        assert_eq!(decode(&Bytes::from(v)), None);
    }

    #[test]
    fn cas_values_are_nonzero_63_bit_and_distinct() {
        let mut g = CasGenerator::new(42);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..100_000 {
            let c = g.next_cas();
            assert!(c != 0 && c < (1 << 63));
            assert!(seen.insert(c));
        }
    }
}

//! Get/GetK/GAT/GATK (+Q) as `gets <key>` / `gats <exptime> <key>` (the
//! classic path: plain GET/GETEX on Redis, the near cache), or, for keys a
//! text line cannot carry, and for Touch, `mg <key> [v] f c [T<exptime>]`
//! with the key in base64.

use bytes::Bytes;
use memshift_protocol::memcache::reply::put_u64;
use memshift_protocol::memcache::{Keys, MetaCommand, MetaFlags, Request, RetrievalCommand};
use tokio::time::Instant;

use super::super::Session;

impl Session {
    /// One text-safe key: `gets <key>`, or `gats <exptime> <key>`.
    pub(super) fn binary_classic_get(&mut self, key: Bytes, touch: Option<u32>, now: Instant) {
        let (command, exptime) = match touch {
            Some(e) => (RetrievalCommand::Gats, exptime(e)),
            None => (RetrievalCommand::Gets, 0),
        };
        let request = Request::Retrieval {
            command,
            exptime,
            keys: Keys::new(key, 1),
        };
        self.dispatch(request, now);
    }

    /// `touch`: the new expiration (GAT, Touch); `value`: return it (not
    /// for Touch).
    pub(super) fn binary_get(&mut self, key: Bytes, touch: Option<u32>, value: bool, now: Instant) {
        self.reserve_scratch();
        let scratch = &mut self.binary.scratch;
        if value {
            scratch.extend_from_slice(b"v ");
        }
        scratch.extend_from_slice(b"f c");
        let ttl = touch.map(exptime);
        if let Some(t) = ttl {
            scratch.extend_from_slice(b" T");
            put_u64(scratch, t as u64);
        }
        let flags = MetaFlags {
            value,
            ttl,
            ..MetaFlags::default()
        };
        self.dispatch_meta_for_binary(MetaCommand::Get, key, Bytes::new(), flags, now);
    }
}

/// A binary expiration (unsigned 32 bits, memcached reads it as a positive
/// time) as a meta `T`/`N` value: past `i32::MAX` (2038, an absolute time
/// either way) it is clamped.
pub(super) fn exptime(e: u32) -> i64 {
    i64::from(e.min(i32::MAX as u32))
}

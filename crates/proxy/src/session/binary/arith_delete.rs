//! Increment/Decrement (+Q) as `ma <key> v c D<delta> [N<exptime> J<initial>]
//! M<I|D> [C<cas>]` (expiration `0xffffffff`: no `N`, a miss is not
//! created), Delete (+Q) as `md <key> [C<cas>]`.

use bytes::Bytes;
use memshift_protocol::memcache::reply::put_u64;
use memshift_protocol::memcache::{MetaCommand, MetaFlags};
use tokio::time::Instant;

use super::super::Session;
use super::get::exptime;

/// Expiration that tells Increment/Decrement not to create the counter.
const NO_CREATE: u32 = 0xffff_ffff;

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn binary_arith(
        &mut self,
        key: Bytes,
        decrement: bool,
        delta: u64,
        initial: u64,
        expiration: u32,
        cas: u64,
        now: Instant,
    ) {
        self.reserve_scratch();
        let scratch = &mut self.binary.scratch;
        scratch.extend_from_slice(b"v c D");
        put_u64(scratch, delta);
        let vivify = (expiration != NO_CREATE).then(|| exptime(expiration));
        if let Some(n) = vivify {
            scratch.extend_from_slice(b" N");
            put_u64(scratch, n as u64);
            scratch.extend_from_slice(b" J");
            put_u64(scratch, initial);
        }
        scratch.extend_from_slice(if decrement { b" MD" } else { b" MI" });
        if cas != 0 {
            scratch.extend_from_slice(b" C");
            put_u64(scratch, cas);
        }
        let flags = MetaFlags {
            value: true,
            vivify,
            initial,
            delta,
            decrement,
            compare_cas: (cas != 0).then_some(cas),
            ..MetaFlags::default()
        };
        self.dispatch_meta_for_binary(MetaCommand::Arith, key, Bytes::new(), flags, now);
    }

    pub(super) fn binary_delete(&mut self, key: Bytes, cas: u64, now: Instant) {
        self.reserve_scratch();
        if cas != 0 {
            self.binary.scratch.extend_from_slice(b"C");
            put_u64(&mut self.binary.scratch, cas);
        }
        let flags = MetaFlags {
            compare_cas: (cas != 0).then_some(cas),
            ..MetaFlags::default()
        };
        self.dispatch_meta_for_binary(MetaCommand::Delete, key, Bytes::new(), flags, now);
    }
}

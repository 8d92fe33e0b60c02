//! Set/Add/Replace (+Q) as `ms <key> c F<flags> T<exptime> [C<cas>] M<mode>`,
//! Append/Prepend (+Q) as `ms <key> c M<A|P> [C<cas>]`. A non-zero header
//! CAS makes any store a compare-and-swap (memcached's NREAD_CAS).

use bytes::Bytes;
use memshift_protocol::memcache::binary::{Status, StoreMode};
use memshift_protocol::memcache::reply::put_u64;
use memshift_protocol::memcache::{MetaCommand, MetaFlags, MetaSetMode};
use tokio::time::Instant;

use super::super::Session;
use super::get::exptime;
use super::Answer;

/// What `NS` means for this store: memcached answers a refused Add with
/// `Data exists`, a refused Replace with `Not found`.
pub(super) fn answer(mode: StoreMode, cas: u64) -> Answer {
    let not_stored = match (mode, cas) {
        (_, c) if c != 0 => Status::NotStored,
        (StoreMode::Add, _) => Status::KeyExists,
        (StoreMode::Replace, _) => Status::KeyNotFound,
        (StoreMode::Set, _) => Status::NotStored,
    };
    Answer::Store { not_stored }
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn binary_store(
        &mut self,
        key: Bytes,
        mode: StoreMode,
        client_flags: u32,
        expiration: u32,
        cas: u64,
        value: Bytes,
        now: Instant,
    ) {
        self.reserve_scratch();
        let ttl = exptime(expiration);
        let set_mode = match (mode, cas) {
            (_, c) if c != 0 => MetaSetMode::Set,
            (StoreMode::Set, _) => MetaSetMode::Set,
            (StoreMode::Add, _) => MetaSetMode::Add,
            (StoreMode::Replace, _) => MetaSetMode::Replace,
        };
        let scratch = &mut self.binary.scratch;
        scratch.extend_from_slice(b"c F");
        put_u64(scratch, u64::from(client_flags));
        scratch.extend_from_slice(b" T");
        put_u64(scratch, ttl as u64);
        if cas != 0 {
            scratch.extend_from_slice(b" C");
            put_u64(scratch, cas);
        }
        scratch.extend_from_slice(match set_mode {
            MetaSetMode::Add => b" ME",
            MetaSetMode::Replace => b" MR",
            _ => b" MS",
        });
        let flags = MetaFlags {
            client_flags,
            ttl: Some(ttl),
            compare_cas: (cas != 0).then_some(cas),
            set_mode,
            ..MetaFlags::default()
        };
        self.dispatch_meta_for_binary(MetaCommand::Set, key, value, flags, now);
    }

    pub(super) fn binary_concat(
        &mut self,
        key: Bytes,
        append: bool,
        cas: u64,
        value: Bytes,
        now: Instant,
    ) {
        self.reserve_scratch();
        let scratch = &mut self.binary.scratch;
        scratch.extend_from_slice(if append { b"c MA" } else { b"c MP" });
        if cas != 0 {
            scratch.extend_from_slice(b" C");
            put_u64(scratch, cas);
        }
        let flags = MetaFlags {
            compare_cas: (cas != 0).then_some(cas),
            set_mode: if append {
                MetaSetMode::Append
            } else {
                MetaSetMode::Prepend
            },
            ..MetaFlags::default()
        };
        self.dispatch_meta_for_binary(MetaCommand::Set, key, value, flags, now);
    }
}

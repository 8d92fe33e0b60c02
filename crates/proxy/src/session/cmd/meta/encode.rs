//! A meta command on Redis: its Redis command (in `cmd_buf`), one function
//! per verb, and how its reply reads (`MetaOp::kind`).

use bytes::Bytes;
use memshift_protocol::memcache::{ArithCommand, Exptime, MetaSetMode, StorageCommand};

use super::super::super::Session;
use super::{last_of_n_and_t, position, Kind, MetaOp};
use crate::redis::encoding::STATE_KEY_BINARY;
use crate::redis::translate::{self, Expiry, MetaArith, MetaGet};

impl MetaOp {
    /// An exptime as of the request's dispatch.
    fn expiry(&self, exptime: i64) -> Expiry {
        Expiry::from_exptime(exptime, self.now)
    }
}

impl Session {
    /// `mg`: every mg runs the script: a stale item answers X and hands
    /// out W even to a plain `mg`, and a hit marks it fetched.
    pub(super) fn encode_meta_get(&mut self, op: &mut MetaOp) {
        let flags = &op.flags;
        let created_exptime = last_of_n_and_t(&op.tokens, flags);
        let vivify = created_exptime.map(|e| (self.cas.next_cas(), op.expiry(e)));
        op.new_cas = vivify.map_or(0, |(c, _)| c);
        let recache_ttl = match (flags.ttl, flags.recache) {
            (Some(t), Some(_)) if position(&op.tokens, b'T') < position(&op.tokens, b'R') => {
                Some(Exptime::new(t).ttl(op.now))
            }
            _ => None,
        };
        let get = MetaGet {
            touch: flags.ttl.map(|t| op.expiry(t)),
            vivify,
            recache: flags.recache,
            recache_ttl,
            idle: flags.access_info,
            peek: false,
            no_update: flags.no_update,
        };
        translate::meta_get(&mut self.cmd_buf, &op.key, &get);
        op.kind = Kind::Get;
    }

    /// `me`: the meta get script, looking only.
    pub(super) fn encode_meta_debug(&mut self, op: &mut MetaOp) {
        let get = MetaGet {
            idle: true,
            peek: true,
            ..MetaGet::default()
        };
        translate::meta_get(&mut self.cmd_buf, &op.key, &get);
        op.kind = Kind::Debug;
    }

    /// `ms`: a compare-and-swap, an append/prepend, or a store by mode.
    pub(super) fn encode_meta_set(&mut self, op: &mut MetaOp, data: Bytes) {
        op.new_cas = self.cas.next_cas();
        let store = match (op.flags.set_mode, op.flags.compare_cas) {
            (MetaSetMode::Set | MetaSetMode::Replace, Some(expected)) => {
                self.encode_meta_cas(op, expected, &data)
            }
            (MetaSetMode::Append | MetaSetMode::Prepend, expected) => {
                self.encode_meta_concat(op, expected, &data)
            }
            (mode, _) => self.encode_meta_store(op, mode, &data),
        };
        op.kind = Kind::Store(store);
        op.data = data;
    }

    /// memcached remembers that the key came in base64.
    fn key_state(op: &MetaOp) -> u8 {
        if op.flags.base64 {
            STATE_KEY_BINARY
        } else {
            0
        }
    }

    fn encode_meta_cas(&mut self, op: &MetaOp, expected: u64, data: &[u8]) -> StorageCommand {
        let flags = &op.flags;
        translate::meta_compare_and_swap(
            &mut self.cmd_buf,
            &op.key,
            expected,
            flags.client_flags,
            op.new_cas,
            Self::key_state(op),
            data,
            op.expiry(flags.ttl.unwrap_or(0)),
            // memcached never takes C0 as an older CAS.
            flags.invalidate && expected != 0,
        );
        StorageCommand::Cas
    }

    fn encode_meta_concat(
        &mut self,
        op: &MetaOp,
        expected: Option<u64>,
        data: &[u8],
    ) -> StorageCommand {
        // memcached checks an append's CAS only when it is not 0 (`C0`
        // appends unconditionally).
        let expected = expected.filter(|&c| c != 0);
        let append = op.flags.set_mode == MetaSetMode::Append;
        let max = self
            .proxy
            .settings
            .load()
            .limits
            .max_data_len(op.key.len(), 0);
        translate::concat(
            &mut self.cmd_buf,
            &op.key,
            append,
            op.new_cas,
            data,
            max,
            expected,
        );
        if append {
            StorageCommand::Append
        } else {
            StorageCommand::Prepend
        }
    }

    fn encode_meta_store(&mut self, op: &MetaOp, mode: MetaSetMode, data: &[u8]) -> StorageCommand {
        let command = match mode {
            MetaSetMode::Add => StorageCommand::Add,
            MetaSetMode::Replace => StorageCommand::Replace,
            _ => StorageCommand::Set,
        };
        let (flags, cas) = (op.flags.client_flags, op.new_cas);
        let ex = op.expiry(op.flags.ttl.unwrap_or(0));
        let buf = &mut self.cmd_buf;
        match Self::key_state(op) {
            0 => translate::store(buf, command, &op.key, flags, cas, data, ex),
            state => translate::store_meta(buf, command, &op.key, flags, cas, state, data, ex),
        }
        command
    }

    /// `md`: invalidate (`I`), delete with a CAS, or a plain delete.
    pub(super) fn encode_meta_delete(&mut self, op: &mut MetaOp) {
        let flags = &op.flags;
        if flags.invalidate {
            op.new_cas = self.cas.next_cas();
            let ttl = flags.ttl.map(|t| op.expiry(t));
            let (key, cas, expected) = (&op.key, op.new_cas, flags.compare_cas);
            translate::meta_invalidate(&mut self.cmd_buf, key, expected, cas, ttl);
            op.kind = Kind::Invalidate;
            return;
        }
        match flags.compare_cas {
            Some(expected) => {
                translate::meta_delete_cas(&mut self.cmd_buf, &op.key, expected);
                op.kind = Kind::DeleteCas;
            }
            None => {
                translate::delete(&mut self.cmd_buf, &op.key);
                op.kind = Kind::Delete;
            }
        }
    }

    /// `ma`: a created counter ends with the TTL of whichever of N and T
    /// comes last (memcached applies them in order).
    pub(super) fn encode_meta_arith(&mut self, op: &mut MetaOp) {
        op.new_cas = self.cas.next_cas();
        let flags = &op.flags;
        let create_exptime = last_of_n_and_t(&op.tokens, flags);
        let arith = MetaArith {
            command: if flags.decrement {
                ArithCommand::Decr
            } else {
                ArithCommand::Incr
            },
            delta: flags.delta,
            new_cas: op.new_cas,
            expected: flags.compare_cas.filter(|&c| c != 0),
            create: create_exptime.map(|e| (flags.initial, op.expiry(e))),
            touch: flags.ttl.map(|t| op.expiry(t)),
        };
        translate::meta_arith(&mut self.cmd_buf, &op.key, &arith);
        op.kind = Kind::Arith;
    }
}

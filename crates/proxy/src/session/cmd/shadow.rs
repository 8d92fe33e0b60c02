//! The one rule for shadow writes: the shadow backend gets the resulting
//! state when it is known, a delete when it is not (never a stale value),
//! and nothing when nothing changed. Each family only says what its write
//! did ([`Change`]).

use bytes::Bytes;
use memshift_shadow::op::{unix_now, Expiry, ShadowOp};

use super::super::Session;
use crate::router::Backend;

/// What a write did to its key on the primary, as far as the shadow cares.
#[derive(Debug)]
pub(super) enum Change {
    /// The key now holds this item (the request's flags, exptime, data).
    Stored {
        flags: u32,
        exptime: i64,
        data: Bytes,
    },
    /// Only the key's TTL changed.
    Touched { exptime: i64 },
    /// The primary refused or did not find the key: nothing changed.
    Nothing,
    /// The key changed, or may have, in a way not known here.
    Unknown,
}

/// The shadow write that follows `change` of `key`.
pub(super) fn shadow_op(key: Bytes, change: Change) -> Option<ShadowOp> {
    match change {
        Change::Stored {
            flags,
            exptime,
            data,
        } => Some(ShadowOp::Set {
            key,
            flags,
            expiry: Expiry::from_memcached(exptime, unix_now()),
            data,
        }),
        Change::Touched { exptime } => Some(ShadowOp::Touch {
            key,
            expiry: Expiry::from_memcached(exptime, unix_now()),
        }),
        Change::Nothing => None,
        Change::Unknown => Some(ShadowOp::Delete { key }),
    }
}

impl Session {
    /// Queue the shadow write that follows `change` of `key` on `side`;
    /// never waits.
    pub(super) fn shadow(&self, side: Backend, key: Bytes, change: Change) {
        if let Some(op) = shadow_op(key, change) {
            self.proxy.router.shadow(side, op);
        }
    }
}

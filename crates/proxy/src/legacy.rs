//! The legacy memcached pool as the session sees it: where a key lives
//! (the legacy clients' own distribution) and a pipelined send whose raw
//! reply comes back on the session's reply channel.

use bytes::Bytes;

use crate::redis::{BackendError, ReplyTo};

/// What kind of reply a legacy request gets, so its end can be found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyShape {
    /// One line (STORED, DELETED, a number, an error…).
    Line,
    /// VALUE blocks until END (get/gets/gat/gats).
    Values,
    /// A meta reply (`VA` + data, `EN`, `HD`…).
    Meta,
}

pub struct Legacy {}

impl Legacy {
    pub fn start(
        config: &crate::config::MemcachedConfig,
    ) -> Result<Legacy, crate::error::ProxyError> {
        let _ = config;
        Ok(Legacy {})
    }

    /// Index of the server that owns `key`.
    pub fn locate(&self, key: &[u8]) -> usize {
        let _ = key;
        0
    }

    pub fn server_count(&self) -> usize {
        1
    }

    /// The shadow sink that writes to this pool.
    pub fn shadow_sink(&self) -> std::sync::Arc<dyn memshift_shadow::queue::ShadowSink> {
        unimplemented!("legacy pool not wired yet")
    }

    /// Send one request (never with `noreply`) to `server`; the raw reply
    /// goes to `reply` via [`ReplyTo::send_memcached`].
    pub fn send(&self, server: usize, lane: usize, cmd: Bytes, shape: ReplyShape, reply: ReplyTo) {
        let _ = (server, lane, cmd, shape);
        reply.send_memcached(Err(BackendError::Unavailable));
    }
}

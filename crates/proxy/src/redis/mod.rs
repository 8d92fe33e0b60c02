//! The Redis side: storage encoding, Lua scripts, pipelined shard
//! connections, and the translation of memcached requests into Redis commands.

pub mod cluster;
pub mod connection;
pub mod dedicated;
pub mod diverted;
pub mod encoding;
pub mod primary;
pub mod redirect;
pub mod replica;
pub mod route_pin;
pub mod scripts;
pub mod sentinel;
pub mod shard;
pub mod subscriber;
pub mod topology;
pub mod tracking;
pub mod translate;

pub use crate::backend::{BackendError, BackendReply, BackendRequest, Reply, ReplyTo};

/// A request's caller on a shard connection: where its reply goes, and how
/// many times a Redis Cluster redirected or deferred it.
#[derive(Debug)]
pub struct Routed {
    pub reply: ReplyTo,
    pub hops: u8,
    /// The session's connection lane: a redirected request is re-sent on
    /// the same lane of its new node, so one client's requests stay in
    /// order there (as on the node they were first sent to).
    pub lane: usize,
    /// A read sent to a replica: where it goes once more if the replica
    /// fails it (`replica`).
    pub retry: Option<Retry>,
}

/// Sends a read the replica failed once more, to the shard's primary
/// (`shard::Shard::send_read` makes it; `connection`'s codec calls it).
pub struct Retry(Box<dyn FnOnce(Routed) + Send>);

impl Retry {
    pub fn new(resend: impl FnOnce(Routed) + Send + 'static) -> Retry {
        Retry(Box::new(resend))
    }

    /// Send `caller`'s read again (its own `retry` taken: once only).
    pub fn send(self, caller: Routed) {
        (self.0)(caller)
    }
}

impl std::fmt::Debug for Retry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Retry")
    }
}

//! What every backend request carries and answers, below both the Redis
//! side (`crate::redis`) and the near cache (`crate::near_cache`), which
//! use these types without importing each other.

pub mod mailbox;

use bytes::Bytes;
use memshift_protocol::resp::Frame;

pub use mailbox::{Mailbox, ReplySender};

/// Why a backend request got no reply (the engine's, shared with the legacy
/// pool): `Unavailable`, `Timeout`, `ConnectionLost`, `Busy`.
pub use memshift_pipeline::BackendError;

/// Where a reply goes: the session's mailbox (or a channel), tagged with
/// the client request (`seq`) and which of its backend requests this is
/// (`part`).
#[derive(Debug, Clone)]
pub struct ReplyTo {
    pub tx: ReplySender,
    pub seq: u64,
    pub part: u32,
}

impl ReplyTo {
    /// Deliver a Redis reply (or why there is none).
    pub fn send(self, result: Result<Frame, BackendError>) {
        self.deliver(result.map(Reply::Redis));
    }

    /// Deliver a legacy memcached reply: the complete raw reply bytes.
    pub fn send_memcached(self, result: Result<Bytes, BackendError>) {
        self.deliver(result.map(Reply::Memcached));
    }

    fn deliver(self, result: Result<Reply, BackendError>) {
        // The session may be gone (client disconnected): nothing to do then.
        self.tx.send(BackendReply {
            seq: self.seq,
            part: self.part,
            result,
        });
    }
}

/// What a backend answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Redis(Frame),
    /// A complete memcached reply, byte for byte (e.g. `VALUE …END\r\n`).
    Memcached(Bytes),
}

impl Reply {
    /// Payload bytes this reply holds (values and raw replies), roughly.
    pub fn size(&self) -> usize {
        fn frame_size(f: &Frame) -> usize {
            match f {
                Frame::Bulk(b) | Frame::Simple(b) | Frame::Error(b) => b.len(),
                Frame::Array(items) => items.iter().map(frame_size).sum(),
                _ => 0,
            }
        }
        match self {
            Reply::Redis(f) => frame_size(f),
            Reply::Memcached(raw) => raw.len(),
        }
    }

    /// The Redis frame, if this came from Redis.
    pub fn frame(&self) -> Option<&Frame> {
        match self {
            Reply::Redis(f) => Some(f),
            Reply::Memcached(_) => None,
        }
    }
}

/// A reply for a session.
#[derive(Debug)]
pub struct BackendReply {
    pub seq: u64,
    pub part: u32,
    pub result: Result<Reply, BackendError>,
}

/// One encoded Redis command and where its single reply goes.
#[derive(Debug)]
pub struct BackendRequest {
    pub cmd: Bytes,
    pub reply: ReplyTo,
}

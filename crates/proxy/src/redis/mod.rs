//! The Redis side: storage encoding, Lua scripts, pipelined shard
//! connections, and the translation of memcached requests into Redis commands.

pub mod cluster;
pub mod connection;
pub mod diverted;
pub mod encoding;
pub mod scripts;
pub mod shard;
pub mod subscriber;
pub mod topology;
pub mod tracking;
pub mod translate;

use bytes::Bytes;
use memshift_protocol::resp::Frame;
use tokio::sync::mpsc;

/// Why a backend request got no reply (the engine's, shared with the legacy
/// pool): `Unavailable`, `Timeout`, `ConnectionLost`, `Busy`.
pub use memshift_pipeline::BackendError;

/// Where a reply goes: the session's reply channel, tagged with the client
/// request (`seq`) and which of its backend requests this is (`part`).
#[derive(Debug, Clone)]
pub struct ReplyTo {
    pub tx: mpsc::UnboundedSender<BackendReply>,
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
        let _ = self.tx.send(BackendReply {
            seq: self.seq,
            part: self.part,
            result,
        });
    }
}

/// A request's caller on a shard connection: where its reply goes, and how
/// many times a Redis Cluster redirected or deferred it.
#[derive(Debug)]
pub struct Routed {
    pub reply: ReplyTo,
    pub hops: u8,
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

//! The Redis side: storage encoding, Lua scripts, pipelined shard
//! connections, and the translation of memcached requests into Redis commands.

pub mod connection;
pub mod encoding;
pub mod scripts;
pub mod shadow_sink;
pub mod shard;
pub mod translate;

use bytes::Bytes;
use memshift_protocol::resp::Frame;
use tokio::sync::mpsc;

/// Why a backend request got no reply from Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendError {
    /// The shard is not connected (down, or reconnecting).
    Unavailable,
    /// No reply within `redis.timeout_ms`.
    Timeout,
    /// The connection broke while the request was in flight.
    ConnectionLost,
    /// The shard connection's queue is full.
    Busy,
}

impl BackendError {
    /// The line a client gets.
    pub fn reply_line(self) -> &'static [u8] {
        match self {
            BackendError::Unavailable => b"SERVER_ERROR backend unavailable\r\n",
            BackendError::Timeout => b"SERVER_ERROR backend timeout\r\n",
            BackendError::ConnectionLost => b"SERVER_ERROR backend connection lost\r\n",
            BackendError::Busy => b"SERVER_ERROR backend busy\r\n",
        }
    }

    /// Label for `memshift_backend_errors_total{kind}`.
    pub fn kind(self) -> &'static str {
        match self {
            BackendError::Unavailable => "connection",
            BackendError::Timeout => "timeout",
            BackendError::ConnectionLost => "connection",
            BackendError::Busy => "busy",
        }
    }
}

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

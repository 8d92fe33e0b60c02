//! Why a request got no reply, why a connect failed, why a connection ended.

use std::io;
use std::time::Duration;

/// Why a request got no reply from its backend (the same for Redis and the
/// legacy memcached pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The backend is not connected (down, or reconnecting).
    #[error("server unavailable")]
    Unavailable,
    /// No reply within the request timeout; the connection was reset.
    #[error("server timed out")]
    Timeout,
    /// The connection broke while the request was in flight.
    #[error("connection lost")]
    ConnectionLost,
    /// The connection's request queue is full.
    #[error("connection busy")]
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
            BackendError::Unavailable | BackendError::ConnectionLost => "connection",
            BackendError::Timeout => "timeout",
            BackendError::Busy => "busy",
        }
    }
}

/// Why a connect attempt (with its handshake) failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connect: {0}")]
    Connect(io::Error),
    #[error("nodelay: {0}")]
    NoDelay(io::Error),
    /// The TLS handshake (the message says which step).
    #[error("{0}")]
    Tls(String),
    #[error("write: {0}")]
    Write(io::Error),
    #[error("read: {0}")]
    Read(io::Error),
    #[error("closed during handshake")]
    Closed,
    /// The backend refused the handshake or answered it unexpectedly.
    #[error("handshake: {0}")]
    Handshake(String),
    #[error("connect timeout")]
    Timeout,
}

/// A reply the codec cannot frame: the connection is out of sync.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{0}")]
    Malformed(Box<dyn std::error::Error + Send + Sync>),
    /// Well-formed, but not what the request expects.
    #[error("{0}")]
    Unexpected(&'static str),
}

/// Why an established connection ended.
#[derive(Debug, thiserror::Error)]
pub enum Broken {
    #[error("closed by server")]
    Closed,
    #[error("read: {0}")]
    Read(io::Error),
    #[error("write: {0}")]
    Write(io::Error),
    #[error("write: zero bytes")]
    WriteZero,
    #[error("protocol: {0}")]
    Protocol(DecodeError),
    #[error("reply without a request")]
    ReplyWithoutRequest,
    /// The oldest request waited longer than the request timeout.
    #[error("no reply within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The backend moved ([`crate::Connector::moved`]).
    #[error("backend moved")]
    Moved,
}

impl Broken {
    /// What the requests in flight are told.
    pub fn request_error(&self) -> BackendError {
        match self {
            Broken::Timeout(_) => BackendError::Timeout,
            _ => BackendError::ConnectionLost,
        }
    }
}

//! Resumable RESP2 reply parser. Implemented by the protocol work; API fixed here.

use bytes::BytesMut;

use super::Frame;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RespError {
    #[error("invalid RESP: {0}")]
    Invalid(&'static str),
}

/// Parses replies from a connection's read buffer. Keeps its position inside a
/// partially received frame (including nested arrays) across calls so a large
/// reply is not re-scanned from the start on every read.
#[derive(Debug, Default)]
pub struct ReplyParser {}

impl ReplyParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Take the next complete reply off the front of `buf`, consuming its
    /// bytes. `Ok(None)`: need more input (bytes of a partial frame may have
    /// been consumed into the parser's state). `Err`: the stream is corrupt;
    /// the connection must be dropped.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, RespError> {
        let _ = buf;
        todo!()
    }
}

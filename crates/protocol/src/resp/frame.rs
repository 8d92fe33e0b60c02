use bytes::Bytes;

/// One RESP2 reply, or one of the few RESP3 types a tracking connection
/// (`HELLO 3`) receives: push, map, null, boolean. Bulk and simple payloads are slices of the connection's
/// read buffer (no copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// `+OK\r\n`
    Simple(Bytes),
    /// `-ERR ...\r\n` (text without the leading `-`)
    Error(Bytes),
    /// `:123\r\n`
    Integer(i64),
    /// `$3\r\nfoo\r\n`
    Bulk(Bytes),
    /// `$-1\r\n`
    Null,
    /// `*N\r\n...`
    Array(Vec<Frame>),
    /// `*-1\r\n`
    NullArray,
    /// RESP3 `>N\r\n...`: out-of-band data (client-tracking invalidations).
    Push(Vec<Frame>),
    /// RESP3 `%N\r\n...`: keys and values alternating (`2N` frames).
    Map(Vec<Frame>),
    /// RESP3 `#t\r\n` / `#f\r\n`.
    Boolean(bool),
}

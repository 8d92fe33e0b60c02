use bytes::Bytes;

/// One RESP2 reply. Bulk and simple payloads are slices of the connection's
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
}

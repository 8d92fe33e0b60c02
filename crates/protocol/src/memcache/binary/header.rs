//! The 24-byte header every binary request and response starts with.

/// Header length, requests and responses alike.
pub const HEADER_LEN: usize = 24;
/// First byte of a request (and of a binary connection).
pub const REQUEST_MAGIC: u8 = 0x80;
/// First byte of a response.
pub const RESPONSE_MAGIC: u8 = 0x81;

/// A request header, in host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub magic: u8,
    /// The opcode as sent (echoed in the response, known or not).
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    pub data_type: u8,
    pub vbucket: u16,
    pub body_len: u32,
    /// Echoed in the response.
    pub opaque: u32,
    pub cas: u64,
}

impl Header {
    /// The header at the start of `buf`, if 24 bytes are there.
    pub fn decode(buf: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Header {
            magic: b[0],
            opcode: b[1],
            key_len: u16::from_be_bytes([b[2], b[3]]),
            extras_len: b[4],
            data_type: b[5],
            vbucket: u16::from_be_bytes([b[6], b[7]]),
            body_len: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            opaque: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            cas: u64::from_be_bytes([b[16], b[17], b[18], b[19], b[20], b[21], b[22], b[23]]),
        })
    }

    /// The header as sent (for tests and clients).
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.magic;
        b[1] = self.opcode;
        b[2..4].copy_from_slice(&self.key_len.to_be_bytes());
        b[4] = self.extras_len;
        b[5] = self.data_type;
        b[6..8].copy_from_slice(&self.vbucket.to_be_bytes());
        b[8..12].copy_from_slice(&self.body_len.to_be_bytes());
        b[12..16].copy_from_slice(&self.opaque.to_be_bytes());
        b[16..24].copy_from_slice(&self.cas.to_be_bytes());
        b
    }

    /// Header, extras and key: what memcached reads before it looks at
    /// the request (and consumes, whatever the body length says).
    pub fn fixed_len(&self) -> usize {
        HEADER_LEN + usize::from(self.extras_len) + usize::from(self.key_len)
    }

    /// Body bytes after extras and key (the value of a store); 0 when the
    /// body is shorter than extras + key.
    pub fn value_len(&self) -> usize {
        (self.body_len as usize)
            .saturating_sub(usize::from(self.extras_len) + usize::from(self.key_len))
    }
}

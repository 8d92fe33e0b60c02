//! Redis Cluster hash slots: CRC16 (XMODEM) of the key, or of its
//! `{hash tag}`, modulo 16384, exactly as Redis Cluster defines it.

/// Number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection.
const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CRC16: [u16; 256] = crc16_table();

/// CRC16 (XMODEM) of `bytes`.
#[inline]
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ CRC16[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// The part of `key` Redis Cluster hashes: the bytes between the first `{`
/// and the first `}` after it when that is not empty, else the whole key.
#[inline]
pub fn slot_tag(key: &[u8]) -> &[u8] {
    let Some(open) = memchr::memchr(b'{', key) else {
        return key;
    };
    let rest = &key[open + 1..];
    match memchr::memchr(b'}', rest) {
        Some(close) if close > 0 => &rest[..close],
        _ => key,
    }
}

/// The hash slot of `key` (0..16384).
#[inline]
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(slot_tag(key)) & (SLOT_COUNT - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // The CRC16 check value from the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        // `CLUSTER KEYSLOT` answers of a live Redis.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"hello"), 866);
        assert_eq!(key_slot(b""), 0);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"{"), crc16(b"{") & 16383);
        assert_eq!(key_slot(b"a{b"), crc16(b"a{b") & 16383);
    }

    /// Agrees with an independent implementation on keys holding any byte
    /// a memcached key may hold (anything but space and control bytes),
    /// with braces placed everywhere.
    #[test]
    fn matches_redis_protocol_oracle() {
        let alphabet: Vec<u8> = (0x21u8..=0xff).filter(|&b| b != 0x7f).collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as usize
        };
        let mut key = Vec::new();
        for _ in 0..200_000 {
            key.clear();
            let len = next() % 40;
            for _ in 0..len {
                // Braces often, so tags of every shape occur.
                let b = match next() % 8 {
                    0 => b'{',
                    1 => b'}',
                    _ => alphabet[next() % alphabet.len()],
                };
                key.push(b);
            }
            assert_eq!(
                key_slot(&key),
                redis_protocol::redis_keyslot(&key),
                "key {key:?}"
            );
        }
        for key in [
            &b"{}"[..],
            b"{}x",
            b"x{}",
            b"{a}",
            b"}{a}",
            b"{{}}",
            b"250-byte",
        ] {
            assert_eq!(key_slot(key), redis_protocol::redis_keyslot(key));
        }
    }
}

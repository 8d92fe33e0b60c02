//! The three hash functions the legacy clients use, written out so the crate
//! needs no extra dependency: MD5 (RFC 1321; libmemcached/spymemcached
//! ketama), CRC-32/IEEE (Go's `hash/crc32.ChecksumIEEE`; gomemcache) and
//! MurmurHash3 x86_32 (pymemcache's `murmur3_32`), the latter as a streaming
//! hasher so pymemcache's string-building (`f"{node}-{key}"`) needs no
//! allocation.

/// Per-round left-rotation amounts (RFC 1321, section 3.4).
const MD5_S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, //
    5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, //
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, //
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

/// `floor(abs(sin(i + 1)) * 2^32)` (RFC 1321, section 3.4).
const MD5_K: [u32; 64] = [
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
];

fn md5_block(state: &mut [u32; 4], block: &[u8; 64]) {
    let mut m = [0u32; 16];
    for (word, chunk) in m.iter_mut().zip(block.chunks_exact(4)) {
        *word = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    let [mut a, mut b, mut c, mut d] = *state;
    for i in 0..64 {
        let (f, g) = match i / 16 {
            0 => ((b & c) | (!b & d), i),
            1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
            2 => (b ^ c ^ d, (3 * i + 5) % 16),
            _ => (c ^ (b | !d), (7 * i) % 16),
        };
        let rotated = a
            .wrapping_add(f)
            .wrapping_add(MD5_K[i])
            .wrapping_add(m[g])
            .rotate_left(MD5_S[i]);
        a = d;
        d = c;
        c = b;
        b = b.wrapping_add(rotated);
    }
    state[0] = state[0].wrapping_add(a);
    state[1] = state[1].wrapping_add(b);
    state[2] = state[2].wrapping_add(c);
    state[3] = state[3].wrapping_add(d);
}

/// The 16-byte MD5 digest of `data`.
pub fn md5(data: &[u8]) -> [u8; 16] {
    let mut state: [u32; 4] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476];
    let mut blocks = data.chunks_exact(64);
    for block in &mut blocks {
        let mut buf = [0u8; 64];
        buf.copy_from_slice(block);
        md5_block(&mut state, &buf);
    }
    let rest = blocks.remainder();
    // Padding: 0x80, zeros, then the bit length (little-endian u64); one or
    // two final blocks.
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    let tail_len = if rest.len() < 56 { 64 } else { 128 };
    let bits = (data.len() as u64).wrapping_mul(8);
    tail[tail_len - 8..tail_len].copy_from_slice(&bits.to_le_bytes());
    for block in tail[..tail_len].chunks_exact(64) {
        let mut buf = [0u8; 64];
        buf.copy_from_slice(block);
        md5_block(&mut state, &buf);
    }
    let mut out = [0u8; 16];
    for (chunk, word) in out.chunks_exact_mut(4).zip(state) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    out
}

/// Word `n` (0..4) of an MD5 digest as libmemcached and spymemcached read it:
/// bytes `4n..4n+4`, little-endian.
#[inline]
pub fn md5_word(digest: &[u8; 16], n: usize) -> u32 {
    let i = 4 * (n & 3);
    u32::from_le_bytes([digest[i], digest[i + 1], digest[i + 2], digest[i + 3]])
}

/// libmemcached's `MEMCACHED_HASH_MD5` key hash (libhashkit `hashkit_md5`)
/// and spymemcached's `KETAMA_HASH`: the first digest word.
#[inline]
pub fn md5_hash32(data: &[u8]) -> u32 {
    md5_word(&md5(data), 0)
}

const fn crc32_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static CRC32_TABLE: [u32; 256] = crc32_table();

/// CRC-32/IEEE (reflected polynomial 0xEDB88320, init and final xor
/// 0xFFFFFFFF): Go's `crc32.ChecksumIEEE`, zlib's `crc32`.
pub fn crc32_ieee(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c = CRC32_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// Streaming MurmurHash3 x86_32. Feeding bytes one at a time gives the same
/// result as hashing their concatenation. `Copy`, so a common prefix can be
/// hashed once and the state reused.
#[derive(Debug, Clone, Copy)]
pub struct Murmur3 {
    h1: u32,
    pending: u32,
    pending_len: u32,
    len: u32,
}

const MURMUR_C1: u32 = 0xcc9e_2d51;
const MURMUR_C2: u32 = 0x1b87_3593;

#[inline]
fn murmur_scramble(k: u32) -> u32 {
    k.wrapping_mul(MURMUR_C1)
        .rotate_left(15)
        .wrapping_mul(MURMUR_C2)
}

impl Murmur3 {
    pub fn new(seed: u32) -> Self {
        Murmur3 {
            h1: seed,
            pending: 0,
            pending_len: 0,
            len: 0,
        }
    }

    #[inline]
    pub fn write_byte(&mut self, b: u8) {
        self.pending |= u32::from(b) << (8 * self.pending_len);
        self.pending_len += 1;
        // The length enters the hash modulo 2^32, as in the reference code.
        self.len = self.len.wrapping_add(1);
        if self.pending_len == 4 {
            self.h1 ^= murmur_scramble(self.pending);
            self.h1 = self
                .h1
                .rotate_left(13)
                .wrapping_mul(5)
                .wrapping_add(0xe654_6b64);
            self.pending = 0;
            self.pending_len = 0;
        }
    }

    #[inline]
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_byte(b);
        }
    }

    #[inline]
    pub fn finish(&self) -> u32 {
        let mut h = self.h1;
        if self.pending_len > 0 {
            h ^= murmur_scramble(self.pending);
        }
        h ^= self.len;
        h ^= h >> 16;
        h = h.wrapping_mul(0x85eb_ca6b);
        h ^= h >> 13;
        h = h.wrapping_mul(0xc2b2_ae35);
        h ^= h >> 16;
        h
    }
}

/// One-shot MurmurHash3 x86_32.
#[cfg(test)]
pub fn murmur3_32(data: &[u8], seed: u32) -> u32 {
    let mut m = Murmur3::new(seed);
    m.write(data);
    m.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(d: &[u8]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn md5_rfc1321_vectors() {
        let cases: [(&str, &str); 7] = [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(hex(&md5(input.as_bytes())), want, "md5({input:?})");
        }
    }

    #[test]
    fn md5_block_boundaries() {
        // Lengths around the padding edges (55 fits one final block, 56
        // needs two); digests from Python's hashlib.
        let cases: [(usize, &str); 4] = [
            (55, "ef1772b6dff9a122358552954ad0df65"),
            (56, "3b0c8ac703f828b04c6c197006d17218"),
            (63, "b06521f39153d618550606be297466d5"),
            (64, "014842d480b571495a4a0363793f7367"),
        ];
        for (n, want) in cases {
            assert_eq!(hex(&md5(&vec![b'a'; n])), want, "md5(a*{n})");
        }
    }

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32_ieee(b""), 0);
        assert_eq!(crc32_ieee(b"123456789"), 0xcbf4_3926);
        assert_eq!(
            crc32_ieee(b"The quick brown fox jumps over the lazy dog"),
            0x414f_a339
        );
    }

    #[test]
    fn murmur3_reference_values() {
        assert_eq!(murmur3_32(b"", 0), 0);
        assert_eq!(murmur3_32(b"", 1), 0x514e_28b7);
        assert_eq!(murmur3_32(b"hello", 0), 0x248b_fa47);
        assert_eq!(murmur3_32(b"Hello, world!", 1234), 0xfaf6_cdb3);
        assert_eq!(
            murmur3_32(b"The quick brown fox jumps over the lazy dog", 0),
            0x2e4f_f723
        );
    }

    #[test]
    fn murmur3_streaming_equals_oneshot() {
        let data = b"0123456789abcdefghij";
        for split in 0..=data.len() {
            let mut m = Murmur3::new(7);
            m.write(&data[..split]);
            let saved = m;
            let mut m2 = saved;
            m2.write(&data[split..]);
            assert_eq!(m2.finish(), murmur3_32(data, 7));
        }
    }
}

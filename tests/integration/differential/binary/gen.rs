//! The seeded stream of binary requests: every opcode memcached 1.6.18
//! serves (quiet variants, CAS from earlier responses and bogus ones,
//! keys that are not text-safe), plus unknown opcodes. Requests that close
//! the connection are in `closing` cases instead.
//!
//! Avoided, as in the text stream (memcached itself is not stable there):
//! small positive TTLs and flush delays, counters of 2^63 or more, and an
//! incr/decr of a key read (or touched) earlier in the same batch.

use std::collections::HashSet;

use super::super::generator::splitmix;
use super::wire::{CasRef, Req};

pub(super) struct Gen {
    state: u64,
    next_opaque: u32,
}

const KEYS: [&[u8]; 7] = [
    b"a",
    b"b",
    b"counter",
    b"with space",
    b"ctl\r\n\x00\x01key",
    b"\xff\xfe high bytes",
    b"the-longest-key-of-the-stream-0123456789",
];

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen {
            state: seed,
            next_opaque: 1,
        }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix(self.state)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    fn key(&mut self) -> Vec<u8> {
        KEYS[self.below(KEYS.len() as u64) as usize].to_vec()
    }

    fn value(&mut self) -> Vec<u8> {
        match self.below(10) {
            0..=3 => self.below(1000).to_string().into_bytes(),
            4 => Vec::new(),
            5 => b"abc".to_vec(),
            _ => {
                let len = self.below(200) as usize;
                (0..len)
                    .map(|_| b"abcdefghij0123456789"[self.below(20) as usize])
                    .collect()
            }
        }
    }

    /// 0 (never), a day ahead, or an absolute time years ahead.
    fn exptime(&mut self) -> u32 {
        match self.below(4) {
            0 | 1 => 0,
            2 => 86_400,
            _ => 2_000_000_000,
        }
    }

    fn cas(&mut self) -> CasRef {
        match self.below(10) {
            0..=6 => CasRef::Zero,
            7 | 8 => CasRef::LastSeen,
            _ => CasRef::Bogus,
        }
    }

    pub fn opaque(&mut self) -> u32 {
        self.next_opaque = self.next_opaque.wrapping_add(1);
        self.next_opaque
    }

    /// One batch of requests (without its sentinel).
    pub fn batch(&mut self) -> Vec<Req> {
        let n = 1 + self.below(12) as usize;
        let mut read = HashSet::new();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let mut req = self.request();
            let arith = matches!(req.opcode, 0x05 | 0x06 | 0x15 | 0x16);
            if arith && read.contains(&req.key) {
                continue;
            }
            // Reads, and TOUCH: memcached's binary touch keeps the item
            // referenced until its reply (with the flags) is written, as a
            // get does (seed 0xe942899f559f6154: a decr after a touch of
            // the same key was not padded in place).
            if matches!(
                req.opcode,
                0x00 | 0x09 | 0x0c | 0x0d | 0x1c | 0x1d | 0x1e | 0x23 | 0x24
            ) {
                read.insert(req.key.clone());
            }
            req.opaque = self.opaque();
            out.push(req);
        }
        out
    }

    fn request(&mut self) -> Req {
        let key = self.key();
        let quiet = self.chance(300);
        let pick = self.below(100);
        match pick {
            0..=24 => {
                let op = *[0x00u8, 0x09, 0x0c, 0x0d]
                    .get(self.below(4) as usize)
                    .unwrap_or(&0);
                Req::new(op, &key, b"", b"")
            }
            25..=29 => {
                let op = *[0x1du8, 0x1e, 0x23, 0x24]
                    .get(self.below(4) as usize)
                    .unwrap_or(&0x1d);
                let e = self.exptime();
                Req::new(op, &key, &e.to_be_bytes(), b"")
            }
            30..=32 => {
                let e = self.exptime();
                Req::new(0x1c, &key, &e.to_be_bytes(), b"")
            }
            33..=59 => {
                let base = *[0x01u8, 0x02, 0x03]
                    .get(self.below(3) as usize)
                    .unwrap_or(&1);
                let op = if quiet { base + 0x10 } else { base };
                let mut extras = (self.below(3) as u32 * 7).to_be_bytes().to_vec();
                extras.extend_from_slice(&self.exptime().to_be_bytes());
                let value = self.value();
                let mut req = Req::new(op, &key, &extras, &value);
                req.cas = self.cas();
                req
            }
            60..=67 => {
                let append = self.chance(500);
                let op = match (append, quiet) {
                    (true, false) => 0x0e,
                    (false, false) => 0x0f,
                    (true, true) => 0x19,
                    (false, true) => 0x1a,
                };
                let value = if self.chance(500) {
                    b"12".to_vec()
                } else {
                    self.value()
                };
                let mut req = Req::new(op, &key, b"", &value);
                req.cas = self.cas();
                req
            }
            68..=74 => {
                let mut req = Req::new(if quiet { 0x14 } else { 0x04 }, &key, b"", b"");
                req.cas = self.cas();
                req
            }
            75..=87 => {
                let decr = self.chance(400);
                let op = match (decr, quiet) {
                    (false, false) => 0x05,
                    (true, false) => 0x06,
                    (false, true) => 0x15,
                    (true, true) => 0x16,
                };
                let mut extras = self.below(20).to_be_bytes().to_vec();
                extras.extend_from_slice(&self.below(100).to_be_bytes());
                let e = if self.chance(300) {
                    u32::MAX
                } else {
                    self.exptime()
                };
                extras.extend_from_slice(&e.to_be_bytes());
                let mut req = Req::new(op, &key, &extras, b"");
                if self.chance(150) {
                    req.cas = CasRef::LastSeen;
                }
                req
            }
            88..=89 => {
                let op = if quiet { 0x18 } else { 0x08 };
                if self.chance(500) {
                    Req::new(op, b"", &0u32.to_be_bytes(), b"")
                } else {
                    Req::new(op, b"", b"", b"")
                }
            }
            90..=93 => Req::new(0x0a, b"", b"", b""),
            94..=96 => Req::new(0x0b, b"", b"", b""),
            97 => Req::new(0x10, b"no-such-group", b"", b""),
            // Unknown opcodes (Verbosity among them) with no body.
            _ => {
                let op = *[0x1bu8, 0x25, 0x30, 0x44]
                    .get(self.below(4) as usize)
                    .unwrap_or(&0x1b);
                Req::new(op, b"", b"", b"")
            }
        }
    }
}

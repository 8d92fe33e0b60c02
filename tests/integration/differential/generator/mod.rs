//! The seeded command stream: a splitmix64 generator and `Gen`, which
//! builds batches of classic (`classic`) and meta (`meta`) commands over a
//! small key space, avoiding what memcached itself answers unstably.

mod classic;
mod meta;

use std::collections::{HashMap, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};

use super::cmd::{Cmd, Seg};
use super::{NEAR_MAX_HIGH, OVERSIZE_LOW};

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1_700_000_000)
}

pub(super) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// splitmix64: tiny, seedable, and stable forever (replays stay valid).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix(self.0)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }

    /// True with probability `per_mille / 1000`.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }

    /// Uppercase letters and digits: data that, if a server parses it as a
    /// command line, can only produce `ERROR`.
    fn safe(&mut self, n: usize) -> Vec<u8> {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        (0..n).map(|_| *self.pick(ALPHABET)).collect()
    }
}

/// Standard padded base64 (for `b` keys).
pub(super) fn base64(src: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in src.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Whether incr/decr of an item holding `data` could read memory past the
/// item in memcached 1.6.18: a number of 2^63 or more (2^62 here, to leave
/// room for increments) makes `safe_strtoull` look for a '-' with `strchr`
/// past the data, and a value of only whitespace makes `strtoull` skip the
/// `\r\n` terminator and parse whatever follows.
pub(super) fn arith_unsafe(data: &[u8]) -> bool {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    if !data.is_empty() && data.iter().all(is_space) {
        return true;
    }
    let mut rest = data;
    while let [first, tail @ ..] = rest {
        if !is_space(first) {
            break;
        }
        rest = tail;
    }
    if let [b'+' | b'-', tail @ ..] = rest {
        rest = tail;
    }
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let value = std::str::from_utf8(&rest[..digits])
        .ok()
        .and_then(|d| d.parse::<u64>().ok());
    digits > 0 && !matches!(value, Some(v) if v < 1 << 62)
}

/// A get/gets/gat/gats that memcached 1.6.18 fails with a CLIENT_ERROR (a key
/// over 250 bytes, a bad gat exptime) also discards the replies of earlier
/// pipelined commands that it has not written yet, so what the client sees
/// depends on how the pipeline was split into reads. Such commands only ever
/// start a batch (earlier batches are fully answered by then).
fn must_lead_batch(cmd: &Cmd) -> bool {
    let bytes = cmd.render(&HashMap::new());
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let toks: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    let long_key = || toks.iter().skip(1).any(|t| t.len() > 250);
    match toks.first().copied() {
        Some(b"get" | b"gets") => long_key(),
        Some(b"gat" | b"gats") => {
            let exptime_ok = toks
                .get(1)
                .and_then(|e| std::str::from_utf8(e).ok())
                .and_then(|e| e.parse::<i32>().ok())
                .is_some();
            long_key() || !exptime_ok
        }
        _ => false,
    }
}

pub(super) struct Gen {
    rng: Rng,
    pub(super) keys: Vec<Vec<u8>>,
    now: u64,
    /// Keys read earlier in the batch being generated. memcached rewrites an
    /// incr/decr result in place (padding a shorter number with spaces) only
    /// when nobody else holds the item; a pipelined get whose reply is not
    /// yet written does, so the padding would depend on TCP timing. Batches
    /// therefore never incr/decr a key after reading it.
    batch_reads: HashSet<Vec<u8>>,
    /// Keys that may hold a number of 2^63 or more, or only whitespace: for
    /// those, memcached 1.6.18's incr/decr reads memory past the item (see
    /// `arith_unsafe`) and answers a number or "non-numeric value" depending
    /// on stale memory. The stream never incr/decrs them (a fixed script on
    /// fresh processes covers the wrap at 2^64: `differential_fixed_script`).
    maybe_big: HashSet<Vec<u8>>,
    /// Keys an `ms ... b` may have stored: memcached remembers that the item
    /// came with a base64 key and an `mg ... k` echoes the key base64-encoded
    /// (`k<base64> b`) even without `b`. memshift does not keep that bit, so
    /// mg never asks for `k` on those keys (until a flush_all).
    binary_keys: HashSet<Vec<u8>>,
}

impl Gen {
    pub(super) fn new(seed: u64) -> Gen {
        let mut keys: Vec<Vec<u8>> = (0..10).map(|i| format!("k{i}").into_bytes()).collect();
        keys.extend([b"n0".to_vec(), b"n1".to_vec(), b"n2".to_vec()]);
        // Rarely used but legal keys: separators, UTF-8, a control byte,
        // and the maximum length (250).
        keys.push(b"key:with:colons".to_vec());
        keys.push("ключ-κλειδί".as_bytes().to_vec());
        keys.push(b"ctl\x01key".to_vec());
        keys.push(vec![b'L'; 250]);
        Gen {
            rng: Rng(seed),
            keys,
            now: unix_now(),
            batch_reads: HashSet::new(),
            maybe_big: HashSet::new(),
            binary_keys: HashSet::new(),
        }
    }

    fn key(&mut self) -> Vec<u8> {
        if self.rng.chance(40) {
            let i = self.rng.range(13, self.keys.len() - 1);
            self.keys[i].clone()
        } else {
            let i = self.rng.range(0, 12);
            self.keys[i].clone()
        }
    }

    fn long_key(&mut self) -> Vec<u8> {
        let n = self.rng.range(251, 300);
        let mut k = b"long".to_vec();
        k.resize(n, b'x');
        k
    }

    fn eol(&mut self) -> &'static [u8] {
        // memcached accepts a bare LF as the end of a command line.
        if self.rng.chance(30) {
            b"\n"
        } else {
            b"\r\n"
        }
    }

    fn sep(&mut self) -> &'static str {
        if self.rng.chance(20) {
            "  "
        } else {
            " "
        }
    }

    fn noreply(&mut self) -> bool {
        self.rng.chance(100)
    }

    fn value(&mut self) -> Vec<u8> {
        const NUMERIC: &[&str] = &[
            "0",
            "1",
            "9",
            "10",
            "99",
            "100",
            "255",
            "999",
            "1000",
            "4294967295",
            "4294967296",
            "18446744073709551615",
            "18446744073709551614",
            "18446744073709551616",
            " 12",
            "12 ",
            " 12 ",
            "12 abc",
            "12abc",
            "-5",
            "-0",
            "+5",
            "007",
            "1.5",
            "0x10",
            "abc",
            "",
            "12\r\n",
            "\t7",
        ];
        const TRICKY: &[&[u8]] = &[
            b"END\r\n",
            b"END",
            b"VALUE k0 0 5\r\nhello\r\nEND\r\n",
            b"\r\n",
            b"\r\n\r\n",
            b"STORED\r\n",
            b"version\r\n",
            b"VERSION 1.6.18\r\n",
            b"ERROR\r\n",
            b" ",
            b"\0\0\0",
            b"\xff\xfe\x80",
            b"noreply",
        ];
        let roll = self.rng.below(1000);
        if roll < 300 {
            if self.rng.chance(300) {
                self.rng.next().to_string().into_bytes()
            } else if self.rng.chance(300) {
                self.rng.below(100_000).to_string().into_bytes()
            } else {
                self.rng.pick(NUMERIC).as_bytes().to_vec()
            }
        } else if roll < 700 {
            let n = self.rng.range(0, 40);
            self.rng.bytes(n)
        } else if roll < 800 {
            self.rng.pick(TRICKY).to_vec()
        } else if roll < 960 {
            let n = self.rng.range(40, 3000);
            self.rng.bytes(n)
        } else if roll < 990 {
            let n = self.rng.range(3000, 120_000);
            self.rng.bytes(n)
        } else if roll < 996 {
            let n = self.rng.range(900_000, NEAR_MAX_HIGH);
            self.rng.bytes(n)
        } else {
            let n = self.rng.range(OVERSIZE_LOW, OVERSIZE_LOW + 300_000);
            self.rng.bytes(n)
        }
    }

    fn flags(&mut self) -> String {
        let roll = self.rng.below(1000);
        if roll < 650 {
            "0".into()
        } else if roll < 850 {
            self.rng.range(1, 65535).to_string()
        } else if roll < 900 {
            "4294967295".into()
        } else {
            (self.rng.next() as u32).to_string()
        }
    }

    /// Expiry times that never expire during a run, or are already past.
    fn exptime(&mut self) -> String {
        let roll = self.rng.below(1000);
        if roll < 600 {
            "0".into()
        } else if roll < 700 {
            "3600".into()
        } else if roll < 740 {
            "86400".into()
        } else if roll < 770 {
            "2592000".into() // the largest relative time (30 days)
        } else if roll < 800 {
            (self.now + 7200).to_string() // absolute, in the future
        } else if roll < 860 {
            "-1".into()
        } else if roll < 880 {
            format!("-{}", self.rng.range(2, 10_000_000))
        } else if roll < 910 {
            "2592001".into() // absolute: 1970, in the past
        } else if roll < 940 {
            (self.now - 3600).to_string() // absolute, in the past
        } else if roll < 960 {
            "1000000000".into()
        } else {
            "0".into()
        }
    }

    /// A key for incr/decr or ma: one of the numeric keys half the time,
    /// never one read earlier in the batch or that may hold a big number
    /// (a fresh key instead).
    fn arith_key(&mut self) -> Vec<u8> {
        let mut key = Vec::new();
        for _ in 0..20 {
            key = if self.rng.chance(500) {
                let i = self.rng.range(10, 12);
                self.keys[i].clone()
            } else {
                self.key()
            };
            if !self.batch_reads.contains(&key) && !self.maybe_big.contains(&key) {
                break;
            }
            key = format!("fresh{}", self.rng.below(1000)).into_bytes();
        }
        key
    }

    fn cas_arg(&mut self, cmd: &mut Cmd, key: &[u8]) {
        let roll = self.rng.below(1000);
        if roll < 750 {
            cmd.segs.push(Seg::Cas(key.to_vec()));
        } else if roll < 800 {
            cmd.push("0");
        } else if roll < 850 {
            cmd.push("18446744073709551615");
        } else {
            // Far above any unique memcached hands out in a test.
            let bogus = 1_000_000_000_000 + self.rng.below(1 << 60);
            cmd.push(bogus.to_string());
        }
    }

    /// One command, by weight (per mille): 15% meta commands, the rest
    /// classic ones.
    fn command(&mut self) -> Cmd {
        if self.rng.chance(150) {
            return self.meta();
        }
        let roll = self.rng.below(1000);
        match roll {
            0..=109 => self.retrieval("get"),
            110..=199 => self.retrieval("gets"),
            200..=239 => self.retrieval("gat"),
            240..=279 => self.retrieval("gats"),
            280..=409 => self.storage("set"),
            410..=449 => self.storage("add"),
            450..=489 => self.storage("replace"),
            490..=529 => self.storage("append"),
            530..=569 => self.storage("prepend"),
            570..=659 => self.storage("cas"),
            660..=719 => self.arith("incr"),
            720..=779 => self.arith("decr"),
            780..=829 => self.delete(),
            830..=869 => self.touch(),
            870..=879 => self.big_multiget(),
            880..=884 => self.flush_all(),
            885..=894 => self.verbosity(),
            895..=897 => self.stats(),
            _ => self.malformed(),
        }
    }

    pub(super) fn batch(&mut self) -> Vec<Cmd> {
        let roll = self.rng.below(1000);
        let n = if roll < 650 {
            1
        } else if roll < 900 {
            self.rng.range(2, 8)
        } else {
            self.rng.range(9, 40)
        };
        self.batch_reads.clear();
        let mut cmds = Vec::with_capacity(n);
        for _ in 0..100 * n {
            if cmds.len() == n {
                break;
            }
            let cmd = self.command();
            if cmds.is_empty() || !must_lead_batch(&cmd) {
                cmds.push(cmd);
            }
        }
        cmds
    }
}

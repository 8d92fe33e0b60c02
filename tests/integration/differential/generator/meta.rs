//! Meta commands: mg, ms, md, ma, mn and the error lines.

use super::super::cmd::{Cmd, Seg};
use super::{arith_unsafe, base64, Gen};

impl Gen {
    /// A meta command, by weight (per mille).
    pub(super) fn meta(&mut self) -> Cmd {
        match self.rng.below(1000) {
            0..=339 => self.meta_get(),
            340..=629 => self.meta_set(),
            630..=739 => self.meta_delete(),
            740..=909 => self.meta_arith(),
            910..=939 => Cmd::lit(*self.rng.pick(&["mn\r\n", "mn\n", "mn x\r\n"])),
            _ => self.meta_malformed(),
        }
    }

    /// An opaque token (at most 32 bytes, `O` included).
    fn opaque(&mut self) -> String {
        let n = self.rng.range(0, 31);
        let mut o = String::from("O");
        for _ in 0..n {
            o.push(*self.rng.pick(&['a', 'Z', '7', '-', ':', '_']));
        }
        o
    }

    /// The key as a meta command sends it: as is, or base64 under `b`.
    fn meta_key(&mut self, key: &[u8], flags: &mut Vec<Vec<u8>>) -> Vec<u8> {
        let encoded = base64(key);
        // An encoded key over 250 bytes is refused before an ms length is
        // read, and its data block would run as commands: not that way.
        if encoded.len() <= 250 && self.rng.chance(50) {
            flags.push(b"b".to_vec());
            encoded.into_bytes()
        } else {
            key.to_vec()
        }
    }

    /// Flag tokens in a random order, with the separators memcached takes.
    fn push_flags(&mut self, cmd: &mut Cmd, mut flags: Vec<Vec<u8>>, cas_of: Option<&[u8]>) {
        // Fisher-Yates with the seeded generator.
        for i in (1..flags.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            flags.swap(i, j);
        }
        for f in flags {
            let sep = self.sep();
            cmd.push(sep);
            if f == b"C" {
                cmd.push("C");
                match cas_of {
                    Some(key) if self.rng.chance(800) => cmd.segs.push(Seg::Cas(key.to_vec())),
                    _ => cmd.push(*self.rng.pick(&["0", "1", "999999999999"])),
                }
            } else {
                cmd.push(f);
            }
        }
    }

    /// `<verb> <key> <flags>` and the end of line: a meta command without
    /// a data block.
    /// `c` (per mille `cas_per_mille`), `k` (always with `c` unless the key
    /// is base64: memshift returns it as sent) and an opaque, as ms and ma
    /// draw them.
    fn push_cas_key_opaque(&mut self, flags: &mut Vec<Vec<u8>>, cas_per_mille: u64, base64: bool) {
        let cas = self.rng.chance(cas_per_mille);
        if cas {
            flags.push(b"c".to_vec());
        }
        if self.rng.chance(200) || (cas && !base64) {
            flags.push(b"k".to_vec());
        }
        if self.rng.chance(150) {
            let o = self.opaque();
            flags.push(o.into_bytes());
        }
    }

    fn meta_line(
        &mut self,
        verb: &str,
        sent_key: &[u8],
        flags: Vec<Vec<u8>>,
        cas_of: Option<&[u8]>,
    ) -> Cmd {
        let mut cmd = Cmd::lit(format!("{verb} "));
        cmd.push(sent_key);
        self.push_flags(&mut cmd, flags, cas_of);
        let eol = self.eol();
        cmd.push(eol);
        cmd
    }

    /// A TTL for `T`/`N`: any exptime, or (when the reply shows `t`) one
    /// whose remaining time memcached prints sensibly (not one in the past).
    fn meta_ttl(&mut self, shows_ttl: bool) -> String {
        if shows_ttl {
            (*self.rng.pick(&["0", "0", "3600", "86400"])).to_string()
        } else {
            self.touch_exptime()
        }
    }

    fn meta_get(&mut self) -> Cmd {
        let key = self.key();
        self.batch_reads.insert(key.clone());
        let mut flags: Vec<Vec<u8>> = Vec::new();
        let sent_key = self.meta_key(&key, &mut flags);
        let base64 = !flags.is_empty();
        let shows_ttl = self.rng.chance(200);
        for (flag, per_mille) in [
            ("v", 600),
            ("f", 300),
            ("c", 250),
            ("s", 200),
            ("q", 150),
            ("u", 50),
        ] {
            if self.rng.chance(per_mille) {
                flags.push(flag.as_bytes().to_vec());
            }
        }
        if shows_ttl {
            flags.push(b"t".to_vec());
        }
        // `l` (normalised: two clocks); `h` is not generated, as memcached's
        // classic get marks an item fetched and memshift's does not.
        if self.rng.chance(50) {
            flags.push(b"l".to_vec());
        }
        // The anti-stampede flags: N creates an empty item (no incr/decr
        // on it, see `maybe_big`), R hands out a token below 30 seconds.
        if self.rng.chance(60) {
            let n = self.meta_ttl(shows_ttl);
            flags.push(format!("N{n}").into_bytes());
            self.maybe_big.insert(key.clone());
        }
        if self.rng.chance(50) {
            flags.push(b"R30".to_vec());
        }
        // `k` on a hit echoes whether the item was stored with `b`; memshift
        // keeps that mark, but not through every rewrite (an incr that grows
        // the number): never `b` with `k` for mg.
        if !base64
            && !self.binary_keys.contains(&key)
            && (self.rng.chance(250) || flags.contains(&b"c".to_vec()))
        {
            flags.push(b"k".to_vec());
        }
        if self.rng.chance(200) {
            let o = self.opaque();
            flags.push(o.into_bytes());
        }
        if self.rng.chance(120) {
            let t = self.meta_ttl(shows_ttl);
            flags.push(format!("T{t}").into_bytes());
        }
        self.meta_line("mg", &sent_key, flags, None)
    }

    fn meta_set(&mut self) -> Cmd {
        let key = self.key();
        let value = self.value();
        let mut flags: Vec<Vec<u8>> = Vec::new();
        let sent_key = self.meta_key(&key, &mut flags);
        let base64 = !flags.is_empty();
        let mode = if self.rng.chance(400) {
            *self.rng.pick(&["S", "E", "R", "A", "P"])
        } else {
            "S"
        };
        if mode != "S" || self.rng.chance(100) {
            flags.push(format!("M{mode}").into_bytes());
        }
        let with_cas = self.rng.chance(120);
        if with_cas {
            flags.push(b"C".to_vec());
        }
        if self.rng.chance(500) {
            let t = self.exptime();
            flags.push(format!("T{t}").into_bytes());
        }
        if self.rng.chance(400) {
            let f = self.flags();
            flags.push(format!("F{f}").into_bytes());
        }
        for (flag, per_mille) in [("q", 150), ("s", 30)] {
            if self.rng.chance(per_mille) {
                flags.push(flag.as_bytes().to_vec());
            }
        }
        // I with a CAS compare stores a stale item when the CAS is older
        // than the item's: memshift's uniques are not ordered and it takes
        // any mismatch as older, so only C0/C1 (older than any memcached
        // unique) go with I.
        if self.rng.chance(30) {
            flags.push(b"I".to_vec());
            if with_cas {
                flags.retain(|f| f != b"C");
                flags.push(format!("C{}", self.rng.range(0, 1)).into_bytes());
                self.maybe_big.insert(key.clone());
            }
        }
        self.push_cas_key_opaque(&mut flags, 200, base64);
        if base64 {
            self.binary_keys.insert(key.clone());
        }
        let mut cmd = Cmd::lit("ms ");
        cmd.push(&sent_key);
        cmd.push(format!(" {}", value.len()));
        self.push_flags(&mut cmd, flags, Some(&key));
        let eol = self.eol();
        cmd.push(eol);
        cmd.push(&value);
        cmd.push("\r\n");
        let big = match mode {
            "A" | "P" => value.iter().any(u8::is_ascii_digit) || arith_unsafe(&value),
            _ => arith_unsafe(&value),
        };
        if big {
            self.maybe_big.insert(key);
        } else if mode == "S" && !with_cas {
            self.maybe_big.remove(&key);
        }
        cmd
    }

    fn meta_delete(&mut self) -> Cmd {
        let key = self.key();
        let mut flags: Vec<Vec<u8>> = Vec::new();
        let sent_key = self.meta_key(&key, &mut flags);
        for (flag, per_mille) in [("q", 200), ("k", 200), ("C", 150), ("T30", 30)] {
            if self.rng.chance(per_mille) {
                flags.push(flag.as_bytes().to_vec());
            }
        }
        // I marks the item stale (the next mg gets X and W); a stale number
        // grown by incr is a new item in memcached only: no incr/decr on it.
        if self.rng.chance(100) {
            flags.push(b"I".to_vec());
            self.maybe_big.insert(key.clone());
        }
        if self.rng.chance(150) {
            let o = self.opaque();
            flags.push(o.into_bytes());
        }
        self.meta_line("md", &sent_key, flags, Some(&key))
    }

    fn meta_arith(&mut self) -> Cmd {
        let key = self.arith_key();
        let mut flags: Vec<Vec<u8>> = Vec::new();
        let sent_key = self.meta_key(&key, &mut flags);
        let base64 = !flags.is_empty();
        let shows_ttl = self.rng.chance(150);
        if shows_ttl {
            flags.push(b"t".to_vec());
        }
        let decr = self.rng.chance(400);
        if decr {
            flags.push((*self.rng.pick(&["MD", "M-"])).as_bytes().to_vec());
        } else if self.rng.chance(200) {
            flags.push((*self.rng.pick(&["MI", "M+"])).as_bytes().to_vec());
        }
        let mut big = false;
        if self.rng.chance(500) {
            let roll = self.rng.below(1000);
            let delta = if roll < 700 {
                self.rng.range(0, 20).to_string()
            } else if roll < 850 {
                self.rng.next().to_string()
            } else if roll < 900 {
                "18446744073709551615".into()
            } else {
                (*self.rng.pick(&["", "abc", "-1", "18446744073709551616"])).to_string()
            };
            big |= !decr && !matches!(delta.parse::<u64>(), Ok(d) if d < 1 << 32);
            flags.push(format!("D{delta}").into_bytes());
        }
        if self.rng.chance(300) {
            let n = self.meta_ttl(shows_ttl);
            flags.push(format!("N{n}").into_bytes());
            if self.rng.chance(500) {
                let j = *self.rng.pick(&["0", "5", "100", "4294967296", "99999"]);
                flags.push(format!("J{j}").into_bytes());
            }
        }
        if self.rng.chance(100) {
            let t = self.meta_ttl(shows_ttl);
            flags.push(format!("T{t}").into_bytes());
        }
        if big {
            self.maybe_big.insert(key.clone());
        }
        for (flag, per_mille) in [("v", 500), ("q", 150), ("C", 100)] {
            if self.rng.chance(per_mille) {
                flags.push(flag.as_bytes().to_vec());
            }
        }
        self.push_cas_key_opaque(&mut flags, 150, base64);
        self.meta_line("ma", &sent_key, flags, Some(&key))
    }

    /// Meta command lines memcached rejects (data blocks, swallowed or not,
    /// only hold uppercase letters and digits).
    fn meta_malformed(&mut self) -> Cmd {
        let key = String::from_utf8_lossy(&self.key()).into_owned();
        let line = match self.rng.below(20) {
            0 => "mg\r\n".to_string(),
            1 => format!("mg {key} X\r\n"),
            2 => format!("mg {key} v v\r\n"),
            3 => format!("mg {key} Tx v\r\n"),
            4 => format!("mg {key} O{}\r\n", "x".repeat(40)),
            5 => format!("mg {key} 1 2 3 4 5 6 7 8 9 0 A B G H K L Q W\r\n"),
            6 => format!("md {key} x\r\n"),
            7 => format!("ma {key} Mx\r\n"),
            8 => format!("ma {key} Dabc\r\n"),
            9 => format!("ms {key} 2 Mx\r\nAB\r\n"),
            10 => format!("ms {key} x\r\nAB\r\n"),
            11 => format!("ms {key} 2 X\r\nZZ\r\n"),
            12 => format!("ms {key} 2\r\nABCD\r\n"),
            13 => format!("ms {key} 2 F\r\nAB\r\n"),
            14 => format!("ms {key}\r\nAB\r\n"),
            15 => format!("ms {key} -1\r\nAB\r\n"),
            16 => format!("mg {}\r\n", "k".repeat(251)),
            17 => "mq x\r\n".to_string(),
            18 => format!("mg {key} E1\r\n"),
            _ => format!("ms {key} 1 MEE\r\nZ\r\n"),
        };
        Cmd::lit(line)
    }
}

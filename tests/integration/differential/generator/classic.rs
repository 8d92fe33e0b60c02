//! Classic commands: storage, retrieval, arithmetic, delete/touch, flush,
//! and malformed lines.

use super::super::cmd::{Cmd, Seg};
use super::{arith_unsafe, Gen};

impl Gen {
    pub(super) fn storage(&mut self, verb: &str) -> Cmd {
        let key = self.key();
        let value = self.value();
        let sep = self.sep();
        let mut cmd = Cmd::lit(format!("{verb}{sep}"));
        cmd.push(&key);
        let flags = self.flags();
        let exptime = self.exptime();
        cmd.push(format!(" {flags} {exptime} {}", value.len()));
        if verb == "cas" {
            cmd.push(" ");
            self.cas_arg(&mut cmd, &key);
        }
        if self.noreply() {
            cmd.push(" noreply");
        }
        let eol = self.eol();
        cmd.push(eol);
        cmd.push(&value);
        cmd.push("\r\n");
        let big = match verb {
            // The result is the old value and this one concatenated.
            "append" | "prepend" => value.iter().any(u8::is_ascii_digit) || arith_unsafe(&value),
            _ => arith_unsafe(&value),
        };
        if big {
            self.maybe_big.insert(key);
        } else if verb == "set" {
            // set always replaces the item (or, too large, removes it).
            self.maybe_big.remove(&key);
        }
        cmd
    }

    fn keys_list(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            if i > 0 {
                out.extend_from_slice(self.sep().as_bytes());
            }
            if self.rng.chance(100) {
                out.extend_from_slice(format!("miss{}", self.rng.below(1000)).as_bytes());
            } else {
                let k = self.key();
                out.extend_from_slice(&k);
                self.batch_reads.insert(k);
            }
        }
        out
    }

    pub(super) fn retrieval(&mut self, verb: &str) -> Cmd {
        let n = if self.rng.chance(600) {
            1
        } else {
            self.rng.range(2, 6)
        };
        let mut cmd = Cmd::lit(format!("{verb} "));
        if verb.starts_with("gat") {
            let e = self.touch_exptime();
            cmd.push(format!("{e} "));
        }
        let keys = self.keys_list(n);
        cmd.push(keys);
        let eol = self.eol();
        cmd.push(eol);
        cmd
    }

    /// A multi-get over many keys (lines stay below 2048 bytes for gat/gats:
    /// memcached only tolerates longer lines for get/gets).
    pub(super) fn big_multiget(&mut self) -> Cmd {
        let verb = *self.rng.pick(&["get", "gets", "gat 0", "gats 3600"]);
        let mut line = format!("{verb} ").into_bytes();
        let n = self.rng.range(20, 100);
        for i in 0..n {
            if i > 0 {
                line.push(b' ');
            }
            let k = if self.rng.chance(300) {
                format!("miss{}", self.rng.below(10_000)).into_bytes()
            } else {
                let i = self.rng.range(0, 12);
                self.keys[i].clone()
            };
            if verb.starts_with("gat") && line.len() + k.len() > 1900 {
                break;
            }
            self.batch_reads.insert(k.clone());
            line.extend_from_slice(&k);
        }
        line.extend_from_slice(b"\r\n");
        Cmd::lit(line)
    }

    pub(super) fn touch_exptime(&mut self) -> String {
        let roll = self.rng.below(1000);
        if roll < 350 {
            "0".into()
        } else if roll < 650 {
            "3600".into()
        } else if roll < 750 {
            (self.now + 7200).to_string()
        } else if roll < 850 {
            "-1".into()
        } else if roll < 900 {
            "2592001".into()
        } else {
            (self.now - 3600).to_string()
        }
    }

    pub(super) fn arith(&mut self, verb: &str) -> Cmd {
        let key = self.arith_key();
        let roll = self.rng.below(1000);
        let delta = if roll < 500 {
            self.rng.range(1, 20).to_string()
        } else if roll < 600 {
            "0".into()
        } else if roll < 700 {
            self.rng.next().to_string()
        } else if roll < 760 {
            "18446744073709551615".into()
        } else if roll < 800 {
            (u64::MAX - 1).to_string()
        } else if roll < 830 {
            "18446744073709551616".into()
        } else if roll < 860 {
            "abc".into()
        } else if roll < 880 {
            "-1".into()
        } else if roll < 900 {
            "1.5".into()
        } else {
            self.rng.range(1, 1000).to_string()
        };
        if verb == "incr" && !matches!(delta.parse::<u64>(), Ok(d) if d < 1 << 32) {
            self.maybe_big.insert(key.clone());
        }
        let mut cmd = Cmd::lit(format!("{verb} "));
        cmd.push(&key);
        cmd.push(format!(" {delta}"));
        if self.noreply() {
            cmd.push(" noreply");
        }
        let eol = self.eol();
        cmd.push(eol);
        cmd
    }

    pub(super) fn delete(&mut self) -> Cmd {
        let key = self.key();
        let suffix = *self
            .rng
            .pick(&["", "", "", "", " noreply", " 0", " 0 noreply", " 5"]);
        let mut cmd = Cmd::lit("delete ");
        cmd.push(&key);
        cmd.push(suffix);
        let eol = self.eol();
        cmd.push(eol);
        cmd
    }

    pub(super) fn touch(&mut self) -> Cmd {
        let key = self.key();
        let e = self.touch_exptime();
        let mut cmd = Cmd::lit("touch ");
        cmd.push(&key);
        cmd.push(format!(" {e}"));
        if self.noreply() {
            cmd.push(" noreply");
        }
        let eol = self.eol();
        cmd.push(eol);
        cmd
    }

    pub(super) fn flush_all(&mut self) -> Cmd {
        // No positive delays: a delayed flush is timing-dependent.
        let line = *self.rng.pick(&[
            "flush_all\r\n",
            "flush_all 0\r\n",
            "flush_all -1\r\n",
            "flush_all noreply\r\n",
            "flush_all 0 noreply\r\n",
            "flush_all abc\r\n",
        ]);
        if !line.contains("abc") {
            self.maybe_big.clear();
            self.binary_keys.clear();
        }
        Cmd::lit(line)
    }

    pub(super) fn verbosity(&mut self) -> Cmd {
        Cmd::lit(*self.rng.pick(&[
            "verbosity 1\r\n",
            "verbosity 0\r\n",
            "verbosity 0 noreply\r\n",
            "verbosity 1 noreply\r\n",
            "verbosity\r\n",
            "verbosity abc\r\n",
        ]))
    }

    /// A line of uppercase letters and digits: `ERROR` wherever it lands.
    fn safe_line(&mut self) -> Vec<u8> {
        let n = self.rng.range(1, 12);
        let mut v = self.rng.safe(n);
        v.extend_from_slice(b"\r\n");
        v
    }

    pub(super) fn malformed(&mut self) -> Cmd {
        let key = self.key();
        // Some of these read keys (conservatively: all of them).
        for k in [key.clone(), b"k0".to_vec(), b"k1".to_vec()] {
            self.batch_reads.insert(k);
        }
        let kind = self.rng.below(8);
        match kind {
            // Bad numbers in a storage line; the data line that follows is
            // not consumed as data by memcached.
            0 => {
                let verb = *self
                    .rng
                    .pick(&["set", "add", "replace", "append", "prepend", "cas"]);
                let n = self.rng.range(1, 10);
                let (flags, exptime, len) = match self.rng.below(9) {
                    0 => ("abc".to_string(), "0".to_string(), n.to_string()),
                    1 => ("-1".into(), "0".into(), n.to_string()),
                    2 => ("0".into(), "x1".into(), n.to_string()),
                    3 => ("0".into(), "0".into(), "abc".into()),
                    4 => ("0".into(), "0".into(), "-1".into()),
                    5 => ("1a".into(), "0".into(), n.to_string()),
                    6 => ("4294967296".into(), "0".into(), n.to_string()),
                    7 => ("0".into(), "99999999999".into(), n.to_string()),
                    _ => ("0".into(), "0".into(), format!("{n}x")),
                };
                let mut cmd = Cmd::lit(format!("{verb} "));
                cmd.push(&key);
                cmd.push(format!(" {flags} {exptime} {len}"));
                if verb == "cas" {
                    cmd.push(
                        *self
                            .rng
                            .pick(&[" abc", " -1", " 1x", " 18446744073709551616"]),
                    );
                }
                if self.noreply() {
                    cmd.push(" noreply");
                }
                cmd.push("\r\n");
                let data = self.rng.safe(n);
                cmd.push(data);
                cmd.push("\r\n");
                cmd
            }
            // Missing arguments / too many arguments.
            1 => {
                let line = *self.rng.pick(&[
                    "set k0 0 0\r\n",
                    "set k0\r\n",
                    "set\r\n",
                    "add k0 0\r\n",
                    "cas k0 0 0 1\r\n",
                    "get\r\n",
                    "gets\r\n",
                    "gat\r\n",
                    "gat 0\r\n",
                    "gats 0\r\n",
                    "incr k0\r\n",
                    "decr\r\n",
                    "touch k0\r\n",
                    "delete\r\n",
                    "incr k0 1 noreply extra\r\n",
                    "delete k0 0 noreply extra\r\n",
                    "touch k0 0 noreply extra\r\n",
                    "set k0 0 0 1 noreply extra\r\n",
                    "flush_all 0 noreply extra\r\n",
                    "verbosity 1 noreply extra\r\n",
                ]);
                let mut cmd = Cmd::lit(line);
                if line.starts_with("set") || line.starts_with("add") || line.starts_with("cas") {
                    let safe = self.safe_line();
                    cmd.push(safe);
                }
                cmd
            }
            // Keys over 250 bytes.
            2 => {
                let long = self.long_key();
                let verb = *self.rng.pick(&[
                    "set", "add", "get", "gets", "gat", "delete", "incr", "touch", "multiget",
                ]);
                match verb {
                    "set" | "add" => {
                        let n = self.rng.range(1, 10);
                        let mut cmd = Cmd::lit(format!("{verb} "));
                        cmd.push(&long);
                        cmd.push(format!(" 0 0 {n}\r\n"));
                        let data = self.rng.safe(n);
                        cmd.push(data);
                        cmd.push("\r\n");
                        cmd
                    }
                    "get" | "gets" | "delete" => {
                        let mut cmd = Cmd::lit(format!("{verb} "));
                        cmd.push(&long);
                        cmd.push("\r\n");
                        cmd
                    }
                    "gat" => {
                        let mut cmd = Cmd::lit("gat 0 ");
                        cmd.push(&long);
                        cmd.push("\r\n");
                        cmd
                    }
                    "incr" => {
                        let mut cmd = Cmd::lit("incr ");
                        cmd.push(&long);
                        cmd.push(" 1\r\n");
                        cmd
                    }
                    "touch" => {
                        let mut cmd = Cmd::lit("touch ");
                        cmd.push(&long);
                        cmd.push(" 0\r\n");
                        cmd
                    }
                    _ => {
                        // A too-long key in the middle of a multi-get.
                        let mut cmd = Cmd::lit("get ");
                        cmd.push(&key);
                        cmd.push(" ");
                        cmd.push(&long);
                        cmd.push(" k1\r\n");
                        cmd
                    }
                }
            }
            // Unknown commands and odd whitespace.
            3 => {
                let line = *self.rng.pick(&[
                    "foo\r\n",
                    "GET k0\r\n",
                    "Set k0 0 0 1\r\n",
                    "sett k0\r\n",
                    "\r\n",
                    "\n",
                    "   \r\n",
                    "get\tk0\r\n",
                    "gets\tk0\r\n",
                    "incr\tk0 1\r\n",
                    " get k0\r\n",
                    "  gets k0 k1\r\n",
                    "get k0 \r\n",
                    "delete k0  \r\n",
                    "\x01\x02\r\n",
                    "bogus command with args\r\n",
                ]);
                Cmd::lit(line)
            }
            // Bad data chunks: the block's two trailer bytes are not CRLF.
            4 | 5 => {
                let verb = *self
                    .rng
                    .pick(&["set", "add", "replace", "append", "prepend", "cas"]);
                let n = self.rng.range(0, 30);
                let mut cmd = Cmd::lit(format!("{verb} "));
                cmd.push(&key);
                cmd.push(format!(" 0 0 {n}"));
                if verb == "cas" {
                    cmd.push(" ");
                    cmd.segs.push(Seg::Cas(key.clone()));
                }
                if self.noreply() {
                    cmd.push(" noreply");
                }
                cmd.push("\r\n");
                let data = self.rng.bytes(n);
                cmd.push(data);
                const TRAILERS: [&[u8]; 6] = [b"XY", b"\nX", b"\rX", b"X\r", b"\n\n", b"\r\r"];
                let trailer = *self.rng.pick(&TRAILERS);
                cmd.push(trailer);
                let tail: &[u8] = if self.rng.chance(500) {
                    b"\r\n"
                } else {
                    b"ZZ\r\n"
                };
                cmd.push(tail);
                cmd
            }
            // Bad numeric arguments elsewhere.
            6 => {
                let line = self.rng.pick(&[
                    "incr {} 99999999999999999999999\r\n",
                    "decr {} 1x\r\n",
                    "incr {} \r\n",
                    "touch {} abc\r\n",
                    "touch {} 99999999999\r\n",
                    "gat abc {}\r\n",
                    "gats -x {}\r\n",
                    "gat 4294967296 {}\r\n",
                    "delete {} noreply 0\r\n",
                    "delete {} 1 noreply\r\n",
                ]);
                let (a, b) = line.split_once("{}").expect("placeholder");
                let mut cmd = Cmd::lit(a);
                cmd.push(&key);
                cmd.push(b);
                cmd
            }
            // Noreply on errors.
            _ => {
                let line = self.rng.pick(&[
                    "incr {} abc noreply\r\n",
                    "decr {} -1 noreply\r\n",
                    "touch {} abc noreply\r\n",
                    "delete {} 5 noreply\r\n",
                    "verbosity abc noreply\r\n",
                    "flush_all abc noreply\r\n",
                ]);
                let line = line.replace("{}", "k3");
                Cmd::lit(line)
            }
        }
    }

    pub(super) fn stats(&mut self) -> Cmd {
        Cmd::lit("stats\r\n")
    }
}

//! Binary protocol differential test: the same binary requests, byte for
//! byte, to memcached 1.6.18 and to memshift over Redis shards; responses
//! must be identical (CAS uniques as one consistent bijection; the body of
//! a Version response is memshift's own).
//!
//! * `differential_binary_stream`: seeded batches (see `gen`), each ended
//!   by a Noop sentinel and written in pieces; a key's CAS in a request is
//!   the one that side last showed for it (or a bogus one).
//! * `differential_binary_script`: fixed cases (too-large values, unknown
//!   opcodes with bodies to swallow, Stat errors, quiet semantics).
//! * `differential_binary_closing`: inputs after which memcached closes
//!   (bad magic, key too long, lengths an opcode does not take, body
//!   shorter than the key, Quit/QuitQ): everything up to the close.
//!
//! Environment: `DIFF_SEED` replays one seed, `DIFF_BINARY_BATCHES`
//! batches per seed (default 400).

mod gen;
mod wire;

use std::collections::HashMap;
use std::time::Duration;

use memshift_tests::Memcached;

use super::runner::{start_sides, start_sides_one_worker, Target};
use gen::Gen;
use wire::{compare, render, CasMap, Conn, Req, Resp};

/// A side's connection and the CAS it last showed per key.
struct Side {
    conn: Conn,
    last_cas: HashMap<Vec<u8>, u64>,
}

impl Side {
    fn new(addr: &str) -> Side {
        Side {
            conn: Conn::connect(addr),
            last_cas: HashMap::new(),
        }
    }

    /// Send `reqs` (pieces cut at `cuts`) and read up to `sentinel`'s
    /// response.
    fn exchange(
        &mut self,
        reqs: &[Req],
        cuts: &[usize],
        sentinel: u32,
    ) -> Result<Vec<Resp>, (Vec<Resp>, String)> {
        let mut bytes = Vec::new();
        for r in reqs {
            bytes.extend_from_slice(&r.encode(&self.last_cas));
        }
        if let Err(e) = self.conn.send_in_pieces(&bytes, cuts) {
            return Err((Vec::new(), format!("send: {e}")));
        }
        let resps = self.conn.read_until(sentinel)?;
        // Remember each key's latest unique.
        let keys: HashMap<u32, &Req> = reqs.iter().map(|r| (r.opaque, r)).collect();
        for resp in &resps {
            let Some(req) = keys.get(&resp.opaque) else {
                continue;
            };
            if resp.status == 0 && resp.cas != 0 && !req.key.is_empty() {
                self.last_cas.insert(req.key.clone(), resp.cas);
            }
        }
        Ok(resps)
    }
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("DIFF_SEED") {
        let s = s.trim();
        let seed = match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        };
        return vec![seed.unwrap_or_else(|| panic!("DIFF_SEED={s:?} is not a number"))];
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    vec![0x6269_6e61_7279, super::generator::splitmix(nanos)]
}

fn sentinel(opaque: u32) -> Req {
    let mut noop = Req::new(0x0a, b"", b"", b"");
    noop.opaque = opaque;
    noop
}

#[test]
fn differential_binary_stream() {
    let Some((reference, target)) = start_sides("differential_binary_stream") else {
        return;
    };
    run_stream("differential_binary_stream", &reference, &target);
}

/// The generated stream against memshift with one worker thread (tokio's
/// current-thread scheduler).
#[test]
fn differential_binary_stream_one_worker() {
    let test = "differential_binary_stream_one_worker";
    let Some((reference, target)) = start_sides_one_worker(test) else {
        return;
    };
    run_stream(test, &reference, &target);
}

fn run_stream(test: &str, reference: &Memcached, target: &Target) {
    let batches: usize = std::env::var("DIFF_BINARY_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    for seed in seeds() {
        eprintln!("{test}: seed {seed:#x} (replay: DIFF_SEED={seed:#x})");
        let mut gen = Gen::new(seed);
        let mut r = Side::new(&reference.addr());
        let mut t = Side::new(&target.addr());
        let mut cas = CasMap::default();
        let mut compared = 0;
        // Start both sides empty.
        let mut reqs = vec![Req::new(0x08, b"", b"", b"")];
        reqs[0].opaque = gen.opaque();
        for batch in 0..=batches {
            let end = gen.opaque();
            reqs.push(sentinel(end));
            let len: usize = reqs
                .iter()
                .map(|q| 24 + q.key.len() + q.extras.len() + q.value.len())
                .sum();
            let cuts: Vec<usize> = (0..gen.below(3))
                .map(|_| gen.below(len as u64) as usize)
                .collect();
            let mut cuts_sorted = cuts.clone();
            cuts_sorted.sort_unstable();
            let r_resps = r
                .exchange(&reqs, &cuts_sorted, end)
                .unwrap_or_else(|(got, e)| {
                    panic!("reference failed in batch {batch}: {e}\n{}", render(&got))
                });
            let t_resps = t.exchange(&reqs, &cuts_sorted, end);
            let verdict = match &t_resps {
                Ok(t_resps) => compare(&mut cas, &r_resps, t_resps),
                Err((_, e)) => Err((0, format!("target failed: {e}"))),
            };
            if let Err((unit, why)) = verdict {
                let sent: String = reqs
                    .iter()
                    .map(|q| format!("      {}\n", q.describe()))
                    .collect();
                let got = match &t_resps {
                    Ok(x) | Err((x, _)) => render(x),
                };
                panic!(
                    "DIFFERENCE (seed {seed:#x}; replay: DIFF_SEED={seed:#x}) in batch {batch}: {why}, \
                     first differing response [{unit}]\n  sent:\n{sent}  reference memcached:\n{}  memshift:\n{got}{}",
                    render(&r_resps),
                    super::runner::tail(&target.diagnostics(), 3000)
                );
            }
            compared += r_resps.len();
            reqs = gen.batch();
        }
        eprintln!("{test}: seed {seed:#x}: {compared} responses identical");
        assert!(compared > batches, "too few responses compared");
    }
}

/// Fixed cases: name and requests (a Noop sentinel is added).
fn script() -> Vec<(&'static str, Vec<Req>)> {
    let set = |key: &[u8], flags: u32, value: &[u8]| {
        let mut extras = flags.to_be_bytes().to_vec();
        extras.extend_from_slice(&0u32.to_be_bytes());
        Req::new(0x01, key, &extras, value)
    };
    let big = vec![b'x'; super::MAX_ITEM + 100];
    let mut too_large_setq = set(b"big", 0, &big);
    too_large_setq.opcode = 0x11;
    // memcached discards the body length *after* the key: 5 bytes here.
    let mut unknown_with_body = Req::new(0x55, b"kk", b"", b"vvvxx");
    unknown_with_body.body_len = Some(5);
    // Body 4 (the extras), discarded after them: 4 more bytes.
    let mut verbosity = Req::new(0x1b, b"", &1u32.to_be_bytes(), &[0, 0, 0, 0]);
    verbosity.body_len = Some(4);
    vec![
        (
            "set then every get kind",
            vec![
                set(b"k", 5, b"value"),
                Req::new(0x00, b"k", b"", b""),
                Req::new(0x09, b"k", b"", b""),
                Req::new(0x0c, b"k", b"", b""),
                Req::new(0x0d, b"k", b"", b""),
                Req::new(0x1d, b"k", &0u32.to_be_bytes(), b""),
                Req::new(0x24, b"k", &0u32.to_be_bytes(), b""),
                Req::new(0x1c, b"k", &0u32.to_be_bytes(), b""),
            ],
        ),
        (
            "quiet misses say nothing",
            vec![
                Req::new(0x09, b"missing", b"", b""),
                Req::new(0x0d, b"missing", b"", b""),
                Req::new(0x1e, b"missing", &0u32.to_be_bytes(), b""),
                Req::new(0x0c, b"missing", b"", b""),
                Req::new(0x14, b"missing", b"", b""),
            ],
        ),
        (
            "too large set drops the old item",
            vec![
                set(b"big", 0, b"old"),
                set(b"big", 0, &big),
                Req::new(0x00, b"big", b"", b""),
            ],
        ),
        (
            "too large quiet set",
            vec![too_large_setq, Req::new(0x00, b"big", b"", b"")],
        ),
        (
            "unknown opcode swallows its body after the key",
            vec![unknown_with_body, Req::new(0x0b, b"", b"", b"")],
        ),
        ("verbosity is unknown in 1.6.18", vec![verbosity]),
        (
            "stat of an unknown group",
            vec![Req::new(0x10, b"bogus", b"", b"")],
        ),
        (
            "counters",
            vec![
                Req::new(
                    0x05,
                    b"n",
                    &[0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0],
                    b"",
                ),
                Req::new(
                    0x05,
                    b"n",
                    &[0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0],
                    b"",
                ),
                Req::new(
                    0x06,
                    b"n",
                    &[0, 0, 0, 0, 0, 0, 0, 50, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 0],
                    b"",
                ),
                Req::new(
                    0x06,
                    b"nope",
                    &[
                        0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 255, 255, 255, 255,
                    ],
                    b"",
                ),
                set(b"text", 0, b"abc"),
                Req::new(
                    0x05,
                    b"text",
                    &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
                    b"",
                ),
            ],
        ),
        (
            "append and prepend",
            vec![
                Req::new(0x0e, b"cat", b"", b"tail"),
                set(b"cat", 3, b"mid"),
                Req::new(0x0e, b"cat", b"", b"-tail"),
                Req::new(0x0f, b"cat", b"", b"head-"),
                Req::new(0x00, b"cat", b"", b""),
            ],
        ),
        (
            "add and replace refusals",
            vec![
                Req::new(0x03, b"fresh", &[0; 8], b"x"),
                Req::new(0x02, b"fresh", &[0; 8], b"x"),
                Req::new(0x02, b"fresh", &[0; 8], b"y"),
                Req::new(0x12, b"fresh", &[0; 8], b"y"),
            ],
        ),
        (
            "flush",
            vec![
                set(b"f", 0, b"1"),
                Req::new(0x18, b"", b"", b""),
                Req::new(0x00, b"f", b"", b""),
                Req::new(0x08, b"", &0u32.to_be_bytes(), b""),
            ],
        ),
    ]
}

#[test]
fn differential_binary_script() {
    let Some((reference, target)) = start_sides("differential_binary_script") else {
        return;
    };
    let mut diffs = Vec::new();
    let mut opaque = 1u32;
    for (name, mut reqs) in script() {
        for q in reqs.iter_mut() {
            opaque += 1;
            q.opaque = opaque;
        }
        opaque += 1;
        reqs.push(sentinel(opaque));
        // Fresh connections and CAS mapping per case.
        let mut r = Side::new(&reference.addr());
        let mut t = Side::new(&target.addr());
        let mut cas = CasMap::default();
        let r_resps = r
            .exchange(&reqs, &[], opaque)
            .unwrap_or_else(|(got, e)| panic!("{name}: reference failed: {e}\n{}", render(&got)));
        let t_resps = t.exchange(&reqs, &[], opaque);
        let verdict = match &t_resps {
            Ok(x) => compare(&mut cas, &r_resps, x),
            Err((_, e)) => Err((0, format!("target failed: {e}"))),
        };
        if let Err((unit, why)) = verdict {
            let got = match &t_resps {
                Ok(x) | Err((x, _)) => render(x),
            };
            diffs.push(format!(
                "{name}: {why} at [{unit}]\n  reference:\n{}  memshift:\n{got}",
                render(&r_resps)
            ));
        }
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn differential_binary_closing() {
    let Some((reference, target)) = start_sides("differential_binary_closing") else {
        return;
    };
    let noop = || {
        let mut n = Req::new(0x0a, b"", b"", b"");
        n.opaque = 7;
        n
    };
    let mut bad_magic = noop();
    bad_magic.magic = 0x81;
    let mut short_body = Req::new(0x00, b"abc", b"", b"");
    short_body.body_len = Some(1);
    let cases: Vec<(&str, Vec<Req>)> = vec![
        ("bad magic after a binary request", vec![noop(), bad_magic]),
        (
            "key longer than 250",
            vec![noop(), Req::new(0x00, &[b'k'; 251], b"", b""), noop()],
        ),
        (
            "version with a key",
            vec![Req::new(0x0b, b"k", b"", b""), noop()],
        ),
        (
            "get with extras",
            vec![Req::new(0x00, b"k", b"xx", b""), noop()],
        ),
        (
            "incr without expiration",
            vec![Req::new(0x05, b"c", &[0; 16], b""), noop()],
        ),
        (
            "set with short extras",
            vec![Req::new(0x01, b"k", &[0; 4], b"v"), noop()],
        ),
        ("body shorter than the key", vec![short_body, noop()]),
        (
            "quit answers then closes",
            vec![Req::new(0x07, b"", b"", b""), noop()],
        ),
        (
            "quietq closes silently",
            vec![noop(), Req::new(0x17, b"", b"", b""), noop()],
        ),
        (
            "touch without extras",
            vec![Req::new(0x1c, b"k", b"", b""), noop()],
        ),
    ];
    let mut diffs = Vec::new();
    for (name, reqs) in cases {
        let bytes: Vec<u8> = reqs
            .iter()
            .flat_map(|q| q.encode(&HashMap::new()))
            .collect();
        let run = |addr: &str| {
            let mut c = Conn::connect(addr);
            c.send_in_pieces(&bytes, &[]).expect("send");
            c.read_to_end(Duration::from_secs(10))
        };
        let (r_resps, r_rest, r_closed) = run(&reference.addr());
        let (t_resps, t_rest, t_closed) = run(&target.addr());
        let mut cas = CasMap::default();
        let verdict = compare(&mut cas, &r_resps, &t_resps).err();
        if verdict.is_some() || r_rest != t_rest || r_closed != t_closed {
            diffs.push(format!(
                "{name}: {verdict:?}, closed {r_closed} vs {t_closed}, trailing {:?} vs {:?}\n  reference:\n{}  memshift:\n{}",
                r_rest,
                t_rest,
                render(&r_resps),
                render(&t_resps)
            ));
        }
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

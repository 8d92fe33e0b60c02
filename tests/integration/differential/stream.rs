//! The seeded random stream: batches from `generator`, sent to both sides,
//! with a per-batch audit of the whole key space.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use memshift_tests::{escape, Memcached, Unit};

use super::cmd::Cmd;
use super::generator::{splitmix, Gen};
use super::normalise::{normalize, CasMap, Norm};
use super::runner::{
    assert_near_cache_served, exchange, render_units, start_sides, start_sides_one_worker,
    start_sides_over_unix_socket, start_sides_with, Side, Target,
};

/// The fixed seed every run starts with ("memshift").
const FIXED_SEED: u64 = 0x6d65_6d73_6869_6674;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn parse_seed(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("DIFF_SEED") {
        let seed = parse_seed(&s).unwrap_or_else(|| panic!("DIFF_SEED={s:?} is not a number"));
        return vec![seed];
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let random = splitmix(nanos ^ (u64::from(std::process::id()) << 32));
    vec![FIXED_SEED, random]
}

struct Outcome {
    commands: usize,
    batches: usize,
    diffs: Vec<String>,
}

/// `gets` of every key of the key space, with the sentinel.
fn audit_request(gen: &Gen) -> Vec<u8> {
    let mut req = b"gets".to_vec();
    for k in &gen.keys {
        req.push(b' ');
        req.extend_from_slice(k);
    }
    req.extend_from_slice(b"\r\nversion\r\n");
    req
}

/// After a difference: which stored items differ now (values and flags; CAS
/// uniques ignored).
fn post_mortem(r: &mut Side, t: &mut Side, audit_req: &[u8]) -> String {
    let read = |side: &mut Side| -> Option<HashMap<Vec<u8>, Vec<u8>>> {
        side.conn.send(audit_req).ok()?;
        let units = side.read_batch(false).ok()?;
        Some(
            normalize(&units)
                .into_iter()
                .zip(units.iter())
                .filter_map(|(n, u)| match (n, u) {
                    (
                        Norm::Value {
                            header_without_cas,
                            block,
                            ..
                        },
                        Unit::Value { key, .. },
                    ) => {
                        let mut v = header_without_cas;
                        v.extend_from_slice(b" | ");
                        v.extend_from_slice(&block);
                        Some((key.clone(), v))
                    }
                    _ => None,
                })
                .collect(),
        )
    };
    let (Some(rs), Some(ts)) = (read(r), read(t)) else {
        return "  (no post-mortem: a side did not answer gets of the key space)\n".into();
    };
    let mut keys: Vec<&Vec<u8>> = rs.keys().chain(ts.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = String::new();
    for k in keys {
        let (a, b) = (rs.get(k), ts.get(k));
        if a != b {
            let show = |v: Option<&Vec<u8>>| v.map_or("(miss)".to_string(), |v| escape(v, 120));
            let _ = writeln!(
                out,
                "      {}: reference {} / target {}",
                escape(k, 40),
                show(a),
                show(b)
            );
        }
    }
    if out.is_empty() {
        "  stored items after the batch: identical\n".into()
    } else {
        format!("  stored items that differ after the batch:\n{out}")
    }
}

fn run_seed(seed: u64, reference: &Memcached, target: &Target) -> Outcome {
    let n_commands = env_usize("DIFF_COMMANDS", 5000);
    let max_diffs = env_usize("DIFF_MAX_DIFFS", 1).max(1);
    // After every batch, compare the whole key space too, so a difference
    // that a reply does not show (noreply, or a stored value) is pinned to
    // the batch that caused it.
    let audit = env_usize("DIFF_AUDIT", 1) != 0;
    // DIFF_TRACE=<text>: print every batch whose commands contain <text>
    // (`*`: every batch).
    let trace = std::env::var("DIFF_TRACE").ok().filter(|s| !s.is_empty());
    let mut gen = Gen::new(seed);
    let audit_req = audit_request(&gen);
    let mut r = Side::connect("reference memcached", &reference.addr());
    let mut t = Side::connect(target.name(), &target.addr());
    let mut cas = CasMap::default();
    let mut out = Outcome {
        commands: 0,
        batches: 0,
        diffs: Vec::new(),
    };
    // Both start empty.
    for side in [&mut r, &mut t] {
        let reply = side.conn.request(b"flush_all\r\n").expect("flush_all");
        assert_eq!(reply, b"OK\r\n", "{}: flush_all at start", side.name);
    }

    let started = std::time::Instant::now();
    let deadline = Duration::from_secs(env_usize("DIFF_DEADLINE_S", 600) as u64);
    while out.commands < n_commands {
        assert!(
            started.elapsed() < deadline,
            "seed {seed:#x}: still running after {deadline:?} ({} commands done): \
             is the target very slow? (DIFF_DEADLINE_S raises the limit)",
            out.commands
        );
        let batch = gen.batch();
        let first = out.commands;
        out.commands += batch.len();
        out.batches += 1;

        let mut rb = Vec::new();
        let mut tb = Vec::new();
        for cmd in &batch {
            rb.extend_from_slice(&cmd.render(&r.last_cas));
            tb.extend_from_slice(&cmd.render(&t.last_cas));
        }
        rb.extend_from_slice(b"version\r\n");
        tb.extend_from_slice(b"version\r\n");
        let mut result = exchange(&mut r, &mut t, &mut cas, &rb, &tb, true).map_err(|m| (m, ""));
        if let (Some(needle), Ok((ru, tu))) = (&trace, &result) {
            if needle == "*" || batch.iter().any(|c| c.describe().contains(needle.as_str())) {
                eprintln!(
                    "trace: batch {} (commands #{first}..):\n{}  reference:\n{}  target:\n{}",
                    out.batches,
                    describe_batch(&batch, first),
                    render_units(ru),
                    render_units(tu)
                );
            }
        }
        if result.is_ok() && audit {
            result =
                exchange(&mut r, &mut t, &mut cas, &audit_req, &audit_req, false).map_err(|m| {
                    (
                    m,
                    " -- the batch's replies were identical, but the stored items differ after it \
                     (audit: gets of the whole key space)",
                )
                });
        }
        let Err((m, context)) = result.map(|_| ()) else {
            continue;
        };
        if m.reference_failed {
            panic!(
                "generator bug: the reference memcached did not answer batch {} up to its sentinel ({}).\n\
                 seed {seed:#x}\ncommands:\n{}got:\n{}",
                out.batches,
                m.why,
                describe_batch(&batch, first),
                render_units(&m.r_units)
            );
        }
        let post_mortem = if context.is_empty() {
            post_mortem(&mut r, &mut t, &audit_req)
        } else {
            String::new()
        };
        let report = format!(
            "DIFFERENCE (seed {seed:#x}; replay: DIFF_SEED={seed:#x}) in batch {} (commands #{}..#{}){context}, \
             first differing reply unit [{}]: {}\n  commands{}:\n{}  reference memcached replied:\n{}  {} replied:\n{}",
            out.batches,
            first,
            first + batch.len() - 1,
            m.unit,
            m.why,
            if batch.len() == 1 { "" } else { " (pipelined)" },
            describe_batch(&batch, first),
            render_units(&m.r_units),
            target.name(),
            render_units(&m.t_units),
        ) + &post_mortem;
        eprintln!("{report}");
        out.diffs.push(report);
        if out.diffs.len() >= max_diffs {
            break;
        }
        // Resynchronise: fresh connections, empty caches.
        r.reconnect();
        t.reconnect();
        cas = CasMap::default();
        for side in [&mut r, &mut t] {
            let _ = side.conn.request(b"flush_all\r\n");
        }
    }
    out
}

fn describe_batch(batch: &[Cmd], first: usize) -> String {
    let mut s = String::new();
    for (i, c) in batch.iter().enumerate() {
        let _ = writeln!(s, "      #{} {}", first + i, c.describe());
    }
    s
}

#[test]
fn differential_stream() {
    let Some((reference, target)) = start_sides("differential_stream") else {
        return;
    };
    run_stream(&reference, &target);
}

/// The generated stream against memshift with the near cache on, every
/// read admitted (`DIFF_NEAR_CACHE=1` does the same for `differential_stream`).
#[test]
fn differential_stream_near_cache() {
    let Some((reference, target)) = start_sides_with("differential_stream_near_cache", true) else {
        return;
    };
    run_stream(&reference, &target);
    assert_near_cache_served(&target);
}

/// The generated stream with memshift's clients on a unix socket
/// (`listen = "unix:/path"`): byte for byte what memcached answers over TCP.
#[test]
fn differential_stream_unix_socket() {
    let Some((reference, target)) = start_sides_over_unix_socket("differential_stream_unix_socket")
    else {
        return;
    };
    assert!(target.addr().starts_with("unix:") || target.name() != "memshift");
    run_stream(&reference, &target);
}

/// The generated stream against memshift with one worker thread (tokio's
/// current-thread scheduler).
#[test]
fn differential_stream_one_worker() {
    let Some((reference, target)) = start_sides_one_worker("differential_stream_one_worker") else {
        return;
    };
    let log = target.diagnostics();
    assert!(
        log.contains("worker_pool=false") || target.name() != "memshift",
        "memshift with threads = 1 runs on its main thread alone:\n{log}"
    );
    run_stream(&reference, &target);
}

fn run_stream(reference: &Memcached, target: &Target) {
    let seeds = seeds();
    eprintln!(
        "differential: target {}, seeds {} (replay one with DIFF_SEED=<seed>)",
        target.name(),
        seeds
            .iter()
            .map(|s| format!("{s:#x}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut failures = Vec::new();
    for seed in seeds {
        let outcome = run_seed(seed, reference, target);
        eprintln!(
            "differential: seed {seed:#x}: {} commands in {} batches, {} difference(s)",
            outcome.commands,
            outcome.batches,
            outcome.diffs.len()
        );
        failures.extend(outcome.diffs);
    }
    if !failures.is_empty() {
        panic!(
            "{} difference(s) between memcached and {}:\n\n{}\n{} log (tail):\n{}",
            failures.len(),
            target.name(),
            failures.join("\n"),
            target.name(),
            target.diagnostics()
        );
    }
}

//! Timed sequences: the same steps, with the same waits between them, on
//! memcached and memshift (delayed `flush_all`: one deadline, replaced by
//! every later `flush_all`; delays above 30 days are Unix times).
//!
//! memcached's clock ticks in whole seconds, so a delayed flush takes effect
//! up to a second early; every wait here stays at least a second clear of a
//! deadline on both sides.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use memshift_tests::escape;

use super::normalise::CasMap;
use super::runner::{exchange, render_units, start_sides, Side};

/// (what, bytes, wait after it in ms)
type Step = (String, Vec<u8>, u64);

fn step(what: &str, bytes: &[u8], wait_ms: u64) -> Step {
    (what.to_string(), bytes.to_vec(), wait_ms)
}

fn run_timed(test: &str, name: &str, steps: &[Step]) {
    let Some((reference, target)) = start_sides(test) else {
        return;
    };
    let mut r = Side::connect("reference memcached", &reference.addr());
    let mut t = Side::connect(target.name(), &target.addr());
    let mut cas = CasMap::default();
    for (what, bytes, wait_ms) in steps {
        let mut req = bytes.clone();
        req.extend_from_slice(b"version\r\n");
        if let Err(m) = exchange(&mut r, &mut t, &mut cas, &req, &req, false) {
            panic!(
                "{name}, step {what:?}: {}, first differing reply unit [{}]\n  sent: {}\n  reference memcached replied:\n{}  {} replied:\n{}\n{}",
                m.why,
                m.unit,
                escape(bytes, 400),
                render_units(&m.r_units),
                target.name(),
                render_units(&m.t_units),
                target.diagnostics()
            );
        }
        std::thread::sleep(Duration::from_millis(*wait_ms));
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[test]
fn differential_flush_all_replaced_by_an_immediate_one_never_fires() {
    run_timed(
        "differential_flush_all_replaced_by_an_immediate_one_never_fires",
        "flush_all 2 then flush_all",
        &[
            step(
                "flush_all 2, flush_all, set p1",
                b"flush_all 2\r\nflush_all\r\nset p1 0 0 1\r\nx\r\n",
                3300,
            ),
            step("get p1 past the replaced deadline", b"get p1\r\n", 0),
        ],
    );
}

#[test]
fn differential_flush_all_replaced_by_a_shorter_one_fires_once() {
    run_timed(
        "differential_flush_all_replaced_by_a_shorter_one_fires_once",
        "flush_all 4 then flush_all 1",
        &[
            step("set p0", b"set p0 0 0 1\r\nw\r\n", 0),
            // flush_all 1 is immediate in memcached (its deadline is one
            // tick before the delay's end) and replaces the 4 s deadline.
            step(
                "flush_all 4, flush_all 1, get p0, set p2",
                b"flush_all 4\r\nflush_all 1\r\nget p0\r\nset p2 0 0 1\r\ny\r\n",
                5000,
            ),
            step("get p2 past the replaced deadline", b"get p2\r\n", 0),
        ],
    );
}

#[test]
fn differential_delayed_flush_all_flushes_what_was_stored_before_it() {
    run_timed(
        "differential_delayed_flush_all_flushes_what_was_stored_before_it",
        "flush_all 2",
        &[
            step(
                "set a, flush_all 2, get a",
                b"set a 0 0 1\r\n1\r\nflush_all 2\r\nget a\r\n",
                3500,
            ),
            step(
                "after the deadline: set b, get a b",
                b"set b 0 0 1\r\n2\r\nget a b\r\n",
                0,
            ),
        ],
    );
}

#[test]
fn differential_flush_all_with_a_unix_time() {
    let soon = unix_now() + 3;
    run_timed(
        "differential_flush_all_with_a_unix_time",
        "flush_all <Unix time>",
        &[
            // Above 30 days a delay is a Unix time: one in 1970 is past (now).
            step(
                "set p5, flush_all 2592001, get p5",
                b"set p5 0 0 1\r\nz\r\nflush_all 2592001\r\nget p5\r\n",
                0,
            ),
            step(
                "flush_all -1 is now",
                b"set p6 0 0 1\r\nz\r\nflush_all -1\r\nget p6\r\n",
                0,
            ),
            step(
                "set p3, flush_all <now+3>, get p3",
                format!("set p3 0 0 1\r\nq\r\nflush_all {soon}\r\nget p3\r\n").as_bytes(),
                5000,
            ),
            step(
                "get p3 past the Unix deadline, set p4, get p4",
                b"get p3\r\nset p4 0 0 1\r\nr\r\nget p4\r\n",
                0,
            ),
        ],
    );
}

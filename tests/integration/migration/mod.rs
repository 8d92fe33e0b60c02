//! The migration off a legacy memcached pool (issue 4), end to end with real
//! `memcached`, `redis-server` and `memshift` processes. Every backend is
//! checked directly: memcached with `mg <key> v f t`, Redis with `GET`/`TTL`
//! and memshift's 13-byte item header.
//!
//! - `phases`: each phase answers from the right backend and shadows every
//!   write (set/add/replace/append/prepend/cas/incr/decr/touch/delete) to the
//!   other one; per-backend hit/miss metrics in warmup and cutover;
//! - `legacy_app`: pymemcache's HashClient talking straight to the pool
//!   reads what memshift wrote (cutover) and vice versa (warmup);
//! - `shadow_down`: the shadow memcached dies under load; the breaker opens,
//!   drops are counted, then it closes again after a restart;
//! - `canary`: the 20% split is `is_canary`, stable over restarts and
//!   proxies; automatic rollback to warmup;
//! - `backfill`: a memcached-only key is served and copied with its flags
//!   and remaining TTL (canary, then cutover after a SIGHUP);
//! - `compare`: `memshift_compare_total{result}`;
//! - `read_errors`: a failed Redis read in cutover is a miss, not a backfill;
//!   a failed legacy read (phase memcached) stays a `SERVER_ERROR`;
//! - `bulk_copy`: `memshift copy` of 100,000 items, progress, `--verify`.

mod backfill;
mod bulk_copy;
mod canary;
mod compare;
mod legacy_app;
mod meta;
mod phases;
mod read_errors;
mod shadow_down;

use std::time::Duration;

use memshift_tests::migration_support::{wait_for, MigrationSetup};
use memshift_tests::{escape, require_tools, McClient, Unit};

/// How long a shadow write may take to show up on a loaded machine.
pub const SHADOW_DEADLINE: Duration = Duration::from_secs(15);

/// Both servers must be installed (skip locally, fail in CI).
pub fn tools(test: &str) -> bool {
    require_tools(test, &["redis-server", "memcached"])
}

/// A storage backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Redis,
    Memcached,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::Redis => Side::Memcached,
            Side::Memcached => Side::Redis,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Side::Redis => "redis",
            Side::Memcached => "memcached",
        }
    }
}

/// One key's state on one backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub flags: u32,
    pub data: Vec<u8>,
    /// Remaining seconds, -1 without expiry.
    pub ttl: i64,
}

impl State {
    pub fn show(s: &Option<State>) -> String {
        match s {
            None => "absent".into(),
            Some(s) => format!(
                "{:?} flags {} ttl {}",
                String::from_utf8_lossy(&s.data),
                s.flags,
                s.ttl
            ),
        }
    }
}

/// `key` as `side` holds it, read directly.
pub fn state(setup: &MigrationSetup, side: Side, key: &str) -> Option<State> {
    match side {
        Side::Redis => setup.redis_item(key).map(|i| State {
            flags: i.flags,
            data: i.data,
            ttl: i.ttl,
        }),
        Side::Memcached => setup.mc_item(key).map(|i| State {
            flags: i.flags,
            data: i.data,
            ttl: i.ttl,
        }),
    }
}

/// What a key should look like: value, flags, and a TTL (`-1`: none;
/// otherwise within `TTL_SLACK` seconds below `ttl`).
#[derive(Debug, Clone)]
pub struct Want {
    pub data: &'static str,
    pub flags: u32,
    pub ttl: i64,
}

/// A remaining TTL may be this much lower than the exptime that was set
/// (the time the write took to get there, rounding).
pub const TTL_SLACK: i64 = 3;

impl Want {
    pub fn new(data: &'static str, flags: u32, ttl: i64) -> Want {
        Want { data, flags, ttl }
    }

    pub fn matches(&self, s: &Option<State>) -> bool {
        match s {
            None => false,
            Some(s) => {
                s.data == self.data.as_bytes()
                    && s.flags == self.flags
                    && if self.ttl < 0 {
                        s.ttl == -1
                    } else {
                        // memcached's clock ticks once a second: its TTL
                        // can read one second over an absolute deadline.
                        s.ttl <= self.ttl + 1 && s.ttl >= self.ttl - TTL_SLACK
                    }
            }
        }
    }
}

/// Asserts `side` holds `key` as `want` now.
pub fn assert_state(setup: &MigrationSetup, side: Side, key: &str, want: &Want, what: &str) {
    let got = state(setup, side, key);
    assert!(
        want.matches(&got),
        "{what}: {key} on {}: want {want:?}, got {}",
        side.label(),
        State::show(&got)
    );
}

/// Polls until `side` holds `key` as `want`.
pub fn wait_state(setup: &MigrationSetup, side: Side, key: &str, want: &Want, what: &str) {
    wait_for(
        &format!("{what}: {key} on {} to be {want:?}", side.label()),
        SHADOW_DEADLINE,
        |last| {
            let got = state(setup, side, key);
            *last = State::show(&got);
            want.matches(&got).then_some(())
        },
    );
}

/// Polls until `key` is gone from `side`.
pub fn wait_absent(setup: &MigrationSetup, side: Side, key: &str, what: &str) {
    wait_for(
        &format!("{what}: {key} gone from {}", side.label()),
        SHADOW_DEADLINE,
        |last| {
            let got = state(setup, side, key);
            *last = State::show(&got);
            got.is_none().then_some(())
        },
    );
}

/// Sends one request through memshift and returns the reply as a string.
pub fn req(c: &mut McClient, request: &str) -> String {
    c.request_str(request.as_bytes())
        .unwrap_or_else(|e| panic!("{}: {e}", escape(request.as_bytes(), 100)))
}

/// A storage command line and its data.
pub fn storage(cmd: &str, key: &str, flags: u32, exptime: i64, data: &str) -> String {
    format!("{cmd} {key} {flags} {exptime} {}\r\n{data}\r\n", data.len())
}

/// `gets key` through memshift: (data, flags, cas unique).
pub fn gets(c: &mut McClient, key: &str) -> Option<(Vec<u8>, u32, u64)> {
    c.send(format!("gets {key}\r\n").as_bytes())
        .expect("send gets");
    let units = c.read_reply().expect("gets reply");
    match units.as_slice() {
        [Unit::Line(l)] if l == b"END\r\n" => None,
        [v @ Unit::Value { flags, cas, .. }, end] if end.is_line(b"END\r\n") => Some((
            v.data().unwrap_or_default().to_vec(),
            String::from_utf8_lossy(flags).parse().expect("flags"),
            cas.expect("gets returns a CAS unique"),
        )),
        other => panic!(
            "gets {key}: unexpected reply {}",
            escape(&other.iter().flat_map(Unit::raw).collect::<Vec<u8>>(), 200)
        ),
    }
}

/// `get key` through memshift: (data, flags).
pub fn get(c: &mut McClient, key: &str) -> Option<(Vec<u8>, u32)> {
    c.send(format!("get {key}\r\n").as_bytes())
        .expect("send get");
    let units = c.read_reply().expect("get reply");
    match units.as_slice() {
        [Unit::Line(l)] if l == b"END\r\n" => None,
        [v @ Unit::Value {
            flags, cas: None, ..
        }, end]
            if end.is_line(b"END\r\n") =>
        {
            Some((
                v.data().unwrap_or_default().to_vec(),
                String::from_utf8_lossy(flags).parse().expect("flags"),
            ))
        }
        other => panic!(
            "get {key}: unexpected reply {}",
            escape(&other.iter().flat_map(Unit::raw).collect::<Vec<u8>>(), 200)
        ),
    }
}

/// A key whose canary membership at `pct` is `canary`: `prefix` plus the
/// first suffix that gives it.
pub fn key_with_split(prefix: &str, pct: f64, canary: bool) -> String {
    (0..100_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| memshift_shadow::canary::is_canary(k.as_bytes(), pct) == canary)
        .expect("a key on each side of the split")
}

/// Seconds since the epoch, as memcached exptimes count them.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

//! Each phase end to end: the primary answers, the shadow gets the resulting
//! state of every write (or a delete when memshift does not know it: append,
//! prepend, incr, decr), never a stale value; refused writes change nothing.
//! Per-backend hit/miss metrics in warmup (memcached) and cutover (redis).

use std::cell::Cell;

use memshift_tests::migration_support::{MigrationOptions, MigrationSetup};
use memshift_tests::McClient;

use super::*;

/// Where one key's requests go in the phase under test.
struct Route {
    primary: Side,
    shadow: Option<Side>,
}

/// Runs the whole write sequence for keys named by `key(base)`, all of
/// which route as `route`.
struct Exercise<'a> {
    setup: &'a MigrationSetup,
    route: Route,
    key: &'a dyn Fn(&str) -> String,
    phase: &'a str,
    barriers: Cell<u32>,
}

impl Exercise<'_> {
    fn what(&self, step: &str) -> String {
        format!(
            "phase {} (primary {}, shadow {}): {step}",
            self.phase,
            self.route.primary.label(),
            self.route.shadow.map_or("none", Side::label)
        )
    }

    /// The primary holds `key` as `want` now; the shadow (if any) gets there.
    fn both(&self, key: &str, want: &Want, step: &str) {
        assert_state(self.setup, self.route.primary, key, want, &self.what(step));
        if let Some(shadow) = self.route.shadow {
            wait_state(self.setup, shadow, key, want, &self.what(step));
        }
    }

    /// A write through memshift whose shadow effect has landed: later
    /// shadow checks see everything queued before it.
    fn barrier(&self, c: &mut McClient) {
        let Some(shadow) = self.route.shadow else {
            return;
        };
        let n = self.barriers.get();
        self.barriers.set(n + 1);
        let key = (self.key)(&format!("barrier{n}"));
        assert_eq!(
            req(c, &storage("set", &key, 0, 0, "b")),
            "STORED\r\n",
            "{}",
            self.what("barrier set")
        );
        wait_state(
            self.setup,
            shadow,
            &key,
            &Want::new("b", 0, -1),
            &self.what("barrier"),
        );
    }

    /// After a write whose result memshift does not hold (append, incr...),
    /// the shadow must lose `stale`: it ends up absent, or equal to the
    /// primary's new state, never the old value.
    fn shadow_not_stale(&self, key: &str, stale: &Want, fresh: &Want, step: &str) {
        let Some(shadow) = self.route.shadow else {
            return;
        };
        wait_for(
            &format!(
                "{}: {key} on the shadow no longer {stale:?}",
                self.what(step)
            ),
            SHADOW_DEADLINE,
            |last| {
                let got = state(self.setup, shadow, key);
                *last = State::show(&got);
                (!stale.matches(&got)).then_some(())
            },
        );
        let got = state(self.setup, shadow, key);
        assert!(
            got.is_none() || fresh.matches(&got),
            "{}: {key} on the shadow {} must be deleted or {fresh:?}, got {}",
            self.what(step),
            shadow.label(),
            State::show(&got)
        );
    }

    fn run(&self) {
        let s = self.setup;
        let mut c = s.client();
        let k = |b: &str| (self.key)(b);

        // Reads: the primary answers (each backend has its own value).
        let which = k("which");
        s.mc_put_everywhere(&which, 11, 0, b"from-memcached");
        s.redis_put_everywhere(&which, 22, b"from-redis", 0);
        let want_read = match self.route.primary {
            Side::Memcached => (b"from-memcached".to_vec(), 11),
            Side::Redis => (b"from-redis".to_vec(), 22),
        };
        assert_eq!(
            get(&mut c, &which),
            Some(want_read.clone()),
            "{}",
            self.what("get answers from the primary")
        );
        let (data, flags, _) = gets(&mut c, &which).expect("gets hit");
        assert_eq!((data, flags), want_read, "{}", self.what("gets"));

        // set with flags and TTL.
        let key = k("set");
        assert_eq!(
            req(&mut c, &storage("set", &key, 5, 1000, "v-set")),
            "STORED\r\n"
        );
        self.both(&key, &Want::new("v-set", 5, 1000), "set");
        assert_eq!(
            get(&mut c, &key),
            Some((b"v-set".to_vec(), 5)),
            "{}",
            self.what("get after set")
        );

        // Flags up to 2^32-1, an absolute exptime (more than 30 days), and
        // noreply.
        let key = k("bigflags");
        let at = unix_now() + 40 * 86_400;
        assert_eq!(
            req(&mut c, &storage("set", &key, u32::MAX, at, "far")),
            "STORED\r\n"
        );
        self.both(
            &key,
            &Want::new("far", u32::MAX, 40 * 86_400),
            "set with an absolute exptime",
        );
        let key = k("noreply");
        c.send(format!("set {key} 12 0 2 noreply\r\nnr\r\n").as_bytes())
            .expect("send");
        assert_eq!(
            get(&mut c, &key),
            Some((b"nr".to_vec(), 12)),
            "{}",
            self.what("set noreply")
        );
        self.both(&key, &Want::new("nr", 12, -1), "set noreply");
        // A negative exptime stores an item that is already gone.
        assert_eq!(
            req(&mut c, &storage("set", &key, 0, -1, "gone")),
            "STORED\r\n"
        );
        assert!(
            state(s, self.route.primary, &key).is_none(),
            "{}",
            self.what("negative exptime")
        );
        if let Some(shadow) = self.route.shadow {
            wait_absent(s, shadow, &key, &self.what("negative exptime"));
        }

        // add: stored, then refused (the shadow keeps the stored value).
        let key = k("add");
        assert_eq!(
            req(&mut c, &storage("add", &key, 6, 0, "v-add")),
            "STORED\r\n"
        );
        let added = Want::new("v-add", 6, -1);
        self.both(&key, &added, "add");
        assert_eq!(
            req(&mut c, &storage("add", &key, 7, 0, "other")),
            "NOT_STORED\r\n",
            "{}",
            self.what("add of an existing key")
        );
        self.barrier(&mut c);
        self.both(&key, &added, "refused add changes nothing");

        // replace.
        let key = k("replace");
        assert_eq!(
            req(&mut c, &storage("replace", &key, 9, 500, "v-rep")),
            "NOT_STORED\r\n",
            "{}",
            self.what("replace of a missing key")
        );
        assert_eq!(
            req(&mut c, &storage("set", &key, 1, 0, "old")),
            "STORED\r\n"
        );
        self.both(&key, &Want::new("old", 1, -1), "set before replace");
        assert_eq!(
            req(&mut c, &storage("replace", &key, 9, 500, "v-rep")),
            "STORED\r\n"
        );
        self.both(&key, &Want::new("v-rep", 9, 500), "replace");

        // append / prepend: the primary concatenates, the shadow must not
        // keep the old value.
        for (cmd, piece, result) in [
            ("append", "-tail", "base-tail"),
            ("prepend", "head-", "head-base"),
        ] {
            let key = k(cmd);
            assert_eq!(
                req(&mut c, &storage("set", &key, 3, 0, "base")),
                "STORED\r\n"
            );
            let base = Want::new("base", 3, -1);
            self.both(&key, &base, &format!("set before {cmd}"));
            assert_eq!(
                req(&mut c, &storage(cmd, &key, 0, 0, piece)),
                "STORED\r\n",
                "{}",
                self.what(cmd)
            );
            let fresh = Want::new(result, 3, -1);
            assert_state(s, self.route.primary, &key, &fresh, &self.what(cmd));
            self.shadow_not_stale(&key, &base, &fresh, cmd);
            assert_eq!(get(&mut c, &key), Some((result.as_bytes().to_vec(), 3)));
        }

        // cas: a fresh unique stores (and is shadowed), a stale one is
        // refused (and is not).
        let key = k("cas");
        assert_eq!(req(&mut c, &storage("set", &key, 0, 0, "c1")), "STORED\r\n");
        self.both(&key, &Want::new("c1", 0, -1), "set before cas");
        let (_, _, unique) = gets(&mut c, &key).expect("gets after set");
        let cas = |flags: u32, data: &str, unique: u64| {
            format!("cas {key} {flags} 0 {} {unique}\r\n{data}\r\n", data.len())
        };
        assert_eq!(
            req(&mut c, &cas(4, "c2", unique)),
            "STORED\r\n",
            "{}",
            self.what("cas")
        );
        let swapped = Want::new("c2", 4, -1);
        self.both(&key, &swapped, "cas");
        assert_eq!(
            req(&mut c, &cas(8, "c3", unique)),
            "EXISTS\r\n",
            "{}",
            self.what("cas with a stale unique")
        );
        self.barrier(&mut c);
        self.both(&key, &swapped, "refused cas changes nothing");
        let missing = k("cas-missing");
        assert_eq!(
            req(&mut c, &format!("cas {missing} 0 0 1 1\r\nx\r\n")),
            "NOT_FOUND\r\n",
            "{}",
            self.what("cas of a missing key")
        );

        // incr / decr.
        let key = k("counter");
        assert_eq!(req(&mut c, &storage("set", &key, 2, 0, "10")), "STORED\r\n");
        let ten = Want::new("10", 2, -1);
        self.both(&key, &ten, "set before incr");
        assert_eq!(
            req(&mut c, &format!("incr {key} 5\r\n")),
            "15\r\n",
            "{}",
            self.what("incr")
        );
        let fifteen = Want::new("15", 2, -1);
        assert_state(s, self.route.primary, &key, &fifteen, &self.what("incr"));
        self.shadow_not_stale(&key, &ten, &fifteen, "incr");
        if let Some(shadow) = self.route.shadow {
            // Put a known value back on both sides for decr.
            assert_eq!(req(&mut c, &storage("set", &key, 2, 0, "15")), "STORED\r\n");
            wait_state(s, shadow, &key, &fifteen, &self.what("set before decr"));
        }
        assert_eq!(
            req(&mut c, &format!("decr {key} 3\r\n")),
            "12\r\n",
            "{}",
            self.what("decr")
        );
        let twelve = Want::new("12", 2, -1);
        assert_state(s, self.route.primary, &key, &twelve, &self.what("decr"));
        self.shadow_not_stale(&key, &fifteen, &twelve, "decr");
        assert_eq!(
            req(&mut c, &format!("incr {} 1\r\n", k("no-counter"))),
            "NOT_FOUND\r\n",
            "{}",
            self.what("incr of a missing key")
        );

        // touch: the new TTL reaches the shadow.
        let key = k("touch");
        assert_eq!(req(&mut c, &storage("set", &key, 0, 0, "t")), "STORED\r\n");
        self.both(&key, &Want::new("t", 0, -1), "set before touch");
        assert_eq!(
            req(&mut c, &format!("touch {key} 300\r\n")),
            "TOUCHED\r\n",
            "{}",
            self.what("touch")
        );
        self.both(&key, &Want::new("t", 0, 300), "touch");

        // delete.
        let key = k("delete");
        assert_eq!(req(&mut c, &storage("set", &key, 0, 0, "d")), "STORED\r\n");
        self.both(&key, &Want::new("d", 0, -1), "set before delete");
        assert_eq!(
            req(&mut c, &format!("delete {key}\r\n")),
            "DELETED\r\n",
            "{}",
            self.what("delete")
        );
        assert!(
            state(s, self.route.primary, &key).is_none(),
            "{}",
            self.what("deleted on the primary")
        );
        if let Some(shadow) = self.route.shadow {
            wait_absent(s, shadow, &key, &self.what("delete"));
        }
        assert_eq!(get(&mut c, &key), None);
        assert_eq!(req(&mut c, &format!("delete {key}\r\n")), "NOT_FOUND\r\n");

        // Without a shadow, the other backend never saw any of these keys.
        if self.route.shadow.is_none() {
            let other = self.route.primary.other();
            for base in [
                "set", "add", "replace", "append", "prepend", "cas", "counter", "touch",
            ] {
                let key = k(base);
                assert!(
                    state(s, other, &key).is_none(),
                    "{}: {key} reached {} with no shadow in this phase",
                    self.what("no shadow"),
                    other.label()
                );
            }
        }
    }
}

/// Names the keys of one route: base name → key.
type KeyFn<'a> = &'a dyn Fn(&str) -> String;

fn run_phase(phase: &str, routes: &[(Route, KeyFn)], migration: &str) -> MigrationSetup {
    let setup = MigrationSetup::start(MigrationOptions {
        phase: phase.into(),
        migration: migration.into(),
        ..MigrationOptions::default()
    });
    for (route, key) in routes {
        Exercise {
            setup: &setup,
            route: Route {
                primary: route.primary,
                shadow: route.shadow,
            },
            key: *key,
            phase,
            barriers: Cell::new(0),
        }
        .run();
    }
    let m = setup.metrics();
    assert_eq!(
        m.value("memshift_migration_phase", &[("phase", phase)]),
        1.0,
        "memshift_migration_phase{{phase=\"{phase}\"}}"
    );
    let errors = m.value("memshift_shadow_writes_total", &[("result", "error")]);
    assert_eq!(
        errors,
        0.0,
        "shadow write errors in phase {phase}:\n{}",
        setup.proxy.memshift.stderr()
    );
    for side in [Side::Redis, Side::Memcached] {
        let ok = m.value(
            "memshift_shadow_writes_total",
            &[("backend", side.label()), ("result", "ok")],
        );
        let shadowed = routes.iter().any(|(r, _)| r.shadow == Some(side));
        assert_eq!(
            ok > 0.0,
            shadowed,
            "memshift_shadow_writes_total{{backend=\"{}\",result=\"ok\"}} = {ok} in phase {phase}",
            side.label()
        );
    }
    setup
}

fn plain(prefix: &'static str) -> impl Fn(&str) -> String {
    move |b: &str| format!("{prefix}:{b}")
}

#[test]
fn phase_memcached_is_a_transparent_proxy() {
    if !tools("phase_memcached_is_a_transparent_proxy") {
        return;
    }
    let key = plain("pm");
    run_phase(
        "memcached",
        &[(
            Route {
                primary: Side::Memcached,
                shadow: None,
            },
            &key,
        )],
        "",
    );
}

#[test]
fn phase_warmup_shadows_to_redis() {
    if !tools("phase_warmup_shadows_to_redis") {
        return;
    }
    let key = plain("pw");
    run_phase(
        "warmup",
        &[(
            Route {
                primary: Side::Memcached,
                shadow: Some(Side::Redis),
            },
            &key,
        )],
        "",
    );
}

#[test]
fn phase_canary_splits_primary_and_shadow() {
    if !tools("phase_canary_splits_primary_and_shadow") {
        return;
    }
    const PCT: f64 = 30.0;
    let canary = |b: &str| key_with_split(&format!("pc:r:{b}:"), PCT, true);
    let legacy = |b: &str| key_with_split(&format!("pc:m:{b}:"), PCT, false);
    run_phase(
        "canary",
        &[
            (
                Route {
                    primary: Side::Redis,
                    shadow: Some(Side::Memcached),
                },
                &canary,
            ),
            (
                Route {
                    primary: Side::Memcached,
                    shadow: Some(Side::Redis),
                },
                &legacy,
            ),
        ],
        // No backfill, compare or rollback in the way of the write checks.
        "canary_percent = 30\nbackfill = false\nrollback_min_samples = 1000000\n",
    );
}

#[test]
fn phase_cutover_shadows_to_memcached() {
    if !tools("phase_cutover_shadows_to_memcached") {
        return;
    }
    let key = plain("pcut");
    run_phase(
        "cutover",
        &[(
            Route {
                primary: Side::Redis,
                shadow: Some(Side::Memcached),
            },
            &key,
        )],
        "backfill = false\n",
    );
}

#[test]
fn phase_redis_only() {
    if !tools("phase_redis_only") {
        return;
    }
    let key = plain("pr");
    let mut setup = run_phase(
        "redis",
        &[(
            Route {
                primary: Side::Redis,
                shadow: None,
            },
            &key,
        )],
        "",
    );
    // Phase redis does not need the pool: memcached down changes nothing.
    setup.memcached[0].stop();
    let mut c = setup.client();
    assert_eq!(
        req(&mut c, &storage("set", "pr:after", 0, 0, "x")),
        "STORED\r\n"
    );
    assert_eq!(get(&mut c, "pr:after"), Some((b"x".to_vec(), 0)));
    let (status, body) =
        memshift_tests::migration_support::http_get(setup.proxy.admin_port, "/ready")
            .expect("GET /ready");
    assert_eq!(
        status, 200,
        "/ready in phase redis with memcached down: {body}"
    );
}

/// A canary multi-get mixes both backends in one reply, in request order.
#[test]
fn canary_multi_get_mixes_backends() {
    if !tools("canary_multi_get_mixes_backends") {
        return;
    }
    const PCT: f64 = 50.0;
    let setup = MigrationSetup::start(MigrationOptions {
        phase: "canary".into(),
        migration: "canary_percent = 50\nbackfill = false\nrollback_min_samples = 1000000\n".into(),
        ..MigrationOptions::default()
    });
    let keys: Vec<String> = (0..40).map(|i| format!("mg:{i}")).collect();
    for k in &keys {
        setup.mc_put_everywhere(k, 1, 0, format!("M-{k}").as_bytes());
        setup.redis_put_everywhere(k, 2, format!("R-{k}").as_bytes(), 0);
    }
    let want: String = keys
        .iter()
        .map(|k| {
            let (flags, v) = if memshift_shadow::canary::is_canary(k.as_bytes(), PCT) {
                (2, format!("R-{k}"))
            } else {
                (1, format!("M-{k}"))
            };
            format!("VALUE {k} {flags} {}\r\n{v}\r\n", v.len())
        })
        .collect::<String>()
        + "END\r\n";
    assert!(
        want.contains(" 1 ") && want.contains(" 2 "),
        "both sides in the sample"
    );
    let mut c = setup.client();
    let got = req(&mut c, &format!("get {}\r\n", keys.join(" ")));
    assert_eq!(got, want, "canary multi-get");
}

/// `memshift_get_hits_total` / `memshift_get_misses_total` per backend:
/// memcached's move in warmup, Redis' in cutover (backfill off).
#[test]
fn hit_and_miss_metrics_per_backend() {
    if !tools("hit_and_miss_metrics_per_backend") {
        return;
    }
    let mut setup = MigrationSetup::start(MigrationOptions {
        phase: "warmup".into(),
        migration: "backfill = false\n".into(),
        ..MigrationOptions::default()
    });
    let counts = |setup: &MigrationSetup| {
        let m = setup.metrics();
        [
            m.value("memshift_get_hits_total", &[("backend", "memcached")]),
            m.value("memshift_get_misses_total", &[("backend", "memcached")]),
            m.value("memshift_get_hits_total", &[("backend", "redis")]),
            m.value("memshift_get_misses_total", &[("backend", "redis")]),
        ]
    };
    let delta = |a: [f64; 4], b: [f64; 4]| -> [f64; 4] {
        [b[0] - a[0], b[1] - a[1], b[2] - a[2], b[3] - a[3]]
    };
    let mut c = setup.client();
    setup.mc_put_everywhere("hm:mc", 0, 0, b"m");
    setup.redis_put_everywhere("hm:redis", 0, b"r", 0);

    // warmup: memcached answers: 3 hits, 2 misses (one of them a key only
    // Redis has).
    let before = counts(&setup);
    for _ in 0..3 {
        assert_eq!(get(&mut c, "hm:mc"), Some((b"m".to_vec(), 0)));
    }
    assert_eq!(get(&mut c, "hm:none"), None);
    assert_eq!(get(&mut c, "hm:redis"), None, "warmup reads memcached only");
    let d = delta(before, counts(&setup));
    assert_eq!(
        d,
        [3.0, 2.0, 0.0, 0.0],
        "warmup [mc hits, mc misses, redis hits, redis misses]"
    );

    // cutover: Redis answers: 2 hits, 4 misses.
    setup.proxy.reload_phase("cutover", "");
    let before = counts(&setup);
    for _ in 0..2 {
        assert_eq!(
            get(&mut c, "hm:redis"),
            Some((b"r".to_vec(), 0)),
            "same connection after SIGHUP"
        );
    }
    for _ in 0..3 {
        assert_eq!(
            get(&mut c, "hm:mc"),
            None,
            "cutover reads Redis only (backfill off)"
        );
    }
    assert_eq!(get(&mut c, "hm:none"), None);
    let d = delta(before, counts(&setup));
    assert_eq!(
        d,
        [0.0, 0.0, 2.0, 4.0],
        "cutover [mc hits, mc misses, redis hits, redis misses]"
    );
}

/// A client that pipelines more requests than memshift keeps waiting on
/// its backends (1024 per connection) in one write, then only reads: every
/// request must still be answered (memcached answers all of them).
#[test]
fn deep_pipeline_sent_at_once_is_fully_answered() {
    if !tools("deep_pipeline_sent_at_once_is_fully_answered") {
        return;
    }
    const N: usize = 10_000;
    let setup = MigrationSetup::start(MigrationOptions {
        phase: "cutover".into(),
        migration: "backfill = false\n".into(),
        ..MigrationOptions::default()
    });
    setup.redis_put_everywhere("deep:hit", 0, b"h", 0);
    let mut c = setup.client();
    c.set_read_timeout(std::time::Duration::from_secs(10))
        .expect("read timeout");
    let mut w = c.try_clone_stream().expect("clone");
    let requests: Vec<u8> = (0..N)
        .flat_map(|i| {
            if i % 2 == 0 {
                "get deep:hit\r\n".to_string()
            } else {
                format!("get deep:miss{i}\r\n")
            }
            .into_bytes()
        })
        .collect();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut w, &requests));
    let mut answered = 0;
    for i in 0..N {
        match c.read_reply() {
            Ok(_) => answered += 1,
            Err(e) => panic!("only {answered} of {N} pipelined gets answered (request {i}: {e})"),
        }
    }
    writer.join().expect("writer").expect("send");
    assert_eq!(answered, N);
}

/// `gat`/`gats` change the item's TTL on the primary like `touch`: the
/// shadow must get the new TTL too (a shorter TTL left out would keep the
/// item alive on the shadow after the primary expired it).
#[test]
fn gat_and_gats_touch_reaches_the_shadow() {
    if !tools("gat_and_gats_touch_reaches_the_shadow") {
        return;
    }
    for (phase, shadow) in [("warmup", Side::Redis), ("cutover", Side::Memcached)] {
        let setup = MigrationSetup::start(MigrationOptions {
            phase: phase.into(),
            migration: "backfill = false\n".into(),
            ..MigrationOptions::default()
        });
        let primary = shadow.other();
        let mut c = setup.client();
        for (cmd, key) in [("gat", "gat:k"), ("gats", "gats:k")] {
            assert_eq!(req(&mut c, &storage("set", key, 4, 0, "g")), "STORED\r\n");
            wait_state(
                &setup,
                shadow,
                key,
                &Want::new("g", 4, -1),
                &format!("{phase}: set before {cmd}"),
            );
            let reply = req(&mut c, &format!("{cmd} 200 {key}\r\n"));
            assert!(
                reply.starts_with(&format!("VALUE {key} 4 1")),
                "{phase}: {cmd}: {reply:?}"
            );
            let want = Want::new("g", 4, 200);
            assert_state(
                &setup,
                primary,
                key,
                &want,
                &format!("{phase}: {cmd} on the primary"),
            );
            wait_state(
                &setup,
                shadow,
                key,
                &want,
                &format!("{phase}: {cmd} TTL on the shadow"),
            );
        }
    }
}

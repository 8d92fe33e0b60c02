//! The shadow memcached dies in the middle of 10,000 sets in cutover: the
//! clients see no error (Redis answers), the breaker opens and drops are
//! counted; memcached comes back on the same port: the breaker closes after
//! its cooldown and shadow writes land again.

use std::time::{Duration, Instant};

use memshift_tests::migration_support::{MigrationOptions, MigrationSetup};

use super::*;

const SETS: usize = 10_000;
const BATCH: usize = 100;
/// Sets sent before memcached is killed.
const KILL_AFTER: usize = 2_000;

#[test]
fn shadow_memcached_down_opens_breaker_then_recovers() {
    if !tools("shadow_memcached_down_opens_breaker_then_recovers") {
        return;
    }
    let mut setup = MigrationSetup::start(MigrationOptions {
        phase: "cutover".into(),
        migration: "backfill = false\nbreaker_failures = 3\nbreaker_cooldown_ms = 500\n".into(),
        ..MigrationOptions::default()
    });
    let port = setup.proxy.admin_port;
    let breaker = || {
        memshift_tests::migration_support::scrape(port)
            .get("memshift_shadow_breaker_open", &[("backend", "memcached")])
    };
    let dropped = || {
        memshift_tests::migration_support::scrape(port).value(
            "memshift_shadow_writes_total",
            &[("backend", "memcached"), ("result", "dropped")],
        )
    };

    // Shadow writes work to begin with.
    let mut c = setup.client();
    assert_eq!(
        req(&mut c, &storage("set", "sd:first", 0, 0, "x")),
        "STORED\r\n"
    );
    wait_state(
        &setup,
        Side::Memcached,
        "sd:first",
        &Want::new("x", 0, -1),
        "shadow up",
    );
    assert_eq!(
        breaker(),
        Some(0.0),
        "memshift_shadow_breaker_open{{backend=\"memcached\"}} before"
    );

    // 10,000 sets, pipelined by batches; memcached is killed on the way.
    let value = "v".repeat(100);
    let mut errors = Vec::new();
    let started = Instant::now();
    for batch in 0..SETS / BATCH {
        if batch * BATCH == KILL_AFTER {
            setup.memcached[0].stop();
        }
        let mut out = String::new();
        for i in batch * BATCH..(batch + 1) * BATCH {
            out.push_str(&storage("set", &format!("sd:{i}"), 0, 0, &value));
        }
        c.send(out.as_bytes()).expect("send batch");
        for i in batch * BATCH..(batch + 1) * BATCH {
            let line = c
                .read_line()
                .unwrap_or_else(|e| panic!("set sd:{i}: no reply: {e}"));
            if line != b"STORED\r\n" {
                errors.push(format!(
                    "sd:{i}: {}",
                    String::from_utf8_lossy(&line).trim_end()
                ));
            }
        }
    }
    let load = started.elapsed();
    assert!(
        errors.is_empty(),
        "{} client errors with the shadow down (first: {:?})",
        errors.len(),
        errors.first()
    );
    assert!(
        setup.redis_dbsize() >= SETS as i64,
        "Redis holds {} keys after {SETS} sets",
        setup.redis_dbsize()
    );

    wait_for("the breaker to open", SHADOW_DEADLINE, |last| {
        let b = breaker();
        *last = format!("breaker {b:?}, dropped {}", dropped());
        (b == Some(1.0)).then_some(())
    });
    let ready = || {
        memshift_tests::migration_support::http_get(port, "/ready")
            .map(|(s, _)| s)
            .ok()
    };
    assert_ne!(
        ready(),
        Some(200),
        "/ready while cutover's memcached pool is down"
    );
    let drops = dropped();
    assert!(
        drops > 0.0,
        "memshift_shadow_writes_total{{backend=\"memcached\",result=\"dropped\"}} = {drops}"
    );
    eprintln!("shadow down: {SETS} sets in {load:?}, {drops} shadow writes dropped");

    // memcached back on the same port, empty: the next shadow writes probe
    // it after the cooldown and close the breaker.
    setup.memcached[0].restart();
    let mut n = 0;
    wait_for(
        "the breaker to close after memcached restarted",
        Duration::from_secs(20),
        |last| {
            n += 1;
            let reply = req(&mut c, &storage("set", &format!("sd:probe{n}"), 0, 0, "p"));
            assert_eq!(reply, "STORED\r\n", "set while the breaker is open");
            let b = breaker();
            *last = format!("breaker {b:?}");
            std::thread::sleep(Duration::from_millis(100));
            (b == Some(0.0)).then_some(())
        },
    );
    assert_eq!(
        req(&mut c, &storage("set", "sd:after", 3, 600, "back")),
        "STORED\r\n"
    );
    wait_state(
        &setup,
        Side::Memcached,
        "sd:after",
        &Want::new("back", 3, 600),
        "shadow writes resume",
    );
    let m = setup.metrics();
    assert_eq!(
        m.value("memshift_shadow_breaker_open", &[("backend", "memcached")]),
        0.0
    );
    wait_for("/ready to answer 200 again", SHADOW_DEADLINE, |last| {
        let r = ready();
        *last = format!("{r:?}");
        (r == Some(200)).then_some(())
    });
}

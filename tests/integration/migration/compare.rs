//! compare_percent = 100 in cutover: every read is also read from memcached
//! and counted in `memshift_compare_total{result}`; a mismatch is logged
//! with its key.

use memshift_tests::migration_support::{scrape, MigrationOptions, MigrationSetup};

use super::*;

#[test]
fn compare_counts_match_mismatch_and_misses() {
    if !tools("compare_counts_match_mismatch_and_misses") {
        return;
    }
    let setup = MigrationSetup::start(MigrationOptions {
        phase: "cutover".into(),
        migration: "compare_percent = 100\nbackfill = false\n".into(),
        ..MigrationOptions::default()
    });
    // Both the same; different values; different flags; only in Redis;
    // only in memcached.
    setup.mc_put_everywhere("cmp:same", 1, 0, b"same");
    setup.redis_put_everywhere("cmp:same", 1, b"same", 0);
    setup.mc_put_everywhere("cmp:diff", 1, 0, b"old");
    setup.redis_put_everywhere("cmp:diff", 1, b"new", 0);
    setup.mc_put_everywhere("cmp:flags", 1, 0, b"v");
    setup.redis_put_everywhere("cmp:flags", 2, b"v", 0);
    setup.redis_put_everywhere("cmp:redis-only", 0, b"r", 0);
    setup.mc_put_everywhere("cmp:mc-only", 0, 0, b"m");

    let before = setup.metrics();
    let mut c = setup.client();
    for _ in 0..2 {
        assert_eq!(get(&mut c, "cmp:same"), Some((b"same".to_vec(), 1)));
        assert_eq!(
            get(&mut c, "cmp:diff"),
            Some((b"new".to_vec(), 1)),
            "Redis answers in cutover"
        );
        assert_eq!(get(&mut c, "cmp:flags"), Some((b"v".to_vec(), 2)));
        assert_eq!(get(&mut c, "cmp:redis-only"), Some((b"r".to_vec(), 0)));
        assert_eq!(get(&mut c, "cmp:mc-only"), None, "no backfill");
    }
    let want = [
        ("match", 2.0),
        ("value_mismatch", 4.0),
        ("shadow_miss", 2.0),
        ("primary_miss", 2.0),
    ];
    let port = setup.proxy.admin_port;
    let deltas = || {
        let m = scrape(port);
        want.iter()
            .map(|(r, _)| {
                let l = [("result", *r)];
                (
                    *r,
                    m.value("memshift_compare_total", &l)
                        - before.value("memshift_compare_total", &l),
                )
            })
            .collect::<Vec<_>>()
    };
    wait_for(
        "memshift_compare_total to count every read",
        SHADOW_DEADLINE,
        |last| {
            let d = deltas();
            *last = format!("{d:?}");
            (d.iter().map(|(_, v)| v).sum::<f64>() >= 10.0).then_some(())
        },
    );
    assert_eq!(
        deltas(),
        want.to_vec(),
        "memshift_compare_total{{result}} deltas"
    );
    let log = setup.proxy.memshift.stderr();
    assert!(
        ["cmp:diff", "cmp:flags", "cmp:redis-only", "cmp:mc-only"]
            .iter()
            .any(|k| log.contains(k)),
        "no log line names a mismatched key:\n{log}"
    );
}

//! Backfill: in canary (for a canary key) and in cutover, a key only
//! memcached has is served from it and copied into Redis with the same flags
//! and remaining TTL. The phase changes by SIGHUP on a live connection.

use memshift_tests::migration_support::{mc_get_item, mc_put, MigrationOptions, MigrationSetup};

use super::*;

const PCT: f64 = 20.0;

/// `key` is only in memcached (flags 7, 100 s left); a `get` through
/// memshift answers it and Redis then holds it with flags 7 and a TTL
/// within 2 s of memcached's.
fn backfilled(
    setup: &MigrationSetup,
    c: &mut memshift_tests::McClient,
    key: &str,
    flags: u32,
    exptime: i64,
    what: &str,
) {
    let mut mc = setup.memcached[0].client();
    mc_put(&mut mc, key, flags, exptime, format!("bf-{key}").as_bytes());
    assert!(
        setup.redis_item(key).is_none(),
        "{what}: {key} already in Redis"
    );
    assert_eq!(
        get(c, key),
        Some((format!("bf-{key}").into_bytes(), flags)),
        "{what}: the Redis miss is served from memcached"
    );
    let item = wait_for(
        &format!("{what}: backfill of {key} into Redis"),
        SHADOW_DEADLINE,
        |last| {
            let item = setup.redis_item(key);
            *last = format!("{item:?}");
            item
        },
    );
    let mc_ttl = mc_get_item(&mut mc, key)
        .expect("mg")
        .expect("still in memcached")
        .ttl;
    assert_eq!(
        item.data,
        format!("bf-{key}").into_bytes(),
        "{what}: value copied"
    );
    assert_eq!(item.flags, flags, "{what}: flags copied");
    if exptime == 0 {
        assert_eq!(
            (item.ttl, mc_ttl),
            (-1, -1),
            "{what}: no expiry on either side"
        );
    } else {
        assert!(
            (item.ttl - mc_ttl).abs() <= 2 && item.ttl > 0,
            "{what}: Redis TTL {} vs memcached's remaining {mc_ttl}",
            item.ttl
        );
    }
    // Served from Redis now (same answer), and still once only in Redis.
    assert_eq!(get(c, key), Some((format!("bf-{key}").into_bytes(), flags)));
}

#[test]
fn backfill_copies_value_flags_and_ttl_in_canary_and_cutover() {
    if !tools("backfill_copies_value_flags_and_ttl_in_canary_and_cutover") {
        return;
    }
    let mut setup = MigrationSetup::start(MigrationOptions {
        phase: "canary".into(),
        migration: "canary_percent = 20\nbackfill = true\nrollback_min_samples = 1000000\n".into(),
        ..MigrationOptions::default()
    });
    let mut c = setup.client();

    let key = key_with_split("bf:canary:", PCT, true);
    backfilled(&setup, &mut c, &key, 7, 100, "canary");
    let key = key_with_split("bf:canary-forever:", PCT, true);
    backfilled(&setup, &mut c, &key, 0, 0, "canary, no expiry");
    // A non-canary key is memcached's: served, not copied.
    let legacy = key_with_split("bf:legacy:", PCT, false);
    mc_put(&mut setup.memcached[0].client(), &legacy, 7, 100, b"L");
    assert_eq!(get(&mut c, &legacy), Some((b"L".to_vec(), 7)));

    setup.proxy.reload_phase("cutover", "");
    backfilled(&setup, &mut c, "bf:cutover", 7, 100, "cutover");
    backfilled(
        &setup,
        &mut c,
        "bf:cutover-big-flags",
        u32::MAX,
        100,
        "cutover, flags 2^32-1",
    );

    // A multi-get mixing Redis hits, memcached-only keys and real misses:
    // answered in request order, the memcached-only ones backfilled.
    setup.redis_put_everywhere("bf:multi:r", 1, b"R", 0);
    let mut mc = setup.memcached[0].client();
    mc_put(&mut mc, "bf:multi:m1", 2, 100, b"M1");
    mc_put(&mut mc, "bf:multi:m2", 3, 0, b"M2");
    let reply = req(
        &mut c,
        "get bf:multi:m1 bf:multi:none bf:multi:r bf:multi:m2\r\n",
    );
    assert_eq!(
        reply,
        "VALUE bf:multi:m1 2 2\r\nM1\r\nVALUE bf:multi:r 1 1\r\nR\r\nVALUE bf:multi:m2 3 2\r\nM2\r\nEND\r\n",
        "multi-get with backfill"
    );
    for (key, flags, data, ttl) in [("bf:multi:m1", 2, "M1", 100), ("bf:multi:m2", 3, "M2", -1)] {
        let item = wait_for(
            &format!("backfill of {key} from a multi-get"),
            SHADOW_DEADLINE,
            |last| {
                let item = setup.redis_item(key);
                *last = format!("{item:?}");
                item
            },
        );
        assert_eq!(
            (item.flags, item.data.as_slice()),
            (flags, data.as_bytes()),
            "{key}"
        );
        assert!(
            if ttl < 0 {
                item.ttl == -1
            } else {
                item.ttl <= ttl && item.ttl >= ttl - 3
            },
            "{key}: Redis TTL {}, want {ttl}",
            item.ttl
        );
    }
    assert!(setup.redis_item("bf:multi:none").is_none());
    assert!(
        setup.redis_item(&legacy).is_none(),
        "a memcached-primary key read in canary was copied into Redis"
    );

    let m = setup.metrics();
    assert!(
        m.value("memshift_get_hits_total", &[("backend", "memcached")]) >= 4.0,
        "backfilled reads count as memcached hits:\n{}",
        m.text
    );
}

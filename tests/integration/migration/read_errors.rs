//! `redis.read_errors_as_misses` during a migration (docs/config.md): a
//! failed Redis read is a miss and is not looked up in memcached (cutover);
//! a failed read of the legacy memcached pool (phase memcached) keeps its
//! `SERVER_ERROR`.

use memshift_tests::migration_support::{mc_put, MigrationOptions, MigrationSetup};

use super::*;

#[test]
fn read_errors_as_misses_in_cutover_and_on_the_legacy_pool() {
    if !tools("read_errors_as_misses_in_cutover_and_on_the_legacy_pool") {
        return;
    }
    let mut setup = MigrationSetup::start(MigrationOptions {
        redis_shards: 1,
        phase: "cutover".into(),
        migration: "backfill = true\n".into(),
        ..MigrationOptions::default()
    });
    let mut c = setup.client();
    let mut mc = setup.memcached[0].client();
    mc_put(&mut mc, "re:only-legacy", 0, 0, b"legacy");
    setup.redis[0].stop();
    // Not served from memcached (nor copied into the failed shard).
    let got = c.request(b"get re:only-legacy\r\n").expect("get");
    assert_eq!(got, b"END\r\n", "cutover, Redis down");
    drop(setup);

    let mut setup = MigrationSetup::start(MigrationOptions {
        redis_shards: 1,
        phase: "memcached".into(),
        ..MigrationOptions::default()
    });
    let mut c = setup.client();
    setup.memcached[0].stop();
    let got = c.request(b"get re:k\r\n").expect("get");
    assert!(
        got.starts_with(b"SERVER_ERROR "),
        "phase memcached, its server down: {}",
        memshift_tests::escape(&got, 100)
    );
}

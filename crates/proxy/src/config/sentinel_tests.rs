//! `[redis] sentinels` and `{ master = "…" }` shards: parsing, validation,
//! placement by master name.

use super::*;

fn load(redis: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(&format!(
        "[server]\nlisten = \"127.0.0.1:11211\"\n[redis]\n{redis}\n"
    ))
}

fn error(redis: &str) -> String {
    match load(redis) {
        Ok(_) => panic!("expected an error for {redis}"),
        Err(e) => {
            let e = e.to_string();
            assert!(!e.contains('\n'), "error is not one line: {e:?}");
            e
        }
    }
}

#[test]
fn master_shards_are_placed_by_their_names_with_weights() {
    let c = load(
        r#"sentinels = ["10.0.0.9:26379", "10.0.0.10:26379"]
           sentinel_password = "pw"
           shards = [{ master = "s1" }, { master = "s2", weight = 2 }]"#,
    )
    .unwrap();
    let s = &c.redis.shards;
    assert_eq!((s[0].id(), s[0].weight, s[0].addr.as_str()), ("s1", 1, ""));
    assert_eq!((s[1].id(), s[1].weight), ("s2", 2));
    assert_eq!(
        c.ring_shards(),
        vec![
            memshift_ring::ShardSpec {
                id: "s1".into(),
                weight: 1
            },
            memshift_ring::ShardSpec {
                id: "s2".into(),
                weight: 2
            },
        ]
    );
    let rendered = c.render_resolved();
    assert!(
        rendered.contains(r#"{ master = "s2", weight = 2 }"#),
        "{rendered}"
    );
    assert!(
        rendered.contains(r#"sentinel_password = "***""#),
        "{rendered}"
    );
    assert!(!format!("{:?}", c.redis).contains("pw\""));
    // What `check` prints loads again as the same config.
    let again = Config::from_toml_str(&rendered).unwrap();
    assert_eq!(again.redis.shards, c.redis.shards);
    assert_eq!(again.redis.sentinels, c.redis.sentinels);
}

#[test]
fn both_forms_are_never_mixed() {
    let e = error(
        r#"sentinels = ["a:1"]
        shards = [{ master = "s1" }, "10.0.0.1:6379"]"#,
    );
    assert!(
        e.contains("redis.shards: mixes 1 Sentinel master(s)"),
        "{e}"
    );
    let e = error(r#"shards = [{ master = "s1" }]"#);
    assert!(e.contains("redis.sentinels: empty"), "{e}");
    let e = error(
        r#"sentinels = ["a:1"]
        shards = ["10.0.0.1:6379"]"#,
    );
    assert!(e.contains("redis.sentinels: set, but no shard"), "{e}");
    let e = error(r#"shards = [{ master = "s1", addr = "10.0.0.1:6379" }]"#);
    assert!(e.contains("not both"), "{e}");
    let e = error(
        r#"sentinels = ["a:1"]
        shards = [{ master = "s1", name = "x" }]"#,
    );
    assert!(e.contains("remove `name`"), "{e}");
}

#[test]
fn sentinel_settings_are_checked() {
    let e = error(
        r#"sentinels = ["a:1", "a:1"]
        shards = [{ master = "s1" }]"#,
    );
    assert!(e.contains("redis.sentinels[1]: duplicate"), "{e}");
    let e = error(
        r#"sentinels = ["nope"]
        shards = [{ master = "s1" }]"#,
    );
    assert!(e.contains("redis.sentinels[0]: bad address"), "{e}");
    let e = error(
        r#"sentinels = ["a:1"]
        shards = [{ master = "s1" }, { master = "s1" }]"#,
    );
    assert!(e.contains("duplicate Sentinel master"), "{e}");
    let e = error(
        r#"sentinels = ["a:1"]
        shards = [{ master = "s 1" }]"#,
    );
    assert!(e.contains("redis.shards[0].master"), "{e}");
    let e = error(
        r#"sentinels = ["a:1"]
        sentinel_username = "u"
        shards = [{ master = "s1" }]"#,
    );
    assert!(e.contains("redis.sentinel_username"), "{e}");
    let e = error(
        r#"sentinels = ["a:1"]
        tls = true
        shards = [{ master = "s1" }]"#,
    );
    assert!(e.contains("redis.tls_server_name: required"), "{e}");
    let e = error(
        r#"mode = "cluster"
        cluster_nodes = ["a:1"]
        sentinels = ["a:2"]"#,
    );
    assert!(e.contains("redis.sentinels: not used"), "{e}");
}

#[test]
fn read_from_is_parsed_live_and_needs_sentinel_shards() {
    let c = load(
        r#"sentinels = ["10.0.0.9:26379"]
           shards = [{ master = "s1" }]
           read_from = "replica_preferred""#,
    )
    .unwrap();
    assert_eq!(c.redis.read_from, ReadFrom::ReplicaPreferred);
    assert!(c
        .render_resolved()
        .contains("read_from = \"replica_preferred\""));
    let primary = load(
        r#"sentinels = ["10.0.0.9:26379"]
           shards = [{ master = "s1" }]"#,
    )
    .unwrap();
    assert_eq!(primary.redis.read_from, ReadFrom::Primary);
    assert!(primary.restart_required_changes(&c).is_empty());
    let e = error(
        r#"shards = ["127.0.0.1:6379"]
           read_from = "replica_preferred""#,
    );
    assert!(
        e.contains("redis.read_from") && e.contains("Sentinel"),
        "{e}"
    );
    let e = error(
        r#"mode = "cluster"
           cluster_nodes = ["127.0.0.1:7000"]
           read_from = "replica_preferred""#,
    );
    assert!(
        e.contains("redis.read_from") && e.contains("cluster"),
        "{e}"
    );
    assert!(load(
        r#"shards = ["127.0.0.1:6379"]
           read_from = "replicas""#
    )
    .is_err());
}

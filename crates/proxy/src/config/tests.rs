use super::*;
use std::net::SocketAddr;

const MIN: &str = r#"
[server]
listen = "127.0.0.1:11211"
[redis]
shards = ["127.0.0.1:6379"]
"#;

const LEGACY: &str = r#"
[memcached]
servers = ["127.0.0.1:21211"]
"#;

fn parse(extra: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(&format!("{MIN}{extra}"))
}

fn ok(extra: &str) -> Config {
    parse(extra).unwrap_or_else(|e| panic!("expected a valid config, got: {e}"))
}

/// The error for `MIN` + `extra` (extra sections appended).
fn err(extra: &str) -> String {
    match parse(extra) {
        Ok(_) => panic!("expected an error for:\n{extra}"),
        Err(e) => e.to_string(),
    }
}

/// The error for a whole file.
fn err_full(toml: &str) -> String {
    match Config::from_toml_str(toml) {
        Ok(_) => panic!("expected an error for:\n{toml}"),
        Err(e) => e.to_string(),
    }
}

/// The validation error after `edit` on a valid config.
fn invalid(edit: impl FnOnce(&mut Config)) -> String {
    let mut c = ok("");
    edit(&mut c);
    match c.validate() {
        Ok(()) => panic!("expected a validation error"),
        Err(e @ ConfigError::Invalid(_)) => e.to_string(),
        Err(e) => panic!("expected ConfigError::Invalid, got {e:?}"),
    }
}

fn assert_mentions(msg: &str, parts: &[&str]) {
    assert!(!msg.contains('\n'), "error is not one line: {msg:?}");
    for p in parts {
        assert!(msg.contains(p), "{msg:?} should mention {p:?}");
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn tcp(s: &str) -> ListenAddr {
    ListenAddr::Tcp(addr(s))
}

// ---- defaults and forms ----

#[test]
fn minimal_config_gets_every_default() {
    let c = ok("");
    assert_eq!(c.server.listen, [tcp("127.0.0.1:11211")]);
    assert_eq!(c.server.tls_listen, None);
    assert_eq!(c.server.unix_socket_mode, "0700");
    assert_eq!(c.server.max_connections, 100_000);
    assert_eq!(c.server.max_item_size, 1_048_576);
    assert_eq!(c.server.idle_timeout_ms, 0);
    assert_eq!(c.server.threads, 0);
    assert_eq!(c.server.drain_timeout_ms, 10_000);
    assert_eq!(c.server.drain_quiet_ms, 100);
    assert!(c.server.allow_flush_all);
    assert_eq!(c.server.max_pending_replies, 10_000);
    assert_eq!(c.server.max_line_length, 2048);
    assert_eq!(c.log.level, "info");
    assert_eq!(c.log.format, LogFormat::Text);
    assert_eq!(c.admin.listen, Some(addr("127.0.0.1:9121")));
    assert!(c.tls.is_none());
    let r = &c.redis;
    assert_eq!(
        r.shards,
        vec![ShardConfig {
            addr: "127.0.0.1:6379".into(),
            weight: 1,
            name: None,
            master: None,
        }]
    );
    assert_eq!(
        r.connections_per_shard,
        RedisConfig::auto_connections_per_shard(c.server.worker_threads())
    );
    assert_eq!(r.timeout_ms, 500);
    assert_eq!(r.connect_timeout_ms, 1000);
    assert_eq!(r.on_shard_down, ShardDownPolicy::Fail);
    assert!(r.read_errors_as_misses);
    assert_eq!(r.eject_after_failures, 3);
    assert_eq!(r.health_check_interval_ms, 1000);
    assert_eq!(r.max_inflight_per_connection, 10_000);
    assert_eq!((r.username.as_ref(), r.password.as_ref()), (None, None));
    assert!(!r.tls);
    assert_eq!(r.tls_ca, None);
    assert_eq!(r.tls_server_name, None);
    assert_eq!(
        c.ring,
        RingSection {
            vnodes: 160,
            seed: 0,
            hash_tag: None
        }
    );
    assert!(c.memcached.is_none());
    let m = &c.migration;
    assert_eq!(m.phase, Phase::Redis);
    assert_eq!(m.canary_percent, 5.0);
    assert_eq!(m.compare_percent, 0.0);
    assert!(m.backfill);
    assert_eq!(m.rollback_miss_delta_pp, 5.0);
    assert_eq!(m.rollback_window_s, 60);
    assert_eq!(m.rollback_min_samples, 1000);
    assert_eq!(m.shadow_queue, 10_000);
    assert_eq!(m.breaker_failures, 3);
    assert_eq!(m.breaker_cooldown_ms, 5000);
}

#[test]
fn section_defaults_fill_in_omitted_keys() {
    let c = Config::from_toml_str(
        r#"
        [server]
        tls_listen = "[::1]:11212"
        [tls]
        cert = "a.crt"
        key = "a.key"
        [redis]
        shards = ["r:1"]
        [memcached]
        servers = ["m:1"]
        "#,
    )
    .unwrap();
    let t = c.tls.unwrap();
    assert_eq!(t.handshake_timeout_ms, 5000);
    assert_eq!(t.client_ca, None);
    let m = c.memcached.unwrap();
    assert_eq!(m.distribution, Distribution::Ketama);
    assert_eq!(m.timeout_ms, 500);
    assert_eq!(m.connections_per_server, 2);
    assert_eq!(m.servers[0].weight, 1);
}

#[test]
fn shards_as_strings_or_tables() {
    let c = Config::from_toml_str(
        r#"
        [server]
        listen = "127.0.0.1:11211"
        [redis]
        shards = ["10.0.0.1:6379", { addr = "10.0.0.2:6379", weight = 2, name = "r2" }, { addr = "redis-3.svc:6379" }]
        "#,
    )
    .unwrap();
    let s = &c.redis.shards;
    assert_eq!((s[0].id(), s[0].weight), ("10.0.0.1:6379", 1));
    assert_eq!(
        (s[1].id(), s[1].weight, s[1].addr.as_str()),
        ("r2", 2, "10.0.0.2:6379")
    );
    assert_eq!((s[2].id(), s[2].weight), ("redis-3.svc:6379", 1));
    let specs = c.ring_shards();
    assert_eq!(
        specs,
        vec![
            memshift_ring::ShardSpec {
                id: "10.0.0.1:6379".into(),
                weight: 1
            },
            memshift_ring::ShardSpec {
                id: "r2".into(),
                weight: 2
            },
            memshift_ring::ShardSpec {
                id: "redis-3.svc:6379".into(),
                weight: 1
            },
        ]
    );
}

#[test]
fn legacy_servers_as_strings_or_tables() {
    let c = ok(r#"
        [memcached]
        servers = ["m1:11211", { addr = "m2:11211", weight = 3 }]
        distribution = "rendezvous"
        "#);
    let m = c.memcached.unwrap();
    assert_eq!(
        m.servers[0],
        LegacyServerConfig {
            addr: "m1:11211".into(),
            weight: 1
        }
    );
    assert_eq!(
        m.servers[1],
        LegacyServerConfig {
            addr: "m2:11211".into(),
            weight: 3
        }
    );
    assert_eq!(m.distribution, Distribution::Rendezvous);
}

#[test]
fn enums_parse_their_lowercase_names() {
    let c = ok(r#"
        [log]
        format = "json"
        [migration]
        phase = "cutover"
        [memcached]
        servers = ["m:1"]
        distribution = "modula"
        "#);
    assert_eq!(c.log.format, LogFormat::Json);
    assert_eq!(c.migration.phase, Phase::Cutover);
    assert_eq!(c.memcached.unwrap().distribution, Distribution::Modula);
    let c = Config::from_toml_str(&MIN.replace("[redis]", "[redis]\non_shard_down = \"eject\""))
        .unwrap();
    assert_eq!(c.redis.on_shard_down, ShardDownPolicy::Eject);
}

#[test]
fn percentages_accept_integers() {
    let c = ok(&format!(
        "{LEGACY}[migration]\nphase = \"canary\"\ncanary_percent = 20\ncompare_percent = 1.5\n"
    ));
    assert_eq!(c.migration.canary_percent, 20.0);
    assert_eq!(c.migration.compare_percent, 1.5);
}

#[test]
fn admin_listen_empty_string_disables_it() {
    assert_eq!(ok("[admin]\nlisten = \"\"\n").admin.listen, None);
    assert_eq!(
        ok("[admin]\nlisten = \"0.0.0.0:9000\"\n").admin.listen,
        Some(addr("0.0.0.0:9000"))
    );
}

#[test]
fn shipped_example_and_local_configs_are_valid() {
    let example = Config::from_toml_str(include_str!("../../../../config/example.toml"))
        .unwrap_or_else(|e| panic!("config/example.toml: {e}"));
    // The example shows every key; spot-check that it matches the defaults
    // it documents.
    assert_eq!(example.server.max_connections, 100_000);
    assert_eq!(example.migration.phase, Phase::Redis);
    let local = Config::from_toml_str(include_str!("../../../../config/local.toml"))
        .unwrap_or_else(|e| panic!("config/local.toml: {e}"));
    assert_eq!(local.server.listen[0], tcp("127.0.0.1:11211"));
    assert_eq!(local.admin.listen, Some(addr("127.0.0.1:9121")));
    let shards: Vec<_> = local.redis.shards.iter().map(|s| s.addr.as_str()).collect();
    assert_eq!(
        shards,
        ["127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6381"]
    );
    let legacy = local.memcached.expect("local.toml has the legacy pool");
    assert_eq!(legacy.servers[0].addr, "127.0.0.1:21211");
    assert_eq!(local.migration.phase, Phase::Redis);
}

// ---- parse errors: one line, key and line named ----

#[test]
fn unknown_top_level_section_is_named() {
    let e = err("[servr]\nlisten = \"127.0.0.1:1\"\n");
    assert_mentions(&e, &["unknown field `servr`", "line 6"]);
}

#[test]
fn unknown_key_in_a_section_names_key_line_and_section() {
    let e = err_full(
        "[server]\nlisten = \"127.0.0.1:11211\"\nlisen = \"x\"\n[redis]\nshards = [\"a:1\"]\n",
    );
    assert_mentions(&e, &["unknown field `lisen`", "line 3", "[server]"]);
}

#[test]
fn unknown_key_in_a_shard_table_is_named() {
    let e = err_full("[server]\nlisten = \"127.0.0.1:11211\"\n[redis]\nshards = [{ addr = \"a:1\", wieght = 2 }]\n");
    assert_mentions(&e, &["unknown field `wieght`", "line 4", "[redis]"]);
}

#[test]
fn unknown_key_in_optional_sections_is_named() {
    assert_mentions(
        &err("[tls]\ncert = \"a\"\nkey = \"b\"\nca = \"c\"\n"),
        &["unknown field `ca`"],
    );
    assert_mentions(
        &err("[migration]\nphaze = \"redis\"\n"),
        &["unknown field `phaze`"],
    );
    assert_mentions(
        &err("[memcached]\nservers = [{ addr = \"m:1\", name = \"x\" }]\n"),
        &["unknown field `name`"],
    );
}

#[test]
fn not_toml_is_a_one_line_parse_error() {
    let e = Config::from_toml_str("[server\nlisten = 1").unwrap_err();
    assert!(matches!(e, ConfigError::Parse(_)), "{e:?}");
    assert_mentions(&e.to_string(), &["line 1"]);
}

#[test]
fn wrong_type_is_named() {
    let e = err_full("[server]\nlisten = 11211\n[redis]\nshards = [\"a:1\"]\n");
    assert_mentions(&e, &["line 2", "invalid type", "[server]"]);
    assert_mentions(
        &err_full("[server]\nlisten = \"127.0.0.1:1\"\n[redis]\nshards = [6379]\n"),
        &["line 4", "host:port"],
    );
}

#[test]
fn bad_enum_values_list_the_choices() {
    assert_mentions(
        &err("[log]\nformat = \"xml\"\n"),
        &["`xml`", "text", "json"],
    );
    assert_mentions(
        &err("[migration]\nphase = \"done\"\n"),
        &["`done`", "warmup", "cutover"],
    );
    assert_mentions(
        &err("[memcached]\nservers = [\"m:1\"]\ndistribution = \"crc32\"\n"),
        &["`crc32`", "ketama"],
    );
}

#[test]
fn missing_tls_cert_is_named() {
    assert_mentions(
        &err("[tls]\nkey = \"k.pem\"\n"),
        &["missing field `cert`", "[tls]"],
    );
}

#[test]
fn load_reports_unreadable_file_with_its_path() {
    let e = Config::load(Path::new("/nonexistent/memshift.toml")).unwrap_err();
    assert!(matches!(e, ConfigError::Io { .. }));
    assert_mentions(
        &e.to_string(),
        &["/nonexistent/memshift.toml", "cannot read"],
    );
    assert!(!e.reason().contains("/nonexistent"), "{}", e.reason());
}

// ---- validation rules: one test each, the message names the key ----

#[test]
fn bad_listen_address_is_rejected() {
    let e = err_full("[server]\nlisten = \"localhost:11211\"\n[redis]\nshards = [\"a:1\"]\n");
    assert_mentions(
        &e,
        &["line 2", "server.listen", "localhost:11211", "IP:port"],
    );
    assert_mentions(
        &err_full("[server]\nlisten = \"127.0.0.1\"\n[redis]\nshards = [\"a:1\"]\n"),
        &["IP:port"],
    );
    assert_mentions(
        &err("[admin]\nlisten = \"127.0.0.1:99999\"\n"),
        &["admin.listen", "IP:port"],
    );
    assert_mentions(
        &err_full("[server]\ntls_listen = \"x\"\n[redis]\nshards = [\"a:1\"]\n"),
        &["server.tls_listen", "IP:port"],
    );
}

#[test]
fn listen_port_zero_is_rejected() {
    assert_mentions(
        &invalid(|c| c.server.listen = vec![tcp("127.0.0.1:0")]),
        &["server.listen", "port 0"],
    );
    assert_mentions(
        &invalid(|c| c.admin.listen = Some(addr("127.0.0.1:0"))),
        &["admin.listen", "port 0"],
    );
}

#[test]
fn no_listener_is_rejected() {
    let e = err_full("[redis]\nshards = [\"a:1\"]\n");
    assert_mentions(&e, &["server", "listen", "tls_listen"]);
}

#[test]
fn tls_listen_needs_tls_section() {
    assert_mentions(
        &invalid(|c| c.server.tls_listen = Some(tcp("127.0.0.1:11212"))),
        &["server.tls_listen", "[tls]"],
    );
}

#[test]
fn tls_listen_and_listen_must_differ() {
    let e = invalid(|c| {
        c.server.tls_listen = c.server.listen.first().cloned();
        c.tls = Some(TlsConfig {
            cert: "c".into(),
            key: "k".into(),
            client_ca: None,
            handshake_timeout_ms: 5000,
        });
    });
    assert_mentions(&e, &["server.tls_listen", "same address"]);
}

#[test]
fn admin_listen_must_not_clash_with_server() {
    assert_mentions(
        &invalid(|c| c.admin.listen = c.server.listen[0].tcp()),
        &["admin.listen", "already used"],
    );
}

#[test]
fn tls_paths_must_not_be_empty() {
    assert_mentions(
        &err("[tls]\ncert = \"\"\nkey = \"k\"\n"),
        &["tls.cert", "empty"],
    );
    assert_mentions(
        &err("[tls]\ncert = \"c\"\nkey = \"\"\n"),
        &["tls.key", "empty"],
    );
    assert_mentions(
        &err("[tls]\ncert = \"c\"\nkey = \"k\"\nclient_ca = \"\"\n"),
        &["tls.client_ca", "empty"],
    );
    assert_mentions(
        &err("[tls]\ncert = \"c\"\nkey = \"k\"\nhandshake_timeout_ms = 0\n"),
        &["tls.handshake_timeout_ms"],
    );
}

#[test]
fn no_shards_is_rejected() {
    let e = err_full("[server]\nlisten = \"127.0.0.1:11211\"\n");
    assert_mentions(&e, &["redis.shards", "no shards"]);
    assert_mentions(
        &invalid(|c| c.redis.shards.clear()),
        &["redis.shards", "no shards"],
    );
}

#[test]
fn bad_shard_addresses_are_rejected() {
    let cases = [
        ("127.0.0.1", "missing \":port\""),
        ("127.0.0.1:0", "port 0"),
        ("127.0.0.1:65536", "not a number"),
        ("127.0.0.1:http", "not a number"),
        (":6379", "empty host"),
        ("", "empty"),
        ("::1:6379", "brackets"),
        ("[::x]:6379", "IPv6"),
        ("bad host:6379", "whitespace"),
        ("bad/host:6379", "not a valid host"),
    ];
    for (a, why) in cases {
        let e = invalid(|c| c.redis.shards[0].addr = a.into());
        assert_mentions(&e, &["redis.shards[0]", "bad address", why]);
    }
    for good in ["[::1]:6379", "redis-0.redis.default.svc:6379", "10.1.2.3:1"] {
        let mut c = ok("");
        c.redis.shards[0].addr = good.into();
        c.validate().unwrap_or_else(|e| panic!("{good}: {e}"));
    }
}

#[test]
fn duplicate_shard_address_is_rejected() {
    let e = err_full(
        "[server]\nlisten = \"127.0.0.1:11211\"\n[redis]\nshards = [\"a:1\", \"b:1\", \"a:1\"]\n",
    );
    assert_mentions(
        &e,
        &[
            "redis.shards[2]",
            "duplicate shard address",
            "\"a:1\"",
            "redis.shards[0]",
        ],
    );
}

#[test]
fn duplicate_shard_name_is_rejected() {
    let e = err_full(
        "[server]\nlisten = \"127.0.0.1:11211\"\n[redis]\nshards = [{ addr = \"a:1\", name = \"r\" }, { addr = \"b:1\", name = \"r\" }]\n",
    );
    assert_mentions(&e, &["redis.shards[1]", "duplicate shard name", "\"r\""]);
    // A name equal to another shard's (unnamed) address collides on the ring too.
    let e = err_full(
        "[server]\nlisten = \"127.0.0.1:11211\"\n[redis]\nshards = [\"b:1\", { addr = \"a:1\", name = \"b:1\" }]\n",
    );
    assert_mentions(&e, &["redis.shards[1]", "duplicate shard name"]);
}

#[test]
fn empty_shard_name_is_rejected() {
    assert_mentions(
        &invalid(|c| c.redis.shards[0].name = Some(" ".into())),
        &["redis.shards[0].name"],
    );
}

#[test]
fn bad_shard_weight_is_rejected() {
    assert_mentions(
        &invalid(|c| c.redis.shards[0].weight = 0),
        &["redis.shards[0]", "bad weight 0"],
    );
    assert_mentions(
        &invalid(|c| c.redis.shards[0].weight = 1001),
        &["redis.shards[0]", "bad weight 1001"],
    );
    let mut c = ok("");
    c.redis.shards[0].weight = 1000;
    c.validate().unwrap();
}

#[test]
fn redis_client_cert_needs_cert_and_key() {
    let e = invalid(|c| {
        c.redis.tls = true;
        c.redis.tls_cert = Some("c.pem".into());
    });
    assert_mentions(&e, &["redis.tls_cert", "redis.tls_key"]);
    let e = invalid(|c| {
        c.redis.tls = true;
        c.redis.tls_key = Some("k.pem".into());
    });
    assert_mentions(&e, &["redis.tls_key", "redis.tls_cert"]);
}

#[test]
fn redis_tls_settings_need_tls_on() {
    assert_mentions(
        &invalid(|c| c.redis.tls_ca = Some("ca.pem".into())),
        &["redis.tls_ca", "redis.tls is false"],
    );
    assert_mentions(
        &invalid(|c| c.redis.tls_server_name = Some("r".into())),
        &["redis.tls_server_name", "redis.tls is false"],
    );
    let mut c = ok("");
    c.redis.tls = true;
    c.redis.tls_ca = Some("ca.pem".into());
    c.redis.tls_cert = Some("c.pem".into());
    c.redis.tls_key = Some("k.pem".into());
    c.validate().unwrap();
}

#[test]
fn redis_username_needs_password() {
    assert_mentions(
        &invalid(|c| c.redis.username = Some("u".into())),
        &["redis.username", "redis.password"],
    );
    assert_mentions(
        &invalid(|c| c.redis.password = Some(String::new())),
        &["redis.password", "empty"],
    );
    let mut c = ok("");
    c.redis.password = Some("p".into());
    c.validate().unwrap();
}

#[test]
fn connections_per_shard_defaults_to_one_per_worker_thread() {
    let resolved = |threads: &str, cps: &str| {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:11211\"\nthreads = {threads}\n[redis]\nshards = [\"127.0.0.1:6379\"]\n{cps}"
        );
        let c = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        c.redis.connections_per_shard
    };
    assert_eq!(resolved("1", ""), 1);
    assert_eq!(resolved("4", ""), 4);
    assert_eq!(resolved("100", ""), 64);
    assert_eq!(resolved("1", "connections_per_shard = 0"), 1);
    assert_eq!(resolved("1", "connections_per_shard = 3"), 3);
    assert_eq!(resolved("4", "connections_per_shard = 1"), 1);
}

#[test]
fn connections_per_shard_must_be_1_to_64() {
    assert_mentions(
        &invalid(|c| c.redis.connections_per_shard = 0),
        &["redis.connections_per_shard", "1 to 64"],
    );
    assert_mentions(
        &invalid(|c| c.redis.connections_per_shard = 65),
        &["redis.connections_per_shard", "65"],
    );
}

#[test]
fn timeouts_must_be_positive() {
    assert_mentions(&invalid(|c| c.redis.timeout_ms = 0), &["redis.timeout_ms"]);
    assert_mentions(
        &invalid(|c| c.redis.connect_timeout_ms = 0),
        &["redis.connect_timeout_ms"],
    );
    assert_mentions(
        &invalid(|c| c.redis.health_check_interval_ms = 0),
        &["redis.health_check_interval_ms"],
    );
    assert_mentions(
        &invalid(|c| c.redis.eject_after_failures = 0),
        &["redis.eject_after_failures"],
    );
    assert_mentions(
        &invalid(|c| c.redis.max_inflight_per_connection = 0),
        &["redis.max_inflight_per_connection"],
    );
    assert_mentions(
        &err(&format!("{LEGACY}timeout_ms = 0\n")),
        &["memcached.timeout_ms"],
    );
}

#[test]
fn vnodes_must_be_1_to_10000() {
    assert_mentions(
        &invalid(|c| c.ring.vnodes = 0),
        &["ring.vnodes", "1 to 10000"],
    );
    assert_mentions(
        &invalid(|c| c.ring.vnodes = 10_001),
        &["ring.vnodes", "10001"],
    );
}

#[test]
fn ring_size_is_bounded() {
    let e = invalid(|c| {
        c.ring.vnodes = 10_000;
        c.redis.shards[0].weight = 1000;
        c.redis.shards.push(ShardConfig {
            addr: "b:1".into(),
            weight: 1000,
            name: None,
            master: None,
        });
    });
    assert_mentions(&e, &["ring.vnodes", "ring points"]);
}

#[test]
fn hash_tag_must_be_two_distinct_chars() {
    for bad in ["{", "{{", "{}}", "é}", " }", ""] {
        let e = invalid(|c| c.ring.hash_tag = Some(bad.into()));
        assert_mentions(&e, &["ring.hash_tag", "two different"]);
    }
    let c = ok("[ring]\nhash_tag = \"{}\"\nseed = 7\nvnodes = 40\n");
    assert_eq!(
        c.ring_config(),
        memshift_ring::RingConfig {
            vnodes: 40,
            seed: 7,
            hash_tag: Some((b'{', b'}'))
        }
    );
    assert_eq!(ok("").ring_config().hash_tag, None);
}

#[test]
fn percentages_must_be_0_to_100_and_finite() {
    assert_mentions(
        &invalid(|c| c.migration.canary_percent = 100.5),
        &["migration.canary_percent", "0..=100"],
    );
    assert_mentions(
        &invalid(|c| c.migration.canary_percent = -1.0),
        &["migration.canary_percent"],
    );
    assert_mentions(
        &err("[migration]\ncompare_percent = nan\n"),
        &["migration.compare_percent"],
    );
    assert_mentions(
        &err("[migration]\nrollback_miss_delta_pp = inf\n"),
        &["migration.rollback_miss_delta_pp"],
    );
    let mut c = ok("");
    c.migration.canary_percent = 100.0;
    c.migration.compare_percent = 0.0;
    c.validate().unwrap();
}

#[test]
fn phases_but_redis_need_memcached_servers() {
    for phase in ["memcached", "warmup", "canary", "cutover"] {
        let e = err(&format!("[migration]\nphase = \"{phase}\"\n"));
        assert_mentions(&e, &["migration.phase", phase, "[memcached]"]);
        let e = err(&format!(
            "[migration]\nphase = \"{phase}\"\n[memcached]\nservers = []\n"
        ));
        assert_mentions(&e, &["memcached.servers", "empty", phase]);
        ok(&format!("[migration]\nphase = \"{phase}\"\n{LEGACY}"));
    }
    // The redis phase needs no legacy pool.
    ok("[memcached]\nservers = []\n");
}

#[test]
fn duplicate_memcached_server_is_rejected() {
    let e = err("[memcached]\nservers = [\"m:1\", { addr = \"m:1\", weight = 2 }]\n");
    assert_mentions(&e, &["memcached.servers[1]", "duplicate server", "\"m:1\""]);
}

#[test]
fn bad_memcached_server_is_rejected() {
    assert_mentions(
        &err("[memcached]\nservers = [\"m\"]\n"),
        &["memcached.servers[0]", "bad address"],
    );
    assert_mentions(
        &err("[memcached]\nservers = [{ addr = \"m:1\", weight = 0 }]\n"),
        &["memcached.servers[0]", "bad weight"],
    );
    assert_mentions(
        &err(&format!("{LEGACY}connections_per_server = 0\n")),
        &["memcached.connections_per_server"],
    );
}

#[test]
fn shadow_queue_and_breaker_must_be_positive() {
    assert_mentions(
        &invalid(|c| c.migration.shadow_queue = 0),
        &["migration.shadow_queue", "at least 1"],
    );
    assert_mentions(
        &invalid(|c| c.migration.breaker_failures = 0),
        &["migration.breaker_failures", "at least 1"],
    );
    assert_mentions(
        &invalid(|c| c.migration.breaker_cooldown_ms = 0),
        &["migration.breaker_cooldown_ms"],
    );
    assert_mentions(
        &invalid(|c| c.migration.rollback_window_s = 0),
        &["migration.rollback_window_s"],
    );
    assert_mentions(
        &invalid(|c| c.migration.rollback_min_samples = 0),
        &["migration.rollback_min_samples"],
    );
}

#[test]
fn max_item_size_mirrors_memcached_range() {
    assert_mentions(
        &invalid(|c| c.server.max_item_size = 1023),
        &["server.max_item_size", "1023", "1 KiB"],
    );
    assert_mentions(
        &invalid(|c| c.server.max_item_size = (1 << 30) + 1),
        &["server.max_item_size", "1 GiB"],
    );
    for good in [1024, 1 << 30] {
        let mut c = ok("");
        c.server.max_item_size = good;
        c.validate().unwrap();
    }
}

#[test]
fn server_limits_are_checked() {
    assert_mentions(
        &invalid(|c| c.server.max_connections = 0),
        &["server.max_connections", "at least 1"],
    );
    assert_mentions(
        &invalid(|c| c.server.max_pending_replies = 0),
        &["server.max_pending_replies"],
    );
    assert_mentions(
        &invalid(|c| c.server.drain_quiet_ms = 0),
        &["server.drain_quiet_ms", "0"],
    );
    assert_mentions(
        &invalid(|c| c.server.drain_quiet_ms = 60_001),
        &["server.drain_quiet_ms", "60001"],
    );
    assert_mentions(
        &invalid(|c| c.server.max_line_length = 100),
        &["server.max_line_length", "100"],
    );
    assert_mentions(
        &invalid(|c| c.server.threads = 5000),
        &["server.threads", "5000"],
    );
}

#[test]
fn sasl_needs_a_readable_credentials_file() {
    assert_mentions(
        &invalid(|c| c.server.sasl = true),
        &["server.sasl", "sasl_credentials_file"],
    );
    assert_mentions(
        &invalid(|c| {
            c.server.sasl = true;
            c.server.sasl_credentials_file = Some("/nonexistent/sasl.txt".into());
        }),
        &["server.sasl_credentials_file", "/nonexistent/sasl.txt"],
    );
    let dir = std::env::temp_dir().join(format!("memshift-sasl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.txt");
    std::fs::write(&bad, "alice:x\nno colon here\n").unwrap();
    let e = invalid(|c| {
        c.server.sasl = true;
        c.server.sasl_credentials_file = Some(bad.clone());
    });
    assert_mentions(&e, &["line 2"]);
    assert!(!e.contains("alice:x"), "a password shows in: {e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn log_level_must_be_a_level_or_filter() {
    for bad in ["verbose", "", "warning", "info,memshift=loud", "memshift"] {
        let e = invalid(|c| c.log.level = bad.into());
        assert_mentions(&e, &["log.level", "not a level"]);
    }
    for good in [
        "debug",
        "WARN",
        "off",
        "info,memshift_proxy=debug",
        "warn,tokio=error",
    ] {
        let mut c = ok("");
        c.log.level = good.into();
        c.validate().unwrap_or_else(|e| panic!("{good}: {e}"));
    }
}

// ---- reload, ring, rendering ----

#[test]
fn restart_required_changes_lists_only_startup_settings() {
    let a = ok("");
    let mut b = a.clone();
    b.redis.shards.push(ShardConfig {
        addr: "b:1".into(),
        weight: 1,
        name: None,
        master: None,
    });
    b.migration.phase = Phase::Redis;
    b.migration.canary_percent = 50.0;
    b.server.idle_timeout_ms = 30_000;
    assert!(a.restart_required_changes(&b).is_empty());

    b.server.listen = vec![tcp("127.0.0.1:11311")];
    b.server.threads = 4;
    b.admin.listen = None;
    b.log.format = LogFormat::Json;
    assert_eq!(
        a.restart_required_changes(&b),
        [
            "server.listen",
            "server.threads",
            "admin.listen",
            "log.format"
        ]
    );
}

#[test]
fn rendered_settings_parse_back_to_the_same_config() {
    let c = ok(r#"
        [tls]
        cert = "c.pem"
        key = "k.pem"
        [ring]
        hash_tag = "{}"
        [memcached]
        servers = ["m:1", { addr = "m:2", weight = 2 }]
        [migration]
        compare_percent = 0.25
        "#);
    let text = c.render_resolved();
    let back = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back, c);
    // Defaults are shown, not hidden.
    assert!(text.contains("max_connections = 100000"), "{text}");
    assert!(text.contains("# tls_listen not set"), "{text}");
}

#[test]
fn password_is_never_shown() {
    let c = ok("").clone();
    let mut c = c;
    c.redis.username = Some("app".into());
    c.redis.password = Some("hunter2".into());
    c.validate().unwrap();
    let rendered = c.render_resolved();
    assert!(rendered.contains("password = \"***\""), "{rendered}");
    assert!(!rendered.contains("hunter2"));
    let debug = format!("{c:?} {c:#?}");
    assert!(!debug.contains("hunter2"), "{debug}");
    assert!(debug.contains("***"));
}

#[test]
fn phase_names_round_trip() {
    for p in Phase::ALL {
        assert_eq!(p.as_str().parse::<Phase>(), Ok(p));
        assert_eq!(p.to_string(), p.as_str());
    }
    assert!("done".parse::<Phase>().unwrap_err().contains("done"));
    assert!(!Phase::Redis.needs_memcached());
    assert!(Phase::Cutover.needs_memcached());
}

#[test]
fn warnings_point_out_settings_without_effect() {
    let c = ok("[tls]\ncert = \"c\"\nkey = \"k\"\n[migration]\ncompare_percent = 10\n[memcached]\nservers = [\"m:1\"]\n");
    let w = c.warnings().join("\n");
    assert!(w.contains("tls_listen"), "{w}");
    assert!(w.contains("compare_percent"), "{w}");
    // A legacy pool kept in phase "redis" (ready for a rollback) is normal.
    assert!(!w.contains("[memcached]"), "{w}");
    assert!(ok("").warnings().is_empty());
}

/// `config/example.toml` must show every key (set or commented out), each
/// with a comment: derived from the resolved rendering, which lists them all.
#[test]
fn example_shows_every_key_with_a_comment() {
    use std::collections::{BTreeMap, BTreeSet};
    fn keys_by_section(text: &str, commented_keys: bool) -> BTreeMap<String, BTreeSet<String>> {
        let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut section = String::new();
        for line in text.lines().map(str::trim) {
            if let Some(h) = line.strip_prefix('[') {
                section = h.split(']').next().unwrap_or("").to_owned();
                continue;
            }
            let body = match line.strip_prefix("# ") {
                Some(b) if commented_keys => b,
                Some(_) => continue,
                None => line,
            };
            let key = body
                .split([' ', '='])
                .next()
                .unwrap_or("")
                .trim_end_matches(" not set");
            if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                map.entry(section.clone())
                    .or_default()
                    .insert(key.to_owned());
            }
        }
        map
    }
    let src = include_str!("../../../../config/example.toml");
    let example_cfg = Config::from_toml_str(src).unwrap();
    let mut full = example_cfg.clone();
    full.redis.username = Some("u".into());
    full.redis.password = Some("p".into());
    let rendered = keys_by_section(&full.render_resolved(), true);
    let shown = keys_by_section(src, true);
    for (section, keys) in &rendered {
        for key in keys {
            assert!(
                shown.get(section).is_some_and(|s| s.contains(key)),
                "config/example.toml lacks [{section}] {key}"
            );
        }
    }
    for line in src.lines().filter(|l| l.contains(" = ")) {
        assert!(line.contains('#'), "no comment on example line {line:?}");
    }
}

const CLUSTER: &str = r#"
[server]
listen = "127.0.0.1:11211"
[redis]
mode = "cluster"
cluster_nodes = ["127.0.0.1:7000", "127.0.0.1:7001"]
"#;

#[test]
fn cluster_mode_parses_with_seeds_and_defaults() {
    let c = Config::from_toml_str(CLUSTER).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.redis.mode, RedisMode::Cluster);
    assert_eq!(c.redis.cluster_nodes, ["127.0.0.1:7000", "127.0.0.1:7001"]);
    assert_eq!(c.redis.cluster_refresh_ms, 5000);
    assert!(c.redis.shards.is_empty());
    // Standalone stays the default.
    assert_eq!(ok("").redis.mode, RedisMode::Standalone);
}

#[test]
fn cluster_mode_errors_are_named() {
    let e = err_full("[server]\nlisten = \"127.0.0.1:1\"\n[redis]\nmode = \"cluster\"\n");
    assert_mentions(&e, &["redis.cluster_nodes", "no seed"]);
    let e = err_full(&format!("{CLUSTER}shards = [\"127.0.0.1:6379\"]\n"));
    assert_mentions(&e, &["redis.shards", "cluster_nodes", "remove one"]);
    let e = err("cluster_nodes = [\"127.0.0.1:7000\"]\n");
    assert_mentions(&e, &["redis.cluster_nodes", "mode = \"cluster\""]);
    let e = err_full(
        "[server]\nlisten = \"127.0.0.1:1\"\n[redis]\nmode = \"cluster\"\ncluster_nodes = [\"nope\"]\n",
    );
    assert_mentions(&e, &["redis.cluster_nodes[0]", "bad address"]);
    let e = err_full(&format!("{CLUSTER}on_shard_down = \"eject\"\n"));
    assert_mentions(&e, &["redis.on_shard_down", "cluster"]);
    // TLS to the cluster's nodes is allowed; its keys keep their rules.
    let c =
        Config::from_toml_str(&format!("{CLUSTER}tls = true\n")).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.redis.tls);
    let e = err_full(&format!("{CLUSTER}tls_ca = \"/ca.pem\"\n"));
    assert_mentions(&e, &["redis.tls_ca", "tls = true"]);
    let e = err_full(&CLUSTER.replace("\"cluster\"", "\"sentinel\""));
    assert_mentions(&e, &["standalone", "cluster"]);
}

#[test]
fn cluster_settings_render_and_parse_back() {
    let c = Config::from_toml_str(CLUSTER).unwrap_or_else(|e| panic!("{e}"));
    let text = c.render_resolved();
    assert!(text.contains("mode = \"cluster\""), "{text}");
    let back = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back.redis, c.redis);
}

// ---- RESP listener ----

#[test]
fn resp_listeners_are_off_by_default_and_validated() {
    let c = ok("");
    assert_eq!(c.server.resp_listen, None);
    assert_eq!(c.server.resp_tls_listen, None);
    assert_eq!(c.server.resp_password, None);
    assert_eq!(c.server.resp_max_bulk_len, 512 * 1024 * 1024);
    assert_mentions(
        &invalid(|c| c.server.resp_listen = c.server.listen.first().cloned()),
        &["server.resp_listen", "memcached listener"],
    );
    assert_mentions(
        &invalid(|c| c.server.resp_tls_listen = Some(tcp("127.0.0.1:6380"))),
        &["server.resp_tls_listen", "[tls]"],
    );
    assert_mentions(
        &invalid(|c| c.server.resp_password = Some("has space".into())),
        &["server.resp_password"],
    );
    assert_mentions(
        &invalid(|c| c.server.resp_max_bulk_len = 10),
        &["server.resp_max_bulk_len"],
    );
    assert_mentions(
        &invalid(|c| {
            c.server.resp_listen = Some(tcp("127.0.0.1:6379"));
            c.admin.listen = c.server.resp_listen.as_ref().and_then(ListenAddr::tcp);
        }),
        &["admin.listen", "already used"],
    );
    let mut c = ok("");
    c.server.resp_listen = Some(tcp("127.0.0.1:6379"));
    c.server.resp_password = Some("s3cret".into());
    c.validate().expect("resp_listen with a password");
}

#[test]
fn plaintext_resp_is_no_open_door_next_to_tls_only_memcached() {
    let e = invalid(|c| {
        c.tls = Some(TlsConfig {
            cert: "c.pem".into(),
            key: "k.pem".into(),
            client_ca: None,
            handshake_timeout_ms: 5000,
        });
        c.server.tls_listen = Some(tcp("127.0.0.1:11212"));
        c.server.listen = Vec::new();
        c.server.resp_listen = Some(tcp("127.0.0.1:6379"));
    });
    assert_mentions(&e, &["server.resp_listen", "resp_password"]);
}

#[test]
fn resp_listen_keys_parse() {
    let redis = "[redis]\nshards = [\"127.0.0.1:6379\"]\n";
    let c = Config::from_toml_str(&format!(
        "[server]\nlisten = \"127.0.0.1:11211\"\nresp_listen = \"127.0.0.1:6390\"\nresp_password = \"pw\"\n{redis}"
    ))
    .expect("valid");
    assert_eq!(c.server.resp_listen, Some(tcp("127.0.0.1:6390")));
    assert_mentions(
        &err_full(&format!(
            "[server]\nlisten = \"127.0.0.1:11211\"\nresp_listen = \"nope\"\n{redis}"
        )),
        &["server.resp_listen", "IP:port"],
    );
}

#[test]
fn read_errors_as_misses_parses_and_is_live() {
    let off = MIN.replace("[redis]", "[redis]\nread_errors_as_misses = false");
    let c = Config::from_toml_str(&off).expect("valid");
    assert!(!c.redis.read_errors_as_misses);
    assert!(format!("{:?}", c.redis).contains("read_errors_as_misses: false"));
    // Applied by a reload, no restart.
    assert!(ok("").restart_required_changes(&c).is_empty());
    let bad = MIN.replace("[redis]", "[redis]\nread_errors_as_misses = \"yes\"");
    assert!(Config::from_toml_str(&bad).is_err());
}

#[test]
fn pubsub_shard_names_a_shard_and_max_subscribers_is_at_least_one() {
    let shards = |pick: &str| {
        format!(
            "[server]\nlisten = \"127.0.0.1:1\"\n[redis]\nshards = [\"127.0.0.1:7000\", {{ addr = \"127.0.0.1:7001\", name = \"b\" }}, \"127.0.0.1:7002\"]\n{pick}"
        )
    };
    let settled = |pick: &str| {
        let c = Config::from_toml_str(&shards(pick)).unwrap_or_else(|e| panic!("{e}"));
        crate::proxy::Settings::from_config(&c).pubsub_shard
    };
    assert_eq!(settled(""), 0);
    assert_eq!(settled("pubsub_shard = \"b\"\n"), 1);
    assert_eq!(settled("pubsub_shard = \"127.0.0.1:7002\"\n"), 2);
    assert_eq!(settled("pubsub_shard = \"1\"\n"), 1);
    let e = err_full(&shards("pubsub_shard = \"nope\"\n"));
    assert_mentions(
        &e,
        &["redis.pubsub_shard", "\"nope\"", "none of redis.shards"],
    );
    let e = err_full(&format!("{CLUSTER}pubsub_shard = \"0\"\n"));
    assert_mentions(&e, &["redis.pubsub_shard", "mode = \"cluster\""]);
    assert_eq!(ok("").redis.max_subscriber_connections, 1024);
    let e = invalid(|c| c.redis.max_subscriber_connections = 0);
    assert_mentions(&e, &["redis.max_subscriber_connections"]);
}

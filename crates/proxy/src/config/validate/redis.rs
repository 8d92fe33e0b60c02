//! `[redis]`: shards (addresses, unix sockets or Sentinel masters), a
//! cluster's seeds, and the settings every mode shares.

use std::collections::HashMap;

use super::*;

/// `mode = "cluster"`: seeds instead of shards.
fn redis_cluster(r: &RedisConfig) -> Check {
    if !r.sentinels.is_empty() {
        return Err("redis.sentinels: not used with mode = \"cluster\" (a Redis Cluster fails over itself); remove it".into());
    }
    if r.read_from != crate::config::ReadFrom::Primary {
        return Err("redis.read_from: \"replica_preferred\" is not supported with mode = \"cluster\" yet (replica reads need Sentinel shards); use \"primary\"".into());
    }
    if !r.shards.is_empty() {
        return Err("redis.shards: not used with mode = \"cluster\" (the cluster's nodes are discovered from redis.cluster_nodes); remove one of the two".into());
    }
    if r.cluster_nodes.is_empty() {
        return Err("redis.cluster_nodes: no seed nodes; list at least one cluster node \"host:port\" with mode = \"cluster\"".into());
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, a) in r.cluster_nodes.iter().enumerate() {
        let key = format!("redis.cluster_nodes[{i}]");
        check_host_port(a).map_err(|e| format!("{key}: bad address {a:?}: {e}"))?;
        if let Some(j) = seen.insert(a, i) {
            return Err(format!(
                "{key}: duplicate seed {a:?} (also redis.cluster_nodes[{j}])"
            ));
        }
    }
    at_least("redis.cluster_refresh_ms", r.cluster_refresh_ms, 100)?;
    if r.on_shard_down == crate::config::ShardDownPolicy::Eject {
        return Err("redis.on_shard_down: \"eject\" does not apply with mode = \"cluster\" (the cluster fails over to a replica itself); use \"fail\"".into());
    }
    if r.pubsub_shard.is_some() {
        return Err("redis.pubsub_shard: not used with mode = \"cluster\" (Redis Cluster propagates PUBLISH to every node); remove it".into());
    }
    redis_common(r)
}

pub(super) fn redis(c: &Config) -> Check {
    let r = &c.redis;
    if r.mode == RedisMode::Cluster {
        return redis_cluster(r);
    }
    if !r.cluster_nodes.is_empty() {
        return Err(
            "redis.cluster_nodes: set only with mode = \"cluster\"; standalone shards go in redis.shards"
                .into(),
        );
    }
    if r.shards.is_empty() {
        return Err(
            "redis.shards: no shards; list at least one Redis \"host:port\" in [redis] shards"
                .into(),
        );
    }
    sentinel_shards(r)?;
    let mut addrs: HashMap<&str, usize> = HashMap::new();
    let mut ids: HashMap<&str, usize> = HashMap::new();
    for (i, s) in r.shards.iter().enumerate() {
        let key = format!("redis.shards[{i}]");
        if s.master.is_some() {
            check_weight(&key, s.weight)?;
            if let Some(j) = ids.insert(s.id(), i) {
                return Err(format!(
                    "{key}: duplicate Sentinel master {:?} (also redis.shards[{j}])",
                    s.id()
                ));
            }
            continue;
        }
        check_backend_addr(&s.addr).map_err(|e| format!("{key}: bad address {:?}: {e}", s.addr))?;
        if r.tls
            && s.addr
                .starts_with(memshift_pipeline::transport::UNIX_PREFIX)
        {
            return Err(format!(
                "{key}: redis.tls is on, but {:?} is a unix socket (TLS is for TCP shards; a unix socket never leaves the host)",
                s.addr
            ));
        }
        check_weight(&key, s.weight)?;
        if let Some(name) = &s.name {
            if name.trim().is_empty() || name.trim() != name {
                return Err(format!(
                    "{key}.name: {name:?} must be non-empty without surrounding spaces"
                ));
            }
        }
        if let Some(j) = addrs.insert(&s.addr, i) {
            return Err(format!(
                "{key}: duplicate shard address {:?} (also redis.shards[{j}])",
                s.addr
            ));
        }
        // Names and unnamed addresses share one namespace: the ring ids.
        if let Some(j) = ids.insert(s.id(), i) {
            return Err(format!(
                "{key}: duplicate shard name {:?} (also the id of redis.shards[{j}])",
                s.id()
            ));
        }
    }
    if let Some(name) = &r.pubsub_shard {
        if !r
            .shards
            .iter()
            .enumerate()
            .any(|(i, s)| s.is_named(i, name))
        {
            return Err(format!("redis.pubsub_shard: {name:?} is none of redis.shards (give a shard's name, address or index)"));
        }
    }
    redis_common(r)
}

/// Sentinel-managed shards: every shard a `{ master = "…" }` with
/// `redis.sentinels` set, or none (the two forms are never mixed).
fn sentinel_shards(r: &RedisConfig) -> Check {
    let masters = r.shards.iter().filter(|s| s.master.is_some()).count();
    if masters > 0 && masters < r.shards.len() {
        return Err(format!(
            "redis.shards: mixes {masters} Sentinel master(s) ({{ master = \"…\" }}) with {} address(es); use one form for every shard",
            r.shards.len() - masters
        ));
    }
    if masters == 0 {
        if !r.sentinels.is_empty() {
            return Err("redis.sentinels: set, but no shard names a Sentinel master; write shards as { master = \"name\" } or remove redis.sentinels".into());
        }
        if r.read_from != crate::config::ReadFrom::Primary {
            return Err("redis.read_from: \"replica_preferred\" needs Sentinel shards ({ master = \"…\" }): the replicas are the ones Sentinel lists; use \"primary\"".into());
        }
        if r.sentinel_username.is_some() || r.sentinel_password.is_some() {
            return Err(
                "redis.sentinel_password: set without Sentinel shards (redis.sentinels)".into(),
            );
        }
        return Ok(());
    }
    if r.sentinels.is_empty() {
        return Err("redis.sentinels: empty; Sentinel master shards ({ master = \"…\" }) need at least one sentinel \"host:port\"".into());
    }
    for (i, s) in r.shards.iter().enumerate() {
        let name = s.master.as_deref().unwrap_or_default();
        if name.is_empty() || name.trim() != name || name.contains(char::is_whitespace) {
            return Err(format!(
                "redis.shards[{i}].master: {name:?} must be non-empty without spaces"
            ));
        }
    }
    for (i, a) in r.sentinels.iter().enumerate() {
        let key = format!("redis.sentinels[{i}]");
        check_host_port(a).map_err(|e| format!("{key}: bad address {a:?}: {e}"))?;
        if let Some(j) = r.sentinels[..i].iter().position(|b| b == a) {
            return Err(format!(
                "{key}: duplicate sentinel {a:?} (also redis.sentinels[{j}])"
            ));
        }
    }
    match (&r.sentinel_username, &r.sentinel_password) {
        (Some(_), None) => Err(
            "redis.sentinel_username: set without redis.sentinel_password (ACL AUTH needs both)"
                .into(),
        ),
        (Some(u), _) if u.is_empty() => Err("redis.sentinel_username: empty".into()),
        (_, Some(p)) if p.is_empty() => Err("redis.sentinel_password: empty".into()),
        // The primary's address is only known at connect time, so its
        // certificate name cannot default to the host of a configured addr.
        _ if r.tls && r.tls_server_name.is_none() => Err(
            "redis.tls_server_name: required with redis.tls and Sentinel shards (the primaries' addresses change; name the certificate they all carry)"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// Connection settings both modes share.
fn redis_common(r: &RedisConfig) -> Check {
    in_range(
        "redis.connections_per_shard",
        r.connections_per_shard as u64,
        1,
        MAX_CONNECTIONS_PER_BACKEND as u64,
    )?;
    at_least("redis.timeout_ms", r.timeout_ms, 1)?;
    at_least("redis.connect_timeout_ms", r.connect_timeout_ms, 1)?;
    at_least(
        "redis.eject_after_failures",
        r.eject_after_failures.into(),
        1,
    )?;
    at_least(
        "redis.health_check_interval_ms",
        r.health_check_interval_ms,
        1,
    )?;
    at_least(
        "redis.max_inflight_per_connection",
        r.max_inflight_per_connection as u64,
        1,
    )?;
    at_least(
        "redis.max_dedicated_connections",
        r.max_dedicated_connections as u64,
        1,
    )?;
    at_least(
        "redis.max_subscriber_connections",
        r.max_subscriber_connections as u64,
        1,
    )?;
    match (&r.username, &r.password) {
        (Some(_), None) => {
            return Err("redis.username: set without redis.password (ACL AUTH needs both)".into())
        }
        (Some(u), _) if u.is_empty() => return Err("redis.username: empty".into()),
        (_, Some(p)) if p.is_empty() => return Err("redis.password: empty".into()),
        _ => {}
    }
    match (&r.tls_cert, &r.tls_key) {
        (Some(_), None) => {
            return Err(
                "redis.tls_cert: set without redis.tls_key; a client certificate needs both".into(),
            )
        }
        (None, Some(_)) => {
            return Err(
                "redis.tls_key: set without redis.tls_cert; a client certificate needs both".into(),
            )
        }
        _ => {}
    }
    let tls_only = [
        ("redis.tls_ca", r.tls_ca.is_some()),
        ("redis.tls_cert", r.tls_cert.is_some()),
        ("redis.tls_key", r.tls_key.is_some()),
        ("redis.tls_server_name", r.tls_server_name.is_some()),
    ];
    for (key, set) in tls_only {
        if set && !r.tls {
            return Err(format!(
                "{key}: set but redis.tls is false; set redis.tls = true or remove it"
            ));
        }
    }
    for (key, p) in [
        ("redis.tls_ca", &r.tls_ca),
        ("redis.tls_cert", &r.tls_cert),
        ("redis.tls_key", &r.tls_key),
    ] {
        if let Some(p) = p {
            non_empty_path(key, p)?;
        }
    }
    if r.tls_server_name.as_deref() == Some("") {
        return Err("redis.tls_server_name: empty".into());
    }
    Ok(())
}

//! Config validation: every rule returns one line that starts with the key.

use std::collections::HashMap;
use std::net::Ipv6Addr;

use super::listen::{check_socket_path, parse_socket_mode};
use super::{Config, ListenAddr, Phase, RedisConfig, RedisMode};

/// memcached's `-I` range (ITEM_SIZE_MAX_LOWER_LIMIT / _UPPER_LIMIT).
const MIN_ITEM_SIZE: usize = 1024;
const MAX_ITEM_SIZE: usize = 1024 * 1024 * 1024;
const MAX_WEIGHT: u32 = 1000;
const MAX_VNODES: u32 = 10_000;
/// Bounds the ring's memory (points = vnodes × total weight).
const MAX_RING_POINTS: u64 = 10_000_000;
const MAX_CONNECTIONS_PER_BACKEND: usize = 64;
/// A `set` line with a 250-byte key and every numeric field fits in 512.
const MIN_LINE_LENGTH: usize = 512;
const MAX_LINE_LENGTH: usize = 1024 * 1024;
const MAX_THREADS: usize = 1024;
/// Longest quiet period a draining connection waits for (a minute).
const MAX_DRAIN_QUIET_MS: u64 = 60_000;
const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

type Check = Result<(), String>;

mod redis;
use redis::redis;

pub(super) fn validate(c: &Config) -> Check {
    server(c)?;
    log(c)?;
    admin(c)?;
    tls(c)?;
    redis(c)?;
    ring(c)?;
    memcached(c)?;
    migration(c)?;
    super::near_cache::validate(&c.near_cache)
}

fn server(c: &Config) -> Check {
    let s = &c.server;
    if s.listen.is_empty() && s.tls_listen.is_none() {
        return Err("server: neither listen nor tls_listen is set; set at least one (e.g. listen = \"127.0.0.1:11211\")".into());
    }
    for (i, a) in s.listen.iter().enumerate() {
        listen_port("server.listen", Some(a))?;
        if s.listen[..i].contains(a) {
            return Err(format!("server.listen: {a} is listed twice"));
        }
    }
    listen_port("server.tls_listen", s.tls_listen.as_ref())?;
    if s.tls_listen.as_ref().is_some_and(|a| s.listen.contains(a)) {
        return Err("server.tls_listen: same address as server.listen".into());
    }
    if s.tls_listen.is_some() && c.tls.is_none() {
        return Err("server.tls_listen: needs a [tls] section with cert and key".into());
    }
    match (&s.sasl, &s.sasl_credentials_file) {
        (true, None) => {
            return Err(
                "server.sasl: needs server.sasl_credentials_file (user:password lines)".into(),
            )
        }
        (true, Some(path)) => {
            non_empty_path("server.sasl_credentials_file", path)?;
            crate::sasl::Credentials::load(path).map_err(|e| e.to_string())?;
        }
        (false, _) => {}
    }
    resp(c)?;
    parse_socket_mode(&s.unix_socket_mode).map_err(|e| format!("server.unix_socket_mode: {e}"))?;
    at_least("server.max_connections", s.max_connections as u64, 1)?;
    if !(MIN_ITEM_SIZE..=MAX_ITEM_SIZE).contains(&s.max_item_size) {
        return Err(format!(
            "server.max_item_size: {} is out of range; must be {MIN_ITEM_SIZE} (1 KiB) to {MAX_ITEM_SIZE} (1 GiB) bytes, like memcached -I",
            s.max_item_size
        ));
    }
    if s.threads > MAX_THREADS {
        return Err(format!(
            "server.threads: {} is too many; must be 0 (one per core) to {MAX_THREADS}",
            s.threads
        ));
    }
    if !(1..=MAX_DRAIN_QUIET_MS).contains(&s.drain_quiet_ms) {
        return Err(format!(
            "server.drain_quiet_ms: {} is out of range; must be 1 to {MAX_DRAIN_QUIET_MS}",
            s.drain_quiet_ms
        ));
    }
    at_least(
        "server.max_pending_replies",
        s.max_pending_replies as u64,
        1,
    )?;
    at_least(
        "server.max_pending_bytes",
        s.max_pending_bytes as u64,
        1024 * 1024,
    )?;
    if !(MIN_LINE_LENGTH..=MAX_LINE_LENGTH).contains(&s.max_line_length) {
        return Err(format!(
            "server.max_line_length: {} is out of range; must be {MIN_LINE_LENGTH} to {MAX_LINE_LENGTH} bytes",
            s.max_line_length
        ));
    }
    Ok(())
}

/// The RESP listeners: distinct addresses, `[tls]` for the TLS one, and
/// no open door: with a TLS memcached listener (the operator secured the
/// memcached side), a plaintext RESP listener needs `resp_password`.
fn resp(c: &Config) -> Check {
    let s = &c.server;
    listen_port("server.resp_listen", s.resp_listen.as_ref())?;
    listen_port("server.resp_tls_listen", s.resp_tls_listen.as_ref())?;
    for (key, addr) in [
        ("server.resp_listen", &s.resp_listen),
        ("server.resp_tls_listen", &s.resp_tls_listen),
    ] {
        if let Some(a) = addr {
            if s.listen.contains(a) || Some(a) == s.tls_listen.as_ref() {
                return Err(format!(
                    "{key}: {a} is already used by a memcached listener"
                ));
            }
        }
    }
    if s.resp_listen.is_some() && s.resp_listen == s.resp_tls_listen {
        return Err("server.resp_tls_listen: same address as server.resp_listen".into());
    }
    if s.resp_tls_listen.is_some() && c.tls.is_none() {
        return Err("server.resp_tls_listen: needs a [tls] section with cert and key".into());
    }
    if s.resp_listen.is_some()
        && s.tls_listen.is_some()
        && s.listen.is_empty()
        && s.resp_password.is_none()
    {
        return Err("server.resp_listen: the memcached side is TLS-only, so a plaintext RESP listener would be an open door; set server.resp_password or use server.resp_tls_listen".into());
    }
    if let Some(p) = &s.resp_password {
        if p.is_empty() || p.len() > 512 || p.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err("server.resp_password: 1 to 512 characters, no spaces".into());
        }
    }
    if !(1024..=MAX_ITEM_SIZE).contains(&s.resp_max_bulk_len) {
        return Err(format!(
            "server.resp_max_bulk_len: {} is out of range; must be 1024 to {MAX_ITEM_SIZE} bytes",
            s.resp_max_bulk_len
        ));
    }
    Ok(())
}

fn log(c: &Config) -> Check {
    check_log_level(&c.log.level).map_err(|e| format!("log.level: {e}"))
}

fn admin(c: &Config) -> Check {
    listen_port("admin.listen", c.admin.listen.map(ListenAddr::Tcp).as_ref())?;
    if let Some(a) = c.admin.listen {
        let used = c.server.listeners();
        if used.iter().any(|(_, l)| l.tcp() == Some(a)) {
            return Err(format!(
                "admin.listen: {a} is already used by a server listener"
            ));
        }
    }
    Ok(())
}

fn tls(c: &Config) -> Check {
    let Some(t) = &c.tls else { return Ok(()) };
    // Existence and PEM contents are checked when the TLS code loads them.
    non_empty_path("tls.cert", &t.cert)?;
    non_empty_path("tls.key", &t.key)?;
    if let Some(ca) = &t.client_ca {
        non_empty_path("tls.client_ca", ca)?;
    }
    at_least("tls.handshake_timeout_ms", t.handshake_timeout_ms, 1)
}

fn ring(c: &Config) -> Check {
    let r = &c.ring;
    in_range("ring.vnodes", r.vnodes.into(), 1, MAX_VNODES.into())?;
    let total_weight: u64 = c.redis.shards.iter().map(|s| u64::from(s.weight)).sum();
    let points = total_weight * u64::from(r.vnodes);
    if points > MAX_RING_POINTS {
        return Err(format!(
            "ring.vnodes: {} vnodes × total shard weight {total_weight} = {points} ring points; at most {MAX_RING_POINTS}",
            r.vnodes
        ));
    }
    if let Some(tag) = &r.hash_tag {
        let b = tag.as_bytes();
        let ok = b.len() == 2 && b[0] != b[1] && b.iter().all(|c| c.is_ascii_graphic());
        if !ok {
            return Err(format!(
                "ring.hash_tag: {tag:?} must be exactly two different printable ASCII characters, like \"{{}}\""
            ));
        }
    }
    Ok(())
}

fn memcached(c: &Config) -> Check {
    let phase = c.migration.phase;
    let Some(m) = &c.memcached else {
        if phase.needs_memcached() {
            return Err(format!(
                "migration.phase: {:?} needs a [memcached] section with at least one server",
                phase.as_str()
            ));
        }
        return Ok(());
    };
    if m.servers.is_empty() && phase.needs_memcached() {
        return Err(format!(
            "memcached.servers: empty, but migration.phase {:?} needs at least one server",
            phase.as_str()
        ));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, s) in m.servers.iter().enumerate() {
        let key = format!("memcached.servers[{i}]");
        check_backend_addr(&s.addr).map_err(|e| format!("{key}: bad address {:?}: {e}", s.addr))?;
        check_weight(&key, s.weight)?;
        if let Some(j) = seen.insert(&s.addr, i) {
            return Err(format!(
                "{key}: duplicate server {:?} (also memcached.servers[{j}])",
                s.addr
            ));
        }
    }
    at_least("memcached.timeout_ms", m.timeout_ms, 1)?;
    in_range(
        "memcached.connections_per_server",
        m.connections_per_server as u64,
        1,
        MAX_CONNECTIONS_PER_BACKEND as u64,
    )
}

fn migration(c: &Config) -> Check {
    let m = &c.migration;
    percent("migration.canary_percent", m.canary_percent)?;
    percent("migration.compare_percent", m.compare_percent)?;
    percent("migration.rollback_miss_delta_pp", m.rollback_miss_delta_pp)?;
    at_least("migration.rollback_window_s", m.rollback_window_s, 1)?;
    at_least("migration.rollback_min_samples", m.rollback_min_samples, 1)?;
    at_least("migration.shadow_queue", m.shadow_queue as u64, 1)?;
    at_least("migration.breaker_failures", m.breaker_failures.into(), 1)?;
    at_least("migration.breaker_cooldown_ms", m.breaker_cooldown_ms, 1)
}

pub(super) fn warnings(c: &Config) -> Vec<String> {
    let mut w = Vec::new();
    if c.tls.is_some() && c.server.tls_listen.is_none() && c.server.resp_tls_listen.is_none() {
        w.push("[tls] is set but server.tls_listen is not, so no TLS listener runs".to_owned());
    }
    let phase = c.migration.phase;
    if c.migration.compare_percent > 0.0 && matches!(phase, Phase::Memcached | Phase::Redis) {
        w.push(format!(
            "migration.compare_percent has no effect in phase {:?} (only one backend is read)",
            phase.as_str()
        ));
    }
    w
}

/// `host:port` with a non-empty host (name, IPv4 or bracketed IPv6) and a
/// port in 1..=65535.
pub(crate) fn check_host_port(addr: &str) -> Check {
    if addr.is_empty() {
        return Err("empty; expected host:port".into());
    }
    if addr.chars().any(char::is_whitespace) {
        return Err("contains whitespace".into());
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err("missing \":port\"; expected host:port".into());
    };
    match port.parse::<u16>() {
        Ok(0) => return Err("port 0 is not allowed".into()),
        Ok(_) => {}
        Err(_) => return Err(format!("port {port:?} is not a number in 1..=65535")),
    }
    if host.is_empty() {
        return Err("empty host; expected host:port".into());
    }
    if let Some(inner) = host.strip_prefix('[') {
        let ok = inner
            .strip_suffix(']')
            .is_some_and(|ip| ip.parse::<Ipv6Addr>().is_ok());
        return if ok {
            Ok(())
        } else {
            Err(format!("{host:?} is not a bracketed IPv6 address"))
        };
    }
    if host.contains(':') {
        return Err("an IPv6 address needs brackets, like [::1]:6379".into());
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err(format!("{host:?} is not a valid host name or IP address"));
    }
    Ok(())
}

fn check_log_level(level: &str) -> Check {
    let bad = || {
        format!(
            "{level:?} is not a level (trace, debug, info, warn, error, off) or a filter like \"info,memshift_proxy=debug\""
        )
    };
    if level.trim().is_empty() {
        return Err(bad());
    }
    // A bare word is a level; tracing would otherwise take it as a target
    // name and quietly log nothing useful ("verbose", "warning").
    for directive in level.split(',').map(str::trim) {
        let lvl = directive.rsplit_once('=').map_or(directive, |(_, l)| l);
        if !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(lvl.trim())) {
            return Err(bad());
        }
    }
    tracing_subscriber::EnvFilter::try_new(level).map_err(|_| bad())?;
    Ok(())
}

fn listen_port(key: &str, addr: Option<&ListenAddr>) -> Check {
    match addr.and_then(ListenAddr::tcp) {
        Some(a) if a.port() == 0 => Err(format!("{key}: port 0 is not allowed in {a}")),
        _ => Ok(()),
    }
}

/// A backend address: `host:port`, or `unix:/path` (a server on this host).
pub(crate) fn check_backend_addr(addr: &str) -> Check {
    match addr.strip_prefix(memshift_pipeline::transport::UNIX_PREFIX) {
        Some(path) => check_socket_path(path),
        None => check_host_port(addr),
    }
}

fn check_weight(key: &str, weight: u32) -> Check {
    if weight == 0 || weight > MAX_WEIGHT {
        return Err(format!(
            "{key}: bad weight {weight}; must be 1 to {MAX_WEIGHT}"
        ));
    }
    Ok(())
}

fn percent(key: &str, v: f64) -> Check {
    if !v.is_finite() || !(0.0..=100.0).contains(&v) {
        return Err(format!("{key}: {v} is not a percentage in 0..=100"));
    }
    Ok(())
}

fn at_least(key: &str, v: u64, min: u64) -> Check {
    if v < min {
        return Err(format!("{key}: {v} is too small; must be at least {min}"));
    }
    Ok(())
}

fn in_range(key: &str, v: u64, min: u64, max: u64) -> Check {
    if !(min..=max).contains(&v) {
        return Err(format!(
            "{key}: {v} is out of range; must be {min} to {max}"
        ));
    }
    Ok(())
}

fn non_empty_path(key: &str, p: &std::path::Path) -> Check {
    if p.as_os_str().is_empty() {
        return Err(format!("{key}: empty path"));
    }
    Ok(())
}

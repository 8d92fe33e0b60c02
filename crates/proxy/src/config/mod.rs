//! The config file (TOML): types whose field names are the TOML keys, their
//! defaults, loading and validation. `docs/config.md` is the reference;
//! `config/example.toml` shows every key.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

mod render;
mod validate;

#[cfg(test)]
mod tests;

pub(crate) use validate::check_host_port;

/// Why a config could not be used. `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not TOML, or not our schema (unknown key, wrong type, bad enum value):
    /// "line L, column C: <what>".
    #[error("{0}")]
    Parse(String),
    /// Well-formed but unusable: "<key>: <what is wrong>".
    #[error("{0}")]
    Invalid(String),
}

impl ConfigError {
    /// The reason without the file name, for callers that print the path
    /// themselves ("memshift: <path>: <reason>").
    pub fn reason(&self) -> String {
        match self {
            ConfigError::Io { source, .. } => format!("cannot read the file: {source}"),
            other => other.to_string(),
        }
    }
}

/// The whole config file. Every section but `[redis]` may be left out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    // Defaulted so a missing [redis] is reported by validation as "no
    // shards", which says what to do, rather than serde's "missing field".
    #[serde(default)]
    pub redis: RedisConfig,
    #[serde(default)]
    pub ring: RingSection,
    #[serde(default)]
    pub memcached: Option<MemcachedConfig>,
    #[serde(default)]
    pub migration: MigrationConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Plaintext memcached protocol listener.
    #[serde(deserialize_with = "de_server_listen")]
    pub listen: Option<SocketAddr>,
    /// Memcached protocol over TLS 1.3.
    #[serde(deserialize_with = "de_server_tls_listen")]
    pub tls_listen: Option<SocketAddr>,
    pub max_connections: usize,
    /// Largest value accepted by a storage command, in bytes (memcached -I).
    pub max_item_size: usize,
    /// Close client connections idle this long; 0 = never.
    pub idle_timeout_ms: u64,
    /// Worker threads; 0 = one per core.
    pub threads: usize,
    /// On SIGTERM, how long in-flight requests may take to finish.
    pub drain_timeout_ms: u64,
    /// false: `flush_all` is refused.
    pub allow_flush_all: bool,
    /// Replies a client may have queued before it is closed as a slow consumer.
    pub max_pending_replies: usize,
    /// Longest command line (without data block) accepted, in bytes.
    pub max_line_length: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: None,
            tls_listen: None,
            max_connections: 100_000,
            max_item_size: 1024 * 1024,
            idle_timeout_ms: 0,
            threads: 0,
            drain_timeout_ms: 10_000,
            allow_flush_all: true,
            max_pending_replies: 10_000,
            max_line_length: 2048,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A level (`info`) or a tracing filter (`info,memshift_proxy=debug`).
    pub level: String,
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_owned(),
            format: LogFormat::Text,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// HTTP endpoint for /metrics, /health, /ready; `listen = ""` disables it.
    #[serde(deserialize_with = "de_admin_listen")]
    pub listen: Option<SocketAddr>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9121))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    #[serde(default = "default_handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
}

fn default_handshake_timeout_ms() -> u64 {
    5000
}

#[derive(Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    pub shards: Vec<ShardConfig>,
    pub connections_per_shard: usize,
    /// Per-request timeout.
    pub timeout_ms: u64,
    pub connect_timeout_ms: u64,
    pub on_shard_down: ShardDownPolicy,
    /// Consecutive failures before a shard counts as down.
    pub eject_after_failures: u32,
    pub health_check_interval_ms: u64,
    pub max_inflight_per_connection: usize,
    pub username: Option<String>,
    pub password: Option<String>,
    pub tls: bool,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Name checked against the shards' certificates (default: the host of each addr).
    pub tls_server_name: Option<String>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            shards: Vec::new(),
            connections_per_shard: 2,
            timeout_ms: 500,
            connect_timeout_ms: 1000,
            on_shard_down: ShardDownPolicy::Fail,
            eject_after_failures: 3,
            health_check_interval_ms: 1000,
            max_inflight_per_connection: 10_000,
            username: None,
            password: None,
            tls: false,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            tls_server_name: None,
        }
    }
}

// Hand-written so the password never reaches a log line through `{:?}`.
impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("shards", &self.shards)
            .field("connections_per_shard", &self.connections_per_shard)
            .field("timeout_ms", &self.timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("on_shard_down", &self.on_shard_down)
            .field("eject_after_failures", &self.eject_after_failures)
            .field("health_check_interval_ms", &self.health_check_interval_ms)
            .field(
                "max_inflight_per_connection",
                &self.max_inflight_per_connection,
            )
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("tls", &self.tls)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("tls_server_name", &self.tls_server_name)
            .finish()
    }
}

/// What happens to a shard's keys while it does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardDownPolicy {
    /// Its keys get a fast `SERVER_ERROR`.
    #[default]
    Fail,
    /// It leaves the ring until it answers again.
    Eject,
}

impl ShardDownPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ShardDownPolicy::Fail => "fail",
            ShardDownPolicy::Eject => "eject",
        }
    }
}

/// One Redis shard: `"host:port"` or `{ addr = "host:port", weight = 2, name = "r1" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardConfig {
    pub addr: String,
    pub weight: u32,
    pub name: Option<String>,
}

impl ShardConfig {
    /// Identity on the ring: the name when set, else the address. Naming
    /// shards lets an address change without moving keys.
    pub fn id(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.addr)
    }
}

impl<'de> Deserialize<'de> for ShardConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            addr: String,
            #[serde(default = "default_weight")]
            weight: u32,
            #[serde(default)]
            name: Option<String>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ShardConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a "host:port" string or a table { addr = "host:port", weight = 1, name = "..." }"#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ShardConfig, E> {
                Ok(ShardConfig {
                    addr: v.to_owned(),
                    weight: default_weight(),
                    name: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ShardConfig, A::Error> {
                let t = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(ShardConfig {
                    addr: t.addr,
                    weight: t.weight,
                    name: t.name,
                })
            }
        }
        d.deserialize_any(V)
    }
}

fn default_weight() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RingSection {
    /// Virtual nodes per unit of shard weight.
    pub vnodes: u32,
    /// xxh3 seed; every proxy of a fleet must use the same.
    pub seed: u64,
    /// Two characters, e.g. "{}": hash only the part of the key between them.
    pub hash_tag: Option<String>,
}

impl Default for RingSection {
    fn default() -> Self {
        RingSection {
            vnodes: 160,
            seed: 0,
            hash_tag: None,
        }
    }
}

/// The legacy memcached pool.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemcachedConfig {
    pub servers: Vec<LegacyServerConfig>,
    pub distribution: Distribution,
    pub timeout_ms: u64,
    pub connections_per_server: usize,
}

impl Default for MemcachedConfig {
    fn default() -> Self {
        MemcachedConfig {
            servers: Vec::new(),
            distribution: Distribution::Ketama,
            timeout_ms: 500,
            connections_per_server: 2,
        }
    }
}

/// One legacy memcached server: `"host:port"` or `{ addr = "host:port", weight = 2 }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyServerConfig {
    pub addr: String,
    pub weight: u32,
}

impl<'de> Deserialize<'de> for LegacyServerConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Table {
            addr: String,
            #[serde(default = "default_weight")]
            weight: u32,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LegacyServerConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a "host:port" string or a table { addr = "host:port", weight = 1 }"#)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<LegacyServerConfig, E> {
                Ok(LegacyServerConfig {
                    addr: v.to_owned(),
                    weight: default_weight(),
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LegacyServerConfig, A::Error> {
                let t = Table::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(LegacyServerConfig {
                    addr: t.addr,
                    weight: t.weight,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// How the legacy clients spread keys over the memcached pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    #[default]
    Ketama,
    Rendezvous,
    Modula,
}

impl Distribution {
    pub fn as_str(self) -> &'static str {
        match self {
            Distribution::Ketama => "ketama",
            Distribution::Rendezvous => "rendezvous",
            Distribution::Modula => "modula",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MigrationConfig {
    pub phase: Phase,
    pub canary_percent: f64,
    pub compare_percent: f64,
    pub backfill: bool,
    pub rollback_miss_delta_pp: f64,
    pub rollback_window_s: u64,
    pub rollback_min_samples: u64,
    pub shadow_queue: usize,
    pub breaker_failures: u32,
    pub breaker_cooldown_ms: u64,
}

impl Default for MigrationConfig {
    fn default() -> Self {
        MigrationConfig {
            phase: Phase::Redis,
            canary_percent: 5.0,
            compare_percent: 0.0,
            backfill: true,
            rollback_miss_delta_pp: 5.0,
            rollback_window_s: 60,
            rollback_min_samples: 1000,
            shadow_queue: 10_000,
            breaker_failures: 3,
            breaker_cooldown_ms: 5000,
        }
    }
}

/// Migration phase, in the order a migration walks through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Memcached,
    Warmup,
    Canary,
    Cutover,
    #[default]
    Redis,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::Memcached,
        Phase::Warmup,
        Phase::Canary,
        Phase::Cutover,
        Phase::Redis,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Memcached => "memcached",
            Phase::Warmup => "warmup",
            Phase::Canary => "canary",
            Phase::Cutover => "cutover",
            Phase::Redis => "redis",
        }
    }

    /// Every phase but `redis` reads or shadows the legacy pool.
    pub fn needs_memcached(self) -> bool {
        self != Phase::Redis
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Phase {
    type Err = String;
    fn from_str(s: &str) -> Result<Phase, String> {
        Phase::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!("unknown phase {s:?} (memcached, warmup, canary, cutover or redis)")
            })
    }
}

/// `"ip:port"` → Some, `""` → None (disables the listener).
fn parse_listen<E: de::Error>(key: &str, s: &str) -> Result<Option<SocketAddr>, E> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse::<SocketAddr>().map(Some).map_err(|_| {
        E::custom(format!(
            "{key}: {s:?} is not an IP:port address (like \"127.0.0.1:11211\" or \"[::1]:11211\")"
        ))
    })
}

// One deserializer per listen key so the error names the key.
macro_rules! listen_fields {
    ($($f:ident => $key:literal),* $(,)?) => {$(
        fn $f<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
            parse_listen($key, &String::deserialize(d)?)
        }
    )*};
}
listen_fields!(
    de_server_listen => "server.listen",
    de_server_tls_listen => "server.tls_listen",
    de_admin_listen => "admin.listen",
);

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        Config::from_toml_str(&text)
    }

    /// Parses and validates config text.
    pub fn from_toml_str(s: &str) -> Result<Config, ConfigError> {
        let cfg: Config =
            toml::from_str(s).map_err(|e| ConfigError::Parse(describe_toml_error(s, &e)))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every rule of `docs/config.md`; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate::validate(self).map_err(ConfigError::Invalid)
    }

    /// Non-fatal remarks (settings that have no effect as configured), for
    /// `memshift check` and the startup log.
    pub fn warnings(&self) -> Vec<String> {
        validate::warnings(self)
    }

    /// Settings whose change only takes effect after a restart, as TOML key
    /// names, for a SIGHUP reload to report. Everything else is applied live
    /// (shards, ring, migration, TLS certificates, per-request limits).
    pub fn restart_required_changes(&self, new: &Config) -> Vec<&'static str> {
        let (a, b) = (self, new);
        let checks: [(&'static str, bool); 7] = [
            ("server.listen", a.server.listen != b.server.listen),
            (
                "server.tls_listen",
                a.server.tls_listen != b.server.tls_listen,
            ),
            ("server.threads", a.server.threads != b.server.threads),
            (
                "server.max_connections",
                a.server.max_connections != b.server.max_connections,
            ),
            ("admin.listen", a.admin.listen != b.admin.listen),
            ("log.level", a.log.level != b.log.level),
            ("log.format", a.log.format != b.log.format),
        ];
        checks
            .into_iter()
            .filter_map(|(name, changed)| changed.then_some(name))
            .collect()
    }

    pub fn ring_config(&self) -> memshift_ring::RingConfig {
        memshift_ring::RingConfig {
            vnodes: self.ring.vnodes,
            seed: self.ring.seed,
            hash_tag: self.ring.hash_tag.as_deref().and_then(hash_tag_bytes),
        }
    }

    /// The Redis shards as the ring sees them, in config order (the ring's
    /// `locate` returns an index into this list and into `redis.shards`).
    pub fn ring_shards(&self) -> Vec<memshift_ring::ShardSpec> {
        self.redis
            .shards
            .iter()
            .map(|s| memshift_ring::ShardSpec {
                id: s.id().to_owned(),
                weight: s.weight,
            })
            .collect()
    }

    /// The effective settings (defaults filled in) as TOML, with the Redis
    /// password shown as "***". Unset optional keys appear as comments.
    pub fn render_resolved(&self) -> String {
        render::render(self)
    }
}

/// `"{}"` → `Some((b'{', b'}'))`; anything but two ASCII characters → None
/// (validation rejects those).
fn hash_tag_bytes(tag: &str) -> Option<(u8, u8)> {
    match tag.as_bytes() {
        [open, close] if open.is_ascii() && close.is_ascii() => Some((*open, *close)),
        _ => None,
    }
}

/// One line: "line L, column C: <message> (in [section])".
fn describe_toml_error(src: &str, e: &toml::de::Error) -> String {
    let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(span) = e.span() else {
        return message;
    };
    let start = span.start.min(src.len());
    let before = &src[..start];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    let mut out = format!("line {line}, column {column}: {message}");
    // Serde's messages name the key but not its table: add the table header
    // in force at the error. An error on a header line is about that header
    // (an unknown section) unless a key is missing from its table.
    let this_line = src[line_start..].lines().next().unwrap_or("").trim();
    let header = if this_line.starts_with('[') {
        message.starts_with("missing field").then_some(this_line)
    } else {
        before[..line_start]
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| l.starts_with('['))
    };
    if let Some(h) = header {
        let h = h.split('#').next().unwrap_or(h).trim();
        out.push_str(&format!(" (in {h})"));
    }
    out
}

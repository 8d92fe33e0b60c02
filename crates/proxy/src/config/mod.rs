//! The config file (TOML): types whose field names are the TOML keys, their
//! defaults, loading and validation. `docs/config.md` is the reference;
//! `config/example.toml` shows every key.

//!
//! One module per group of sections: [`server`] (`[server]`, `[log]`,
//! `[admin]`, `[tls]`), [`redis`] (`[redis]`, `[ring]`), [`migration`]
//! (`[memcached]`, `[migration]`); their types are re-exported here.

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod listen;
pub mod migration;
pub mod near_cache;
pub mod redis;
mod render;
pub mod server;
mod validate;

pub use listen::ListenAddr;
pub use migration::{Distribution, LegacyServerConfig, MemcachedConfig, MigrationConfig, Phase};
pub use near_cache::NearCacheConfig;
pub use redis::{ReadFrom, RedisConfig, RedisMode, RingSection, ShardConfig, ShardDownPolicy};
pub use server::{AdminConfig, LogConfig, LogFormat, ServerConfig, TlsConfig};

#[cfg(test)]
mod sentinel_tests;
#[cfg(test)]
mod tests;

pub(crate) use validate::check_backend_addr;

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
    #[serde(default)]
    pub near_cache: NearCacheConfig,
}

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
        let mut cfg: Config =
            toml::from_str(s).map_err(|e| ConfigError::Parse(describe_toml_error(s, &e)))?;
        if cfg.redis.connections_per_shard == 0 {
            cfg.redis.connections_per_shard =
                RedisConfig::auto_connections_per_shard(cfg.server.worker_threads());
        }
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
        let checks: [(&'static str, bool); 13] = [
            ("server.listen", a.server.listen != b.server.listen),
            (
                "server.tls_listen",
                a.server.tls_listen != b.server.tls_listen,
            ),
            (
                "server.resp_listen",
                a.server.resp_listen != b.server.resp_listen,
            ),
            (
                "server.resp_tls_listen",
                a.server.resp_tls_listen != b.server.resp_tls_listen,
            ),
            (
                "server.unix_socket_mode",
                a.server.unix_socket_mode != b.server.unix_socket_mode,
            ),
            ("server.threads", a.server.threads != b.server.threads),
            (
                "server.max_connections",
                a.server.max_connections != b.server.max_connections,
            ),
            ("server.sasl", a.server.sasl != b.server.sasl),
            (
                "server.sasl_credentials_file",
                a.server.sasl_credentials_file != b.server.sasl_credentials_file,
            ),
            ("admin.listen", a.admin.listen != b.admin.listen),
            ("log.level", a.log.level != b.log.level),
            ("log.format", a.log.format != b.log.format),
            (
                "near_cache.enabled",
                a.near_cache.enabled != b.near_cache.enabled,
            ),
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

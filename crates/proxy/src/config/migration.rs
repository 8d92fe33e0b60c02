//! `[memcached]` and `[migration]`: the legacy pool and the phase walk.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::redis::default_weight;

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

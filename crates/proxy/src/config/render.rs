//! The resolved config as TOML, for `memshift check`: every effective value,
//! defaults included, so an operator sees what will run. The output parses
//! back to the same config (except the password, shown as "***").

use std::fmt::Write;
use std::path::Path;

use super::{Config, ListenAddr};

pub(super) fn render(c: &Config) -> String {
    let mut o = Out(String::new());
    let s = &c.server;
    o.section("server");
    match s.listen.as_slice() {
        [one] => o.str("listen", &one.to_string()),
        many => {
            let quoted: Vec<String> = many.iter().map(|a| quote(&a.to_string())).collect();
            o.line(&format!("listen = [{}]", quoted.join(", ")));
        }
    }
    o.addr("tls_listen", s.tls_listen.as_ref());
    o.raw("max_connections", s.max_connections);
    o.raw("max_item_size", s.max_item_size);
    o.raw("idle_timeout_ms", s.idle_timeout_ms);
    o.raw("threads", s.threads);
    o.raw("drain_timeout_ms", s.drain_timeout_ms);
    o.raw("drain_quiet_ms", s.drain_quiet_ms);
    o.raw("allow_flush_all", s.allow_flush_all);
    o.raw("max_pending_replies", s.max_pending_replies);
    o.raw("max_pending_bytes", s.max_pending_bytes);
    o.raw("max_line_length", s.max_line_length);
    o.raw("sasl", s.sasl);
    o.path("sasl_credentials_file", s.sasl_credentials_file.as_deref());
    o.addr("resp_listen", s.resp_listen.as_ref());
    o.addr("resp_tls_listen", s.resp_tls_listen.as_ref());
    o.opt_str("resp_password", s.resp_password.as_ref().map(|_| "***"));
    o.raw("resp_max_bulk_len", s.resp_max_bulk_len);
    o.str("unix_socket_mode", &s.unix_socket_mode);

    o.section("log");
    o.str("level", &c.log.level);
    o.str("format", c.log.format.as_str());

    o.section("admin");
    match c.admin.listen {
        Some(a) => o.str("listen", &a.to_string()),
        None => o.line("listen = \"\"  # disabled"),
    }

    match &c.tls {
        Some(t) => {
            o.section("tls");
            o.path("cert", Some(&t.cert));
            o.path("key", Some(&t.key));
            o.path("client_ca", t.client_ca.as_deref());
            o.raw("handshake_timeout_ms", t.handshake_timeout_ms);
        }
        None => o.line("\n# [tls] not set"),
    }

    let r = &c.redis;
    o.section("redis");
    o.str("mode", r.mode.as_str());
    if r.mode == super::RedisMode::Cluster {
        o.line("cluster_nodes = [");
        for a in &r.cluster_nodes {
            o.line(&format!("  {},", quote(a)));
        }
        o.line("]");
        o.raw("cluster_refresh_ms", r.cluster_refresh_ms);
    }
    o.line("shards = [");
    for sh in &r.shards {
        let mut entry = match &sh.master {
            Some(m) => format!("  {{ master = {}, weight = {}", quote(m), sh.weight),
            None => format!("  {{ addr = {}, weight = {}", quote(&sh.addr), sh.weight),
        };
        if let Some(n) = &sh.name {
            let _ = write!(entry, ", name = {}", quote(n));
        }
        entry.push_str(" },");
        o.line(&entry);
    }
    o.line("]");
    o.raw("connections_per_shard", r.connections_per_shard);
    o.raw("timeout_ms", r.timeout_ms);
    o.raw("connect_timeout_ms", r.connect_timeout_ms);
    o.str("on_shard_down", r.on_shard_down.as_str());
    o.str("read_from", r.read_from.as_str());
    o.raw("eject_after_failures", r.eject_after_failures);
    o.raw("health_check_interval_ms", r.health_check_interval_ms);
    o.raw("max_inflight_per_connection", r.max_inflight_per_connection);
    o.raw("max_dedicated_connections", r.max_dedicated_connections);
    o.opt_str("username", r.username.as_deref());
    // Never the secret itself: check output ends up in tickets and chats.
    o.opt_str("password", r.password.as_ref().map(|_| "***"));
    o.raw("tls", r.tls);
    o.path("tls_ca", r.tls_ca.as_deref());
    o.path("tls_cert", r.tls_cert.as_deref());
    o.path("tls_key", r.tls_key.as_deref());
    o.opt_str("tls_server_name", r.tls_server_name.as_deref());
    if !r.sentinels.is_empty() {
        o.line("sentinels = [");
        for a in &r.sentinels {
            o.line(&format!("  {},", quote(a)));
        }
        o.line("]");
        o.opt_str("sentinel_username", r.sentinel_username.as_deref());
        o.opt_str(
            "sentinel_password",
            r.sentinel_password.as_ref().map(|_| "***"),
        );
    }
    o.opt_str("pubsub_shard", r.pubsub_shard.as_deref());
    o.raw("max_subscriber_connections", r.max_subscriber_connections);

    o.section("ring");
    o.raw("vnodes", c.ring.vnodes);
    o.raw("seed", c.ring.seed);
    o.opt_str("hash_tag", c.ring.hash_tag.as_deref());

    match &c.memcached {
        Some(m) => {
            o.section("memcached");
            o.line("servers = [");
            for sv in &m.servers {
                o.line(&format!(
                    "  {{ addr = {}, weight = {} }},",
                    quote(&sv.addr),
                    sv.weight
                ));
            }
            o.line("]");
            o.str("distribution", m.distribution.as_str());
            o.raw("timeout_ms", m.timeout_ms);
            o.raw("connections_per_server", m.connections_per_server);
        }
        None => o.line("\n# [memcached] not set"),
    }

    let m = &c.migration;
    o.section("migration");
    o.str("phase", m.phase.as_str());
    o.float("canary_percent", m.canary_percent);
    o.float("compare_percent", m.compare_percent);
    o.raw("backfill", m.backfill);
    o.float("rollback_miss_delta_pp", m.rollback_miss_delta_pp);
    o.raw("rollback_window_s", m.rollback_window_s);
    o.raw("rollback_min_samples", m.rollback_min_samples);
    o.raw("shadow_queue", m.shadow_queue);
    o.raw("breaker_failures", m.breaker_failures);
    o.raw("breaker_cooldown_ms", m.breaker_cooldown_ms);

    let n = &c.near_cache;
    o.section("near_cache");
    o.raw("enabled", n.enabled);
    o.raw("max_bytes", n.max_bytes);
    o.raw("max_ttl_ms", n.max_ttl_ms);
    o.raw("admit_reads", n.admit_reads);
    o.raw("admit_window_ms", n.admit_window_ms);
    o.raw("coalesce_misses", n.coalesce_misses);
    o.0
}

struct Out(String);

impl Out {
    fn line(&mut self, l: &str) {
        self.0.push_str(l);
        self.0.push('\n');
    }
    fn section(&mut self, name: &str) {
        if !self.0.is_empty() {
            self.0.push('\n');
        }
        self.line(&format!("[{name}]"));
    }
    fn raw(&mut self, key: &str, v: impl std::fmt::Display) {
        self.line(&format!("{key} = {v}"));
    }
    fn float(&mut self, key: &str, v: f64) {
        // Debug keeps the ".0", so the value reads as a float.
        self.line(&format!("{key} = {v:?}"));
    }
    fn str(&mut self, key: &str, v: &str) {
        self.line(&format!("{key} = {}", quote(v)));
    }
    fn opt_str(&mut self, key: &str, v: Option<&str>) {
        match v {
            Some(v) => self.str(key, v),
            None => self.line(&format!("# {key} not set")),
        }
    }
    fn addr(&mut self, key: &str, v: Option<&ListenAddr>) {
        self.opt_str(key, v.map(|a| a.to_string()).as_deref());
    }
    fn path(&mut self, key: &str, v: Option<&Path>) {
        self.opt_str(key, v.map(|p| p.to_string_lossy()).as_deref());
    }
}

/// A TOML basic string, escaped.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

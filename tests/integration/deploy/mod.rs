//! Deployment artifacts under `deploy/` (Docker is not available here, so
//! they are parsed, not run): the Dockerfile, the Kubernetes manifests, the
//! compose file and the systemd unit must agree with each other and with the
//! config they ship, and every shipped config must pass `memshift check`, the
//! real binary's own validation. The health check command and the probe paths
//! are run against a real memshift.
//!
//! One file per artifact (`docker`: Dockerfile and .dockerignore,
//! `kubernetes`, `compose`, `systemd`) and `probes` for the health check
//! and probe paths against a real memshift; the shared config checks
//! (`memshift check` and reading its answer) live here.

mod compose;
mod docker;
mod kubernetes;
mod probes;
mod systemd;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use memshift_tests::{memshift_bin, run_with_timeout, workspace_root};

/// Where every artifact mounts or installs the config (documented in
/// deploy/README.md).
pub(super) const CONFIG_PATH: &str = "/etc/memshift/memshift.toml";
pub(super) const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) fn deploy_path(rel: &str) -> PathBuf {
    workspace_root().join("deploy").join(rel)
}

pub(super) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

// ---------------------------------------------------------------------------
// memshift check

/// `memshift check --config` on `toml`: it must pass without warnings. Returns
/// the resolved settings it prints (every default filled in).
pub(super) fn memshift_check(what: &str, toml: &str) -> toml::Table {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("memshift.toml");
    std::fs::write(&path, toml).expect("write config");
    let mut cmd = Command::new(memshift_bin());
    cmd.arg("check").arg("--config").arg(&path);
    let out = run_with_timeout(cmd, CHECK_TIMEOUT).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: `memshift check` rejects the shipped config ({}):\n{}",
        out.status,
        out.stderr
    );
    assert!(
        out.stderr.trim().is_empty(),
        "{what}: `memshift check` warns about the shipped config:\n{}",
        out.stderr
    );
    let resolved = out
        .stdout
        .strip_prefix("config OK")
        .unwrap_or_else(|| panic!("{what}: unexpected check output:\n{}", out.stdout));
    toml::from_str(resolved)
        .unwrap_or_else(|e| panic!("{what}: resolved settings do not parse: {e}\n{resolved}"))
}

pub(super) fn section<'a>(cfg: &'a toml::Table, name: &str) -> &'a toml::Table {
    cfg.get(name)
        .and_then(toml::Value::as_table)
        .unwrap_or_else(|| panic!("resolved config has no [{name}]"))
}

pub(super) fn cfg_str<'a>(cfg: &'a toml::Table, sec: &str, key: &str) -> Option<&'a str> {
    section(cfg, sec).get(key).and_then(toml::Value::as_str)
}

pub(super) fn cfg_int(cfg: &toml::Table, sec: &str, key: &str) -> i64 {
    section(cfg, sec)
        .get(key)
        .and_then(toml::Value::as_integer)
        .unwrap_or_else(|| panic!("resolved config has no integer {sec}.{key}"))
}

pub(super) fn cfg_addr(cfg: &toml::Table, sec: &str, key: &str) -> Option<SocketAddr> {
    cfg_str(cfg, sec, key).filter(|s| !s.is_empty()).map(|s| {
        s.parse()
            .unwrap_or_else(|e| panic!("{sec}.{key} = {s:?} is not IP:port: {e}"))
    })
}

/// Worst-case stop time in seconds: memshift drains connections for up to
/// `drain_timeout_ms`, then flushes shadow writes for up to as long again.
pub(super) fn worst_case_stop_s(cfg: &toml::Table) -> f64 {
    2.0 * cfg_int(cfg, "server", "drain_timeout_ms") as f64 / 1000.0
}

/// `host:port` of each entry of `[redis] shards` / `[memcached] servers`.
pub(super) fn backend_addrs(cfg: &toml::Table, sec: &str, key: &str) -> Vec<(String, u16)> {
    let Some(list) = section(cfg, sec).get(key).and_then(toml::Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .map(|entry| {
            let addr = entry
                .as_str()
                .or_else(|| entry.get("addr").and_then(toml::Value::as_str))
                .unwrap_or_else(|| panic!("{sec}.{key}: entry without addr: {entry}"));
            let (host, port) = addr.rsplit_once(':').expect("host:port");
            (host.to_string(), port.parse().expect("port"))
        })
        .collect()
}

/// Every file path a config makes memshift read for TLS.
pub(super) fn tls_files(cfg: &toml::Table) -> Vec<String> {
    let mut files = Vec::new();
    for (sec, keys) in [
        ("tls", &["cert", "key", "client_ca"][..]),
        ("redis", &["tls_ca", "tls_cert", "tls_key"][..]),
    ] {
        if let Some(t) = cfg.get(sec).and_then(toml::Value::as_table) {
            for k in keys {
                if let Some(p) = t.get(*k).and_then(toml::Value::as_str) {
                    files.push(p.to_string());
                }
            }
        }
    }
    files
}

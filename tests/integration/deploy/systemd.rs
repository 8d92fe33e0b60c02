//! The systemd unit.

use std::collections::BTreeMap;
use std::process::Command;

use memshift_tests::{memshift_bin, run_with_timeout, tool_available, workspace_root};

use super::compose::compose_duration_s;
use super::{
    cfg_int, deploy_path, memshift_check, read, worst_case_stop_s, CHECK_TIMEOUT, CONFIG_PATH,
};

/// `[Section] Key=Value` lines; repeated keys keep every value in order.
fn systemd_unit(src: &str) -> BTreeMap<(String, String), Vec<String>> {
    let mut out: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut section = String::new();
    for line in src.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.to_string();
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("bad unit line: {line}"));
        out.entry((section.clone(), k.trim().to_string()))
            .or_default()
            .push(v.trim().to_string());
    }
    out
}

/// systemd time spans: a bare number is seconds; else `30s`, `1min`, `500ms`.
fn systemd_seconds(v: &str) -> f64 {
    if let Ok(n) = v.parse() {
        return n;
    }
    match v.strip_suffix("min") {
        Some(m) => m.trim().parse::<f64>().expect("minutes") * 60.0,
        None => compose_duration_s(v),
    }
}

#[test]
fn systemd_unit_starts_reloads_and_drains_memshift() {
    let path = deploy_path("systemd/memshift.service");
    let src = read(&path);
    let unit = systemd_unit(&src);
    let get = |k: &str| -> Vec<String> {
        unit.get(&("Service".to_string(), k.to_string()))
            .cloned()
            .unwrap_or_default()
    };
    let single = |k: &str| -> String {
        let v = get(k);
        assert_eq!(v.len(), 1, "[Service] {k}: {v:?}");
        v[0].clone()
    };

    let bin = "/usr/local/bin/memshift";
    assert_eq!(single("ExecStart"), format!("{bin} --config {CONFIG_PATH}"));
    let reload = get("ExecReload");
    assert_eq!(
        reload.last().map(String::as_str),
        Some("/bin/kill -HUP $MAINPID"),
        "{reload:?}"
    );
    for r in &reload[..reload.len() - 1] {
        // Anything before the signal only validates the same file.
        assert_eq!(r, &format!("{bin} check --config {CONFIG_PATH}"));
    }
    assert_eq!(single("KillSignal"), "SIGTERM");
    assert_eq!(single("Restart"), "on-failure");
    assert_eq!(single("User"), "memshift");

    // Stop timeout above the worst case, for the default drain and for the
    // reference config.
    let default_cfg = memshift_check(
        "defaults",
        "[server]\nlisten = \"127.0.0.1:11211\"\n[redis]\nshards = [\"127.0.0.1:6379\"]\n",
    );
    let example = memshift_check(
        "config/example.toml",
        &read(&workspace_root().join("config/example.toml")),
    );
    let stop = systemd_seconds(&single("TimeoutStopSec"));
    for cfg in [&default_cfg, &example] {
        assert!(
            stop > worst_case_stop_s(cfg),
            "TimeoutStopSec {stop} s <= 2 x drain_timeout"
        );
    }
    // A descriptor per client: room for the default connection limit.
    let nofile: i64 = single("LimitNOFILE").parse().expect("LimitNOFILE number");
    assert!(
        nofile > cfg_int(&default_cfg, "server", "max_connections"),
        "LimitNOFILE {nofile}"
    );

    for (k, v) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
    ] {
        assert_eq!(single(k), v, "[Service] {k}");
    }

    // systemd's own parser, when present: no unknown keys or bad values.
    // The binary path is swapped for the built one (verify checks it exists).
    if !tool_available("systemd-analyze") {
        eprintln!("systemd-analyze not installed: unit checked by parsing only");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("memshift.service");
    std::fs::write(&copy, src.replace(bin, memshift_bin().to_str().unwrap())).unwrap();
    let mut cmd = Command::new("systemd-analyze");
    cmd.arg("verify").arg(&copy);
    let out = run_with_timeout(cmd, CHECK_TIMEOUT).expect("systemd-analyze verify");
    let complaints: Vec<&str> = out
        .stderr
        .lines()
        .chain(out.stdout.lines())
        .filter(|l| l.contains("memshift.service"))
        .collect();
    assert!(
        out.status.success() && complaints.is_empty(),
        "systemd-analyze verify: {}\n{}",
        out.status,
        complaints.join("\n")
    );
}

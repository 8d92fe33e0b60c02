//! Legacy applications keep talking to the memcached pool directly while
//! memshift migrates it: pymemcache's HashClient (rendezvous hashing) over 3
//! memcached servers finds what memshift wrote in cutover (shadow writes
//! placed by the same distribution), and memshift in warmup serves what
//! HashClient wrote.

use std::process::Command;
use std::time::Duration;

use memshift_tests::migration_support::{MigrationOptions, MigrationSetup};
use memshift_tests::process::run_ok;
use memshift_tests::python::pymemcache_python;
use memshift_tests::require_tools;

use super::*;

const KEYS: usize = 60;

const SCRIPT: &str = r#"
import sys
from pymemcache.client.hash import HashClient

mode, ports, prefix, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
servers = [("127.0.0.1", int(p)) for p in ports.split(",")]
c = HashClient(servers, connect_timeout=5, timeout=5, default_noreply=False,
               retry_attempts=1, ignore_exc=False)
keys = ["%s%03d" % (prefix, i) for i in range(n)]
if mode == "write":
    for k in keys:
        if c.set(k, "v-" + k) is not True:
            print("FAIL: set", k, flush=True)
            sys.exit(1)
elif mode == "read":
    bad = []
    for k in keys:
        v = c.get(k)
        if v != ("v-" + k).encode():
            bad.append("%s=%r" % (k, v))
    if bad:
        print("FAIL: HashClient read wrong values:", " ".join(bad), flush=True)
        sys.exit(1)
print("HASHCLIENT OK", flush=True)
"#;

fn hash_client(setup: &MigrationSetup, mode: &str, prefix: &str) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let script = tmp.path().join("hashclient.py");
    std::fs::write(&script, SCRIPT).expect("write script");
    let ports: Vec<String> = setup
        .memcached
        .iter()
        .map(|m| m.port().to_string())
        .collect();
    let mut cmd = Command::new(pymemcache_python());
    cmd.arg(&script)
        .arg(mode)
        .arg(ports.join(","))
        .arg(prefix)
        .arg(KEYS.to_string());
    let out = run_ok(cmd, Duration::from_secs(120), &format!("HashClient {mode}"));
    assert!(out.contains("HASHCLIENT OK"), "HashClient {mode}: {out}");
}

fn keys(prefix: &str) -> Vec<String> {
    (0..KEYS).map(|i| format!("{prefix}{i:03}")).collect()
}

#[test]
fn legacy_hashclient_reads_cutover_writes_and_warmup_serves_hashclient_writes() {
    if !tools("legacy_hashclient_interplay")
        || !require_tools("legacy_hashclient_interplay", &["python3"])
    {
        return;
    }
    let mut setup = MigrationSetup::start(MigrationOptions {
        phase: "cutover".into(),
        memcached_servers: 3,
        distribution: "rendezvous".into(),
        migration: "backfill = false\n".into(),
        ..MigrationOptions::default()
    });

    // cutover: memshift writes Redis, shadows to the pool.
    let mut c = setup.client();
    let written = keys("app:cut:");
    for k in &written {
        assert_eq!(
            req(&mut c, &storage("set", k, 0, 0, &format!("v-{k}"))),
            "STORED\r\n"
        );
    }
    let mut per_server = [0usize; 3];
    for k in &written {
        wait_for(
            &format!("shadow write of {k} in the pool"),
            SHADOW_DEADLINE,
            |last| {
                let on: Vec<usize> = (0..3)
                    .filter(|&i| {
                        let mut mc = setup.memcached[i].client();
                        memshift_tests::migration_support::mc_get_item(&mut mc, k)
                            .expect("mg")
                            .is_some()
                    })
                    .collect();
                *last = format!("on servers {on:?}");
                match on.as_slice() {
                    [i] => {
                        per_server[*i] += 1;
                        Some(())
                    }
                    [] => None,
                    _ => panic!("{k} on several memcached servers: {on:?}"),
                }
            },
        );
    }
    assert!(
        per_server.iter().all(|&n| n > 0),
        "shadow writes not spread over the 3 servers: {per_server:?}"
    );
    hash_client(&setup, "read", "app:cut:");

    // warmup: HashClient writes the pool directly, memshift reads it.
    setup.proxy.reload_phase("warmup", "");
    hash_client(&setup, "write", "app:warm:");
    for k in keys("app:warm:") {
        assert_eq!(
            get(&mut c, &k),
            Some((format!("v-{k}").into_bytes(), 0)),
            "warmup: memshift reads {k} written by HashClient"
        );
    }
}

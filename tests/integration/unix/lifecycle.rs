//! The socket file: mode, stale replacement, refusal while a live process
//! holds it, removal on exit, bad paths (at start and in `memshift check`),
//! and the per-transport connection metrics.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use memshift_tests::ops_support::{metric, wait_until};
use memshift_tests::{memshift_bin, require_tools, run_with_timeout, CommandOutput, McClient};

use super::{config, socket_dir, unix, UnixProxy};

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("stat the socket")
        .permissions()
        .mode()
        & 0o777
}

/// `memshift <args> --config FILE` with `toml` written into `dir`; as user
/// `nobody` when `as_nobody` (needs root: the permission tests).
fn run_memshift(dir: &Path, args: &[&str], toml: &str, as_nobody: bool) -> CommandOutput {
    let path = dir.join("memshift.toml");
    std::fs::write(&path, toml).expect("write config");
    let mut cmd = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(memshift_bin());
        c
    } else {
        Command::new(memshift_bin())
    };
    cmd.args(args)
        .arg("--config")
        .arg(&path)
        .env("NO_COLOR", "1");
    run_with_timeout(cmd, Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"))
}

/// memshift must refuse to start on `toml` with one line naming the socket
/// and `reason`, and `memshift check` must report it too (`check_reason`).
fn assert_fails_at_start_and_in_check(
    dir: &Path,
    toml: &str,
    (reason, check_reason): (&str, &str),
    as_nobody: bool,
) {
    let out = run_memshift(dir, &[], toml, as_nobody);
    assert!(!out.status.success(), "memshift started:\n{}", out.stderr);
    let last = out.stderr.trim_end().lines().last().unwrap_or("");
    assert!(
        last.starts_with("memshift: ")
            && last.contains("cannot listen on unix:")
            && last.contains(reason),
        "last stderr line {last:?} should say it cannot listen ({reason}); stderr:\n{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);

    let check = run_memshift(dir, &["check"], toml, as_nobody);
    assert!(!check.status.success(), "check passed:\n{}", check.stdout);
    let lines: Vec<&str> = check.stderr.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "one line from check: {lines:?}");
    assert!(
        lines[0].contains("server.listen: cannot listen on unix:")
            && lines[0].contains(check_reason),
        "check said {:?}, expected {check_reason:?}",
        lines[0]
    );
}

/// A config listening on the unix socket at `path`, over an unreachable
/// shard: fine, the listener is bound (or not) first.
fn unbound_config(path: &Path) -> String {
    config(
        &unix(path),
        memshift_tests::free_port(),
        &["127.0.0.1:1".into()],
        "",
    )
}

/// Waits (up to 10 s) until `series` on the admin endpoint reads `want`.
fn wait_metric(admin_port: u16, series: &str, want: f64) {
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        series,
        || (metric(admin_port, series) == want).then_some(()),
    );
}

#[test]
fn unix_socket_mode_is_applied_and_connections_are_counted_by_transport() {
    if !require_tools("unix_socket_mode", &["redis-server"]) {
        return;
    }
    let proxy = UnixProxy::start("unix_socket_mode = \"0660\"\n");
    assert_eq!(mode_of(&proxy.path), 0o660);
    let mut c = McClient::connect(&proxy.addr()).expect("connect over the socket");
    c.set("unix:k", b"v").expect("set");
    assert_eq!(c.get("unix:k").expect("get"), Some(b"v".to_vec()));
    let gauge = |t: &str| {
        metric(
            proxy.admin_port,
            &format!("memshift_transport_connections{{transport=\"{t}\"}}"),
        )
    };
    assert_eq!(gauge("unix"), 1.0);
    assert_eq!(gauge("tcp"), 0.0);
    assert_eq!(
        metric(
            proxy.admin_port,
            "memshift_transport_connections_total{transport=\"unix\"}"
        ),
        // The harness checks readiness without connecting: this client only.
        1.0
    );
    drop(c);
    let unix_gauge = "memshift_transport_connections{transport=\"unix\"}";
    wait_metric(proxy.admin_port, unix_gauge, 0.0);
}

#[test]
fn a_stale_socket_file_is_replaced_and_the_file_is_removed_on_sigterm() {
    if !require_tools("stale_socket", &["redis-server"]) {
        return;
    }
    let dir = socket_dir();
    let path = dir.path().join("memshift.sock");
    // What a killed previous run leaves: a socket file nobody listens on.
    drop(UnixListener::bind(&path).expect("bind"));
    assert!(path.exists());
    let shard = memshift_tests::RedisServer::start();
    let (mut memshift, _) = super::memshift_on(&unix(&path), &[shard.addr()], "");
    assert_eq!(mode_of(&path), 0o700, "default unix_socket_mode");
    assert!(memshift
        .stderr()
        .contains("removing a stale unix socket file"));
    McClient::connect(&unix(&path))
        .expect("connect")
        .set("k", b"v")
        .expect("set");
    memshift.sigterm();
    let status = memshift
        .wait_exit(Duration::from_secs(30))
        .expect("exits on SIGTERM");
    assert!(status.success(), "{status}");
    assert!(!path.exists(), "the socket file is removed on a clean exit");
}

#[test]
fn the_socket_file_is_removed_on_sigint() {
    if !require_tools("sigint_removal", &["redis-server"]) {
        return;
    }
    let mut proxy = UnixProxy::start("");
    assert!(proxy.path.exists());
    proxy.memshift.signal(libc::SIGINT);
    let status = proxy
        .memshift
        .wait_exit(Duration::from_secs(30))
        .expect("exits on SIGINT");
    assert!(status.success(), "{status}");
    assert!(!proxy.path.exists(), "the socket file is removed on SIGINT");
}

#[test]
fn a_socket_held_by_a_live_process_is_refused() {
    let dir = socket_dir();
    let path = dir.path().join("held.sock");
    let holder = UnixListener::bind(&path).expect("bind");
    let toml = unbound_config(&path);
    let reason = "already in use";
    assert_fails_at_start_and_in_check(dir.path(), &toml, (reason, reason), false);
    // Left alone: the holder still serves on its file.
    assert!(path.exists());
    std::os::unix::net::UnixStream::connect(&path).expect("the holder still accepts");
    drop(holder);
}

#[test]
fn a_missing_directory_is_refused() {
    let dir = socket_dir();
    let path = dir.path().join("no-such-dir").join("m.sock");
    let toml = unbound_config(&path);
    assert_fails_at_start_and_in_check(
        dir.path(),
        &toml,
        ("No such file or directory", "no-such-dir"),
        false,
    );
}

#[test]
fn a_directory_without_write_permission_is_refused() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root && !require_tools("no_permission", &["setpriv"]) {
        return;
    }
    let dir = socket_dir();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).expect("mkdir");
    // Root ignores modes: the test then runs memshift as `nobody`, for whom
    // a root-owned 0755 directory is not writable.
    let mode = if root { 0o755 } else { 0o555 };
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(mode)).expect("chmod");
    let toml = unbound_config(&locked.join("m.sock"));
    assert_fails_at_start_and_in_check(
        dir.path(),
        &toml,
        ("Permission denied", "no permission"),
        root,
    );
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).expect("chmod back");
}

/// The connection limit and the idle timeout hold over the socket as over
/// TCP: the second client gets memcached's error and a close, an idle one
/// is closed.
#[test]
fn connection_limit_and_idle_timeout_hold_over_the_socket() {
    if !require_tools("unix_limits", &["redis-server"]) {
        return;
    }
    let proxy = UnixProxy::start("max_connections = 1\nidle_timeout_ms = 1500\n");
    let mut first = McClient::connect(&proxy.addr()).expect("connect");
    assert!(first
        .request(b"version\r\n")
        .expect("version")
        .starts_with(b"VERSION "));
    let mut second = McClient::connect(&proxy.addr()).expect("connect");
    let (bytes, closed) =
        second.read_until_closed_or_idle(Duration::from_secs(5), Duration::from_secs(10));
    assert_eq!(bytes, b"ERROR Too many open connections\r\n");
    assert!(closed, "the connection over the limit is closed");
    assert_eq!(
        metric(proxy.admin_port, "memshift_rejected_connections_total"),
        1.0
    );
    // Now silent: closed by idle_timeout_ms.
    let (bytes, closed) =
        first.read_until_closed_or_idle(Duration::from_secs(10), Duration::from_secs(10));
    assert!(
        closed && bytes.is_empty(),
        "the idle client was not closed: {bytes:?}"
    );
}

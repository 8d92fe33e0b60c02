//! The test environment: free ports, external tools, where the binary is.

use std::collections::HashSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// True when running in CI (`CI=true` or `CI=1`): missing tools are failures.
pub fn in_ci() -> bool {
    matches!(
        std::env::var("CI").map(|v| v.to_ascii_lowercase()),
        Ok(v) if v == "true" || v == "1" || v == "yes"
    )
}

fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static PORTS: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    PORTS.get_or_init(|| Mutex::new(HashSet::new()))
}

/// A loopback TCP port that was free a moment ago and that this test binary
/// has not handed out before (tests run in parallel threads). Another process
/// can still take it before we use it: starters retry with a new port when a
/// server fails to come up.
pub fn free_port() -> u16 {
    for _ in 0..200 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        drop(listener);
        let mut used = handed_out().lock().unwrap_or_else(|e| e.into_inner());
        if used.insert(port) {
            return port;
        }
    }
    panic!("could not find a free loopback port after 200 attempts");
}

/// Highest port a Redis Cluster node can listen on: its cluster bus is the
/// port + 10000.
pub const MAX_CLUSTER_PORT: u16 = 55535;

/// A free loopback port for a Redis Cluster node: at most
/// [`MAX_CLUSTER_PORT`], with its bus port (+ 10000) free too and handed out
/// with it, so that no other test of this binary gets the bus port as a
/// port of its own.
pub fn free_cluster_port() -> u16 {
    for _ in 0..200 {
        let port = free_port();
        if port > MAX_CLUSTER_PORT {
            continue;
        }
        let bus = port + 10000;
        if TcpListener::bind(("127.0.0.1", bus)).is_err() {
            continue;
        }
        let mut used = handed_out().lock().unwrap_or_else(|e| e.into_inner());
        if used.insert(bus) {
            return port;
        }
    }
    panic!("could not find a free cluster port (and bus port) after 200 attempts");
}

/// Whether an executable called `name` is on `PATH`.
pub fn tool_available(name: &str) -> bool {
    find_in_path(name).is_some()
}

/// Full path of an executable on `PATH`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Checks that every tool is installed. Missing tools fail the test in CI;
/// locally the test is skipped with a loud message (the caller returns when
/// this gives `false`).
pub fn require_tools(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| !tool_available(t))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "test `{test}` needs {missing:?} on PATH (install: scripts/ensure-deps.sh, or apt-get install redis-server memcached libmemcached-tools)"
    );
    if in_ci() {
        panic!("{msg}");
    }
    eprintln!();
    eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    eprintln!("!!! SKIPPED (not in CI): {msg}");
    eprintln!("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!");
    eprintln!();
    false
}

/// The workspace root (the parent of this package's directory).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// The cargo target directory: `CARGO_TARGET_DIR` (relative to the workspace
/// root when relative) or `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace_root().join(dir)
            }
        }
        _ => workspace_root().join("target"),
    }
}

/// The memshift binary under test: `MEMSHIFT_BIN`, else
/// `<target>/debug/memshift`. Panics with instructions when it is missing,
/// or (the default binary) older than a source file of the workspace's
/// crates: `cargo test -p memshift-tests` does not rebuild it, and a test
/// run against a stale binary passes or fails for the old code.
pub fn memshift_bin() -> PathBuf {
    let bin = match std::env::var_os("MEMSHIFT_BIN") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => {
            let bin = target_dir().join("debug").join("memshift");
            check_fresh(&bin);
            bin
        }
    };
    if !is_executable(&bin) {
        panic!(
            "memshift binary not found at {}: run `cargo build -p memshift-proxy` first \
             (or set MEMSHIFT_BIN to the binary to test)",
            bin.display()
        );
    }
    bin
}

/// Panic if `bin` exists but is older than a crate's `Cargo.toml` or a
/// `.rs` file under a crate's `src/` (checked once per test process).
fn check_fresh(bin: &Path) {
    static STALE: OnceLock<Option<PathBuf>> = OnceLock::new();
    let stale = STALE.get_or_init(|| {
        let built = std::fs::metadata(bin).and_then(|m| m.modified()).ok()?;
        let crates = std::fs::read_dir(workspace_root().join("crates")).ok()?;
        crates.flatten().find_map(|krate| {
            let manifest = krate.path().join("Cargo.toml");
            let modified = std::fs::metadata(&manifest).and_then(|m| m.modified());
            if modified.is_ok_and(|m| m > built) {
                return Some(manifest);
            }
            newer_source(&krate.path().join("src"), built)
        })
    });
    if let Some(source) = stale {
        panic!(
            "{} is older than {}: run `cargo build -p memshift-proxy` first \
             (or set MEMSHIFT_BIN to the binary to test)",
            bin.display(),
            source.display()
        );
    }
}

/// A source file under `dir` modified after `than`, if any.
fn newer_source(dir: &Path, than: std::time::SystemTime) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if let Some(found) = newer_source(&path, than) {
                return Some(found);
            }
            continue;
        }
        let source = path.extension().is_some_and(|e| e == "rs");
        let modified = entry.metadata().and_then(|m| m.modified()).ok();
        if source && modified.is_some_and(|m| m > than) {
            return Some(path);
        }
    }
    None
}

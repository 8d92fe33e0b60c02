//! The suite's Python venv with pymemcache, shared by every test that runs a
//! real Python client: created once under `<target>/test-venv` and reused
//! between runs. Safe to call from parallel tests and test processes (a
//! mutex in-process, `flock` across processes).

use std::fs::{self, File};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::env::target_dir;
use crate::process::run_ok;

/// The pinned pymemcache.
pub const PYMEMCACHE: &str = "pymemcache==4.0.0";

/// The venv's `python` with [`PYMEMCACHE`] installed; creates the venv on
/// first use (`python3 -m venv`, then `pip install`). Panics with the
/// command's output when that fails (no network, no python3-venv).
pub fn pymemcache_python() -> PathBuf {
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let target = target_dir();
    fs::create_dir_all(&target).expect("create the target dir");
    let lock = File::create(target.join("test-venv.lock")).expect("create the venv lock file");
    // SAFETY: flock on a file descriptor we own; released when `lock` drops.
    let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock the venv lock file");

    let dir = target.join("test-venv");
    let python = dir.join("bin").join("python");
    let marker = dir.join(format!(".installed-{PYMEMCACHE}"));
    if marker.exists() && python.exists() {
        return python;
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).expect("remove an incomplete test venv");
    }
    let mut mk = Command::new("python3");
    mk.args(["-m", "venv"]).arg(&dir);
    run_ok(
        mk,
        Duration::from_secs(120),
        "python3 -m venv (apt-get install python3-venv)",
    );
    pip_install(&python, PYMEMCACHE);
    fs::write(&marker, b"").expect("write the venv marker");
    python
}

/// The pinned python-binary-memcached (a binary protocol client, SASL PLAIN).
pub const PYTHON_BINARY_MEMCACHED: &str = "python-binary-memcached==0.31.4";

/// The pinned redis-py (the RESP listener's tests).
pub const REDIS_PY: &str = "redis==5.2.1";

/// The suite venv's `python` with [`PYTHON_BINARY_MEMCACHED`] installed too.
pub fn binary_memcached_python() -> PathBuf {
    venv_with(PYTHON_BINARY_MEMCACHED)
}

/// The suite venv's `python` with [`REDIS_PY`] installed too.
pub fn redis_py_python() -> PathBuf {
    venv_with(REDIS_PY)
}

/// The suite venv's `python` (with [`PYMEMCACHE`]) plus `package`, installed
/// on first use under the same lock as the venv.
fn venv_with(package: &str) -> PathBuf {
    let python = pymemcache_python();
    static IN_PROCESS: Mutex<()> = Mutex::new(());
    let _guard = IN_PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let target = target_dir();
    let lock = File::create(target.join("test-venv.lock")).expect("create the venv lock file");
    // SAFETY: flock on a file descriptor we own; released when `lock` drops.
    let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock the venv lock file");
    let marker = target
        .join("test-venv")
        .join(format!(".installed-{package}"));
    if marker.exists() {
        return python;
    }
    pip_install(&python, package);
    fs::write(&marker, b"").expect("write the venv marker");
    python
}

/// `python -m pip install package` (quietly); panics with pip's output.
fn pip_install(python: &Path, package: &str) {
    let mut pip = Command::new(python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        package,
    ]);
    run_ok(
        pip,
        Duration::from_secs(300),
        &format!("pip install {package}"),
    );
}

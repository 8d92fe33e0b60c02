//! Go test programs (a go-redis workload, a gomemcache client): built once
//! per run under the target dir, modules from the Go module proxy on first
//! use (cached there too).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::env::{target_dir, workspace_root};
use crate::process::run_with_timeout;

/// `go build` of the program in `src` (relative to the workspace root) into
/// `<target>/go/<name>`; panics with Go's output when the build fails.
pub fn go_build(src: &str, name: &str) -> PathBuf {
    let target = target_dir().join("go");
    std::fs::create_dir_all(&target).expect("create target/go");
    let bin = target.join(name);
    let mut cmd = Command::new("go");
    cmd.current_dir(workspace_root().join(src))
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .env("GOFLAGS", "-mod=mod")
        .env("GOPATH", target.join("gopath"))
        .env("GOCACHE", target.join("gocache"));
    let out = run_with_timeout(cmd, Duration::from_secs(600)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "go build of {src} failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    bin
}

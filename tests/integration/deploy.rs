//! Deployment artifacts under `deploy/` (Docker is not available here, so
//! they are parsed, not run): the Dockerfile, the Kubernetes manifests, the
//! compose file and the systemd unit must agree with each other and with the
//! config they ship, and every shipped config must pass `memshift check`, the
//! real binary's own validation. The health check command and the probe paths
//! are run against a real memshift.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::Duration;

use memshift_tests::{
    free_port, memshift_bin, require_tools, run_with_timeout, tool_available, workspace_root,
    Memshift,
};
use serde::Deserialize;
use serde_yaml::Value;

/// Where every artifact mounts or installs the config (documented in
/// deploy/README.md).
const CONFIG_PATH: &str = "/etc/memshift/memshift.toml";
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

fn deploy_path(rel: &str) -> PathBuf {
    workspace_root().join("deploy").join(rel)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

// ---------------------------------------------------------------------------
// memshift check

/// `memshift check --config` on `toml`: it must pass without warnings. Returns
/// the resolved settings it prints (every default filled in).
fn memshift_check(what: &str, toml: &str) -> toml::Table {
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

fn section<'a>(cfg: &'a toml::Table, name: &str) -> &'a toml::Table {
    cfg.get(name)
        .and_then(toml::Value::as_table)
        .unwrap_or_else(|| panic!("resolved config has no [{name}]"))
}

fn cfg_str<'a>(cfg: &'a toml::Table, sec: &str, key: &str) -> Option<&'a str> {
    section(cfg, sec).get(key).and_then(toml::Value::as_str)
}

fn cfg_int(cfg: &toml::Table, sec: &str, key: &str) -> i64 {
    section(cfg, sec)
        .get(key)
        .and_then(toml::Value::as_integer)
        .unwrap_or_else(|| panic!("resolved config has no integer {sec}.{key}"))
}

fn cfg_addr(cfg: &toml::Table, sec: &str, key: &str) -> Option<SocketAddr> {
    cfg_str(cfg, sec, key).filter(|s| !s.is_empty()).map(|s| {
        s.parse()
            .unwrap_or_else(|e| panic!("{sec}.{key} = {s:?} is not IP:port: {e}"))
    })
}

/// Worst-case stop time in seconds: memshift drains connections for up to
/// `drain_timeout_ms`, then flushes shadow writes for up to as long again.
fn worst_case_stop_s(cfg: &toml::Table) -> f64 {
    2.0 * cfg_int(cfg, "server", "drain_timeout_ms") as f64 / 1000.0
}

/// `host:port` of each entry of `[redis] shards` / `[memcached] servers`.
fn backend_addrs(cfg: &toml::Table, sec: &str, key: &str) -> Vec<(String, u16)> {
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
fn tls_files(cfg: &toml::Table) -> Vec<String> {
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

// ---------------------------------------------------------------------------
// Dockerfile

/// The Dockerfile's instructions: continuation lines joined, comments dropped.
fn dockerfile_instructions(src: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in src.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (pending.is_empty() && trimmed.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                let (instr, args) = pending
                    .split_once(char::is_whitespace)
                    .unwrap_or((&pending, ""));
                out.push((instr.to_ascii_uppercase(), args.trim().to_string()));
                pending.clear();
            }
        }
    }
    assert!(pending.is_empty(), "Dockerfile ends inside a continuation");
    out
}

/// What the other artifacts rely on from deploy/Dockerfile.
struct Image {
    /// The runtime stage's instructions.
    runtime: Vec<(String, String)>,
    uid: u32,
    gid: u32,
    /// HEALTHCHECK's command, exec form.
    healthcheck: Vec<String>,
    /// ENV of the runtime stage.
    env: BTreeMap<String, String>,
    exposed: BTreeSet<u16>,
}

fn exec_form(what: &str, args: &str) -> Vec<String> {
    // Docker silently falls back to the shell form when this is not JSON.
    serde_json::from_str(args)
        .unwrap_or_else(|e| panic!("{what} is not an exec-form JSON array ({e}): {args}"))
}

fn one<'a>(instrs: &'a [(String, String)], name: &str) -> &'a str {
    let found: Vec<&str> = instrs
        .iter()
        .filter(|(i, _)| i == name)
        .map(|(_, a)| a.as_str())
        .collect();
    assert_eq!(found.len(), 1, "the runtime stage needs exactly one {name}");
    found[0]
}

fn proxy_manifest() -> (String, String) {
    let manifest: toml::Table =
        toml::from_str(&read(&workspace_root().join("crates/proxy/Cargo.toml")))
            .expect("crates/proxy/Cargo.toml");
    let package = manifest["package"]["name"].as_str().unwrap().to_string();
    let bin = manifest["bin"][0]["name"].as_str().unwrap().to_string();
    (package, bin)
}

/// The Debian release an image tag is built on.
fn debian_release(image: &str) -> Option<&'static str> {
    [
        ("bookworm", "bookworm"),
        ("debian12", "bookworm"),
        ("trixie", "trixie"),
        ("debian13", "trixie"),
    ]
    .into_iter()
    .find(|(tag, _)| image.contains(tag))
    .map(|(_, release)| release)
}

fn load_image() -> Image {
    let instrs = dockerfile_instructions(&read(&deploy_path("Dockerfile")));
    let (package, bin) = proxy_manifest();

    let stage_starts: Vec<usize> = instrs
        .iter()
        .enumerate()
        .filter(|(_, (i, _))| i == "FROM")
        .map(|(n, _)| n)
        .collect();
    assert!(stage_starts.len() >= 2, "expected a multi-stage build");
    let builder = &instrs[stage_starts[0]..stage_starts[1]];
    let runtime = instrs[*stage_starts.last().unwrap()..].to_vec();

    // Builder: rust image, named, and the release build of the proxy package.
    let from: Vec<&str> = builder[0].1.split_whitespace().collect();
    assert!(
        from[0].starts_with("rust:") && from.len() == 3 && from[1].eq_ignore_ascii_case("as"),
        "builder stage: expected `FROM rust:... AS <name>`, got {from:?}"
    );
    let builder_name = from[2];
    let build = builder
        .iter()
        .find(|(i, a)| i == "RUN" && a.contains("cargo build"))
        .map(|(_, a)| a.as_str())
        .expect("the builder stage runs `cargo build`");
    let words: Vec<&str> = build.split_whitespace().collect();
    for flag in ["--release", "--locked"] {
        assert!(words.contains(&flag), "cargo build without {flag}: {build}");
    }
    assert!(
        words
            .windows(2)
            .any(|w| matches!(w[0], "-p" | "--package") && w[1] == package),
        "cargo build does not select -p {package}: {build}"
    );
    let built = format!("target/release/{bin}");
    assert!(
        build.contains(&built),
        "the build step does not pick up {built}: {build}"
    );

    // Runtime: same Debian release as the builder (glibc), binary from it.
    let runtime_image = runtime[0].1.split_whitespace().next().unwrap();
    assert!(
        runtime_image.starts_with("debian:") || runtime_image.contains("distroless/cc"),
        "runtime stage should be debian slim or distroless/cc, got {runtime_image}"
    );
    assert_eq!(
        debian_release(runtime_image),
        debian_release(from[0]),
        "builder ({}) and runtime ({runtime_image}) must share a Debian release",
        from[0]
    );
    let installed = runtime
        .iter()
        .filter(|(i, a)| i == "COPY" && a.contains(&format!("--from={builder_name}")))
        .filter_map(|(_, a)| a.split_whitespace().last())
        .find(|dest| dest.ends_with(&format!("/{bin}")))
        .unwrap_or_else(|| panic!("the runtime stage does not COPY {bin} from {builder_name}"));
    let entrypoint = exec_form("ENTRYPOINT", one(&runtime, "ENTRYPOINT"));
    assert!(
        entrypoint[0] == installed
            || (entrypoint[0] == bin && installed == format!("/usr/local/bin/{bin}")),
        "ENTRYPOINT {entrypoint:?} does not run the installed {installed}"
    );
    let cmd = exec_form("CMD", one(&runtime, "CMD"));
    assert_eq!(cmd, ["--config", CONFIG_PATH], "CMD");
    assert_eq!(one(&runtime, "STOPSIGNAL"), "SIGTERM");

    // A fixed, numeric, non-root user (runAsNonRoot can only verify numbers).
    let user = one(&runtime, "USER");
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    let uid: u32 = uid
        .parse()
        .unwrap_or_else(|_| panic!("USER {user} is not numeric"));
    let gid: u32 = gid
        .parse()
        .unwrap_or_else(|_| panic!("USER {user} is not numeric"));
    assert!(uid != 0 && gid != 0, "USER {user} is root");
    let useradd = runtime
        .iter()
        .find(|(i, a)| i == "RUN" && a.contains("useradd"))
        .map(|(_, a)| a.clone())
        .unwrap_or_default();
    assert!(
        useradd.contains(&format!("--uid {uid}")),
        "USER {uid} is not the account the image creates: {useradd}"
    );

    let exposed: BTreeSet<u16> = runtime
        .iter()
        .filter(|(i, _)| i == "EXPOSE")
        .flat_map(|(_, a)| a.split_whitespace())
        .map(|p| p.trim_end_matches("/tcp").parse().expect("EXPOSE port"))
        .collect();
    let env: BTreeMap<String, String> = runtime
        .iter()
        .filter(|(i, _)| i == "ENV")
        .filter_map(|(_, a)| a.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let hc = one(&runtime, "HEALTHCHECK");
    let (_, command) = hc
        .split_once(" CMD ")
        .unwrap_or_else(|| panic!("HEALTHCHECK without CMD: {hc}"));
    let healthcheck = exec_form("HEALTHCHECK CMD", command.trim());
    assert!(
        healthcheck.iter().any(|a| a.contains("/health ")),
        "HEALTHCHECK does not GET /health: {healthcheck:?}"
    );
    Image {
        runtime,
        uid,
        gid,
        healthcheck,
        env,
        exposed,
    }
}

impl Image {
    /// The admin port the health check calls when nothing overrides it.
    fn health_port(&self) -> u16 {
        self.env
            .get("MEMSHIFT_ADMIN_PORT")
            .and_then(|p| p.parse().ok())
            .expect("ENV MEMSHIFT_ADMIN_PORT=<port> (used by HEALTHCHECK)")
    }
}

#[test]
fn dockerfile_builds_the_proxy_and_runs_it_as_a_fixed_non_root_user() {
    let image = load_image();
    // The documented ports: memcached protocol and admin.
    for port in [11211, image.health_port()] {
        assert!(
            image.exposed.contains(&port),
            "EXPOSE lacks {port}: {:?}",
            image.exposed
        );
    }
    assert_eq!(image.health_port(), 9121, "admin.listen's default port");
    // The image ships no config: a missing mount must fail, not run defaults.
    assert!(
        !image
            .runtime
            .iter()
            .any(|(i, a)| (i == "COPY" || i == "ADD") && a.contains(CONFIG_PATH)),
        "the image should not bake in {CONFIG_PATH}"
    );
}

// ---------------------------------------------------------------------------
// .dockerignore

/// One path segment against a pattern segment with `*` and `?`.
fn segment_matches(pat: &[u8], s: &[u8]) -> bool {
    match (pat.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            segment_matches(&pat[1..], s) || (!s.is_empty() && segment_matches(pat, &s[1..]))
        }
        (Some(b'?'), Some(_)) => segment_matches(&pat[1..], &s[1..]),
        (Some(p), Some(c)) if p == c => segment_matches(&pat[1..], &s[1..]),
        _ => false,
    }
}

fn glob_matches(pat: &[&str], path: &[&str]) -> bool {
    match pat.first() {
        None => path.is_empty(),
        Some(&"**") => (0..=path.len()).any(|skip| glob_matches(&pat[1..], &path[skip..])),
        Some(p) => {
            !path.is_empty()
                && segment_matches(p.as_bytes(), path[0].as_bytes())
                && glob_matches(&pat[1..], &path[1..])
        }
    }
}

/// Docker's rule: the last matching line wins (`!` re-includes), and a
/// pattern matching a directory excludes everything under it.
fn dockerignored(patterns: &[String], path: &str) -> bool {
    let segs: Vec<&str> = path.split('/').collect();
    let mut excluded = false;
    for line in patterns {
        let (negate, pat) = match line.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, line.as_str()),
        };
        let pat: Vec<&str> = pat.trim_matches('/').split('/').collect();
        if (1..=segs.len()).any(|n| glob_matches(&pat, &segs[..n])) {
            excluded = !negate;
        }
    }
    excluded
}

#[test]
fn dockerignore_keeps_the_workspace_and_drops_build_outputs() {
    let patterns: Vec<String> = read(&workspace_root().join(".dockerignore"))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    // The matcher itself, on Docker's documented cases.
    assert!(dockerignored(&["**/*.go".into()], "a/b/c.go"));
    assert!(dockerignored(&["target".into()], "target/debug/x"));
    assert!(!dockerignored(&["target".into()], "crates/target/x"));
    assert!(!dockerignored(
        &["*.md".into(), "!README.md".into()],
        "README.md"
    ));

    // `cargo build --locked` loads every workspace member: all of them, with
    // their sources and the lock file, must reach the builder.
    let root: toml::Table =
        toml::from_str(&read(&workspace_root().join("Cargo.toml"))).expect("Cargo.toml");
    let members: Vec<&str> = root["workspace"]["members"]
        .as_array()
        .expect("workspace.members")
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert!(members.contains(&"crates/proxy"));
    let mut needed = vec!["Cargo.toml".to_string(), "Cargo.lock".to_string()];
    for m in &members {
        let dir = workspace_root().join(m);
        needed.push(format!("{m}/Cargo.toml"));
        for sub in ["src", "benches", "integration", "tests"] {
            if dir.join(sub).is_dir() {
                needed.push(format!("{m}/{sub}/x.rs"));
            }
        }
    }
    for path in &needed {
        assert!(
            !dockerignored(&patterns, path),
            ".dockerignore drops {path}, which the build needs"
        );
    }
    for path in [
        "target/release/memshift",
        ".git/HEAD",
        "crates/protocol/fuzz/corpus/x",
    ] {
        assert!(
            dockerignored(&patterns, path),
            ".dockerignore should drop {path}"
        );
    }
}

// ---------------------------------------------------------------------------
// Health check and probes, against a real memshift

/// memshift with its admin listener on a free port; its only shard is a
/// closed port, so it is alive but not ready.
fn start_unready_memshift() -> (Memshift, u16) {
    let admin = free_port();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:{}\"\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [redis]\nshards = [\"127.0.0.1:{}\"]\n",
        free_port(),
        free_port()
    );
    (Memshift::start(&config), admin)
}

/// Status code of `GET path` on 127.0.0.1:port.
fn http_status(port: u16, path: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the admin port");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("GET {path}: not an HTTP reply: {reply:?}"))
}

/// A one-shot HTTP server answering `status`; returns its port and the
/// request line it received.
fn fake_admin(status: &'static str) -> (u16, thread::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 512];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let _ = write!(s, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
        String::from_utf8_lossy(&head)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    });
    (port, handle)
}

/// Runs a health check command with the admin port in MEMSHIFT_ADMIN_PORT.
fn health_check_passes(argv: &[String], port: u16) -> bool {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env("MEMSHIFT_ADMIN_PORT", port.to_string());
    run_with_timeout(cmd, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("health check hung: {e}"))
        .status
        .success()
}

#[test]
fn health_check_command_passes_only_on_200_from_health() {
    if !require_tools(
        "health_check_command_passes_only_on_200_from_health",
        &["bash"],
    ) {
        return;
    }
    let image = load_image();
    let compose = load_compose();
    let mut commands = vec![("Dockerfile HEALTHCHECK", image.healthcheck.clone())];
    commands.push((
        "compose memshift healthcheck",
        compose.memshift_healthcheck(),
    ));

    let (_memshift, admin) = start_unready_memshift();
    for (what, argv) in &commands {
        assert!(
            health_check_passes(argv, admin),
            "{what} fails against a serving memshift"
        );

        let (port, req) = fake_admin("503 Service Unavailable");
        assert!(!health_check_passes(argv, port), "{what} passes on a 503");
        let req = req.join().unwrap();
        assert!(
            req.starts_with("GET /health HTTP/1."),
            "{what} sent {req:?}"
        );

        let closed = free_port();
        assert!(
            !health_check_passes(argv, closed),
            "{what} passes with nothing listening"
        );
    }
}

#[test]
fn probe_paths_are_liveness_and_readiness_endpoints() {
    let (_memshift, admin) = start_unready_memshift();
    let mut probes = Vec::new();
    for file in ["kubernetes/sidecar.yaml", "kubernetes/standalone.yaml"] {
        for doc in yaml_docs(file) {
            if doc["kind"] != "Deployment" {
                continue;
            }
            let pod = &doc["spec"]["template"]["spec"];
            let c = memshift_container(pod);
            for kind in ["livenessProbe", "readinessProbe", "startupProbe"] {
                if let Some(path) = c[kind]["httpGet"]["path"].as_str() {
                    probes.push((file, kind, path.to_string()));
                }
            }
        }
    }
    assert!(probes.len() >= 4, "probes: {probes:?}");
    for (file, kind, path) in probes {
        let status = http_status(admin, &path);
        match kind {
            // Must hold while the process serves, shard down or not: a
            // failure restarts the container.
            "livenessProbe" => assert_eq!(status, 200, "{file}: liveness {path}"),
            // Must drop while a backend is down (this memshift's shard is).
            "readinessProbe" => assert_eq!(status, 503, "{file}: readiness {path}"),
            _ => assert!(
                matches!(status, 200 | 503),
                "{file}: startup probe {path}: {status}"
            ),
        }
    }
}

// ---------------------------------------------------------------------------
// Kubernetes

fn yaml_docs(rel: &str) -> Vec<Value> {
    let src = read(&deploy_path(rel));
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&src)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{rel}: {e}")))
        .collect();
    assert!(!docs.is_empty(), "{rel}: no YAML documents");
    for d in &docs {
        for key in ["apiVersion", "kind"] {
            assert!(
                d[key].as_str().is_some_and(|s| !s.is_empty()),
                "{rel}: a document without {key}"
            );
        }
        assert!(
            d["metadata"]["name"]
                .as_str()
                .is_some_and(|s| !s.is_empty()),
            "{rel}: {} without metadata.name",
            d["kind"].as_str().unwrap()
        );
    }
    docs
}

fn find<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn seq(v: &Value) -> &[Value] {
    v.as_sequence().map(Vec::as_slice).unwrap_or(&[])
}

fn pod_containers(pod: &Value) -> impl Iterator<Item = &Value> {
    seq(&pod["initContainers"])
        .iter()
        .chain(seq(&pod["containers"]))
}

fn memshift_container(pod: &Value) -> &Value {
    let found: Vec<&Value> = pod_containers(pod)
        .filter(|c| c["image"].as_str().is_some_and(|i| i.contains("memshift")))
        .collect();
    assert_eq!(found.len(), 1, "expected one memshift container");
    found[0]
}

/// `labels` holds every pair of `selector`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let sel = selector.as_mapping().expect("a label selector");
    !sel.is_empty() && sel.iter().all(|(k, v)| &labels[k.as_str().unwrap()] == v)
}

/// A probe's or Service's port: a number, or a container port's name.
fn container_port(container: &Value, port: &Value) -> u16 {
    if let Some(n) = port.as_u64() {
        return n as u16;
    }
    let name = port.as_str().expect("port is a number or a name");
    seq(&container["ports"])
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("no container port named {name}")) as u16
}

fn prestop_sleep_s(container: &Value) -> f64 {
    let pre = &container["lifecycle"]["preStop"];
    if let Some(s) = pre["sleep"]["seconds"].as_f64() {
        return s;
    }
    match seq(&pre["exec"]["command"]) {
        [cmd, secs] if cmd.as_str().is_some_and(|c| c.ends_with("sleep")) => secs
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("sleep seconds"),
        [] => 0.0,
        other => panic!("preStop is not a plain sleep: {other:?}"),
    }
}

/// Is `path` inside the mount at `mount`?
fn under(path: &str, mount: &str) -> bool {
    Path::new(path).starts_with(mount)
}

/// Checks a Deployment's memshift pod against its ConfigMap, the image and
/// the probes; returns the resolved config.
fn check_memshift_pod(rel: &str, docs: &[Value], image: &Image) -> (toml::Table, Value) {
    let deployment = find(docs, "Deployment")
        .into_iter()
        .find(|d| memshift_container_opt(&d["spec"]["template"]["spec"]).is_some())
        .unwrap_or_else(|| panic!("{rel}: no Deployment with a memshift container"))
        .clone();
    let spec = &deployment["spec"];
    let pod = &spec["template"]["spec"];
    assert!(
        selects(
            &spec["selector"]["matchLabels"],
            &spec["template"]["metadata"]["labels"]
        ),
        "{rel}: the Deployment's selector does not match its pod labels"
    );
    let c = memshift_container(pod);

    // Config: the image's path, mounted from a ConfigMap of this file.
    let args: Vec<&str> = seq(&c["args"]).iter().filter_map(Value::as_str).collect();
    assert!(c["command"].is_null(), "{rel}: keep the image's ENTRYPOINT");
    assert!(
        args.is_empty() || args == ["--config", CONFIG_PATH],
        "{rel}: memshift args {args:?}"
    );
    let config_dir = Path::new(CONFIG_PATH).parent().unwrap().to_str().unwrap();
    let file_name = Path::new(CONFIG_PATH)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let mount = seq(&c["volumeMounts"])
        .iter()
        .find(|m| m["mountPath"] == config_dir)
        .unwrap_or_else(|| panic!("{rel}: nothing mounted at {config_dir}"));
    assert!(
        mount["subPath"].is_null(),
        "{rel}: a subPath mount never sees ConfigMap updates"
    );
    let volume = seq(&pod["volumes"])
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the config volume");
    let cm_name = volume["configMap"]["name"]
        .as_str()
        .unwrap_or_else(|| panic!("{rel}: {config_dir} is not a ConfigMap volume"));
    let key = match seq(&volume["configMap"]["items"]) {
        [] => file_name.to_string(),
        items => items
            .iter()
            .find(|i| i["path"] == file_name)
            .and_then(|i| i["key"].as_str())
            .unwrap_or_else(|| panic!("{rel}: the ConfigMap items do not produce {file_name}"))
            .to_string(),
    };
    let cm = find(docs, "ConfigMap")
        .into_iter()
        .find(|d| d["metadata"]["name"] == cm_name)
        .unwrap_or_else(|| panic!("{rel}: ConfigMap {cm_name} is not in the file"));
    let toml_src = cm["data"][key.as_str()]
        .as_str()
        .unwrap_or_else(|| panic!("{rel}: ConfigMap {cm_name} has no key {key}"));
    let cfg = memshift_check(&format!("{rel}: ConfigMap {cm_name}"), toml_src);

    // Probes on the admin listener; kubelet connects to the pod IP.
    let admin = cfg_addr(&cfg, "admin", "listen").expect("admin.listen must be enabled");
    assert!(
        admin.ip().is_unspecified(),
        "{rel}: admin.listen {admin} is unreachable for kubelet probes"
    );
    for (kind, path) in [("livenessProbe", "/health"), ("readinessProbe", "/ready")] {
        let probe = &c[kind]["httpGet"];
        assert_eq!(probe["path"], path, "{rel}: {kind} path");
        assert_eq!(
            container_port(c, &probe["port"]),
            admin.port(),
            "{rel}: {kind} port"
        );
    }
    if !c["startupProbe"].is_null() {
        let probe = &c["startupProbe"]["httpGet"];
        assert_eq!(
            container_port(c, &probe["port"]),
            admin.port(),
            "{rel}: startupProbe port"
        );
    }

    // Stopping: room for the preStop sleeps and the worst-case drain.
    let grace = pod["terminationGracePeriodSeconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("{rel}: set terminationGracePeriodSeconds"));
    let prestop: f64 = pod_containers(pod).map(prestop_sleep_s).sum();
    assert!(
        grace > prestop + worst_case_stop_s(&cfg),
        "{rel}: terminationGracePeriodSeconds {grace} <= preStop {prestop} s + 2 x drain {} s",
        worst_case_stop_s(&cfg) / 2.0
    );

    // Hardening, and the image's user.
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true, "{rel}: runAsNonRoot");
    assert_eq!(
        sc["readOnlyRootFilesystem"], true,
        "{rel}: readOnlyRootFilesystem"
    );
    assert_eq!(
        sc["allowPrivilegeEscalation"], false,
        "{rel}: allowPrivilegeEscalation"
    );
    assert!(
        seq(&sc["capabilities"]["drop"]).iter().any(|d| d == "ALL"),
        "{rel}: drop ALL"
    );
    if let Some(uid) = sc["runAsUser"].as_u64() {
        assert_eq!(
            uid,
            u64::from(image.uid),
            "{rel}: runAsUser differs from the image's USER"
        );
    }
    for kind in ["requests", "limits"] {
        for res in ["cpu", "memory"] {
            assert!(
                !c["resources"][kind][res].is_null(),
                "{rel}: resources.{kind}.{res}"
            );
        }
    }

    // TLS files come from a read-only Secret mount memshift can read.
    let files = tls_files(&cfg);
    assert!(
        !files.is_empty(),
        "{rel}: the config uses no TLS files from the Secret"
    );
    for file in files {
        let m = seq(&c["volumeMounts"])
            .iter()
            .find(|m| m["mountPath"].as_str().is_some_and(|p| under(&file, p)))
            .unwrap_or_else(|| panic!("{rel}: TLS file {file} is not under any mount"));
        assert_eq!(
            m["readOnly"], true,
            "{rel}: the TLS mount must be read-only"
        );
        let v = seq(&pod["volumes"])
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap();
        let secret = &v["secret"];
        assert!(!secret.is_null(), "{rel}: {file} is not from a Secret");
        let rel_path = Path::new(&file)
            .strip_prefix(m["mountPath"].as_str().unwrap())
            .unwrap()
            .to_str()
            .unwrap();
        let items = seq(&secret["items"]);
        assert!(
            items.is_empty() || items.iter().any(|i| i["path"] == rel_path),
            "{rel}: Secret items do not produce {file}"
        );
        // Secret files are root-owned: memshift reads them as "other" or
        // through fsGroup.
        let mode = secret["defaultMode"].as_u64().unwrap_or(0o644);
        if mode & 0o004 == 0 {
            assert!(
                mode & 0o040 != 0,
                "{rel}: Secret mode {mode:o} is unreadable to memshift"
            );
            assert_eq!(
                pod["securityContext"]["fsGroup"].as_u64(),
                Some(u64::from(image.gid)),
                "{rel}: Secret mode {mode:o} needs fsGroup = memshift's gid"
            );
        }
    }

    // The migration example: warmup over 3 Redis shards named by DNS.
    assert_eq!(cfg_str(&cfg, "migration", "phase"), Some("warmup"), "{rel}");
    let shards = backend_addrs(&cfg, "redis", "shards");
    assert_eq!(shards.len(), 3, "{rel}: shards {shards:?}");
    for (host, _) in &shards {
        assert!(
            host.parse::<IpAddr>().is_err(),
            "{rel}: shard {host} is not a DNS name"
        );
    }
    assert!(
        !backend_addrs(&cfg, "memcached", "servers").is_empty(),
        "{rel}: legacy pool"
    );
    (cfg, deployment)
}

fn memshift_container_opt(pod: &Value) -> Option<&Value> {
    pod_containers(pod).find(|c| c["image"].as_str().is_some_and(|i| i.contains("memshift")))
}

fn kinds(docs: &[Value]) -> BTreeSet<&str> {
    docs.iter().map(|d| d["kind"].as_str().unwrap()).collect()
}

#[test]
fn kubernetes_sidecar_runs_memshift_on_loopback_next_to_the_app() {
    let image = load_image();
    let docs = yaml_docs("kubernetes/sidecar.yaml");
    assert_eq!(kinds(&docs), BTreeSet::from(["ConfigMap", "Deployment"]));
    let (cfg, deployment) = check_memshift_pod("sidecar.yaml", &docs, &image);
    let pod = &deployment["spec"]["template"]["spec"];

    let listen = cfg_addr(&cfg, "server", "listen").expect("server.listen");
    assert_eq!(
        listen,
        "127.0.0.1:11211".parse().unwrap(),
        "the sidecar listens on loopback"
    );

    // Native sidecar: restarted like a container, and its startup probe is
    // what holds the app back until memshift is ready.
    let c = memshift_container(pod);
    if seq(&pod["initContainers"]).iter().any(|i| i == c) {
        assert_eq!(
            c["restartPolicy"], "Always",
            "a plain init container would block the pod"
        );
        assert_eq!(
            c["startupProbe"]["httpGet"]["path"], "/ready",
            "gate the app on readiness"
        );
    }

    // The app container is pointed at memshift.
    let apps: Vec<&Value> = seq(&pod["containers"]).iter().filter(|a| *a != c).collect();
    assert!(!apps.is_empty(), "no app container");
    let target = listen.to_string();
    assert!(
        apps.iter()
            .flat_map(|a| seq(&a["env"]))
            .any(|e| e["value"].as_str().is_some_and(|v| v.contains(&target))),
        "no app env var points at {target}"
    );
}

#[test]
fn kubernetes_standalone_serves_a_service_through_replicas() {
    let image = load_image();
    let docs = yaml_docs("kubernetes/standalone.yaml");
    assert_eq!(
        kinds(&docs),
        BTreeSet::from(["ConfigMap", "Deployment", "PodDisruptionBudget", "Service"])
    );
    let (cfg, deployment) = check_memshift_pod("standalone.yaml", &docs, &image);
    let spec = &deployment["spec"];
    let labels = &spec["template"]["metadata"]["labels"];
    let c = memshift_container(&spec["template"]["spec"]);
    let replicas = spec["replicas"].as_u64().unwrap_or(1);
    assert!(replicas >= 2, "replicas {replicas}");

    // Reachable from other pods: every protocol listener on all interfaces.
    let mut listen_ports = BTreeSet::new();
    for key in ["listen", "tls_listen"] {
        if let Some(a) = cfg_addr(&cfg, "server", key) {
            assert!(
                a.ip().is_unspecified(),
                "server.{key} {a} is unreachable through a Service"
            );
            listen_ports.insert(a.port());
        }
    }
    assert!(listen_ports.contains(&11211), "server.listen on 11211");

    // The Service selects these pods and forwards to memshift's listeners.
    let services = find(&docs, "Service");
    assert_eq!(services.len(), 1);
    let svc = &services[0]["spec"];
    assert!(
        selects(&svc["selector"], labels),
        "the Service selects no memshift pod"
    );
    let mut forwarded = BTreeMap::new();
    for p in seq(&svc["ports"]) {
        let port = p["port"].as_u64().expect("service port") as u16;
        let target = if p["targetPort"].is_null() {
            &p["port"]
        } else {
            &p["targetPort"]
        };
        let to = container_port(c, target);
        assert!(
            listen_ports.contains(&to),
            "Service port {port} -> {to}: memshift does not listen there"
        );
        forwarded.insert(port, to);
    }
    assert_eq!(
        forwarded.get(&11211),
        Some(&11211),
        "Service 11211 -> memshift 11211"
    );

    // Voluntary disruptions never take every replica, and never block a drain forever.
    let pdbs = find(&docs, "PodDisruptionBudget");
    assert_eq!(pdbs.len(), 1);
    let pdb = &pdbs[0]["spec"];
    assert!(
        selects(&pdb["selector"]["matchLabels"], labels),
        "the PDB selects no memshift pod"
    );
    let allowed = match (pdb["maxUnavailable"].as_u64(), pdb["minAvailable"].as_u64()) {
        (Some(max), None) => max,
        (None, Some(min)) => replicas.saturating_sub(min),
        other => panic!("PDB: set one of maxUnavailable/minAvailable as a number: {other:?}"),
    };
    assert!(
        allowed >= 1 && allowed < replicas,
        "PDB allows {allowed} of {replicas} down"
    );
}

// ---------------------------------------------------------------------------
// docker compose

struct Compose {
    doc: Value,
}

fn load_compose() -> Compose {
    let src = read(&deploy_path("docker-compose.yml"));
    let doc: Value = serde_yaml::from_str(&src).expect("docker-compose.yml parses");
    assert!(
        doc["services"].is_mapping(),
        "docker-compose.yml: no services"
    );
    Compose { doc }
}

impl Compose {
    fn service(&self, name: &str) -> &Value {
        let s = &self.doc["services"][name];
        assert!(s.is_mapping(), "compose has no service {name}");
        s
    }

    fn memshift_healthcheck(&self) -> Vec<String> {
        let test: Vec<String> = seq(&self.service("memshift")["healthcheck"]["test"])
            .iter()
            .map(|a| a.as_str().expect("healthcheck arg").replace("$$", "$"))
            .collect();
        assert_eq!(
            test.first().map(String::as_str),
            Some("CMD"),
            "exec-form healthcheck"
        );
        test[1..].to_vec()
    }
}

/// Compose durations: `1m30s`, `15s`, `500ms`.
fn compose_duration_s(s: &str) -> f64 {
    let mut total = 0.0;
    let mut num = String::new();
    let mut chars = s.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch.is_ascii_digit() || ch == '.' {
            num.push(ch);
            continue;
        }
        let n: f64 = num.parse().unwrap_or_else(|_| panic!("duration {s}"));
        num.clear();
        total += match ch {
            'h' => n * 3600.0,
            'm' if chars.peek() == Some(&'s') => {
                chars.next();
                n / 1000.0
            }
            'm' => n * 60.0,
            's' => n,
            _ => panic!("duration {s}"),
        };
    }
    assert!(num.is_empty(), "duration {s} without a unit");
    total
}

/// The container-side port of each `ports:` entry (`[ip:]host:container`).
fn published(service: &Value) -> BTreeSet<u16> {
    seq(&service["ports"])
        .iter()
        .map(|p| {
            let s = p.as_str().expect("short port syntax");
            s.rsplit(':')
                .next()
                .unwrap()
                .trim_end_matches("/tcp")
                .parse()
                .expect("port")
        })
        .collect()
}

/// The port a backend container listens on: `--port`/`-p` in its command,
/// else the image's default.
fn backend_port(service: &Value, default: u16) -> u16 {
    let cmd: Vec<&str> = seq(&service["command"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    cmd.windows(2)
        .find(|w| matches!(w[0], "--port" | "-p"))
        .map(|w| w[1].parse().expect("port"))
        .unwrap_or(default)
}

/// `a/b/../c` → `a/c`, without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn compose_runs_memshift_over_three_redis_and_memcached() {
    let image = load_image();
    let compose = load_compose();
    let base = deploy_path("");
    let services = compose.doc["services"].as_mapping().expect("services");
    let memshift = compose.service("memshift");

    // Built from the repository root with deploy/Dockerfile, like the docs say.
    let context = normalize(
        &base.join(
            memshift["build"]["context"]
                .as_str()
                .expect("build.context"),
        ),
    );
    assert_eq!(context, normalize(&workspace_root()), "build context");
    let dockerfile = memshift["build"]["dockerfile"]
        .as_str()
        .expect("build.dockerfile");
    assert_eq!(
        normalize(&context.join(dockerfile)),
        normalize(&deploy_path("Dockerfile"))
    );

    // The config: mounted where the image's CMD reads it, and valid.
    let cmd: Vec<&str> = seq(&memshift["command"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        cmd.is_empty() || cmd == ["--config", CONFIG_PATH],
        "command {cmd:?}"
    );
    let host_config = seq(&memshift["volumes"])
        .iter()
        .filter_map(|v| {
            let (src, rest) = v.as_str()?.split_once(':')?;
            let dst = rest.split(':').next()?;
            let host = base.join(src);
            if dst == CONFIG_PATH {
                Some(host)
            } else if under(CONFIG_PATH, dst) {
                Some(host.join(Path::new(CONFIG_PATH).strip_prefix(dst).ok()?))
            } else {
                None
            }
        })
        .next()
        .unwrap_or_else(|| panic!("nothing mounted at {CONFIG_PATH}"));
    assert_eq!(
        normalize(&host_config),
        normalize(&deploy_path("compose/memshift.toml"))
    );
    let cfg = memshift_check("deploy/compose/memshift.toml", &read(&host_config));
    assert_eq!(cfg_str(&cfg, "migration", "phase"), Some("warmup"));

    // Listeners reachable through the published ports.
    let ports = published(memshift);
    let listen = cfg_addr(&cfg, "server", "listen").expect("server.listen");
    let admin = cfg_addr(&cfg, "admin", "listen").expect("admin.listen");
    for (what, a) in [("server.listen", listen), ("admin.listen", admin)] {
        assert!(
            a.ip().is_unspecified(),
            "{what} {a}: published ports never reach a loopback listener"
        );
        assert!(
            ports.contains(&a.port()),
            "{what} port {} is not published: {ports:?}",
            a.port()
        );
    }
    // The health check finds the admin port through the image's default.
    assert_eq!(
        admin.port(),
        image.health_port(),
        "admin port vs MEMSHIFT_ADMIN_PORT"
    );
    assert_eq!(
        compose.memshift_healthcheck(),
        image.healthcheck,
        "healthcheck vs Dockerfile"
    );

    // Backends: every shard and legacy server is a service on the right port.
    let shards = backend_addrs(&cfg, "redis", "shards");
    assert_eq!(shards.len(), 3, "shards {shards:?}");
    let legacy = backend_addrs(&cfg, "memcached", "servers");
    assert_eq!(legacy.len(), 1, "memcached servers {legacy:?}");
    let mut backends = BTreeSet::new();
    for ((host, port), image_prefix, default_port) in shards
        .iter()
        .map(|s| (s, "redis:", 6379))
        .chain(legacy.iter().map(|s| (s, "memcached:", 11211)))
    {
        let svc = compose.service(host);
        assert!(
            svc["image"]
                .as_str()
                .is_some_and(|i| i.starts_with(image_prefix)),
            "{host} should run {image_prefix}*"
        );
        assert_eq!(
            *port,
            backend_port(svc, default_port),
            "{host}: port in the config"
        );
        backends.insert(host.as_str());
    }
    let others: BTreeSet<&str> = services
        .keys()
        .filter_map(Value::as_str)
        .filter(|s| *s != "memshift")
        .collect();
    assert_eq!(
        others, backends,
        "services that are not backends of the config, or missing"
    );

    // memshift starts after its backends are healthy; everything has a check.
    for b in &backends {
        assert_eq!(
            memshift["depends_on"][*b]["condition"], "service_healthy",
            "memshift should wait for {b}"
        );
    }
    for (name, svc) in services {
        assert!(
            !seq(&svc["healthcheck"]["test"]).is_empty(),
            "service {} has no healthcheck",
            name.as_str().unwrap()
        );
    }

    // Stopping: the drain and the shadow flush fit in the grace period.
    let grace = compose_duration_s(memshift["stop_grace_period"].as_str().unwrap_or("10s"));
    assert!(
        grace > worst_case_stop_s(&cfg),
        "stop_grace_period {grace} s <= 2 x drain_timeout"
    );
    assert!(matches!(
        memshift["stop_signal"].as_str(),
        None | Some("SIGTERM")
    ));
}

// ---------------------------------------------------------------------------
// systemd

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

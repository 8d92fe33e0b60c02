//! The Dockerfile and .dockerignore.

use std::collections::{BTreeMap, BTreeSet};

use memshift_tests::workspace_root;

use super::{deploy_path, read, CONFIG_PATH};

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
pub(super) struct Image {
    /// The runtime stage's instructions.
    pub(super) runtime: Vec<(String, String)>,
    pub(super) uid: u32,
    pub(super) gid: u32,
    /// HEALTHCHECK's command, exec form.
    pub(super) healthcheck: Vec<String>,
    /// ENV of the runtime stage.
    pub(super) env: BTreeMap<String, String>,
    pub(super) exposed: BTreeSet<u16>,
}

fn exec_form(what: &str, args: &str) -> Vec<String> {
    // Docker silently falls back to the shell form when this is not JSON.
    serde_json::from_str(args)
        .unwrap_or_else(|e| panic!("{what} is not an exec-form JSON array ({e}): {args}"))
}

pub(super) fn one<'a>(instrs: &'a [(String, String)], name: &str) -> &'a str {
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

pub(super) fn load_image() -> Image {
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
    pub(super) fn health_port(&self) -> u16 {
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

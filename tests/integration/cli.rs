//! The `memshift` command line as a user meets it: `--help` (whole and per
//! command), `--version`, shell completions, usage errors, and that every flag
//! the docs show on a `memshift ...` command line exists on that command.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use memshift_tests::process::run_ok;
use memshift_tests::{memshift_bin, run_with_timeout, workspace_root, CommandOutput};

fn memshift(args: &[&str]) -> CommandOutput {
    let mut cmd = Command::new(memshift_bin());
    cmd.args(args);
    run_with_timeout(cmd, Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `memshift ARGS`, asserts exit 0, returns stdout.
fn ok(args: &[&str]) -> String {
    let mut cmd = Command::new(memshift_bin());
    cmd.args(args);
    run_ok(cmd, Duration::from_secs(30), &format!("memshift {args:?}"))
}

/// The subcommands `memshift --help` lists (its "Commands:" section).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|s| s != "help")
        .collect()
}

#[test]
fn help_version_and_completions() {
    let help = ok(&["--help"]);
    let subs = subcommands(&help);
    for want in ["run", "check", "ring", "copy", "completions"] {
        assert!(subs.iter().any(|s| s == want), "{want} not in:\n{help}");
    }
    assert_eq!(ok(&["-h"]), help);
    for sub in &subs {
        let sub_help = ok(&[sub, "--help"]);
        assert!(
            sub_help.contains(&format!("Usage: memshift {sub}")),
            "memshift {sub} --help:\n{sub_help}"
        );
        assert_eq!(ok(&["help", sub]), sub_help, "memshift help {sub}");
    }
    let version = format!("memshift {}\n", env!("CARGO_PKG_VERSION"));
    assert_eq!(ok(&["--version"]), version);
    assert_eq!(ok(&["-V"]), version);

    let bash = ok(&["completions", "bash"]);
    assert!(bash.contains("complete -F _memshift"), "{bash}");
    for flag in ["--config", "--from-shards", "--dry-run", "--remove"] {
        assert!(bash.contains(flag), "{flag} not completed by bash:\n{bash}");
    }
    assert!(ok(&["completions", "zsh"]).contains("#compdef memshift"));
    assert!(ok(&["completions", "fish"]).contains("complete -c memshift"));
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &[][..],
        &["--confg", "x.toml"],
        &["chek", "--config", "x.toml"],
        &["check"],
        &["ring", "--config", "x.toml", "--keys", "0"],
        &[
            "ring", "--config", "x.toml", "--add", "a:1", "--remove", "b:1",
        ],
        &["copy", "--config", "x.toml", "--rate", "many"],
        &["completions", "tcsh"],
    ] {
        let out = memshift(args);
        assert_eq!(out.status.code(), Some(2), "memshift {args:?}: {out:?}");
        assert!(
            out.stderr.contains("Usage: memshift") || out.stderr.starts_with("error: "),
            "memshift {args:?}: {}",
            out.stderr
        );
    }
    // A config that does not exist is not a usage error: exit 1, one line.
    let out = memshift(&["check", "--config", "/nonexistent/memshift.toml"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        out.stderr
            .starts_with("memshift: /nonexistent/memshift.toml: "),
        "{}",
        out.stderr
    );
}

/// Every `(command, --flag)` on a `memshift [command] ...` command line in
/// README.md, docs/ and deploy/ (`command` empty for the bare form).
fn documented_flags(known: &[String]) -> BTreeSet<(String, String)> {
    let root = workspace_root();
    let mut files = vec![root.join("README.md")];
    collect(&root.join("docs"), &mut files);
    collect(&root.join("deploy"), &mut files);
    let mut found = BTreeSet::new();
    for file in files {
        // The history quotes command lines of their day.
        if file.ends_with("benchmarks-history.md") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for line in text.lines() {
            scan_line(line, known, &mut found);
        }
    }
    found
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// One command line is `memshift` (as a word, not `memshift-load`) followed
/// by a known command or an option, up to a closing backtick, a shell
/// comment or the end of the line.
fn scan_line(line: &str, known: &[String], found: &mut BTreeSet<(String, String)>) {
    let mut rest = line;
    while let Some(at) = rest.find("memshift ") {
        let before = rest[..at].chars().last();
        let tail = &rest[at + "memshift ".len()..];
        rest = tail;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_') {
            continue;
        }
        let end = tail.find(['`', '#', '"']).unwrap_or(tail.len());
        let words: Vec<&str> = tail[..end].split_whitespace().collect();
        let Some(first) = words.first() else { continue };
        let sub = if known.iter().any(|k| k == first) {
            first.to_string()
        } else if first.starts_with('-') {
            String::new()
        } else {
            continue;
        };
        for w in &words {
            let w = w.trim_start_matches(['[', '(']);
            if let Some(name) = w.strip_prefix("--") {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                if !name.is_empty() {
                    found.insert((sub.clone(), format!("--{name}")));
                }
            }
        }
    }
}

#[test]
fn every_flag_in_the_docs_exists() {
    let subs = subcommands(&ok(&["--help"]));
    let found = documented_flags(&subs);
    // The docs do show these: a scan that finds nothing proves nothing.
    for want in [
        ("", "--config"),
        ("ring", "--add"),
        ("copy", "--from-shards"),
    ] {
        assert!(
            found.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} not found in the docs; found {found:?}"
        );
    }
    let mut missing = Vec::new();
    for (sub, flag) in &found {
        let help = if sub.is_empty() {
            ok(&["--help"])
        } else {
            ok(&[sub, "--help"])
        };
        if !help.contains(&format!("{flag} ")) && !help.contains(&format!("{flag}\n")) {
            missing.push(format!("memshift {sub} {flag}"));
        }
    }
    assert!(
        missing.is_empty(),
        "documented but not accepted: {missing:?}"
    );
}

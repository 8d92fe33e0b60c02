use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::CommandFactory;

use super::*;

fn parse(args: &[&str]) -> Result<Command, clap::Error> {
    parse_args(args)
}

fn path(p: &str) -> PathBuf {
    PathBuf::from(p)
}

/// The kind of a parse error; panics on success.
fn kind(args: &[&str]) -> ErrorKind {
    match parse(args) {
        Ok(c) => panic!("args {args:?} parsed as {c:?}"),
        Err(e) => e.kind(),
    }
}

#[test]
fn clap_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn run_forms() {
    let run = Command::Run {
        config: path("a.toml"),
    };
    assert_eq!(parse(&["--config", "a.toml"]).unwrap(), run);
    assert_eq!(parse(&["--config=a.toml"]).unwrap(), run);
    assert_eq!(parse(&["-c", "a.toml"]).unwrap(), run);
    assert_eq!(parse(&["run", "--config", "a.toml"]).unwrap(), run);
    assert_eq!(parse(&["run", "-c=a.toml"]).unwrap(), run);
}

#[test]
fn check_form() {
    assert_eq!(
        parse(&["check", "--config", "x/y.toml"]).unwrap(),
        Command::Check {
            config: path("x/y.toml")
        }
    );
}

#[test]
fn ring_forms() {
    assert_eq!(
        parse(&["ring", "--config", "a.toml"]).unwrap(),
        Command::Ring {
            config: path("a.toml"),
            keys: 100_000,
            change: None
        }
    );
    assert_eq!(
        parse(&[
            "ring",
            "--keys=500",
            "--config",
            "a.toml",
            "--add",
            "10.0.0.9:6379"
        ])
        .unwrap(),
        Command::Ring {
            config: path("a.toml"),
            keys: 500,
            change: Some(RingChange::Add("10.0.0.9:6379".into()))
        }
    );
    assert_eq!(
        parse(&["ring", "--config", "a.toml", "--remove=r1"]).unwrap(),
        Command::Ring {
            config: path("a.toml"),
            keys: 100_000,
            change: Some(RingChange::Remove("r1".into()))
        }
    );
}

#[test]
fn copy_forms() {
    assert_eq!(
        parse(&["copy", "--config", "a.toml"]).unwrap(),
        Command::Copy {
            config: path("a.toml"),
            from_shards: None,
            dry_run: false,
            rate: None,
            verify: false
        }
    );
    assert_eq!(
        parse(&[
            "copy",
            "--dry-run",
            "--rate",
            "5000",
            "--verify",
            "--config=a.toml"
        ])
        .unwrap(),
        Command::Copy {
            config: path("a.toml"),
            from_shards: None,
            dry_run: true,
            rate: Some(5000),
            verify: true
        }
    );
    assert_eq!(
        parse(&[
            "copy",
            "--from-shards",
            "old.toml",
            "--config",
            "new.toml",
            "--verify"
        ])
        .unwrap(),
        Command::Copy {
            config: path("new.toml"),
            from_shards: Some(path("old.toml")),
            dry_run: false,
            rate: None,
            verify: true
        }
    );
}

#[test]
fn completions_and_version() {
    assert_eq!(
        parse(&["completions", "bash"]).unwrap(),
        Command::Completions { shell: Shell::Bash }
    );
    assert_eq!(
        parse(&["completions", "zsh"]).unwrap(),
        Command::Completions { shell: Shell::Zsh }
    );
    assert_eq!(
        parse(&["completions", "fish"]).unwrap(),
        Command::Completions { shell: Shell::Fish }
    );
    assert_eq!(kind(&["completions", "tcsh"]), ErrorKind::InvalidValue);
    assert_eq!(parse(&["version"]).unwrap(), Command::Version);
    assert!(version().starts_with("memshift "));
}

#[test]
fn help_and_version_flags_exit_zero() {
    for (args, want) in [
        (&["--version"][..], ErrorKind::DisplayVersion),
        (&["-V"], ErrorKind::DisplayVersion),
        (&["--help"], ErrorKind::DisplayHelp),
        (&["-h"], ErrorKind::DisplayHelp),
        (&["help"], ErrorKind::DisplayHelp),
        (&["ring", "--help"], ErrorKind::DisplayHelp),
        (&["help", "copy"], ErrorKind::DisplayHelp),
    ] {
        let err = parse(args).expect_err("help or version");
        assert_eq!(err.kind(), want, "{args:?}");
        assert_eq!(err.exit_code(), 0, "{args:?}");
    }
    let help = Cli::command().render_help().to_string();
    for sub in ["run", "check", "ring", "copy", "completions"] {
        assert!(help.contains(sub), "{sub} missing from:\n{help}");
    }
    assert!(
        !help.lines().any(|l| l.trim_start().starts_with("version ")),
        "the version subcommand is hidden:\n{help}"
    );
}

#[test]
fn usage_errors_exit_2() {
    let cases: &[(&[&str], ErrorKind)] = &[
        (&[], ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand),
        (&["check"], ErrorKind::MissingRequiredArgument),
        (&["--confg", "a"], ErrorKind::UnknownArgument),
        (
            &["--config=a", "--frobnicate=1"],
            ErrorKind::UnknownArgument,
        ),
        (&["chek", "--config", "a"], ErrorKind::InvalidSubcommand),
        (&["--config", "a", "extra"], ErrorKind::ArgumentConflict),
        (&["--config", "a", "check"], ErrorKind::ArgumentConflict),
        (&["--config"], ErrorKind::InvalidValue),
        (&["--config="], ErrorKind::ValueValidation),
        (&["--config", "a", "-c", "b"], ErrorKind::ArgumentConflict),
        (
            &["ring", "--config", "a", "--keys", "0"],
            ErrorKind::ValueValidation,
        ),
        (
            &["ring", "--config", "a", "--keys", "many"],
            ErrorKind::ValueValidation,
        ),
        (
            &["ring", "--config", "a", "--add", "x:1", "--remove", "y:1"],
            ErrorKind::ArgumentConflict,
        ),
        (
            &["ring", "--config", "a", "--add", "x:1", "--add", "y:1"],
            ErrorKind::ArgumentConflict,
        ),
        (
            &["ring", "--config", "a", "--add="],
            ErrorKind::ValueValidation,
        ),
        (
            &["check", "--config", "a", "--keys", "5"],
            ErrorKind::UnknownArgument,
        ),
        (&["--config", "a", "--dry-run"], ErrorKind::UnknownArgument),
        (
            &["--config", "a", "--from-shards=b"],
            ErrorKind::UnknownArgument,
        ),
        (
            &["copy", "--config", "a", "--dry-run=yes"],
            ErrorKind::TooManyValues,
        ),
        (
            &["copy", "--config", "a", "--verify", "--verify"],
            ErrorKind::ArgumentConflict,
        ),
        (
            &["copy", "--config", "a", "--rate", "-5"],
            ErrorKind::UnknownArgument,
        ),
        (
            &["copy", "--config", "a", "--rate", "0"],
            ErrorKind::ValueValidation,
        ),
    ];
    for (args, want) in cases {
        let err = parse(args).expect_err("a usage error");
        assert_eq!(err.kind(), *want, "args {args:?}: {err}");
        assert_eq!(err.exit_code(), i32::from(USAGE_EXIT_CODE), "args {args:?}");
    }
}

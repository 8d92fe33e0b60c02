//! Command line: argument parsing (hand-rolled, the surface is small) and the
//! commands that need no runtime: `check`, `ring`, `--version`, `--help`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::Config;
use crate::ring_plan::plan_ring;
pub use crate::ring_plan::RingChange;

/// Exit code for a malformed command line (the config is never read).
pub const USAGE_EXIT_CODE: u8 = 2;

const DEFAULT_SAMPLE_KEYS: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run the proxy.
    Run {
        config: PathBuf,
    },
    /// Validate the config and print the resolved settings.
    Check {
        config: PathBuf,
    },
    /// Show how sample keys spread over the shards, and what a change moves.
    Ring {
        config: PathBuf,
        keys: usize,
        change: Option<RingChange>,
    },
    /// Copy the legacy pool (or, with `from_shards`, another config's
    /// standalone Redis shards) into the config's Redis.
    Copy {
        config: PathBuf,
        /// `--from-shards FILE`: the config whose `[redis] shards` are the source.
        from_shards: Option<PathBuf>,
        dry_run: bool,
        /// Keys per second.
        rate: Option<u64>,
        verify: bool,
    },
    /// Size the Redis fleet from the live memcached pool.
    Plan {
        config: PathBuf,
        options: crate::plan::PlanOptions,
    },
    Version,
    Help,
}

/// A malformed command line. `Display` is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    #[error("unknown option {0:?}")]
    UnknownOption(String),
    #[error("unknown command {0:?} (commands: run, check, ring, copy, plan)")]
    UnknownCommand(String),
    #[error("unexpected argument {0:?}")]
    UnexpectedArgument(String),
    #[error("{0} needs a value")]
    MissingValue(String),
    #[error("{0} takes no value")]
    UnexpectedValue(String),
    #[error("invalid value {value:?} for {option}: {reason}")]
    BadValue {
        option: String,
        value: String,
        reason: &'static str,
    },
    #[error("{0} given more than once")]
    Repeated(String),
    #[error("{option} does not apply to `memshift {command}`")]
    NotForCommand {
        option: String,
        command: &'static str,
    },
    #[error("--add and --remove cannot be used together")]
    AddAndRemove,
    #[error("missing --config FILE")]
    MissingConfig,
}

pub fn usage() -> &'static str {
    "\
memshift: a memcached-protocol proxy onto sharded Redis, with a built-in migration

usage:
  memshift --config FILE                  run the proxy
  memshift check --config FILE            validate FILE and print the resolved settings
  memshift ring --config FILE [--keys N] [--add ADDR | --remove ADDR]
                                          share of N sample keys (\"key:0\"..\"key:N-1\",
                                          default 100000) per Redis shard; with --add or
                                          --remove, how many keys move, and where
  memshift copy --config FILE [--from-shards OLD] [--dry-run] [--rate KEYS_PER_S] [--verify]
                                          copy the legacy memcached pool into Redis; with
                                          --from-shards, copy OLD's standalone Redis
                                          shards into FILE's Redis (e.g. a cluster)
  memshift plan --config FILE [--node-memory 16GiB] [--headroom 25%] [--sample N]
                [--rate KEYS_PER_S] [--json]
                                          size the Redis fleet from the memcached pool
  memshift --version | -V
  memshift --help | -h

options take \"--opt VALUE\" or \"--opt=VALUE\"; -c is short for --config.
signals: SIGHUP reloads the config file, SIGTERM/SIGINT drain and exit.
"
}

pub fn version() -> String {
    format!("memshift {}", env!("CARGO_PKG_VERSION"))
}

/// Prints a command-line error and a hint to stderr; exit code 2.
pub fn report_usage_error(err: &CliError) -> ExitCode {
    eprintln!("memshift: {err}");
    eprintln!("try 'memshift --help' for usage");
    ExitCode::from(USAGE_EXIT_CODE)
}

/// Runs the commands that need no async runtime. `None` for `Run` and
/// `Copy`, which the binary runs itself.
pub fn run_command(cmd: &Command) -> Option<ExitCode> {
    match cmd {
        Command::Check { config } => Some(run_check(config)),
        Command::Ring {
            config,
            keys,
            change,
        } => Some(run_ring(config, *keys, change.as_ref())),
        Command::Plan { config, options } => Some(crate::plan::run(config, *options)),
        Command::Version => {
            println!("{}", version());
            Some(ExitCode::SUCCESS)
        }
        Command::Help => {
            print!("{}", usage());
            Some(ExitCode::SUCCESS)
        }
        Command::Run { .. } | Command::Copy { .. } => None,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sub {
    Run,
    Check,
    Ring,
    Copy,
    Plan,
}

impl Sub {
    fn name(self) -> &'static str {
        match self {
            Sub::Run => "run",
            Sub::Check => "check",
            Sub::Ring => "ring",
            Sub::Copy => "copy",
            Sub::Plan => "plan",
        }
    }
}

/// Parses the arguments after `argv[0]`. `--help` or `--version` anywhere wins.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Command, CliError> {
    let args: Vec<String> = args.into_iter().collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        return Ok(Command::Help);
    }
    if args.iter().any(|a| a == "--version" || a == "-V") {
        return Ok(Command::Version);
    }
    let mut it = args.into_iter().peekable();
    let sub = match it.peek().map(String::as_str) {
        Some("run") => Sub::Run,
        Some("check") => Sub::Check,
        Some("ring") => Sub::Ring,
        Some("copy") => Sub::Copy,
        Some("plan") => Sub::Plan,
        Some("help") => return Ok(Command::Help),
        Some("version") => return Ok(Command::Version),
        Some(a) if !a.starts_with('-') => return Err(CliError::UnknownCommand(a.to_owned())),
        // No subcommand: `memshift --config FILE` runs the proxy.
        _ => Sub::Run,
    };
    if it.peek().is_some_and(|a| a == sub.name()) {
        it.next();
    }

    let mut config: Option<PathBuf> = None;
    let mut keys: Option<usize> = None;
    let mut change: Option<RingChange> = None;
    let (mut dry_run, mut verify) = (false, false);
    let mut rate: Option<u64> = None;
    let mut from_shards: Option<PathBuf> = None;
    let mut plan = crate::plan::PlanOptions::default();
    let (mut node_memory, mut headroom, mut sample) = (None, None, None);

    while let Some(arg) = it.next() {
        if !arg.starts_with('-') || arg == "-" {
            return Err(CliError::UnexpectedArgument(arg));
        }
        // "--opt=value" or "--opt value".
        let (opt, inline) = match arg.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let allowed = |subs: &[Sub]| -> Result<(), CliError> {
            if subs.contains(&sub) {
                Ok(())
            } else {
                Err(CliError::NotForCommand {
                    option: opt.clone(),
                    command: sub.name(),
                })
            }
        };
        match opt.as_str() {
            "--config" | "-c" => {
                let v = value(&opt, inline, &mut it)?;
                if v.is_empty() {
                    return Err(bad(&opt, v, "empty path"));
                }
                set_once(&mut config, PathBuf::from(v), &opt)?;
            }
            "--keys" => {
                allowed(&[Sub::Ring])?;
                let v = value(&opt, inline, &mut it)?;
                let n = match v.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(bad(&opt, v, "expected a whole number of keys, at least 1")),
                };
                set_once(&mut keys, n, &opt)?;
            }
            "--add" | "--remove" => {
                allowed(&[Sub::Ring])?;
                let v = value(&opt, inline, &mut it)?;
                if v.is_empty() {
                    return Err(bad(&opt, v, "expected a shard address"));
                }
                let c = if opt == "--add" {
                    RingChange::Add(v)
                } else {
                    RingChange::Remove(v)
                };
                match (&change, &c) {
                    (None, _) => change = Some(c),
                    (Some(RingChange::Add(_)), RingChange::Add(_))
                    | (Some(RingChange::Remove(_)), RingChange::Remove(_)) => {
                        return Err(CliError::Repeated(opt))
                    }
                    _ => return Err(CliError::AddAndRemove),
                }
            }
            "--dry-run" | "--verify" => {
                allowed(&[Sub::Copy])?;
                if inline.is_some() {
                    return Err(CliError::UnexpectedValue(opt));
                }
                let flag = if opt == "--dry-run" {
                    &mut dry_run
                } else {
                    &mut verify
                };
                if *flag {
                    return Err(CliError::Repeated(opt));
                }
                *flag = true;
            }
            "--from-shards" => {
                allowed(&[Sub::Copy])?;
                let v = value(&opt, inline, &mut it)?;
                if v.is_empty() {
                    return Err(bad(&opt, v, "empty path"));
                }
                set_once(&mut from_shards, PathBuf::from(v), &opt)?;
            }
            "--rate" => {
                allowed(&[Sub::Copy, Sub::Plan])?;
                let v = value(&opt, inline, &mut it)?;
                let n = match v.parse::<u64>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(bad(&opt, v, "expected keys per second, at least 1")),
                };
                set_once(&mut rate, n, &opt)?;
            }
            "--node-memory" | "--headroom" | "--sample" => {
                allowed(&[Sub::Plan])?;
                let v = value(&opt, inline, &mut it)?;
                match opt.as_str() {
                    "--node-memory" => match crate::plan::parse_size(&v) {
                        Some(n) => set_once(&mut node_memory, n, &opt)?,
                        None => return Err(bad(&opt, v, "expected a size such as 16GiB")),
                    },
                    "--headroom" => match crate::plan::parse_percent(&v) {
                        Some(n) => set_once(&mut headroom, n, &opt)?,
                        None => return Err(bad(&opt, v, "expected a percentage, 0% to 90%")),
                    },
                    _ => match v.parse::<usize>() {
                        Ok(n) if n > 0 => set_once(&mut sample, n, &opt)?,
                        _ => return Err(bad(&opt, v, "expected a number of keys, at least 1")),
                    },
                }
            }
            "--json" => {
                allowed(&[Sub::Plan])?;
                if inline.is_some() {
                    return Err(CliError::UnexpectedValue(opt));
                }
                if plan.json {
                    return Err(CliError::Repeated(opt));
                }
                plan.json = true;
            }
            _ => return Err(CliError::UnknownOption(arg)),
        }
    }

    let config = config.ok_or(CliError::MissingConfig)?;
    Ok(match sub {
        Sub::Run => Command::Run { config },
        Sub::Check => Command::Check { config },
        Sub::Ring => Command::Ring {
            config,
            keys: keys.unwrap_or(DEFAULT_SAMPLE_KEYS),
            change,
        },
        Sub::Copy => Command::Copy {
            config,
            from_shards,
            dry_run,
            rate,
            verify,
        },
        Sub::Plan => Command::Plan {
            config,
            options: crate::plan::PlanOptions {
                node_memory: node_memory.unwrap_or(plan.node_memory),
                headroom_percent: headroom.unwrap_or(plan.headroom_percent),
                sample: sample.unwrap_or(plan.sample),
                rate: rate.unwrap_or(plan.rate),
                ..plan
            },
        },
    })
}

fn value(
    opt: &str,
    inline: Option<String>,
    rest: &mut impl Iterator<Item = String>,
) -> Result<String, CliError> {
    match inline {
        Some(v) => Ok(v),
        None => rest
            .next()
            .ok_or_else(|| CliError::MissingValue(opt.to_owned())),
    }
}

fn set_once<T>(slot: &mut Option<T>, v: T, opt: &str) -> Result<(), CliError> {
    if slot.is_some() {
        return Err(CliError::Repeated(opt.to_owned()));
    }
    *slot = Some(v);
    Ok(())
}

fn bad(opt: &str, value: String, reason: &'static str) -> CliError {
    CliError::BadValue {
        option: opt.to_owned(),
        value,
        reason,
    }
}

/// `memshift check`: "config OK" and the resolved settings on stdout, exit
/// 0; or `memshift: <path>: <reason>` on stderr, exit 1.
pub fn run_check(config: &Path) -> ExitCode {
    match Config::load(config) {
        Ok(cfg) => {
            println!("config OK");
            for w in cfg.warnings() {
                eprintln!("memshift: {}: warning: {w}", config.display());
            }
            println!();
            print!("{}", cfg.render_resolved());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memshift: {}: {}", config.display(), e.reason());
            ExitCode::FAILURE
        }
    }
}

/// `memshift ring`: prints `plan_ring`'s report; exit 1 on a bad config or change.
pub fn run_ring(config: &Path, keys: usize, change: Option<&RingChange>) -> ExitCode {
    let cfg = match Config::load(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("memshift: {}: {}", config.display(), e.reason());
            return ExitCode::FAILURE;
        }
    };
    match plan_ring(&cfg, keys, change) {
        Ok(plan) => {
            print!("{plan}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memshift: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, CliError> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    fn path(p: &str) -> PathBuf {
        PathBuf::from(p)
    }

    #[test]
    fn run_forms() {
        let run = Ok(Command::Run {
            config: path("a.toml"),
        });
        assert_eq!(parse(&["--config", "a.toml"]), run);
        assert_eq!(parse(&["--config=a.toml"]), run);
        assert_eq!(parse(&["-c", "a.toml"]), run);
        assert_eq!(parse(&["run", "--config", "a.toml"]), run);
    }

    #[test]
    fn check_form() {
        assert_eq!(
            parse(&["check", "--config", "x/y.toml"]),
            Ok(Command::Check {
                config: path("x/y.toml")
            })
        );
    }

    #[test]
    fn ring_forms() {
        assert_eq!(
            parse(&["ring", "--config", "a.toml"]),
            Ok(Command::Ring {
                config: path("a.toml"),
                keys: 100_000,
                change: None
            })
        );
        assert_eq!(
            parse(&[
                "ring",
                "--keys=500",
                "--config",
                "a.toml",
                "--add",
                "10.0.0.9:6379"
            ]),
            Ok(Command::Ring {
                config: path("a.toml"),
                keys: 500,
                change: Some(RingChange::Add("10.0.0.9:6379".into()))
            })
        );
        assert_eq!(
            parse(&["ring", "--config", "a.toml", "--remove=r1"]),
            Ok(Command::Ring {
                config: path("a.toml"),
                keys: 100_000,
                change: Some(RingChange::Remove("r1".into()))
            })
        );
    }

    #[test]
    fn copy_forms() {
        assert_eq!(
            parse(&["copy", "--config", "a.toml"]),
            Ok(Command::Copy {
                config: path("a.toml"),
                from_shards: None,
                dry_run: false,
                rate: None,
                verify: false
            })
        );
        assert_eq!(
            parse(&[
                "copy",
                "--dry-run",
                "--rate",
                "5000",
                "--verify",
                "--config=a.toml"
            ]),
            Ok(Command::Copy {
                config: path("a.toml"),
                from_shards: None,
                dry_run: true,
                rate: Some(5000),
                verify: true
            })
        );
        assert_eq!(
            parse(&[
                "copy",
                "--from-shards",
                "old.toml",
                "--config",
                "new.toml",
                "--verify"
            ]),
            Ok(Command::Copy {
                config: path("new.toml"),
                from_shards: Some(path("old.toml")),
                dry_run: false,
                rate: None,
                verify: true
            })
        );
        assert_eq!(
            parse(&["--config", "a", "--from-shards=b"]),
            Err(CliError::NotForCommand {
                option: "--from-shards".into(),
                command: "run"
            })
        );
    }

    #[test]
    fn version_and_help_win_anywhere() {
        assert_eq!(parse(&["--version"]), Ok(Command::Version));
        assert_eq!(parse(&["-V"]), Ok(Command::Version));
        assert_eq!(parse(&["--help"]), Ok(Command::Help));
        assert_eq!(parse(&["-h"]), Ok(Command::Help));
        assert_eq!(parse(&["check", "--bogus", "--help"]), Ok(Command::Help));
        assert_eq!(parse(&["help"]), Ok(Command::Help));
        assert!(version().starts_with("memshift "));
        assert!(usage().contains("memshift ring --config FILE"));
    }

    #[test]
    fn usage_errors() {
        let cases: &[(&[&str], CliError)] = &[
            (&[], CliError::MissingConfig),
            (&["check"], CliError::MissingConfig),
            (&["--confg", "a"], CliError::UnknownOption("--confg".into())),
            (
                &["--config=a", "--frobnicate=1"],
                CliError::UnknownOption("--frobnicate=1".into()),
            ),
            (
                &["chek", "--config", "a"],
                CliError::UnknownCommand("chek".into()),
            ),
            (
                &["--config", "a", "extra"],
                CliError::UnexpectedArgument("extra".into()),
            ),
            (&["--config"], CliError::MissingValue("--config".into())),
            (
                &["--config="],
                CliError::BadValue {
                    option: "--config".into(),
                    value: String::new(),
                    reason: "empty path",
                },
            ),
            (
                &["--config", "a", "-c", "b"],
                CliError::Repeated("-c".into()),
            ),
            (
                &["ring", "--config", "a", "--keys", "0"],
                CliError::BadValue {
                    option: "--keys".into(),
                    value: "0".into(),
                    reason: "expected a whole number of keys, at least 1",
                },
            ),
            (
                &["ring", "--config", "a", "--keys", "many"],
                CliError::BadValue {
                    option: "--keys".into(),
                    value: "many".into(),
                    reason: "expected a whole number of keys, at least 1",
                },
            ),
            (
                &["ring", "--config", "a", "--add", "x:1", "--remove", "y:1"],
                CliError::AddAndRemove,
            ),
            (
                &["ring", "--config", "a", "--add", "x:1", "--add", "y:1"],
                CliError::Repeated("--add".into()),
            ),
            (
                &["check", "--config", "a", "--keys", "5"],
                CliError::NotForCommand {
                    option: "--keys".into(),
                    command: "check",
                },
            ),
            (
                &["--config", "a", "--dry-run"],
                CliError::NotForCommand {
                    option: "--dry-run".into(),
                    command: "run",
                },
            ),
            (
                &["copy", "--config", "a", "--dry-run=yes"],
                CliError::UnexpectedValue("--dry-run".into()),
            ),
            (
                &["copy", "--config", "a", "--rate", "-5"],
                CliError::BadValue {
                    option: "--rate".into(),
                    value: "-5".into(),
                    reason: "expected keys per second, at least 1",
                },
            ),
        ];
        for (args, want) in cases {
            let got = parse(args);
            assert_eq!(got.as_ref(), Err(want), "args {args:?}");
            let msg = want.to_string();
            assert!(!msg.contains('\n') && !msg.is_empty(), "{msg:?}");
        }
        assert_eq!(USAGE_EXIT_CODE, 2);
    }

    #[test]
    fn check_and_ring_exit_codes() {
        let dir = std::env::temp_dir().join(format!("memshift-cli-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(
            &good,
            "[server]\nlisten = \"127.0.0.1:11211\"\n[redis]\nshards = [\"a:1\", \"b:1\"]\n",
        )
        .unwrap();
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "[redis]\nshards = []\n").unwrap();
        assert_eq!(run_check(&good), ExitCode::SUCCESS);
        assert_eq!(run_check(&bad), ExitCode::FAILURE);
        assert_eq!(run_check(&dir.join("missing.toml")), ExitCode::FAILURE);
        assert_eq!(run_ring(&good, 100, None), ExitCode::SUCCESS);
        assert_eq!(
            run_ring(&good, 100, Some(&RingChange::Remove("a:1".into()))),
            ExitCode::SUCCESS
        );
        assert_eq!(
            run_ring(&good, 100, Some(&RingChange::Remove("q:1".into()))),
            ExitCode::FAILURE
        );
        assert_eq!(run_ring(&bad, 100, None), ExitCode::FAILURE);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Command line: argument parsing (hand-rolled, the surface is small) and the
//! commands that need no runtime: `check`, `ring`, `--version`, `--help`.

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::{check_host_port, Config, ShardConfig};

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
    /// Copy the legacy pool into Redis.
    Copy {
        config: PathBuf,
        dry_run: bool,
        /// Keys per second.
        rate: Option<u64>,
        verify: bool,
    },
    Version,
    Help,
}

/// A planned change to the Redis shard list, for `memshift ring`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingChange {
    /// A new shard at this address, weight 1.
    Add(String),
    /// The shard with this address (or name).
    Remove(String),
}

impl fmt::Display for RingChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingChange::Add(a) => write!(f, "--add {a}"),
            RingChange::Remove(a) => write!(f, "--remove {a}"),
        }
    }
}

/// A malformed command line. `Display` is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    #[error("unknown option {0:?}")]
    UnknownOption(String),
    #[error("unknown command {0:?} (commands: run, check, ring, copy)")]
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
  memshift copy --config FILE [--dry-run] [--rate KEYS_PER_S] [--verify]
                                          copy the legacy memcached pool into Redis
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
}

impl Sub {
    fn name(self) -> &'static str {
        match self {
            Sub::Run => "run",
            Sub::Check => "check",
            Sub::Ring => "ring",
            Sub::Copy => "copy",
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
            "--rate" => {
                allowed(&[Sub::Copy])?;
                let v = value(&opt, inline, &mut it)?;
                let n = match v.parse::<u64>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(bad(&opt, v, "expected keys per second, at least 1")),
                };
                set_once(&mut rate, n, &opt)?;
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
            dry_run,
            rate,
            verify,
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

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RingPlanError {
    #[error("--keys must be at least 1")]
    NoKeys,
    #[error("--add {addr}: bad address: {reason}")]
    BadAddress { addr: String, reason: String },
    #[error("--add {0}: already a shard in the config")]
    AlreadyPresent(String),
    #[error("--remove {0}: no shard with that address or name in the config")]
    NotPresent(String),
    #[error("--remove {0}: it is the only shard; a ring needs at least one")]
    LastShard(String),
    #[error("cannot build the ring: {0}")]
    Ring(#[from] memshift_ring::RingError),
}

/// One shard's share of the sample keys.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardShare {
    pub id: String,
    pub weight: u32,
    /// Sample keys this shard owns.
    pub keys: usize,
    /// Its weight's share of the total weight, in percent: what a perfect
    /// ring would give it.
    pub expected_percent: f64,
}

/// What `memshift ring` computes; `Display` is the printed report.
#[derive(Debug, Clone, PartialEq)]
pub struct RingPlan {
    /// Number of sample keys: "key:0" .. "key:{keys-1}".
    pub keys: usize,
    pub before: Vec<ShardShare>,
    pub change: Option<RingMove>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RingMove {
    pub change: RingChange,
    pub after: Vec<ShardShare>,
    /// Keys whose shard changes.
    pub moved: usize,
    /// `matrix[i][j]`: keys moving from `before[i]` to `after[j]`. Keys that
    /// stay on their shard are not counted, so the total is `moved`.
    pub matrix: Vec<Vec<usize>>,
    /// What a perfectly balanced ring would move, in percent: the added
    /// shard's expected share after, or the removed shard's before.
    pub ideal_percent: f64,
}

impl RingPlan {
    pub fn moved_percent(&self) -> Option<f64> {
        self.change.as_ref().map(|m| percent(m.moved, self.keys))
    }
}

/// The `n`th sample key. Deterministic, so runs compare across machines.
pub fn sample_key(buf: &mut String, n: usize) {
    buf.clear();
    let _ = write!(buf, "key:{n}");
}

/// Places `keys` sample keys on the configured ring and, with a change, on
/// the changed ring too. Pure: no I/O.
pub fn plan_ring(
    cfg: &Config,
    keys: usize,
    change: Option<&RingChange>,
) -> Result<RingPlan, RingPlanError> {
    if keys == 0 {
        return Err(RingPlanError::NoKeys);
    }
    let shards = &cfg.redis.shards;
    let ring_cfg = cfg.ring_config();
    let ring = memshift_ring::Ring::new(&cfg.ring_shards(), ring_cfg)?;

    // (the change, the shard list after it, the ideal share that moves in %)
    let changed: Option<(&RingChange, Vec<ShardConfig>, f64)> = match change {
        None => None,
        Some(RingChange::Add(addr)) => {
            check_host_port(addr).map_err(|reason| RingPlanError::BadAddress {
                addr: addr.clone(),
                reason,
            })?;
            if shards.iter().any(|s| s.addr == *addr || s.id() == addr) {
                return Err(RingPlanError::AlreadyPresent(addr.clone()));
            }
            let mut after = shards.clone();
            after.push(ShardConfig {
                addr: addr.clone(),
                weight: 1,
                name: None,
            });
            let min = percent_of_weight(1, &after);
            change.map(|c| (c, after, min))
        }
        Some(RingChange::Remove(what)) => {
            let idx = shards
                .iter()
                .position(|s| s.addr == *what || s.id() == what)
                .ok_or_else(|| RingPlanError::NotPresent(what.clone()))?;
            if shards.len() == 1 {
                return Err(RingPlanError::LastShard(what.clone()));
            }
            let min = percent_of_weight(shards[idx].weight, shards);
            let mut after = shards.clone();
            after.remove(idx);
            change.map(|c| (c, after, min))
        }
    };
    let new_ring = match &changed {
        Some((_, after, _)) => {
            let specs: Vec<_> = after
                .iter()
                .map(|s| memshift_ring::ShardSpec {
                    id: s.id().to_owned(),
                    weight: s.weight,
                })
                .collect();
            Some(memshift_ring::Ring::new(&specs, ring_cfg)?)
        }
        None => None,
    };

    let mut before_counts = vec![0usize; shards.len()];
    let after_len = changed.as_ref().map_or(0, |(_, a, _)| a.len());
    let mut after_counts = vec![0usize; after_len];
    let mut matrix = vec![vec![0usize; after_len]; shards.len()];
    let mut moved = 0usize;
    let mut key = String::new();
    for n in 0..keys {
        sample_key(&mut key, n);
        let from = ring.locate(key.as_bytes());
        // A ring answering out of range is a ring bug; skip rather than panic.
        let Some(c) = before_counts.get_mut(from) else {
            continue;
        };
        *c += 1;
        if let (Some(r), Some((_, after, _))) = (&new_ring, &changed) {
            let to = r.locate(key.as_bytes());
            let Some(c) = after_counts.get_mut(to) else {
                continue;
            };
            *c += 1;
            if shards[from].id() != after[to].id() {
                moved += 1;
                matrix[from][to] += 1;
            }
        }
    }

    let shares = |list: &[ShardConfig], counts: &[usize]| -> Vec<ShardShare> {
        list.iter()
            .zip(counts)
            .map(|(s, &k)| ShardShare {
                id: s.id().to_owned(),
                weight: s.weight,
                keys: k,
                expected_percent: percent_of_weight(s.weight, list),
            })
            .collect()
    };
    Ok(RingPlan {
        keys,
        before: shares(shards, &before_counts),
        change: changed.map(|(change, after, ideal_percent)| RingMove {
            change: change.clone(),
            after: shares(&after, &after_counts),
            moved,
            matrix,
            ideal_percent,
        }),
    })
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn percent_of_weight(weight: u32, list: &[ShardConfig]) -> f64 {
    let total: u64 = list.iter().map(|s| u64::from(s.weight)).sum();
    if total == 0 {
        0.0
    } else {
        f64::from(weight) * 100.0 / total as f64
    }
}

impl fmt::Display for RingPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} sample keys (\"key:0\" .. \"key:{}\")",
            self.keys,
            self.keys - 1
        )?;
        writeln!(f)?;
        writeln!(f, "current ring ({} shards):", self.before.len())?;
        share_table(f, &self.before, self.keys)?;
        let Some(m) = &self.change else {
            return Ok(());
        };
        writeln!(f)?;
        writeln!(f, "after {} ({} shards):", m.change, m.after.len())?;
        share_table(f, &m.after, self.keys)?;
        writeln!(f)?;
        writeln!(
            f,
            "keys that move: {} of {} ({:.2}%; a perfectly balanced ring would move {:.2}%)",
            m.moved,
            self.keys,
            percent(m.moved, self.keys),
            m.ideal_percent
        )?;
        if m.moved == 0 {
            return Ok(());
        }
        writeln!(f)?;
        writeln!(f, "moves (rows: from, columns: to):")?;
        let from_w = self
            .before
            .iter()
            .map(|s| s.id.len())
            .chain([4])
            .max()
            .unwrap_or(4);
        let col_w: Vec<usize> = m.after.iter().map(|s| s.id.len().max(6)).collect();
        write!(f, "  {:from_w$}", "from")?;
        for (s, w) in m.after.iter().zip(&col_w) {
            write!(f, "  {:>w$}", s.id)?;
        }
        writeln!(f)?;
        for (i, row) in m.matrix.iter().enumerate() {
            if row.iter().all(|&n| n == 0) {
                continue;
            }
            write!(f, "  {:from_w$}", self.before[i].id)?;
            for (n, w) in row.iter().zip(&col_w) {
                let cell = if *n == 0 {
                    "-".to_owned()
                } else {
                    n.to_string()
                };
                write!(f, "  {cell:>w$}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

fn share_table(f: &mut fmt::Formatter<'_>, shares: &[ShardShare], total: usize) -> fmt::Result {
    let id_w = shares
        .iter()
        .map(|s| s.id.len())
        .chain([5])
        .max()
        .unwrap_or(5);
    writeln!(
        f,
        "  {:id_w$}  {:>6}  {:>10}  {:>7}  {:>8}",
        "shard", "weight", "keys", "share", "expected"
    )?;
    for s in shares {
        writeln!(
            f,
            "  {:id_w$}  {:>6}  {:>10}  {:>6.2}%  {:>7.2}%",
            s.id,
            s.weight,
            s.keys,
            percent(s.keys, total),
            s.expected_percent
        )?;
    }
    Ok(())
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
                dry_run: true,
                rate: Some(5000),
                verify: true
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

    fn cfg(shards: &str) -> Config {
        Config::from_toml_str(&format!(
            "[server]\nlisten = \"127.0.0.1:11211\"\n[redis]\nshards = [{shards}]\n"
        ))
        .unwrap()
    }

    #[test]
    fn sample_keys_are_documented_form() {
        let mut k = String::new();
        sample_key(&mut k, 0);
        assert_eq!(k, "key:0");
        sample_key(&mut k, 99_999);
        assert_eq!(k, "key:99999");
    }

    #[test]
    fn plan_counts_every_key_once() {
        let c = cfg(r#""a:1", "b:1", { addr = "c:1", weight = 2 }"#);
        let plan = plan_ring(&c, 20_000, None).unwrap();
        assert_eq!(plan.keys, 20_000);
        assert!(plan.change.is_none());
        assert_eq!(plan.before.iter().map(|s| s.keys).sum::<usize>(), 20_000);
        let ids: Vec<_> = plan.before.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a:1", "b:1", "c:1"]);
        assert_eq!(plan.before[2].expected_percent, 50.0);
        assert_eq!(plan.before[0].expected_percent, 25.0);
        // Each shard gets a share near its weight's.
        for s in &plan.before {
            let share = percent(s.keys, plan.keys);
            assert!((share - s.expected_percent).abs() < 10.0, "{s:?}");
        }
        // Deterministic.
        assert_eq!(plan_ring(&c, 20_000, None).unwrap(), plan);
    }

    #[test]
    fn plan_for_an_added_shard_moves_keys_only_onto_it() {
        let c = cfg(r#""a:1", "b:1", "c:1""#);
        let change = RingChange::Add("d:1".into());
        let plan = plan_ring(&c, 20_000, Some(&change)).unwrap();
        let m = plan.change.as_ref().unwrap();
        assert_eq!(m.change, change);
        assert_eq!(m.after.len(), 4);
        assert_eq!(m.after[3].id, "d:1");
        assert_eq!(m.ideal_percent, 25.0);
        // Consistent hashing: only keys landing on the new shard move.
        assert_eq!(m.moved, m.after[3].keys);
        let total: usize = m.matrix.iter().flatten().sum();
        assert_eq!(total, m.moved);
        for row in &m.matrix {
            assert_eq!(&row[..3], &[0, 0, 0]);
        }
        assert!(m.moved > 0 && m.moved < plan.keys / 2, "{}", m.moved);
        let pct = plan.moved_percent().unwrap();
        assert!((pct - percent(m.moved, plan.keys)).abs() < 1e-9);
    }

    #[test]
    fn plan_for_a_removed_shard_moves_only_its_keys() {
        let c = cfg(r#""a:1", { addr = "b:1", name = "bee" }, "c:1""#);
        // By name or by address.
        for what in ["bee", "b:1"] {
            let plan = plan_ring(&c, 10_000, Some(&RingChange::Remove(what.into()))).unwrap();
            let m = plan.change.as_ref().unwrap();
            let ids: Vec<_> = m.after.iter().map(|s| s.id.as_str()).collect();
            assert_eq!(ids, ["a:1", "c:1"]);
            assert_eq!(m.moved, plan.before[1].keys);
            assert_eq!(m.matrix[0].iter().sum::<usize>(), 0);
            assert_eq!(m.matrix[2].iter().sum::<usize>(), 0);
            assert_eq!(m.matrix[1].iter().sum::<usize>(), m.moved);
            assert!((m.ideal_percent - 100.0 / 3.0).abs() < 1e-9);
        }
    }

    #[test]
    fn plan_rejects_bad_changes() {
        let c = cfg(r#""a:1", "b:1""#);
        let plan = |ch: RingChange| plan_ring(&c, 100, Some(&ch)).unwrap_err();
        assert_eq!(
            plan(RingChange::Remove("z:1".into())),
            RingPlanError::NotPresent("z:1".into())
        );
        assert_eq!(
            plan(RingChange::Add("a:1".into())),
            RingPlanError::AlreadyPresent("a:1".into())
        );
        assert!(matches!(
            plan(RingChange::Add("nope".into())),
            RingPlanError::BadAddress { .. }
        ));
        assert_eq!(plan_ring(&c, 0, None).unwrap_err(), RingPlanError::NoKeys);
        let one = cfg(r#""a:1""#);
        assert_eq!(
            plan_ring(&one, 10, Some(&RingChange::Remove("a:1".into()))).unwrap_err(),
            RingPlanError::LastShard("a:1".into())
        );
        let msg = RingPlanError::NotPresent("z:1".into()).to_string();
        assert!(
            msg.contains("--remove z:1") && msg.contains("no shard"),
            "{msg}"
        );
    }

    #[test]
    fn report_shows_shares_and_moves() {
        let c = cfg(r#""a:1", "b:1""#);
        let text = plan_ring(&c, 1000, Some(&RingChange::Add("c:1".into())))
            .unwrap()
            .to_string();
        for part in [
            "1000 sample keys",
            "\"key:999\"",
            "current ring (2 shards)",
            "after --add c:1 (3 shards)",
            "keys that move:",
            "moves (rows: from, columns: to)",
            "a:1",
            "c:1",
            "expected",
        ] {
            assert!(text.contains(part), "missing {part:?} in:\n{text}");
        }
        let text = plan_ring(&c, 1000, None).unwrap().to_string();
        assert!(!text.contains("keys that move"), "{text}");
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

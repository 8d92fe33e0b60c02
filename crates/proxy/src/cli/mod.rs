//! Command line: the clap (derive) definition of `memshift`'s flags and
//! subcommands, turned into one [`Command`] for `main`. The commands that
//! need no async runtime (`check`, `ring`, `completions`) run in
//! [`offline`]; `main` runs the proxy and `copy` itself.
//!
//! Adding a subcommand: a variant of [`Sub`] with its args struct (doc
//! comments are its `--help`), a variant of [`Command`], the arm in
//! [`Cli::into_command`], and the code that runs it (in `offline` when it
//! needs no runtime, else in `main`). docs/config.md's "Command line"
//! section lists every subcommand and flag (a test checks the flags exist).

mod offline;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
pub use clap_complete::Shell;

pub use self::offline::{print_completions, run_check, run_command, run_ring};
pub use crate::ring_plan::RingChange;

/// Exit code for a malformed command line (clap's; the config is never read).
pub const USAGE_EXIT_CODE: u8 = 2;

const DEFAULT_SAMPLE_KEYS: usize = 100_000;

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run the proxy.
    Run { config: PathBuf },
    /// Validate the config and print the resolved settings.
    Check { config: PathBuf },
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
    /// Print a shell completion script.
    Completions { shell: Shell },
    /// `memshift version` (the `--version` flag is clap's own).
    Version,
}

/// memshift: a memcached-protocol proxy onto sharded Redis, with a built-in
/// migration.
#[derive(Debug, Parser)]
#[command(
    name = "memshift",
    version,
    override_usage = "memshift --config FILE\n       memshift <COMMAND> --config FILE [OPTIONS]\n       memshift completions <SHELL>",
    args_conflicts_with_subcommands = true,
    arg_required_else_help = true,
    after_help = "Without a command, `memshift --config FILE` runs the proxy (as `memshift run`).\n\
                  Options take \"--opt VALUE\" or \"--opt=VALUE\".\n\
                  Signals: SIGHUP reloads the config file, SIGTERM/SIGINT drain and exit.\n\
                  Exit codes: 0 done, 1 a bad config or a failed command, 2 a malformed command line."
)]
pub struct Cli {
    /// The TOML config file (docs/config.md): run the proxy with it.
    #[arg(short = 'c', long, value_name = "FILE", value_parser = non_empty_path)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    sub: Option<Sub>,
}

#[derive(Debug, Args)]
struct ConfigArg {
    /// The TOML config file (docs/config.md).
    #[arg(short = 'c', long, value_name = "FILE", value_parser = non_empty_path)]
    config: PathBuf,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Run the proxy (the same as `memshift --config FILE`).
    Run(ConfigArg),
    /// Validate FILE and print the resolved settings (exit 0), or its error (exit 1).
    Check(ConfigArg),
    /// Share of N sample keys per Redis shard; with --add or --remove, how
    /// many keys a resize moves, and where.
    ///
    /// Places N sample keys ("key:0" .. "key:N-1") on the configured ring and
    /// prints each shard's count and share next to the share its weight would
    /// get on a perfectly balanced ring. With --add ADDR (a new shard of
    /// weight 1) or --remove ADDR (an address or a shard name from the
    /// config), it also places them on the changed ring and prints how many
    /// keys move and a from -> to matrix.
    Ring(RingArgs),
    /// Copy the legacy memcached pool into Redis; with --from-shards, copy
    /// OLD's standalone Redis shards into FILE's Redis (e.g. a cluster).
    ///
    /// --rate, --dry-run and --verify work the same for both sources;
    /// --verify exits 1 on any mismatch.
    Copy(CopyArgs),
    /// Size the Redis fleet from the live memcached pool (docs/migration.md).
    ///
    /// Reads `stats` and a rate-limited, sampled `lru_crawler metadump` of
    /// every `[memcached] servers` entry, estimates what Redis will hold
    /// (calibrated with MEMORY USAGE when a Redis shard answers) and
    /// recommends nodes and maxmemory. Exit 1 with one line when the pool
    /// cannot be read.
    Plan(PlanArgs),
    /// Print a completion script for SHELL on stdout.
    ///
    /// bash: `memshift completions bash > /etc/bash_completion.d/memshift`;
    /// zsh: into a directory of $fpath as `_memshift`;
    /// fish: `memshift completions fish > ~/.config/fish/completions/memshift.fish`.
    Completions {
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print the version (as --version).
    #[command(hide = true)]
    Version,
    // The next subcommand goes here (see the module doc).
}

#[derive(Debug, Args)]
struct PlanArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Memory of one Redis node: KiB/MiB/GiB/TiB (or K/M/G/T), KB/MB/GB/TB, or bytes.
    #[arg(long, value_name = "SIZE", default_value = "16GiB", value_parser = node_memory)]
    node_memory: u64,
    /// Share of each node kept free for Redis' own overhead and the OS (0% to 90%).
    #[arg(long, value_name = "PCT", default_value = "25%", value_parser = headroom)]
    headroom: u8,
    /// Keys whose size and TTL are measured.
    #[arg(long, value_name = "N", default_value_t = crate::plan::DEFAULT_SAMPLE, value_parser = at_least_one)]
    sample: usize,
    /// Keys per second per server, for the walk and the lookups.
    #[arg(long, value_name = "KEYS_PER_S", default_value_t = crate::plan::DEFAULT_RATE, value_parser = clap::value_parser!(u64).range(1..))]
    rate: u64,
    /// One JSON object instead of the report.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct RingArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Sample keys to place.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SAMPLE_KEYS, value_parser = at_least_one)]
    keys: usize,
    /// A new shard at ADDR (weight 1).
    #[arg(long, value_name = "ADDR", conflicts_with = "remove", value_parser = non_empty)]
    add: Option<String>,
    /// The shard with this address or name.
    #[arg(long, value_name = "ADDR", value_parser = non_empty)]
    remove: Option<String>,
}

#[derive(Debug, Args)]
struct CopyArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The config whose standalone `[redis] shards` are the source (a
    /// cluster config is refused).
    #[arg(long, value_name = "OLD", value_parser = non_empty_path)]
    from_shards: Option<PathBuf>,
    /// Read and count, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Keys copied per second at most.
    #[arg(long, value_name = "KEYS_PER_S", value_parser = clap::value_parser!(u64).range(1..))]
    rate: Option<u64>,
    /// Compare source and target instead of copying; exit 1 on any mismatch.
    #[arg(long)]
    verify: bool,
}

impl Cli {
    fn into_command(self) -> Result<Command, clap::Error> {
        let sub = match (self.sub, self.config) {
            (Some(sub), _) => sub,
            (None, Some(config)) => return Ok(Command::Run { config }),
            (None, None) => {
                return Err(<Cli as clap::CommandFactory>::command().error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    "missing --config FILE",
                ))
            }
        };
        Ok(match sub {
            Sub::Run(c) => Command::Run { config: c.config },
            Sub::Check(c) => Command::Check { config: c.config },
            Sub::Ring(r) => Command::Ring {
                config: r.config.config,
                keys: r.keys,
                change: match (r.add, r.remove) {
                    (Some(a), _) => Some(RingChange::Add(a)),
                    (None, Some(r)) => Some(RingChange::Remove(r)),
                    (None, None) => None,
                },
            },
            Sub::Copy(c) => Command::Copy {
                config: c.config.config,
                from_shards: c.from_shards,
                dry_run: c.dry_run,
                rate: c.rate,
                verify: c.verify,
            },
            Sub::Plan(p) => Command::Plan {
                config: p.config.config,
                options: crate::plan::PlanOptions {
                    node_memory: p.node_memory,
                    headroom_percent: p.headroom,
                    sample: p.sample,
                    rate: p.rate,
                    json: p.json,
                },
            },
            Sub::Completions { shell } => Command::Completions { shell },
            Sub::Version => Command::Version,
        })
    }
}

/// Parses the arguments after `argv[0]`. `Err` covers `--help` and
/// `--version` too: `err.exit()` prints them (exit 0) or the usage error
/// (exit [`USAGE_EXIT_CODE`]).
pub fn parse_args<I, T>(args: I) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let argv = std::iter::once(std::ffi::OsString::from("memshift"))
        .chain(args.into_iter().map(Into::into));
    Cli::try_parse_from(argv)?.into_command()
}

pub fn version() -> String {
    format!("memshift {}", env!("CARGO_PKG_VERSION"))
}

fn non_empty(v: &str) -> Result<String, &'static str> {
    if v.is_empty() {
        Err("empty value")
    } else {
        Ok(v.to_owned())
    }
}

fn non_empty_path(v: &str) -> Result<PathBuf, &'static str> {
    non_empty(v).map(PathBuf::from).map_err(|_| "empty path")
}

fn node_memory(v: &str) -> Result<u64, &'static str> {
    crate::plan::parse_size(v).ok_or("expected a size such as 16GiB")
}

fn headroom(v: &str) -> Result<u8, &'static str> {
    crate::plan::parse_percent(v).ok_or("expected a percentage, 0% to 90%")
}

fn at_least_one(v: &str) -> Result<usize, &'static str> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("expected a whole number, at least 1"),
    }
}

#[cfg(test)]
mod tests;

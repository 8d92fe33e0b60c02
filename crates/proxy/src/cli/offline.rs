//! The commands that need no async runtime of main's: `check`, `ring`,
//! `plan` (it runs its own), `completions` and `version`. `main` runs the proxy and `copy`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory;

use super::{version, Cli, Command, RingChange, Shell};
use crate::config::Config;
use crate::ring_plan::plan_ring;

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
        Command::Completions { shell } => Some(print_completions(*shell, &mut std::io::stdout())),
        Command::Version => {
            println!("{}", version());
            Some(ExitCode::SUCCESS)
        }
        Command::Run { .. } | Command::Copy { .. } => None,
    }
}

/// `memshift completions SHELL`: the completion script, generated from the
/// same definition clap parses with (so it cannot drift from the flags).
pub fn print_completions(shell: Shell, out: &mut dyn Write) -> ExitCode {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "memshift", &mut buf);
    match out.write_all(&buf).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memshift: writing the completion script: {e}");
            ExitCode::FAILURE
        }
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

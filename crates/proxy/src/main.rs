use std::process::ExitCode;

use memshift_proxy::cli::{self, Command};

fn main() -> ExitCode {
    // clap prints --help / --version (exit 0) or the usage error (exit 2).
    let command = match cli::parse_args(std::env::args_os().skip(1)) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    if let Some(code) = cli::run_command(&command) {
        return code;
    }
    match command {
        Command::Run { config } => match memshift_proxy::run::run(&config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(memshift_proxy::error::ProxyError::Config(e)) => {
                eprintln!("memshift: {}: {}", config.display(), e.reason());
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("memshift: {}: {e}", config.display());
                ExitCode::FAILURE
            }
        },
        Command::Copy {
            config,
            from_shards,
            dry_run,
            rate,
            verify,
        } => {
            let options = memshift_proxy::copy::CopyOptions {
                dry_run,
                rate,
                verify,
            };
            let copied = match &from_shards {
                Some(shards) => memshift_proxy::copy::run_from_shards(&config, shards, options),
                None => memshift_proxy::copy::run(&config, options),
            };
            match copied {
                // --verify fails when anything differs, so scripts can gate on it.
                Ok(s) if verify && (s.mismatched > 0 || s.failed > 0) => ExitCode::FAILURE,
                Ok(s) if s.failed > 0 => ExitCode::FAILURE,
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("memshift: {}: {e}", config.display());
                    ExitCode::FAILURE
                }
            }
        }
        _ => ExitCode::SUCCESS,
    }
}

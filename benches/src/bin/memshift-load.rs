//! memcached text protocol load generator; see `memshift-load --help` and
//! BENCHMARKS.md.

use std::process::ExitCode;

use clap::Parser;
use memshift_benches::load::{self, Cli};

fn main() -> ExitCode {
    // clap prints --help / --version (exit 0) or the usage error (exit 2).
    let args = match Cli::parse().into_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("memshift-load: {e}");
            return ExitCode::from(2);
        }
    };
    let json = args.json;
    match load::run(args) {
        Ok(report) => {
            if json {
                println!("{}", report.to_json());
            } else {
                print!("{}", report.to_text());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("memshift-load: {e}");
            ExitCode::FAILURE
        }
    }
}

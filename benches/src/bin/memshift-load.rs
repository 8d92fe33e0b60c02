//! memcached text protocol load generator; see `memshift-load --help` and
//! BENCHMARKS.md.

use std::process::ExitCode;

use memshift_benches::load::{self, Parsed, USAGE};

fn main() -> ExitCode {
    let args = match load::args::parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(a)) => *a,
        Ok(Parsed::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
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

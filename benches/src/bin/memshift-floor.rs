//! The floor of a memcached → Redis hop: one epoll loop with memshift's
//! codecs and ring (`memshift_benches::floor`); `benches/hop.sh` runs it as
//! `SYSTEM=floor`.

use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use memshift_benches::floor::Floor;

/// The least a memcached → Redis proxy hop costs: one thread, one epoll
/// loop, memshift's parser, ring and item layout; single-key get and set
/// only. A measuring instrument for BENCHMARKS.md, not a proxy.
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// Address to accept memcached text clients on.
    #[arg(long)]
    listen: SocketAddr,
    /// A Redis shard (repeat for each; placed on memshift's default ring).
    #[arg(long = "shard", required = true)]
    shards: Vec<SocketAddr>,
    /// After each loop turn that had work, sleep this many microseconds
    /// before waiting again (0: never), so one wake-up finds many requests:
    /// an experiment trading latency for fewer wake-ups.
    #[arg(long, default_value_t = 0)]
    coalesce_us: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let coalesce = Some(Duration::from_micros(cli.coalesce_us)).filter(|d| !d.is_zero());
    let run =
        TcpListener::bind(cli.listen).and_then(|l| Floor::new(l, &cli.shards, coalesce)?.run());
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memshift-floor: {e}");
            ExitCode::FAILURE
        }
    }
}

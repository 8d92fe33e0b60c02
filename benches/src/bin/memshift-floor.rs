//! The floor of a memcached → Redis hop: one epoll loop with memshift's
//! codecs and ring (`memshift_benches::floor`); `benches/hop.sh` runs it as
//! `SYSTEM=floor`.

use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let run = TcpListener::bind(cli.listen).and_then(|l| Floor::new(l, &cli.shards)?.run());
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memshift-floor: {e}");
            ExitCode::FAILURE
        }
    }
}

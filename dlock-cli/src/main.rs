//! `dlock`: inspect the Redis locks of [dlock-redis](https://docs.rs/dlock-redis) from a
//! shell. `dlock list` shows every lock in use (holders, lease, waiters, fair queue, semaphore
//! permits), `dlock show NAME` one lock in detail, `dlock watch NAME` its holder changes live,
//! and `dlock unlock NAME --force` deletes it the way the library's force unlock does. It takes
//! the URLs the client takes (`--url` for one Redis server, a PostgreSQL store or a ZooKeeper
//! ensemble, `--cluster`,
//! `--sentinel` with `--master`), and
//! `--json` for scripts. See README.md for examples.

mod args;
mod cluster_nodes;
mod deployment;
mod duration;
mod list;
mod output;
mod scan;
mod snapshot;
mod source;
#[cfg(any(feature = "postgres", feature = "zookeeper"))]
mod stored;
mod table;
mod unlock;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any TLS config is built (see Cargo.toml); an application default would win, but
    // this binary installs none other.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dlock: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(true) => ExitCode::SUCCESS,
        // A declined confirmation: nothing went wrong, but nothing was done either.
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("dlock: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `Ok(false)`: the user declined.
async fn run(cli: Cli) -> Result<bool, String> {
    let (target, prefix, json) = (&cli.target, cli.prefix.as_str(), cli.json);
    match cli.command {
        Command::List { redisson } => list::list(target, prefix, json, redisson)
            .await
            .map(|()| true),
        Command::Show { name, kind } => list::show(target, prefix, json, &name, kind)
            .await
            .map(|()| true),
        Command::Unlock {
            name,
            force: _,
            yes,
            kind,
        } => unlock::run(target, prefix, json, &name, kind, yes).await,
        Command::Watch {
            name,
            kind,
            for_,
            count,
            interval,
        } => {
            let bounds = watch::Bounds {
                for_,
                count,
                interval,
            };
            watch::run(target, prefix, json, &name, kind, bounds)
                .await
                .map(|()| true)
        }
    }
}

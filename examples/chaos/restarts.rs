//! The single server's restarts: with its AOF (loading the filler for seconds, answering
//! LOADING meanwhile), without it, and after a kill that lands while a client's grant replies
//! are in flight.

use std::thread::sleep;
use std::time::{Duration, Instant};

use dlock::testing::RedisServer;

use crate::deploy;
use crate::history::{Ev, Recorder};
use crate::proxy::Proxies;

/// Replies to the client under `kill_inflight` are held this long: longer than the fault, so
/// none gets through before the links are cut.
const HOLD_REPLIES: Duration = Duration::from_secs(60);
/// How long the server stays dead after `kill_inflight` before it restarts from its AOF.
const DEAD_AFTER_INFLIGHT: Duration = Duration::from_millis(1_500);

/// Kills the server (SIGKILL) and starts it again after `down` (at most 1 s): from its AOF
/// (nothing acknowledged is lost; the filler makes it load for seconds), or after deleting
/// it (everything is lost; the filler is written again, so later restarts still load).
pub fn restart(
    server: &mut RedisServer,
    rec: &Recorder,
    empty: bool,
    down: Duration,
    filler: usize,
) -> Result<(), String> {
    server.kill();
    if empty {
        let _ = std::fs::remove_dir_all(server.dir().join("appendonlydir"));
        let _ = std::fs::remove_file(server.dir().join("appendonly.aof"));
        let _ = std::fs::remove_file(server.dir().join("dump.rdb"));
    }
    sleep(down.min(Duration::from_secs(1)));
    start_again(server, rec)?;
    if empty {
        deploy::write_filler(server.port(), filler)?;
    }
    Ok(())
}

/// A grant whose reply never arrives, then a restart from the AOF that has it: client
/// `client`'s replies are held at its proxy (its requests still reach Redis, which grants and
/// fsyncs), for `grants` (0.3-1.5 s); then Redis is SIGKILLed, that client's links are cut
/// (the held replies die with them), and after 1.5 s Redis restarts from its AOF, still
/// holding what it granted to a client that never heard of it.
pub fn kill_inflight(
    server: &mut RedisServer,
    proxies: &Proxies,
    rec: &Recorder,
    client: usize,
    grants: Duration,
) -> Result<(), String> {
    proxies.delay(client, HOLD_REPLIES);
    sleep(grants.clamp(Duration::from_millis(300), Duration::from_millis(1_500)));
    server.kill();
    let cut = proxies.cut(client);
    proxies.delay(client, Duration::ZERO);
    sleep(DEAD_AFTER_INFLIGHT);
    start_again(server, rec)?;
    if !cut {
        return Err("the proxy did not close its connections within 5 s".into());
    }
    Ok(())
}

/// Starts the server from what is on disk and notes how long it took to answer again (its
/// LOADING time, less ~20 ms of start-up).
fn start_again(server: &mut RedisServer, rec: &Recorder) -> Result<(), String> {
    let started = Instant::now();
    server.restart().map_err(|e| e.to_string())?;
    rec.record(&rec.event(Ev::Note).detail(format!(
        "port {} restarted; loaded for {:.1}s",
        server.port(),
        started.elapsed().as_secs_f64()
    )));
    Ok(())
}

//! `watch NAME`: a line each time the lock's holders change.
//!
//! Polling, every `--interval` (200 ms by default), rather than keyspace notifications:
//! those are off unless the server's `notify-keyspace-events` is set (an inspector should not
//! change server configuration, on every node of a cluster), they are not delivered reliably
//! across reconnects, and an acquire, a re-entry and a renewal are all an `hset`/`pexpire` to
//! decode. The lock's channel is no help either: it carries releases only, not acquires. The
//! price: a hold that starts and ends between two reads is not seen. Each read is one
//! pipeline on the lock's node.

use std::time::Duration;

use dlock_runtime::inspect::Layout;
use serde::Serialize;
use tokio::time::Instant;

use crate::args::{KindArg, Target};
use crate::duration::format_pttl;
use crate::snapshot::{Holder, LockView};
use crate::source::Source;
use crate::{output, table};

/// What `--json` prints per change.
#[derive(Serialize)]
struct Change<'a> {
    elapsed_ms: u128,
    #[serde(flatten)]
    view: &'a LockView,
}

/// How long to watch.
pub struct Bounds {
    pub for_: Option<Duration>,
    pub count: Option<u64>,
    pub interval: Duration,
}

pub async fn run(
    target: &Target,
    prefix: &str,
    json: bool,
    name: &str,
    kind: KindArg,
    bounds: Bounds,
) -> Result<(), String> {
    let mut source = Source::open(target, prefix).await?;
    let watched = watch(&mut source, prefix, json, name, kind, bounds).await;
    source.close().await;
    watched
}

async fn watch(
    source: &mut Source,
    prefix: &str,
    json: bool,
    name: &str,
    kind: KindArg,
    bounds: Bounds,
) -> Result<(), String> {
    let layout = Layout::new(prefix, kind.into(), name);
    let started = Instant::now();
    let deadline = bounds.for_.map(|d| started + d);
    let mut last: Option<Vec<Holder>> = None;
    let mut printed = 0;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let view = source.read(prefix, &layout).await?;
        let holders = comparable(&view.holders);
        if last.as_ref() != Some(&holders) {
            let elapsed = started.elapsed();
            if json {
                output::json(&Change {
                    elapsed_ms: elapsed.as_millis(),
                    view: &view,
                });
            } else {
                output::text(&format!(
                    "+{:.3}s  {}\n",
                    elapsed.as_secs_f64(),
                    line(&view)
                ));
            }
            last = Some(holders);
            printed += 1;
            if bounds.count.is_some_and(|n| printed >= n) {
                return Ok(());
            }
        }
        let wake = Instant::now() + bounds.interval;
        let wake = deadline.map_or(wake, |d| wake.min(d));
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = &mut interrupted => return Ok(()),
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(());
        }
    }
}

/// The holders without their lease: a renewal is not a change.
fn comparable(holders: &[Holder]) -> Vec<Holder> {
    holders
        .iter()
        .map(|h| Holder {
            ttl_ms: None,
            ..h.clone()
        })
        .collect()
}

fn line(v: &LockView) -> String {
    let mut s = if v.held {
        let holders: Vec<String> = v.holders.iter().map(table::holder_cell).collect();
        format!("held by {}", holders.join(", "))
    } else {
        "free".to_owned()
    };
    if let Some(p) = v.permits {
        let total = p.total.map_or_else(|| "?".to_owned(), |t| t.to_string());
        s.push_str(&format!(" ({}/{total} permits)", p.used));
    }
    if let Some(pttl) = v.pttl_ms.filter(|_| v.held) {
        s.push_str(&format!(", ttl {}", format_pttl(pttl)));
    }
    s
}

//! What waiting met: acquires and releases that gave up on a transient reply (violations), and
//! acquires that waited on a lock nobody else was believed to hold (for people: a grant Redis
//! kept for nobody, a release that was lost or overtaken, shows as such a wait).

use std::collections::HashMap;

use crate::checker::{secs, Fault, Hold, Report, Violation};
use crate::history::{Ev, Event};
use crate::modes;

/// How far past its wait an acquire may return: the last attempt's reply (the response
/// timeout, 2 s), a synced acquire's WAIT (0.5 s), and a second for a busy machine.
const OVERRUN: u64 = 3_500_000_000;

/// How many of the longest free waits the summary lists, during faults and away from them.
const LISTED: usize = 3;
/// How long after a fault a wait still counts as during it: a killed client's lease (at most
/// 4 s) runs on.
const AFTERMATH: u64 = 5_000_000_000;

/// An acquire's wait, and how much of it no conflicting hold of another op covered.
#[derive(Debug, Clone)]
pub struct FreeWait {
    pub p: i32,
    pub op: u64,
    pub lock: String,
    pub mode: String,
    pub from: u64,
    pub to: u64,
    /// ns of the wait with no conflicting believed hold.
    pub free: u64,
    /// `ok`, or the failure.
    pub outcome: String,
    /// Faults that overlapped the wait, or ended less than [`AFTERMATH`] before it.
    pub faults: Vec<String>,
}

/// An acquire answers (granted or not) within its wait plus [`OVERRUN`], unless its process
/// was stopped (SIGSTOP) meanwhile.
pub fn bounded(events: &[Event], faults: &[Fault]) -> Vec<Violation> {
    let mut late = Vec::new();
    let paused = |p: i32, from: u64, to: u64| {
        faults.iter().any(|f| {
            f.kind == "pause" && f.target == format!("c{p}") && f.start < to && from < f.end
        })
    };
    let mut invoked: HashMap<(i32, u64), (u64, u64)> = HashMap::new();
    for e in events {
        let key = (e.p, e.op.unwrap_or(0));
        match e.ev {
            Ev::Invoke => {
                invoked.insert(key, (e.t, e.wait.unwrap_or(0)));
            }
            Ev::Ok | Ev::Fail => {
                let Some((sent, wait_ms)) = invoked.remove(&key) else {
                    continue;
                };
                let took = e.t.saturating_sub(sent);
                if took > wait_ms * 1_000_000 + OVERRUN && !paused(e.p, sent, e.t) {
                    late.push(Violation {
                        property: "acquires answer within their wait",
                        text: format!(
                            "c{} op {} {} {}: waiting up to {wait_ms} ms, it answered ({}) after {:.3}s, at {:.3}s",
                            e.p,
                            key.1,
                            e.mode.as_deref().unwrap_or("?"),
                            e.lock.as_deref().unwrap_or("?"),
                            if e.ev == Ev::Ok { "granted" } else { e.detail.as_deref().unwrap_or("failed") },
                            secs(took),
                            secs(e.t)
                        ),
                        at: vec![(sent, e.p), (e.t, e.p)],
                    });
                }
            }
            _ => {}
        }
    }
    late
}

/// The acquires (semaphores aside) whose wait had the most time with no conflicting believed
/// hold, longest first. Believed holds are not Redis's truth (a killed client's lease runs on,
/// a fair grant waits for its waiter, a writer's claim holds readers off), so this is listed
/// for people, not judged.
pub fn free_waits(events: &[Event], holds: &[Hold], faults: &[Fault]) -> Vec<FreeWait> {
    let mut by_lock: HashMap<&str, Vec<&Hold>> = HashMap::new();
    for h in holds {
        by_lock.entry(h.lock.as_str()).or_default().push(h);
    }
    let mut invoked: HashMap<(i32, u64), &Event> = HashMap::new();
    let mut out = Vec::new();
    for e in events {
        let key = (e.p, e.op.unwrap_or(0));
        match e.ev {
            Ev::Invoke => {
                invoked.insert(key, e);
            }
            Ev::Ok | Ev::Fail => {
                let Some(inv) = invoked.remove(&key) else {
                    continue;
                };
                let mode = inv.mode.clone().unwrap_or_default();
                if mode == "sem" || e.t <= inv.t {
                    continue;
                }
                let lock = inv.lock.clone().unwrap_or_default();
                let shared = modes::mode(&mode).shared;
                let mut covers: Vec<(u64, u64)> = by_lock
                    .get(lock.as_str())
                    .into_iter()
                    .flatten()
                    .filter(|h| (h.p, h.op) != key)
                    .filter(|h| !(shared && modes::mode(&h.mode).shared))
                    .map(|h| (h.grant.max(inv.t), h.end.min(e.t)))
                    .filter(|(a, b)| a < b)
                    .collect();
                covers.sort_unstable();
                let mut covered = 0;
                let mut reach = inv.t;
                for (a, b) in covers {
                    if b > reach {
                        covered += b - a.max(reach);
                        reach = b;
                    }
                }
                out.push(FreeWait {
                    p: e.p,
                    op: key.1,
                    lock,
                    mode,
                    from: inv.t,
                    to: e.t,
                    free: (e.t - inv.t).saturating_sub(covered),
                    outcome: if e.ev == Ev::Ok {
                        "ok".to_owned()
                    } else {
                        e.detail.clone().unwrap_or_default()
                    },
                    faults: faults
                        .iter()
                        .filter(|f| f.start < e.t && inv.t < f.end + AFTERMATH)
                        .map(|f| format!("#{} {}", f.id, f.kind))
                        .collect(),
                });
            }
            _ => {}
        }
    }
    out.sort_by_key(|w| std::cmp::Reverse(w.free));
    // The longest overall (faults make most of them), then the longest away from any fault,
    // which are the ones a fault does not explain.
    let (calm, stormy): (Vec<FreeWait>, Vec<FreeWait>) =
        out.into_iter().partition(|w| w.faults.is_empty());
    let mut listed: Vec<FreeWait> = stormy.into_iter().take(LISTED).collect();
    listed.extend(calm.into_iter().take(LISTED));
    listed
}

/// Replies a client is to ride out rather than hand to its caller: the server loading its
/// data after a restart, a slot in migration (TRYAGAIN, and the ASK / MOVED redirects).
const TRANSIENT: &[&str] = &["LOADING", "TRYAGAIN", "ASK", "MOVED"];

/// The transient Redis code in an error detail (`redis LOADING`), or PostgreSQL's "not now"
/// (`postgres not_now`: starting up, recovering, a standby not yet promoted), which nothing
/// ran on and the same request may be sent again.
fn transient(detail: Option<&str>) -> Option<&str> {
    let detail = detail?;
    if detail == "postgres not_now" {
        return Some(detail);
    }
    let code = detail.strip_prefix("redis ")?;
    TRANSIENT.contains(&code).then_some(code)
}

/// A waiting acquire does not fail on a transient reply before its wait is over, and a
/// release does not give up on one (the lock would stay held until its lease ran out).
pub fn transient_replies(events: &[Event], report: &mut Report) {
    let mut invoked: HashMap<(i32, u64), (u64, u64)> = HashMap::new();
    for e in events {
        let key = (e.p, e.op.unwrap_or(0));
        match e.ev {
            Ev::Invoke => {
                invoked.insert(key, (e.t, e.wait.unwrap_or(0)));
            }
            Ev::Fail => {
                let Some(code) = transient(e.detail.as_deref()) else {
                    continue;
                };
                let Some(&(sent, wait_ms)) = invoked.get(&key) else {
                    continue;
                };
                let deadline = sent + wait_ms * 1_000_000;
                if wait_ms > 0 && e.t < deadline {
                    report.violations.push(Violation {
                        property: "waiters ride out transient replies",
                        text: format!(
                            "c{} op {} {} {}: an acquire waiting up to {wait_ms} ms failed with {code} at {:.3}s, {:.3}s into its wait",
                            e.p,
                            key.1,
                            e.mode.as_deref().unwrap_or("?"),
                            e.lock.as_deref().unwrap_or("?"),
                            secs(e.t),
                            secs(e.t - sent)
                        ),
                        at: vec![(e.t, e.p)],
                    });
                }
            }
            Ev::Released => {
                if let Some(code) = transient(e.detail.as_deref()) {
                    report.violations.push(Violation {
                        property: "releases ride out transient replies",
                        text: format!(
                            "c{} op {} {} {}: the release failed with {code} at {:.3}s (the lock stays held until its lease ends)",
                            e.p,
                            key.1,
                            e.mode.as_deref().unwrap_or("?"),
                            e.lock.as_deref().unwrap_or("?"),
                            secs(e.t)
                        ),
                        at: vec![(e.t, e.p)],
                    });
                }
            }
            _ => {}
        }
    }
}

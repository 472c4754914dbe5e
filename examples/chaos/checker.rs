//! The checker: reads a history and reports every violation of the model in the crate docs.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use crate::history::{Ev, Event, NEMESIS};
use crate::keys_left::{self, Ending};
use crate::modes::{self, Tokens};
use crate::waits;

/// What the checker needs to know beyond the history.
#[derive(Debug, Clone)]
pub struct Config {
    /// Permits of every semaphore.
    pub permits: u32,
    /// After the last fault healed, every client must be granted something within this.
    pub liveness_ns: u64,
    /// How long after a data-loss fault ended a hold from before it may still believe it
    /// holds: its next renewal (a third of a lease of at most 4 s) or its hard lease (at most
    /// 3 s) tells it.
    pub loss_grace_ns: u64,
}

/// One believed hold.
#[derive(Debug, Clone)]
pub struct Hold {
    pub p: i32,
    pub op: u64,
    pub lock: String,
    pub mode: String,
    pub grant: u64,
    pub token: Option<u64>,
    /// The belief's end: the earliest of release start, the lost transition, the process's
    /// death or exit (and see the pause rule in the crate docs).
    pub end: u64,
    /// What ended it: `release`, `drop`, `cancel`, `lost`, `killed`, `exit`, `paused`, `open`.
    pub ended_by: String,
}

impl Hold {
    fn exclusive(&self) -> bool {
        !modes::mode(&self.mode).shared
    }

    /// The token, where the mode promises something of it.
    fn checked_token(&self) -> Option<u64> {
        match modes::mode(&self.mode).tokens {
            Tokens::Rise | Tokens::Counter => self.token,
            Tokens::None | Tokens::Unchecked => None,
        }
    }
}

/// A property that did not hold, with the events that show it (time, process).
#[derive(Debug, Clone)]
pub struct Violation {
    pub property: &'static str,
    pub text: String,
    pub at: Vec<(u64, i32)>,
}

/// A fault as the history shows it.
#[derive(Debug, Clone)]
pub struct Fault {
    pub id: u64,
    pub kind: String,
    pub target: String,
    pub start: u64,
    pub end: u64,
    pub data_loss: bool,
    pub failed: bool,
}

#[derive(Debug, Default)]
pub struct Report {
    pub holds: Vec<Hold>,
    pub faults: Vec<Fault>,
    pub violations: Vec<Violation>,
    /// Overlaps (and semaphore excesses) inside a data-loss window: counted apart.
    pub explained: Vec<Violation>,
    /// The last fault's end, and how long each client took to be granted after it.
    pub last_heal: Option<u64>,
    pub liveness: BTreeMap<i32, Option<u64>>,
    /// The slowest first grant (by anyone) after a fault healed: (ns, fault id).
    pub worst_recovery: Option<(u64, u64)>,
    /// The longest stretch without any grant: (from, to).
    pub longest_gap: Option<(u64, u64)>,
    /// The acquires that waited longest while nobody else was believed to hold their lock.
    pub free_waits: Vec<waits::FreeWait>,
    /// Replica-synced clients granted nothing after the last fault because every answer was
    /// `not_synced`: the deployment had no replica to confirm (a promoted primary whose old
    /// one had not rejoined), which such a lock must refuse. Reported, not a violation.
    pub unconfirmable: Vec<i32>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Checks `events` (sorted by time) and what the end of the run found.
pub fn check(events: &[Event], ending: &Ending, cfg: &Config) -> Report {
    let faults = faults(events);
    let holds = holds(events, &faults);
    let windows: Vec<(u64, u64)> = faults
        .iter()
        .filter(|f| f.data_loss)
        .map(|f| (f.start, f.end + cfg.loss_grace_ns))
        .collect();
    let mut report = Report {
        faults,
        ..Report::default()
    };
    let mut by_lock: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for hold in &holds {
        by_lock.entry(hold.lock.as_str()).or_default().push(hold);
    }
    for (lock, list) in &by_lock {
        if list.iter().all(|h| h.mode == "sem") {
            semaphore(lock, list, cfg.permits, &windows, &mut report);
        } else {
            exclusion(lock, list, &windows, &mut report);
            token_order(lock, list, &windows, &mut report);
        }
    }
    fenced_writes(events, &mut report);
    waits::transient_replies(events, &mut report);
    let late = waits::bounded(events, &report.faults);
    report.violations.extend(late);
    liveness(events, cfg, &mut report);
    report.violations.extend(keys_left::findings(ending));
    report.free_waits = waits::free_waits(events, &holds, &report.faults);
    report.holds = holds;
    report
}

pub fn faults(events: &[Event]) -> Vec<Fault> {
    let mut open: HashMap<u64, Fault> = HashMap::new();
    let mut done = Vec::new();
    for e in events.iter().filter(|e| e.p == NEMESIS) {
        match e.ev {
            Ev::FaultStart => {
                let id = e.op.unwrap_or(0);
                open.insert(
                    id,
                    Fault {
                        id,
                        kind: e.detail.clone().unwrap_or_default(),
                        target: e.target.clone().unwrap_or_default(),
                        start: e.t,
                        end: e.t,
                        data_loss: false,
                        failed: false,
                    },
                );
            }
            Ev::FaultEnd => {
                if let Some(mut f) = open.remove(&e.op.unwrap_or(0)) {
                    f.end = e.t;
                    f.data_loss = e.data_loss;
                    f.failed = e.detail.as_deref().is_some_and(|d| d.starts_with("failed"));
                    done.push(f);
                }
            }
            _ => {}
        }
    }
    let last = events.last().map_or(0, |e| e.t);
    done.extend(open.into_values().map(|mut f| {
        f.end = last;
        f
    }));
    done.sort_by_key(|f| f.start);
    done
}

/// The client a fault targets (`c3` -> 3).
fn client_of(fault: &Fault) -> Option<i32> {
    fault.target.strip_prefix('c')?.parse().ok()
}

/// Holds not yet ended, by (process, op), with the times and kinds of their events.
type Open = HashMap<(i32, u64), (Hold, Vec<(u64, Ev)>)>;

/// Builds the believed holds.
pub fn holds(events: &[Event], faults: &[Fault]) -> Vec<Hold> {
    let mut open: Open = HashMap::new();
    let mut done: Vec<(Hold, Vec<(u64, Ev)>)> = Vec::new();
    let kills: Vec<(u64, i32)> = faults
        .iter()
        .filter(|f| f.kind == "kill")
        .filter_map(|f| Some((f.start, client_of(f)?)))
        .collect();
    let close_all =
        |open: &mut Open, done: &mut Vec<(Hold, Vec<(u64, Ev)>)>, p: i32, t: u64, why: &str| {
            let keys: Vec<_> = open.keys().filter(|k| k.0 == p).copied().collect();
            for k in keys {
                let (mut h, evs) = open.remove(&k).expect("listed");
                if t < h.end {
                    h.end = t;
                    h.ended_by = why.into();
                }
                done.push((h, evs));
            }
        };
    let mut kill_at = kills.iter().peekable();
    for e in events {
        while let Some(&&(t, p)) = kill_at.peek() {
            if t > e.t {
                break;
            }
            close_all(&mut open, &mut done, p, t, "killed");
            kill_at.next();
        }
        let key = (e.p, e.op.unwrap_or(0));
        match e.ev {
            Ev::Ok => {
                let hold = Hold {
                    p: e.p,
                    op: key.1,
                    lock: e.lock.clone().unwrap_or_default(),
                    mode: e.mode.clone().unwrap_or_default(),
                    grant: e.t,
                    token: e.token,
                    end: u64::MAX,
                    ended_by: "open".into(),
                };
                open.insert(key, (hold, Vec::new()));
            }
            Ev::Lost | Ev::ReleaseStart | Ev::Fence | Ev::Reenter | Ev::Released => {
                if let Some((h, evs)) = open.get_mut(&key) {
                    evs.push((e.t, e.ev));
                    let why = match e.ev {
                        Ev::Lost => Some("lost".to_owned()),
                        Ev::ReleaseStart => e.detail.clone(),
                        _ => None,
                    };
                    if let Some(why) = why {
                        if e.t < h.end {
                            h.end = e.t;
                            h.ended_by = why;
                        }
                    }
                }
            }
            Ev::Start => close_all(&mut open, &mut done, e.p, e.t, "killed"),
            Ev::Exit => close_all(&mut open, &mut done, e.p, e.t, "exit"),
            _ => {}
        }
    }
    let last = events.last().map_or(0, |e| e.t);
    let mut ps: Vec<i32> = open.keys().map(|k| k.0).collect();
    ps.sort_unstable();
    ps.dedup();
    for p in ps {
        close_all(&mut open, &mut done, p, last, "open");
    }
    // The pause rule: a process stopped by SIGSTOP does nothing; if the first thing a hold
    // shows after SIGCONT is its loss, it held no belief it could act on from the stop on
    // (or from its last act, if it acted between the fault's record and the signal landing).
    let pauses: Vec<(i32, u64, u64)> = faults
        .iter()
        .filter(|f| f.kind == "pause")
        .filter_map(|f| Some((client_of(f)?, f.start, f.end)))
        .collect();
    let mut holds: Vec<Hold> = done
        .into_iter()
        .map(|(mut h, evs)| {
            for &(p, stop, cont) in &pauses {
                if p != h.p || stop <= h.grant || stop >= h.end {
                    continue;
                }
                let first_after = evs.iter().find(|(t, _)| *t >= cont);
                if first_after.is_some_and(|(_, ev)| *ev == Ev::Lost) {
                    let last_act = evs
                        .iter()
                        .map(|(t, _)| *t)
                        .filter(|t| (stop..cont).contains(t))
                        .max();
                    h.end = last_act.unwrap_or(stop);
                    h.ended_by = "paused".into();
                }
            }
            h
        })
        .collect();
    holds.sort_by_key(|h| (h.grant, h.p));
    holds
}

fn in_window(windows: &[(u64, u64)], earlier_grant: u64, later_grant: u64) -> bool {
    windows
        .iter()
        .any(|&(s, e)| earlier_grant <= e && s <= later_grant && later_grant <= e)
}

pub fn describe(h: &Hold) -> String {
    format!(
        "c{} op {} {} {} token {} held {:.3}-{:.3}s ({})",
        h.p,
        h.op,
        h.mode,
        h.lock,
        h.token.map_or("-".into(), |t| t.to_string()),
        secs(h.grant),
        secs(h.end),
        h.ended_by
    )
}

pub fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Mutual exclusion: no two believed holds of one lock overlap, unless both are reads.
fn exclusion(lock: &str, list: &[&Hold], windows: &[(u64, u64)], report: &mut Report) {
    let mut active: Vec<&Hold> = Vec::new();
    for &b in list {
        active.retain(|a| a.end > b.grant);
        for &a in &active {
            if a.p == b.p && a.op == b.op {
                continue;
            }
            if !(a.exclusive() || b.exclusive()) || b.end <= b.grant {
                continue;
            }
            let v = Violation {
                property: "mutual exclusion",
                text: format!(
                    "{lock}: {} overlaps {} for {:.3}s",
                    describe(a),
                    describe(b),
                    secs(a.end.min(b.end) - b.grant)
                ),
                at: vec![(a.grant, a.p), (b.grant, b.p)],
            };
            if in_window(windows, a.grant, b.grant) {
                report.explained.push(v);
            } else {
                report.violations.push(v);
            }
        }
        active.push(b);
    }
}

/// Fencing tokens rise in grant order: a hold granted after another's belief ended has a
/// larger token. Two reads are not compared: Redis may grant them side by side, and a read
/// whose reply was delayed (a slow link, a paused process) is then believed after another
/// read that Redis granted later, with a later token. A plain counter (Redisson's) is lost
/// with the data: its tokens are checked between data-loss faults, and a counter that starts
/// again lower after one, or goes back inside a data-loss window (two primaries counting), is
/// counted apart, once per window.
fn token_order(lock: &str, list: &[&Hold], windows: &[(u64, u64)], report: &mut Report) {
    let counter = list
        .iter()
        .all(|h| modes::mode(&h.mode).tokens == Tokens::Counter);
    if !counter {
        rising(lock, list, None, report);
        return;
    }
    let mut starts: Vec<u64> = windows.iter().map(|w| w.0).collect();
    starts.sort_unstable();
    let mut epochs: Vec<Vec<&Hold>> = vec![Vec::new(); starts.len() + 1];
    for &h in list {
        epochs[starts.partition_point(|&s| s <= h.grant)].push(h);
    }
    let mut before: Option<&Hold> = None;
    let mut counted = Vec::new();
    for epoch in epochs.iter().filter(|e| !e.is_empty()) {
        rising(lock, epoch, Some((windows, &mut counted)), report);
        let first = epoch.iter().find(|h| h.checked_token().is_some());
        if let (Some(a), Some(b)) = (before, first) {
            if b.checked_token() <= a.checked_token() {
                report.explained.push(Violation {
                    property: "fencing",
                    text: format!(
                        "{lock}: the counter started again after a data-loss fault: {} granted after {}",
                        describe(b),
                        describe(a)
                    ),
                    at: vec![(a.grant, a.p), (b.grant, b.p)],
                });
            }
        }
        let top = epoch.iter().filter(|h| h.checked_token().is_some());
        if let Some(top) = top.max_by_key(|h| h.checked_token()) {
            before = Some(top);
        }
    }
}

/// Data-loss windows (start, end), and the indexes of those already counted apart.
type Lossy<'a> = (&'a [(u64, u64)], &'a mut Vec<usize>);

/// The token-order check within one stretch of holds. `lossy`: the data-loss windows inside
/// which a plain counter's go-back is counted apart, and those already counted.
fn rising(lock: &str, list: &[&Hold], mut lossy: Option<Lossy>, report: &mut Report) {
    // Holds not yet ended, by end time; and the highest tokens of ended ones.
    let mut running: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut best_excl: Option<(u64, usize)> = None;
    let mut best_read: Option<(u64, usize)> = None;
    for (i, &b) in list.iter().enumerate() {
        while let Some(&Reverse((end, j))) = running.peek() {
            if end > b.grant {
                break;
            }
            running.pop();
            let a = list[j];
            if let Some(t) = a.checked_token() {
                let best = if a.exclusive() {
                    &mut best_excl
                } else {
                    &mut best_read
                };
                if best.is_none_or(|(bt, _)| t > bt) {
                    *best = Some((t, j));
                }
            }
        }
        if let Some(token) = b.checked_token() {
            let mut worst = None;
            if let Some((t, j)) = best_excl {
                if token <= t {
                    worst = Some(j);
                }
            }
            if let Some((t, j)) = best_read {
                if b.exclusive() && token <= t {
                    worst = worst.or(Some(j));
                }
            }
            if let Some(j) = worst {
                let a = list[j];
                let v = Violation {
                    property: "fencing",
                    text: format!(
                        "{lock}: token went back in grant order: {} granted after {}",
                        describe(b),
                        describe(a)
                    ),
                    at: vec![(a.grant, a.p), (b.grant, b.p)],
                };
                let lost = lossy.as_mut().and_then(|(windows, counted)| {
                    let w = windows
                        .iter()
                        .position(|&(s, e)| (s..=e).contains(&b.grant))?;
                    Some(if counted.contains(&w) {
                        false
                    } else {
                        counted.push(w);
                        true
                    })
                });
                match lost {
                    Some(true) => report.explained.push(v),
                    Some(false) => {}
                    None => report.violations.push(v),
                }
            }
        }
        running.push(Reverse((b.end, i)));
    }
}

/// A fenced write is refused once a write with a higher token was acknowledged before it was
/// sent (the register is never faulted, so this checks tokens and the fence together).
fn fenced_writes(events: &[Event], report: &mut Report) {
    let mut by_lock: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in events.iter().filter(|e| e.ev == Ev::Fence) {
        if e.detail.as_deref() == Some("written") {
            by_lock
                .entry(e.lock.as_deref().unwrap_or(""))
                .or_default()
                .push(e);
        }
    }
    for (lock, mut writes) in by_lock {
        writes.sort_by_key(|e| e.t);
        // The highest token acknowledged up to each write's acknowledgement.
        let mut prefix: Vec<(u64, &Event)> = Vec::with_capacity(writes.len());
        for &w in &writes {
            let best = match prefix.last() {
                Some(&(t, e)) if t >= w.token.unwrap_or(0) => (t, e),
                _ => (w.token.unwrap_or(0), w),
            };
            prefix.push((best.0, best.1));
        }
        for &w in &writes {
            let sent = w.at.unwrap_or(w.t);
            let acked_before = writes.partition_point(|x| x.t < sent);
            if acked_before == 0 {
                continue;
            }
            let (highest, by) = prefix[acked_before - 1];
            if highest > w.token.unwrap_or(0) {
                report.violations.push(Violation {
                    property: "fencing",
                    text: format!(
                        "{lock}: a superseded hold's write was accepted: c{} op {} token {} sent at {:.3}s after c{} op {} wrote token {highest} at {:.3}s",
                        w.p,
                        w.op.unwrap_or(0),
                        w.token.unwrap_or(0),
                        secs(sent),
                        by.p,
                        by.op.unwrap_or(0),
                        secs(by.t)
                    ),
                    at: vec![(by.t, by.p), (w.t, w.p)],
                });
            }
        }
    }
}

/// At most `permits` believed holders of a semaphore at once.
fn semaphore(
    lock: &str,
    list: &[&Hold],
    permits: u32,
    windows: &[(u64, u64)],
    report: &mut Report,
) {
    let mut active: Vec<&Hold> = Vec::new();
    for &b in list {
        active.retain(|a| a.end > b.grant);
        if b.end > b.grant {
            active.push(b);
        }
        if active.len() > permits as usize {
            let v = Violation {
                property: "semaphore",
                text: format!(
                    "{lock}: {} believed holders of {permits} permits at {:.3}s: {}",
                    active.len(),
                    secs(b.grant),
                    active
                        .iter()
                        .map(|h| describe(h))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                at: active.iter().map(|h| (h.grant, h.p)).collect(),
            };
            let earliest = active.iter().map(|h| h.grant).min().unwrap_or(b.grant);
            if in_window(windows, earliest, b.grant) {
                report.explained.push(v);
            } else {
                report.violations.push(v);
            }
        }
    }
}

/// After the last fault healed, every client is granted something within the bound; also the
/// slowest recovery after any fault and the longest stretch without a grant.
fn liveness(events: &[Event], cfg: &Config, report: &mut Report) {
    let grants: Vec<(u64, i32)> = events
        .iter()
        .filter(|e| e.ev == Ev::Ok)
        .map(|e| (e.t, e.p))
        .collect();
    let stop = events
        .iter()
        .find(|e| e.p == NEMESIS && e.ev == Ev::Note && e.detail.as_deref() == Some("stop"))
        .map_or_else(|| events.last().map_or(0, |e| e.t), |e| e.t);
    for f in &report.faults {
        let next = grants.iter().find(|g| g.0 >= f.end).map(|g| g.0 - f.end);
        let wait = next.unwrap_or(stop.saturating_sub(f.end));
        if report.worst_recovery.is_none_or(|(w, _)| wait > w) {
            report.worst_recovery = Some((wait, f.id));
        }
    }
    // From the first grant on: before it the servers and clients were starting.
    let mut prev = grants.first().map_or(stop, |g| g.0);
    for &(t, _) in grants.iter().chain(std::iter::once(&(stop, NEMESIS))) {
        if report
            .longest_gap
            .is_none_or(|(a, b)| t.saturating_sub(prev) > b - a)
        {
            report.longest_gap = Some((prev, t.max(prev)));
        }
        prev = t;
    }
    let last_heal = report.faults.iter().map(|f| f.end).max();
    report.last_heal = last_heal;
    let Some(heal) = last_heal else { return };
    let mut clients: Vec<i32> = events.iter().filter(|e| e.p >= 0).map(|e| e.p).collect();
    clients.sort_unstable();
    clients.dedup();
    for p in clients {
        let first = grants
            .iter()
            .find(|g| g.1 == p && g.0 >= heal)
            .map(|g| g.0 - heal);
        report.liveness.insert(p, first);
        let late = match first {
            Some(w) => w > cfg.liveness_ns,
            None => stop.saturating_sub(heal) > cfg.liveness_ns,
        };
        // Answered all along, and every answer a refusal for want of replicas.
        let answers: Vec<&Event> = events
            .iter()
            .filter(|e| e.p == p && e.t >= heal && e.ev == Ev::Fail)
            .collect();
        let unconfirmable = first.is_none()
            && !answers.is_empty()
            && answers.iter().all(|e| {
                matches!(
                    e.detail.as_deref(),
                    Some("not_synced" | "timeout" | "cancelled")
                )
            })
            && answers
                .iter()
                .any(|e| e.detail.as_deref() == Some("not_synced"));
        if late && unconfirmable {
            report.unconfirmable.push(p);
        } else if late {
            report.violations.push(Violation {
                property: "liveness",
                text: format!(
                    "c{p} was not granted anything within {:.1}s of the last fault healing at {:.3}s ({})",
                    secs(cfg.liveness_ns),
                    secs(heal),
                    first.map_or("never, before the stop".into(), |w| format!("after {:.3}s", secs(w)))
                ),
                at: vec![(heal, p)],
            });
        }
    }
}

#[cfg(test)]
mod tests;

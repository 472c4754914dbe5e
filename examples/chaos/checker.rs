//! The checker: reads a history and reports every violation of the model in the crate docs.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use crate::history::{Ev, Event, NEMESIS};

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
        self.mode != "read"
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
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Checks `events` (sorted by time). `leftover` is what a SCAN of the servers found under the
/// key prefix after every client exited cleanly (`None`: not every client did, so it was not
/// checked).
pub fn check(events: &[Event], leftover: Option<&[String]>, cfg: &Config) -> Report {
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
            token_order(lock, list, &mut report);
        }
    }
    fenced_writes(events, &mut report);
    liveness(events, cfg, &mut report);
    if let Some(keys) = leftover {
        report.violations.extend(stranded(keys));
    }
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
    // shows after SIGCONT is its loss, it held no belief it could act on from the stop on.
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
                    h.end = stop;
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

fn describe(h: &Hold) -> String {
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
/// larger token (equal allowed between two reads, which may share one).
fn token_order(lock: &str, list: &[&Hold], report: &mut Report) {
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
            if let Some(t) = a.token {
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
        if let Some(token) = b.token {
            let mut worst = None;
            if let Some((t, j)) = best_excl {
                if token <= t {
                    worst = Some(j);
                }
            }
            if let Some((t, j)) = best_read {
                if token < t || (token == t && b.exclusive()) {
                    worst = worst.or(Some(j));
                }
            }
            if let Some(j) = worst {
                let a = list[j];
                report.violations.push(Violation {
                    property: "fencing",
                    text: format!(
                        "{lock}: token went back in grant order: {} granted after {}",
                        describe(b),
                        describe(a)
                    ),
                    at: vec![(a.grant, a.p), (b.grant, b.p)],
                });
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
        if late {
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

/// Keys left under the prefix after a clean exit. Fencing counters (`...:fence`) outlive their
/// locks by design (tokens must keep rising), and release latches (`...:latch:<id>`) are kept
/// briefly on purpose; anything else is a lock, queue entry or permit nobody holds.
pub fn stranded(keys: &[String]) -> Vec<Violation> {
    keys.iter()
        .filter(|k| {
            let key = k.split(' ').next().unwrap_or_default();
            !key.ends_with(":fence") && !key.contains(":latch:")
        })
        .map(|k| Violation {
            property: "nothing stranded",
            text: format!("key {k} remained after every client exited cleanly"),
            at: Vec::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn cfg() -> Config {
        Config {
            permits: 2,
            liveness_ns: 8 * S,
            loss_grace_ns: 5 * S,
        }
    }

    fn ev(t: u64, p: i32, ev: Ev, op: u64, lock: &str, mode: &str) -> Event {
        Event::new(t, p, ev).op(op).lock(lock, mode)
    }

    /// A hold granted at `from`, released at `to` (in ms), with `token`.
    fn hold(p: i32, op: u64, lock: &str, mode: &str, from: u64, to: u64, token: u64) -> Vec<Event> {
        let ms = 1_000_000;
        let token = (mode != "sem").then_some(token);
        vec![
            ev(from * ms - ms / 2, p, Ev::Invoke, op, lock, mode),
            ev(from * ms, p, Ev::Ok, op, lock, mode).token(token),
            ev(to * ms, p, Ev::ReleaseStart, op, lock, mode).detail("release"),
            ev(to * ms + ms / 2, p, Ev::Released, op, lock, mode).detail("ok"),
        ]
    }

    fn fence(
        p: i32,
        op: u64,
        lock: &str,
        sent_ms: u64,
        acked_ms: u64,
        token: u64,
        outcome: &str,
    ) -> Vec<Event> {
        let mut e = ev(acked_ms * 1_000_000, p, Ev::Fence, op, lock, "plain")
            .token(Some(token))
            .detail(outcome);
        e.at = Some(sent_ms * 1_000_000);
        vec![e]
    }

    fn fault(
        id: u64,
        kind: &str,
        target: &str,
        from_ms: u64,
        to_ms: u64,
        loss: bool,
    ) -> Vec<Event> {
        let mut end = Event::new(to_ms * 1_000_000, NEMESIS, Ev::FaultEnd).op(id);
        end.data_loss = loss;
        vec![
            Event::new(from_ms * 1_000_000, NEMESIS, Ev::FaultStart)
                .op(id)
                .detail(kind)
                .target(target),
            end,
        ]
    }

    fn run(parts: Vec<Vec<Event>>) -> Report {
        let mut events: Vec<Event> = parts.into_iter().flatten().collect();
        events.sort_by_key(|e| (e.t, e.p));
        check(&events, Some(&[]), &cfg())
    }

    fn properties(r: &Report) -> Vec<&'static str> {
        r.violations.iter().map(|v| v.property).collect()
    }

    #[test]
    fn accepts_a_clean_history() {
        let r = run(vec![
            hold(0, 1, "plain:0", "plain", 10, 100, 1024),
            fence(0, 1, "plain:0", 20, 21, 1024, "written"),
            hold(1, 1, "plain:0", "plain", 101, 200, 2048),
            fence(1, 1, "plain:0", 110, 111, 2048, "written"),
            // The first holder's late write is refused: that is the fence working.
            fence(0, 1, "plain:0", 150, 151, 1024, "stale"),
            hold(2, 1, "rw:0", "read", 10, 100, 4096),
            hold(3, 1, "rw:0", "read", 20, 150, 4096),
            hold(4, 1, "rw:0", "write", 151, 160, 5120),
            hold(0, 2, "sem:0", "sem", 10, 100, 0),
            hold(1, 2, "sem:0", "sem", 20, 100, 0),
            hold(2, 2, "sem:0", "sem", 100, 120, 0),
        ]);
        assert!(r.is_clean(), "{:#?}", r.violations);
        assert_eq!(r.holds.len(), 8);
    }

    #[test]
    fn flags_an_overlap_of_two_believed_holds() {
        let r = run(vec![
            hold(0, 1, "plain:0", "plain", 10, 100, 1024),
            hold(1, 1, "plain:0", "plain", 90, 200, 2048),
        ]);
        assert_eq!(properties(&r), ["mutual exclusion"]);
        assert!(
            r.violations[0].text.contains("for 0.010s"),
            "{}",
            r.violations[0].text
        );
        // A reader beside a writer is one too.
        let r = run(vec![
            hold(0, 1, "rw:0", "write", 10, 100, 1024),
            hold(1, 1, "rw:0", "read", 50, 200, 2048),
        ]);
        assert_eq!(properties(&r), ["mutual exclusion"]);
    }

    #[test]
    fn a_hold_ends_at_its_loss() {
        let mut first = hold(0, 1, "plain:0", "plain", 10, 100, 1024);
        first.push(ev(60_000_000, 0, Ev::Lost, 1, "plain:0", "plain"));
        let r = run(vec![first, hold(1, 1, "plain:0", "plain", 70, 200, 2048)]);
        assert!(r.is_clean(), "{:#?}", r.violations);
    }

    #[test]
    fn a_paused_hold_that_wakes_up_lost_ends_at_the_pause() {
        // c0 is stopped at 50 ms and continued at 300 ms; the first thing its hold shows then
        // is the loss, so c1's grant at 200 ms is no overlap.
        let mut first = hold(0, 1, "plain:0", "plain", 10, 320, 1024);
        first.push(ev(305_000_000, 0, Ev::Lost, 1, "plain:0", "plain"));
        let r = run(vec![
            first.clone(),
            fault(1, "pause", "c0", 50, 300, false),
            hold(1, 1, "plain:0", "plain", 200, 250, 2048),
        ]);
        assert!(r.is_clean(), "{:#?}", r.violations);
        // Without the pause it is an overlap.
        let r = run(vec![first, hold(1, 1, "plain:0", "plain", 200, 250, 2048)]);
        assert_eq!(properties(&r), ["mutual exclusion"]);
    }

    #[test]
    fn a_killed_process_holds_nothing() {
        let r = run(vec![
            vec![ev(10_000_000, 0, Ev::Ok, 1, "plain:0", "plain").token(Some(1024))],
            fault(1, "kill", "c0", 50, 60, false),
            hold(1, 1, "plain:0", "plain", 100, 200, 2048),
        ]);
        assert!(r.is_clean(), "{:#?}", r.violations);
    }

    #[test]
    fn counts_overlaps_inside_a_data_loss_window_apart() {
        let r = run(vec![
            hold(0, 1, "plain:0", "plain", 10, 400, 1024),
            fault(1, "restart_empty", "port 1", 100, 150, true),
            hold(1, 1, "plain:0", "plain", 160, 300, 2048),
        ]);
        assert!(r.is_clean(), "{:#?}", r.violations);
        assert_eq!(r.explained.len(), 1);
        // The same overlap without data loss is a violation.
        let r = run(vec![
            hold(0, 1, "plain:0", "plain", 10, 400, 1024),
            fault(1, "restart_aof", "port 1", 100, 150, false),
            hold(1, 1, "plain:0", "plain", 160, 300, 2048),
        ]);
        assert_eq!(properties(&r), ["mutual exclusion"]);
        // And two holds both granted long after the window are not explained by it.
        let r = run(vec![
            fault(1, "restart_empty", "port 1", 100, 150, true),
            hold(0, 1, "plain:0", "plain", 6_000, 6_400, 4096),
            hold(1, 1, "plain:0", "plain", 6_100, 6_300, 5120),
        ]);
        assert_eq!(properties(&r), ["mutual exclusion"]);
    }

    #[test]
    fn flags_a_token_going_backwards_in_grant_order() {
        let r = run(vec![
            hold(0, 1, "plain:0", "plain", 10, 100, 2048),
            hold(1, 1, "plain:0", "plain", 110, 200, 1024),
        ]);
        assert_eq!(properties(&r), ["fencing"]);
        // A reader below the writer before it (what a data-loss failover once did).
        let r = run(vec![
            hold(0, 1, "rw:0", "write", 10, 100, 2048),
            hold(1, 1, "rw:0", "read", 110, 200, 1024),
        ]);
        assert_eq!(properties(&r), ["fencing"]);
        // Two readers may share a token; a writer after them may not reuse it.
        let r = run(vec![
            hold(0, 1, "rw:0", "read", 10, 100, 2048),
            hold(1, 1, "rw:0", "read", 110, 200, 2048),
        ]);
        assert!(r.is_clean(), "{:#?}", r.violations);
        let r = run(vec![
            hold(0, 1, "rw:0", "read", 10, 100, 2048),
            hold(1, 1, "rw:0", "write", 110, 200, 2048),
        ]);
        assert_eq!(properties(&r), ["fencing"]);
    }

    #[test]
    fn flags_a_superseded_holds_write_accepted() {
        let r = run(vec![
            hold(0, 1, "plain:0", "plain", 10, 100, 1024),
            hold(1, 1, "plain:0", "plain", 101, 200, 2048),
            fence(1, 1, "plain:0", 110, 111, 2048, "written"),
            fence(0, 1, "plain:0", 150, 151, 1024, "written"),
        ]);
        assert_eq!(properties(&r), ["fencing"]);
        assert!(r.violations[0].text.contains("superseded"));
        // Sent before the higher write was acknowledged: either order is fine.
        let r = run(vec![
            hold(0, 1, "plain:0", "plain", 10, 100, 1024),
            hold(1, 1, "plain:0", "plain", 101, 200, 2048),
            fence(1, 1, "plain:0", 110, 120, 2048, "written"),
            fence(0, 1, "plain:0", 115, 125, 1024, "written"),
        ]);
        assert!(r.is_clean(), "{:#?}", r.violations);
    }

    #[test]
    fn flags_more_semaphore_holders_than_permits() {
        let r = run(vec![
            hold(0, 1, "sem:0", "sem", 10, 100, 0),
            hold(1, 1, "sem:0", "sem", 20, 100, 0),
            hold(2, 1, "sem:0", "sem", 30, 100, 0),
        ]);
        assert_eq!(properties(&r), ["semaphore"]);
    }

    #[test]
    fn flags_a_stranded_key_and_ignores_counters_and_latches() {
        let keys = [
            "dlock:{plain%3A0}".to_owned(),
            "dlock:{plain%3A1}:fence".to_owned(),
            "dlock:{plain%3A1}:latch:abc".to_owned(),
            "dlock:{fair%3A0}:fair:queue".to_owned(),
        ];
        let v = stranded(&keys);
        assert_eq!(v.len(), 2);
        assert!(v[0].text.contains("dlock:{plain%3A0}"));
        let events = hold(0, 1, "plain:0", "plain", 10, 100, 1024);
        let r = check(&events, Some(&keys), &cfg());
        assert_eq!(properties(&r), ["nothing stranded", "nothing stranded"]);
    }

    #[test]
    fn flags_a_client_not_granted_after_the_last_fault() {
        let mut late = vec![
            hold(0, 1, "plain:0", "plain", 10, 100, 1024),
            hold(1, 1, "plain:0", "plain", 200, 300, 2048),
            fault(1, "freeze", "c1", 1_000, 2_000, false),
            hold(0, 2, "plain:0", "plain", 2_100, 2_200, 4096),
            hold(1, 2, "plain:0", "plain", 12_000, 12_100, 5120),
        ];
        late.push(vec![
            Event::new(13_000_000_000, NEMESIS, Ev::Note).detail("stop")
        ]);
        let r = run(late);
        assert_eq!(properties(&r), ["liveness"]);
        assert!(r.violations[0].text.contains("c1"));
        assert_eq!(r.liveness[&0], Some(100_000_000));
    }
}

//! summary.txt: what ran, what broke, what the checker found.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::checker::{secs, Config, Report, Violation};
use crate::history::{Ev, Event, NEMESIS};
use crate::keys_left::{self, Ending};

/// How many offending events each violation kind lists in full.
const LISTED: usize = 20;

pub fn render(
    title: &str,
    events: &[Event],
    report: &Report,
    ending: &Ending,
    cfg: &Config,
    notes: &[String],
) -> String {
    let mut out = String::new();
    let count = |ev: Ev| events.iter().filter(|e| e.ev == ev).count();
    let _ = writeln!(out, "chaos run {title}");
    let end = events.last().map_or(0, |e| e.t);
    let _ = writeln!(out, "duration {:.1}s, {} events", secs(end), events.len());
    let _ = writeln!(
        out,
        "ops {} (acquires invoked), acquired {}, lost {}, releases {}",
        count(Ev::Invoke),
        count(Ev::Ok),
        count(Ev::Lost),
        count(Ev::ReleaseStart)
    );
    let tally = |ev: Ev| {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for e in events.iter().filter(|e| e.ev == ev) {
            *by.entry(e.detail.clone().unwrap_or_default()).or_default() += 1;
        }
        by.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(out, "acquire failures: {}", tally(Ev::Fail));
    let _ = writeln!(out, "hold endings: {}", tally(Ev::ReleaseStart));
    let _ = writeln!(out, "release replies: {}", tally(Ev::Released));
    let _ = writeln!(out, "fenced writes: {}", tally(Ev::Fence));
    let _ = writeln!(out, "re-entries: {}", tally(Ev::Reenter));
    // Each client's runtime and sync, as its first start says.
    let mut flavours: BTreeMap<i32, String> = BTreeMap::new();
    for e in events.iter().filter(|e| e.ev == Ev::Start) {
        let how = e.detail.as_deref().unwrap_or_default();
        let how = how.split_once(", ").map_or(how, |(_, rest)| rest);
        flavours.entry(e.p).or_insert_with(|| how.to_owned());
    }
    let _ = writeln!(
        out,
        "clients: {}",
        flavours
            .iter()
            .map(|(p, how)| format!("c{p} {how}"))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let loads: Vec<String> = events
        .iter()
        .filter(|e| e.p == NEMESIS && e.ev == Ev::Note)
        .filter_map(|e| e.detail.as_deref()?.split_once("loaded for "))
        .map(|(_, took)| took.to_owned())
        .collect();
    if !loads.is_empty() {
        let _ = writeln!(out, "restarts answered again after: {}", loads.join(", "));
    }

    let _ = writeln!(
        out,
        "\nfaults (count, failed to inject, data loss, total time):"
    );
    let mut by_kind: BTreeMap<&str, (usize, usize, usize, u64)> = BTreeMap::new();
    for f in &report.faults {
        let row = by_kind.entry(f.kind.as_str()).or_default();
        row.0 += 1;
        row.1 += f.failed as usize;
        row.2 += f.data_loss as usize;
        row.3 += f.end - f.start;
    }
    for (kind, (n, failed, loss, total)) in &by_kind {
        let _ = writeln!(
            out,
            "  {kind:<16} {n:>4} {failed:>4} {loss:>4} {:>8.1}s",
            secs(*total)
        );
    }

    let _ = writeln!(out, "\nviolations: {}", report.violations.len());
    list(&mut out, &report.violations);
    let _ = writeln!(
        out,
        "explained by data loss (overlaps or semaphore excess inside a data-loss window, not violations): {}",
        report.explained.len()
    );
    list(&mut out, &report.explained);

    let _ = writeln!(out, "\navailability:");
    if let Some((wait, id)) = report.worst_recovery {
        let kind = report
            .faults
            .iter()
            .find(|f| f.id == id)
            .map_or("?", |f| f.kind.as_str());
        let _ = writeln!(
            out,
            "  longest unavailability after a fault: {:.3}s from the end of fault #{id} ({kind}) to the next grant",
            secs(wait)
        );
    }
    if let Some((a, b)) = report.longest_gap {
        let _ = writeln!(
            out,
            "  longest stretch without any grant: {:.3}s ({:.3}-{:.3}s)",
            secs(b - a),
            secs(a),
            secs(b)
        );
    }
    for w in &report.free_waits {
        let _ = writeln!(
            out,
            "  waited on a lock nobody else held: {:.3}s of c{} op {} {} {} ({:.3}-{:.3}s, {}{})",
            secs(w.free),
            w.p,
            w.op,
            w.mode,
            w.lock,
            secs(w.from),
            secs(w.to),
            w.outcome,
            if w.faults.is_empty() {
                String::new()
            } else {
                format!(", during {}", w.faults.join(", "))
            }
        );
    }
    match report.last_heal {
        Some(heal) => {
            let _ = writeln!(
                out,
                "  liveness: last fault healed at {:.3}s; bound {:.1}s; first grant per client after it: {}",
                secs(heal),
                secs(cfg.liveness_ns),
                report
                    .liveness
                    .iter()
                    .map(|(p, w)| format!("c{p} {}", w.map_or("none".into(), |w| format!("{:.3}s", secs(w)))))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        None => {
            let _ = writeln!(out, "  liveness: no fault ran");
        }
    }
    for p in &report.unconfirmable {
        let _ = writeln!(
            out,
            "  liveness: c{p} (replica-synced) was refused NotSynced after the last fault: no replica confirmed its acquires"
        );
    }
    let kinds = keys_left::by_kind(&ending.keys);
    let endless: usize = kinds.values().map(|k| k.1).sum();
    let _ = writeln!(
        out,
        "\nkeys left at the end, by kind (keys, without expiry, longest pttl): {} keys, {endless} without expiry",
        ending.keys.len()
    );
    for (kind, (n, none, pttl)) in &kinds {
        let pttl = if *pttl > 0 {
            format!("{pttl} ms")
        } else {
            "-".to_owned()
        };
        let _ = writeln!(out, "  {kind:<44} {n:>5} {none:>5} {pttl:>12}");
    }
    if !notes.is_empty() {
        let _ = writeln!(out, "\nnotes:");
        for n in notes {
            let _ = writeln!(out, "  {n}");
        }
    }
    // One line with what the README's table gives per run.
    let mut faults: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &report.faults {
        *faults.entry(f.kind.as_str()).or_default() += 1;
    }
    let _ = writeln!(
        out,
        "\nrow: faults {} ({}); violations {}; explained by data loss {}; worst unavailability {:.1}s after a fault heals, {:.1}s without any grant; keys left {} ({endless} without expiry)",
        report.faults.len(),
        faults
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        report.violations.len(),
        report.explained.len(),
        report.worst_recovery.map_or(0.0, |(w, _)| secs(w)),
        report.longest_gap.map_or(0.0, |(a, b)| secs(b - a)),
        ending.keys.len()
    );
    out
}

fn list(out: &mut String, violations: &[Violation]) {
    let mut by: BTreeMap<&str, Vec<&Violation>> = BTreeMap::new();
    for v in violations {
        by.entry(v.property).or_default().push(v);
    }
    for (property, vs) in by {
        let _ = writeln!(out, "  {property}: {}", vs.len());
        for v in vs.iter().take(LISTED) {
            let _ = writeln!(out, "    - {}", v.text);
        }
        if vs.len() > LISTED {
            let _ = writeln!(
                out,
                "    ... and {} more (history.jsonl has every event)",
                vs.len() - LISTED
            );
        }
    }
}

//! The tables: per call (script time and server CPU) and the ceiling, in Markdown so they go
//! into a note as printed.

use crate::ceiling::{Ceiling, CeilingRun, Load};
use crate::phases::Costs;
use crate::stats::Reading;

/// The median over rounds of `f` of each round's figures.
fn med(rounds: &[Costs], f: impl Fn(&Costs) -> f64) -> f64 {
    let mut v: Vec<f64> = rounds.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// µs per operation of a reading's script time.
fn usec(r: &Reading, ops: u64) -> f64 {
    r.usec as f64 / ops as f64
}

fn cpu_user(r: &Reading, ops: u64) -> f64 {
    r.cpu_user_us / ops as f64
}

fn cpu_all(r: &Reading, ops: u64) -> f64 {
    (r.cpu_user_us + r.cpu_sys_us) / ops as f64
}

/// `7.06 us`, with the calls per operation where they are not `per_op` (a multi-lock's two,
/// a retry).
fn cell(rounds: &[Costs], per_op: u64, pick: impl Fn(&Costs) -> Option<&Reading>) -> String {
    if pick(&rounds[0]).is_none() {
        return "n/a".to_owned();
    }
    let us = med(rounds, |c| pick(c).map_or(0.0, |r| usec(r, c.ops)));
    let calls = med(rounds, |c| {
        pick(c).map_or(0.0, |r| r.calls as f64 / c.ops as f64)
    });
    if (calls - per_op as f64).abs() < 0.005 {
        format!("{us:.2} us")
    } else {
        format!("{us:.2} us ({calls:.2} calls)")
    }
}

pub fn per_call(rows: &[(String, Vec<Costs>)]) {
    let n = rows.first().map_or(0, |(_, r)| r.len());
    println!(
        "\n### Redis time per call (INFO commandstats `usec` of the commands the client sends, \
         a script's own calls included, / operations; median of {n} round(s))\n"
    );
    println!(
        "| per call | acquire (free key) | release (frees) | cycle | re-entry acquire | \
         re-entry release | cycles/s one core could run (scripts alone) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (label, c) in rows {
        println!(
            "| {label} | {} | {} | {} | {} | {} | {:.0}k |",
            cell(c, 1, |c| Some(&c.acquire)),
            cell(c, 1, |c| Some(&c.release)),
            cell(c, 2, |c| Some(&c.cycle)),
            cell(c, 1, |c| c.reentry.as_ref().map(|r| &r.0)),
            cell(c, 1, |c| c.reentry.as_ref().map(|r| &r.1)),
            1e3 / med(c, |c| usec(&c.cycle, c.ops)),
        );
    }
    println!(
        "\n### Server CPU per operation (main thread, `used_cpu_user` and user + sys deltas: \
         the scripts plus reading requests and writing replies; median of {n} round(s))\n"
    );
    println!(
        "| per operation | acquire user | release user | cycle user | cycle user + sys | \
         cycles/s one core could serve |"
    );
    println!("|---|---|---|---|---|---|");
    for (label, c) in rows {
        let all = med(c, |c| cpu_all(&c.cycle, c.ops));
        println!(
            "| {label} | {:.2} us | {:.2} us | {:.2} us | {all:.2} us | {:.0}k |",
            med(c, |c| cpu_user(&c.acquire, c.ops)),
            med(c, |c| cpu_user(&c.release, c.ops)),
            med(c, |c| cpu_user(&c.cycle, c.ops)),
            1e3 / all,
        );
    }
}

/// The median of `values` (the upper one of an even count), None when there are none.
pub fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

pub fn ceilings(runs: &[CeilingRun]) {
    let rounds = runs.iter().map(|r| r.round + 1).max().unwrap_or(1);
    println!(
        "\n### Throughput ceiling (cycles on distinct keys until the time is up; median of \
         {rounds} round(s))\n"
    );
    println!(
        "| load | nodes loaded | cycles/s | server CPU (main threads, % of one core, summed) | \
         server CPU per cycle | cycles per server-CPU second |"
    );
    println!("|---|---|---|---|---|---|");
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for run in runs {
        let row = (run.label.as_str(), run.ceiling.nodes);
        if seen.contains(&row) {
            continue;
        }
        seen.push(row);
        let of = |f: fn(&Ceiling) -> f64| {
            median(
                runs.iter()
                    .filter(|r| (r.label.as_str(), r.ceiling.nodes) == row)
                    .map(|r| f(&r.ceiling)),
            )
            .unwrap_or(f64::NAN)
        };
        println!(
            "| {} | {} | {:.0} | {:.0} % | {:.2} us | {:.0} |",
            run.label,
            run.ceiling.nodes,
            of(Ceiling::per_sec),
            of(Ceiling::cpu_percent),
            of(Ceiling::cpu_us_per_cycle),
            of(Ceiling::per_core_sec),
        );
    }
    // Each dlock load against its peer, round by round: both ran minutes apart at most, so a
    // drifting machine moves both.
    for load in Load::ALL {
        let Some((peer, target)) = load.peer() else {
            continue;
        };
        let one = |l: Load, round: usize| {
            runs.iter()
                .find(|r| r.load == Some(l) && r.round == round && r.ceiling.nodes == 1)
                .map(|r| r.ceiling.cpu_us_per_cycle())
        };
        let ratios: Vec<f64> = (0..rounds)
            .filter_map(|round| Some(one(load, round)? / one(peer, round)?))
            .collect();
        if ratios.is_empty() {
            continue;
        }
        let list: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        println!(
            "\n{} / {}: server CPU per cycle {}x by round, median {:.2}x (target {target:.2}x)",
            load.label(),
            peer.label(),
            list.join(", "),
            median(ratios.iter().copied()).unwrap_or(f64::NAN),
        );
    }
}

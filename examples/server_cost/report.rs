//! The tables: per call (script time and server CPU) and the ceiling, in Markdown so they go
//! into a note as printed.

use crate::ceiling::Ceiling;
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

pub fn ceilings(rows: &[(String, Ceiling)]) {
    println!("\n### Throughput ceiling (cycles on distinct keys until the time is up)\n");
    println!(
        "| load | nodes loaded | cycles/s | server CPU (main threads, % of one core, summed) | \
         cycles per server-CPU second |"
    );
    println!("|---|---|---|---|---|");
    for (label, c) in rows {
        println!(
            "| {label} | {} | {:.0} | {:.0} % | {:.0} |",
            c.nodes,
            c.per_sec(),
            c.cpu_percent(),
            c.per_core_sec()
        );
    }
}

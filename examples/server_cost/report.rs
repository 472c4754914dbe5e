//! The tables: per call (script time and server CPU) and the ceiling, in Markdown so they go
//! into a note as printed.

use crate::ceiling::Ceiling;
use crate::phases::Costs;
use crate::stats::Reading;

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

/// Calls per operation, shown where it is not one (a multi-lock, a retry).
fn calls_note(r: &Reading, ops: u64, per_op: u64) -> String {
    let calls = r.calls as f64 / ops as f64;
    if (calls - per_op as f64).abs() < 0.005 {
        String::new()
    } else {
        format!(" ({calls:.2} calls)")
    }
}

fn cell(r: &Reading, ops: u64, per_op: u64) -> String {
    format!("{:.2} us{}", usec(r, ops), calls_note(r, ops, per_op))
}

pub fn per_call(rows: &[(String, Costs)]) {
    println!(
        "\n### Redis time per call (INFO commandstats `usec` of the commands the client sends, \
         a script's own calls included, / operations)\n"
    );
    println!(
        "| per call | acquire (free key) | release (frees) | cycle | re-entry acquire | \
         re-entry release | cycles/s one core could run (scripts alone) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (label, c) in rows {
        let (re_a, re_r) = match &c.reentry {
            Some((a, r)) => (cell(a, c.ops, 1), cell(r, c.ops, 1)),
            None => ("n/a".to_owned(), "n/a".to_owned()),
        };
        let cycle_us = usec(&c.cycle, c.ops);
        println!(
            "| {label} | {} | {} | {} | {re_a} | {re_r} | {:.0}k |",
            cell(&c.acquire, c.ops, 1),
            cell(&c.release, c.ops, 1),
            cell(&c.cycle, c.ops, 2),
            1e3 / cycle_us,
        );
    }
    println!(
        "\n### Server CPU per operation (main thread, `used_cpu_user` and user + sys deltas: \
         the scripts plus reading requests and writing replies)\n"
    );
    println!(
        "| per operation | acquire user | release user | cycle user | cycle user + sys | \
         cycles/s one core could serve |"
    );
    println!("|---|---|---|---|---|---|");
    for (label, c) in rows {
        println!(
            "| {label} | {:.2} us | {:.2} us | {:.2} us | {:.2} us | {:.0}k |",
            cpu_user(&c.acquire, c.ops),
            cpu_user(&c.release, c.ops),
            cpu_user(&c.cycle, c.ops),
            cpu_all(&c.cycle, c.ops),
            1e3 / cpu_all(&c.cycle, c.ops),
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

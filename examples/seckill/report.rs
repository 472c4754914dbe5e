//! The table a newcomer reads first.

use std::time::Duration;

use super::run::Stats;

/// One strategy's line.
pub struct Row {
    pub label: &'static str,
    /// Whether the strategy claims to be correct (everything but the naive one).
    pub locked: bool,
    pub stats: Stats,
    /// Units left in the store afterwards.
    pub remaining: i64,
    /// The stock's own books add up (sold + remaining == units; the audit for SegmentedStock).
    pub books_balance: bool,
    /// Commands each master served while the buyers ran, by master (empty on one server).
    pub served: Vec<u64>,
}

impl Row {
    pub fn oversold(&self, units: u64) -> u64 {
        self.stats.sold.saturating_sub(units)
    }

    /// Units still in stock although some buyer was sent away.
    pub fn stranded(&self) -> u64 {
        if self.stats.refused > 0 {
            self.remaining.max(0) as u64
        } else {
            0
        }
    }

    /// What is wrong with a strategy that claims to be correct; empty when nothing is.
    pub fn problems(&self, units: u64) -> Vec<&'static str> {
        let mut p = Vec::new();
        if self.oversold(units) > 0 {
            p.push("OVERSOLD");
        }
        if self.stranded() > 0 {
            p.push("STRANDED STOCK");
        }
        if !self.books_balance {
            p.push("BOOKS DO NOT BALANCE");
        }
        if self.stats.errors > 0 {
            p.push("ERRORS");
        }
        p
    }

    fn verdict(&self, units: u64) -> String {
        if !self.locked {
            return if self.oversold(units) > 0 {
                "oversells: nothing stops two buyers reading the same level".into()
            } else {
                "no oversell this time (luck, not design)".into()
            };
        }
        let p = self.problems(units);
        if p.is_empty() {
            "ok".into()
        } else {
            p.join(", ")
        }
    }
}

/// `round_trip` names what `rtt` timed: `PING` on Redis, `SELECT 1` on PostgreSQL.
pub fn print(rows: &[Row], units: u64, rtt: Duration, round_trip: &str) {
    println!(
        "{:<36} {:>9} {:>9} {:>9} {:>11} {:>7} {:>8} {:>8}  verdict",
        "strategy", "orders/s", "p50", "p99", "sold out in", "sold", "oversold", "stranded"
    );
    println!("{}", "-".repeat(36 + 10 + 10 + 10 + 12 + 8 + 9 + 9 + 9));
    for r in rows {
        let s = &r.stats;
        println!(
            "{:<36} {:>9} {:>9} {:>9} {:>11} {:>7} {:>8} {:>8}  {}",
            r.label,
            thousands(s.orders_per_sec().round() as u64),
            latency(s.percentile(0.5)),
            latency(s.percentile(0.99)),
            s.sold_out_after.map_or_else(|| "never".into(), latency),
            thousands(s.sold),
            thousands(r.oversold(units)),
            thousands(r.stranded()),
            r.verdict(units),
        );
    }
    println!();
    println!(
        "orders/s: buy attempts answered per second, sold or refused. p50/p99: one attempt, \
         lock wait included; {round_trip} round trip in this run: {}.",
        latency(rtt)
    );
    println!(
        "sold out in: time to the last unit. oversold: sales beyond the {} units. stranded: \
         units left unsold while buyers were refused.",
        thousands(units)
    );
    print_ratios(
        rows,
        "(b)",
        &["(c)", "(d)", "(e)", "(f)"],
        "one lock per item",
    );
    // On one server the script on one key is the honest baseline for SegmentedStock: both are
    // one atomic script per buyer, without a lock; only spreading over nodes can beat it.
    print_ratios(rows, "(e)", &["(d)"], "the one-key Lua decrement");
    // On PostgreSQL the one statement is the baseline a lock kept in the same server competes
    // with: the database's own row lock, one round trip per buyer.
    print_ratios(rows, "(f)", &["(b)", "(c)"], "the one-statement UPDATE");
    for r in rows {
        if let Some(e) = &r.stats.first_error {
            println!(
                "{}: {} buyers failed; first error: {e}",
                r.label, r.stats.errors
            );
        }
    }
}

/// `orders/s against <what> (b): (c) 1.2x, (d) 3.4x.`, for the rows present.
fn print_ratios(rows: &[Row], base: &str, others: &[&str], what: &str) {
    let Some(base) = rows.iter().find(|r| r.label.starts_with(base)) else {
        return;
    };
    let ratios: Vec<String> = rows
        .iter()
        .filter(|r| others.iter().any(|o| r.label.starts_with(o)))
        .map(|r| {
            let ratio = r.stats.orders_per_sec() / base.stats.orders_per_sec();
            // Two decimals below 1, so a strategy many times slower does not read `0.0x`.
            let decimals = if ratio < 1.0 { 2 } else { 1 };
            format!("{} {ratio:.decimals$}x", &r.label[..3])
        })
        .collect();
    if !ratios.is_empty() {
        println!(
            "orders/s against {what} {}: {}.",
            &base.label[..3],
            ratios.join(", ")
        );
    }
}

/// The second table on a cluster: what each master served during each strategy, and the
/// busiest master's share, which shows whether a strategy spreads or funnels into one node.
pub fn print_per_master(rows: &[Row], masters: &[String]) {
    let width = masters.iter().map(String::len).max().unwrap_or(0).max(9);
    let mut head = format!("{:<36}", "commands served per master");
    for m in masters {
        head.push_str(&format!(" {m:>width$}"));
    }
    println!("{head} {:>8}", "busiest");
    println!("{}", "-".repeat(36 + masters.len() * (width + 1) + 9));
    for r in rows {
        let mut line = format!("{:<36}", r.label);
        for n in &r.served {
            line.push_str(&format!(" {:>width$}", thousands(*n)));
        }
        println!("{line} {:>8}", busiest_share(&r.served));
    }
    println!();
    println!(
        "Counted on each master (INFO stats total_commands_processed) from just before the \
         first buyer to just after the last; a script call counts 1 plus the commands it \
         runs. busiest: the busiest master's share of the \
         strategy's commands (spread evenly over {} masters: {:.0}%).",
        masters.len(),
        100.0 / masters.len().max(1) as f64
    );
}

/// `100%`: the largest count's share of the total.
fn busiest_share(served: &[u64]) -> String {
    let total: u64 = served.iter().sum();
    let max = served.iter().copied().max().unwrap_or(0);
    if total == 0 {
        return "-".into();
    }
    format!("{:.0}%", 100.0 * max as f64 / total as f64)
}

/// `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `870 µs`, `4.1 ms`, `1.23 s`.
pub fn latency(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1_000.0 {
        format!("{us:.0} µs")
    } else if us < 1_000_000.0 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

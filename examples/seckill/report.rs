//! The table a newcomer reads first.

use std::time::Duration;

use super::run::Stats;

/// One strategy's line.
pub struct Row {
    pub label: &'static str,
    /// Whether the strategy claims to be correct (everything but the naive one).
    pub locked: bool,
    pub stats: Stats,
    /// Units left in Redis afterwards.
    pub remaining: i64,
    /// The stock's own books add up (sold + remaining == units; the audit for SegmentedStock).
    pub books_balance: bool,
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

pub fn print(rows: &[Row], units: u64, rtt: Duration) {
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
         lock wait included; PING round trip in this run: {}.",
        latency(rtt)
    );
    println!(
        "sold out in: time to the last unit. oversold: sales beyond the {} units. stranded: \
         units left unsold while buyers were refused.",
        thousands(units)
    );
    let base = rows.iter().find(|r| r.label.starts_with("(b)"));
    if let Some(base) = base {
        let ratios: Vec<String> = rows
            .iter()
            .filter(|r| r.label.starts_with("(c)") || r.label.starts_with("(d)"))
            .map(|r| {
                format!(
                    "{} {:.1}x",
                    &r.label[..3],
                    r.stats.orders_per_sec() / base.stats.orders_per_sec()
                )
            })
            .collect();
        if !ratios.is_empty() {
            println!(
                "orders/s against one lock per item (b): {}.",
                ratios.join(", ")
            );
        }
    }
    for r in rows {
        if let Some(e) = &r.stats.first_error {
            println!(
                "{}: {} buyers failed; first error: {e}",
                r.label, r.stats.errors
            );
        }
    }
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

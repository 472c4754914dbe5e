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
}

/// One strategy's rounds, in the order they ran (round 1 first).
pub struct Runs {
    pub label: &'static str,
    pub locked: bool,
    pub rounds: Vec<Row>,
}

impl Runs {
    /// `(a)`: the strategy's letter, as the table and the ratios name it.
    pub fn tag(&self) -> &'static str {
        &self.label[..3]
    }

    /// Each round's problems, for a strategy that claims to be correct: `(round, problems)`.
    pub fn failed_rounds(&self) -> Vec<(usize, Vec<&'static str>)> {
        if !self.locked {
            return Vec::new();
        }
        self.rounds
            .iter()
            .enumerate()
            .map(|(i, r)| (i + 1, r.problems(r.stats.units)))
            .filter(|(_, p)| !p.is_empty())
            .collect()
    }

    fn verdict(&self) -> String {
        let n = self.rounds.len();
        if !self.locked {
            let oversold = self
                .rounds
                .iter()
                .filter(|r| r.oversold(r.stats.units) > 0)
                .count();
            return if oversold > 0 {
                format!(
                    "oversold in {oversold} of {n} rounds: nothing stops two buyers reading \
                     the same level"
                )
            } else {
                format!("no oversell in {n} rounds (luck, not design)")
            };
        }
        let failed = self.failed_rounds();
        if failed.is_empty() {
            return format!("ok in {n} of {n} rounds");
        }
        failed
            .iter()
            .map(|(round, p)| format!("round {round}: {}", p.join(", ")))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Median, lowest and highest of `values` (not empty).
pub fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[0], v[n - 1])
}

/// `8,251` and `6,454-29,392`: a rate's median and its lowest-highest range.
fn rate_spread(values: &[f64]) -> (String, String) {
    let (median, low, high) = spread(values);
    let n = |x: f64| thousands(x.round() as u64);
    (n(median), format!("{}-{}", n(low), n(high)))
}

/// `0` or `3-41`: a count's range over the rounds.
fn count_range(values: impl Iterator<Item = u64>) -> String {
    let v: Vec<u64> = values.collect();
    let (low, high) = (
        v.iter().copied().min().unwrap_or(0),
        v.iter().copied().max().unwrap_or(0),
    );
    if low == high {
        thousands(low)
    } else {
        format!("{}-{}", thousands(low), thousands(high))
    }
}

/// The table, every figure over the rounds. `round_trip` names what `rtt` timed: `PING` on
/// Redis, `SELECT 1` on PostgreSQL.
pub fn print(runs: &[Runs], units: u64, rtt: Duration, round_trip: &str) {
    let rounds = runs.first().map_or(0, |r| r.rounds.len());
    println!(
        "sold/s: units sold per second, from the first buyer to the last unit sold (refusals \
         left out).\nanswers/s: buyers answered per second, sold or refused (\"sold out\" \
         answers count), from the first buyer to the last answer.\nEach: the median of {rounds} \
         rounds, then the lowest-highest round. p50/p99: one attempt, lock wait included \
         (median of the rounds); {round_trip} round trip in this run: {}.",
        latency(rtt)
    );
    println!();
    println!(
        "{:<36} {:>8} {:>15} {:>9} {:>15} {:>8} {:>8} {:>8} {:>8}  verdict",
        "strategy",
        "sold/s",
        "(range)",
        "answers/s",
        "(range)",
        "p50",
        "p99",
        "oversold",
        "stranded"
    );
    println!("{}", "-".repeat(36 + 9 + 16 + 10 + 16 + 9 + 9 + 9 + 9 + 9));
    for r in runs {
        let sold = rate_spread(&collect(r, |s| s.sold_per_sec()));
        let answers = rate_spread(&collect(r, |s| s.answers_per_sec()));
        let p50 = spread(&collect(r, |s| s.percentile(0.5).as_secs_f64())).0;
        let p99 = spread(&collect(r, |s| s.percentile(0.99).as_secs_f64())).0;
        println!(
            "{:<36} {:>8} {:>15} {:>9} {:>15} {:>8} {:>8} {:>8} {:>8}  {}",
            r.label,
            sold.0,
            sold.1,
            answers.0,
            answers.1,
            latency(Duration::from_secs_f64(p50)),
            latency(Duration::from_secs_f64(p99)),
            count_range(r.rounds.iter().map(|x| x.oversold(units))),
            count_range(r.rounds.iter().map(Row::stranded)),
            r.verdict(),
        );
    }
    println!();
    println!(
        "oversold: sales beyond the {} units (lowest-highest round). stranded: units left \
         unsold while buyers were refused.",
        thousands(units)
    );
    print_ratios(
        runs,
        "(b)",
        &["(c)", "(d)", "(e)", "(f)"],
        "one lock per item",
    );
    // On one server the script on one key is the honest baseline for SegmentedStock: both are
    // one atomic script per buyer, without a lock; only spreading over nodes can beat it.
    print_ratios(runs, "(e)", &["(d)"], "the one-key Lua decrement");
    // On PostgreSQL the one statement is the baseline a lock kept in the same server competes
    // with: the database's own row lock, one round trip per buyer.
    print_ratios(runs, "(f)", &["(b)", "(c)"], "the one-statement UPDATE");
    for r in runs {
        for (i, row) in r.rounds.iter().enumerate() {
            if let Some(e) = &row.stats.first_error {
                println!(
                    "{} round {}: {} buyers failed; first error: {e}",
                    r.tag(),
                    i + 1,
                    row.stats.errors
                );
            }
        }
    }
}

/// One figure of every round of `runs`.
fn collect(runs: &Runs, figure: impl Fn(&Stats) -> f64) -> Vec<f64> {
    runs.rounds.iter().map(|r| figure(&r.stats)).collect()
}

/// `sold/s against <what> (b), ...: (c) 2.1x (1.8-2.4)`, for the rows present. The ratio is
/// taken within each round (the strategies of one round ran seconds apart, under the same load
/// of the machine) and summarised over the rounds like the rates.
fn print_ratios(runs: &[Runs], base: &str, others: &[&str], what: &str) {
    let Some(base) = runs.iter().find(|r| r.label.starts_with(base)) else {
        return;
    };
    for (name, figure) in [
        ("sold/s", Stats::sold_per_sec as fn(&Stats) -> f64),
        ("answers/s", Stats::answers_per_sec),
    ] {
        let ratios: Vec<String> = runs
            .iter()
            .filter(|r| others.iter().any(|o| r.label.starts_with(o)))
            .map(|r| {
                let per_round: Vec<f64> = r
                    .rounds
                    .iter()
                    .zip(&base.rounds)
                    .map(|(x, b)| figure(&x.stats) / figure(&b.stats))
                    .collect();
                let (median, low, high) = spread(&per_round);
                format!(
                    "{} {} ({}-{})",
                    r.tag(),
                    times(median),
                    times(low),
                    times(high)
                )
            })
            .collect();
        if !ratios.is_empty() {
            println!(
                "{name} against {what} {}, median of the rounds' ratios (lowest-highest): {}.",
                base.tag(),
                ratios.join(", ")
            );
        }
    }
}

/// `3.4x`; two decimals below 1, so a strategy many times slower does not read `0.0x`.
fn times(ratio: f64) -> String {
    let decimals = if ratio < 1.0 { 2 } else { 1 };
    format!("{ratio:.decimals$}x")
}

/// The second table on a cluster: what each master served during each strategy, summed over
/// the rounds (the keys, and so their masters, are the same every round), and the busiest
/// master's share, which shows whether a strategy spreads or funnels into one node.
pub fn print_per_master(runs: &[Runs], masters: &[String]) {
    let width = masters.iter().map(String::len).max().unwrap_or(0).max(9);
    let mut head = format!("{:<36}", "commands served per master");
    for m in masters {
        head.push_str(&format!(" {m:>width$}"));
    }
    println!("{head} {:>8}", "busiest");
    println!("{}", "-".repeat(36 + masters.len() * (width + 1) + 9));
    for r in runs {
        let mut served = vec![0u64; masters.len()];
        for row in &r.rounds {
            for (total, n) in served.iter_mut().zip(&row.served) {
                *total += n;
            }
        }
        let mut line = format!("{:<36}", r.label);
        for n in &served {
            line.push_str(&format!(" {:>width$}", thousands(*n)));
        }
        println!("{line} {:>8}", busiest_share(&served));
    }
    println!();
    println!(
        "Counted on each master (INFO stats total_commands_processed) from just before the \
         first buyer to just after the last, summed over the rounds; a script call counts 1 \
         plus the commands it runs. busiest: the busiest master's share of the strategy's \
         commands (spread evenly over {} masters: {:.0}%).",
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

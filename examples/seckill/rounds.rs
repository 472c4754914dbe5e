//! Every strategy, round after round, the order rotating: one run of each is a single sample
//! of a shared machine whose load drifts within seconds (three back-to-back one-run demos gave
//! one strategy 6,454, 17,518 and 29,392 orders/s), so the table reports the rounds' median
//! and range instead.

use std::future::Future;

use super::report::{thousands, Row, Runs};
use super::Strategy;

/// Runs `strategies` `rounds` times through `run_one`, each round in another order (round r
/// starts with the r-th strategy), so that no strategy always runs first on a server that
/// has just started, or always right after the same neighbour. Prints one line per round (its
/// order, each strategy's sold/s, and what its checks found) as it ends.
pub async fn run<F, Fut>(strategies: &[Strategy], rounds: usize, mut run_one: F) -> Vec<Runs>
where
    F: FnMut(Strategy) -> Fut,
    Fut: Future<Output = Row>,
{
    let n = strategies.len();
    let mut rows: Vec<Vec<Row>> = strategies.iter().map(|_| Vec::new()).collect();
    let mut head = format!("{:<7} {:<n$}", "round", "order");
    for s in strategies {
        head.push_str(&format!(" {:>9}", format!("({})", letter(*s))));
    }
    println!("{head}  sold/s per strategy; checks");
    for round in 0..rounds {
        let order: Vec<usize> = (0..n).map(|k| (k + round) % n).collect();
        for &i in &order {
            rows[i].push(run_one(strategies[i]).await);
        }
        let order: String = order.iter().map(|&i| letter(strategies[i])).collect();
        let mut line = format!("{:<7} {order}", format!("{}/{rounds}", round + 1));
        let mut problems = Vec::new();
        for strategy_rows in &rows {
            let row = strategy_rows.last().expect("ran this round");
            line.push_str(&format!(
                " {:>9}",
                thousands(row.stats.sold_per_sec().round() as u64)
            ));
            let p = row.problems(row.stats.units);
            if row.locked && !p.is_empty() {
                problems.push(format!("{} {}", &row.label[..3], p.join(", ")));
            }
        }
        let checks = if problems.is_empty() {
            "ok".to_owned()
        } else {
            problems.join("; ")
        };
        println!("{line}  {checks}");
    }
    rows.into_iter()
        .map(|rounds| Runs {
            label: rounds[0].label,
            locked: rounds[0].locked,
            rounds,
        })
        .collect()
}

/// `b`: the strategy's letter.
fn letter(strategy: Strategy) -> char {
    match strategy {
        Strategy::A => 'a',
        Strategy::B => 'b',
        Strategy::C => 'c',
        Strategy::D => 'd',
        Strategy::E => 'e',
        Strategy::F => 'f',
        Strategy::G => 'g',
    }
}

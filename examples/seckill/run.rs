//! Runs N buyers through one strategy with a bounded number in flight, and measures them.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::strategies::{BuyError, Outcome};

/// What one strategy's run measured.
pub struct Stats {
    /// From the first buyer started to the last one answered.
    pub elapsed: Duration,
    /// Units on sale.
    pub units: u64,
    /// One per buyer, sorted.
    pub latencies: Vec<Duration>,
    pub sold: u64,
    pub refused: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// When the stock ran out (the `units`-th sale), if it did.
    pub sold_out_after: Option<Duration>,
}

impl Stats {
    /// Buyers answered per second, sold or refused: how fast the strategy says yes *or* no, so
    /// a strategy that refuses quickly once the stock is gone scores high here.
    pub fn answers_per_sec(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    /// Units sold per second until the stock ran out (the last unit's sale): how fast the
    /// strategy sells, refusals left out. A run whose stock never ran out (fewer buyers than
    /// units, or failed buyers) counts its sales over the whole run.
    pub fn sold_per_sec(&self) -> f64 {
        match self.sold_out_after {
            Some(t) => self.sold.min(self.units) as f64 / t.as_secs_f64(),
            None => self.sold as f64 / self.elapsed.as_secs_f64(),
        }
    }

    pub fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        self.latencies[((self.latencies.len() - 1) as f64 * p).round() as usize]
    }
}

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    sold: u64,
    refused: u64,
    errors: u64,
    first_error: Option<String>,
    sold_out_after: Option<Duration>,
}

/// Buyers `0..buyers` call `buy(i)`, at most `in_flight` at once, on `in_flight` tasks.
pub async fn run<F, Fut>(label: &str, buyers: usize, in_flight: usize, units: u64, buy: F) -> Stats
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Outcome, BuyError>> + Send,
{
    let bar = ProgressBar::new(buyers as u64).with_prefix(label.to_owned());
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:<36} {bar:30.cyan/blue} {pos:>6}/{len} buyers  {elapsed_precise}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let buy = Arc::new(buy);
    let start = Instant::now();
    let workers: Vec<_> = (0..in_flight.min(buyers))
        .map(|_| {
            let (next, tally, buy, bar) = (next.clone(), tally.clone(), buy.clone(), bar.clone());
            tokio::spawn(async move {
                let mut mine = Tally::default();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= buyers {
                        break;
                    }
                    let t = Instant::now();
                    let result = buy(i).await;
                    mine.latencies.push(t.elapsed());
                    match result {
                        Ok(Outcome::Sold) => {
                            // The shared count decides when the stock ran out.
                            let mut all = tally.lock().unwrap();
                            all.sold += 1;
                            if all.sold == units {
                                all.sold_out_after = Some(start.elapsed());
                            }
                        }
                        Ok(Outcome::Refused) => mine.refused += 1,
                        Err(e) => {
                            mine.errors += 1;
                            mine.first_error.get_or_insert_with(|| e.to_string());
                        }
                    }
                    bar.inc(1);
                }
                let mut all = tally.lock().unwrap();
                all.latencies.append(&mut mine.latencies);
                all.refused += mine.refused;
                all.errors += mine.errors;
                if all.first_error.is_none() {
                    all.first_error = mine.first_error;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("a buyer task panicked");
    }
    let elapsed = start.elapsed();
    // The round's line (see rounds.rs) is what stays on screen: one bar per run would scroll
    // every earlier round away.
    bar.finish_and_clear();
    let mut t = std::mem::take(&mut *tally.lock().unwrap());
    t.latencies.sort_unstable();
    Stats {
        elapsed,
        units,
        latencies: t.latencies,
        sold: t.sold,
        refused: t.refused,
        errors: t.errors,
        first_error: t.first_error,
        sold_out_after: t.sold_out_after,
    }
}

//! Percentiles, and the watchdog's tick durations read back from an in-process recorder.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// The value at quantile `q` (0..=1) of `v` (sorted here), zero when empty.
pub fn quantile(v: &mut [Duration], q: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort_unstable();
    let at = ((v.len() - 1) as f64 * q).round() as usize;
    v[at]
}

/// Installs the recorder the library's metrics go to; every snapshot drains what it read.
pub fn install_recorder() -> Snapshotter {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("no other metrics recorder in this process");
    snapshotter
}

/// The watchdog ticks recorded since the last snapshot (and drains every other metric, whose
/// values would otherwise grow the heap this example measures).
pub fn renew_ticks(snapshots: &Snapshotter) -> Vec<Duration> {
    let mut ticks = Vec::new();
    for (key, _, _, value) in snapshots.snapshot().into_vec() {
        if let (DebugValue::Histogram(values), "dlock_renew_tick_seconds") =
            (value, key.key().name())
        {
            ticks.extend(
                values
                    .iter()
                    .map(|v| Duration::from_secs_f64(v.into_inner())),
            );
        }
    }
    ticks
}

/// `1.2 ms`, `340 µs`: three significant figures for tables.
pub fn show(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

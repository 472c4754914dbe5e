//! The short-lived local view of which segments are drained.
//!
//! Every script reply carries the segment's level, so the view is fed for free. Once every
//! segment is known drained, a sold-out item answers with one round trip (the order's home
//! segment) instead of one per segment: during a flash sale most buyers arrive after the stock
//! is gone. Entries expire after `ttl`, because another process may give stock back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

pub(crate) struct DrainedView {
    base: Instant,
    ttl: Duration,
    /// Per segment: micros since `base` + 1 at which it was seen empty; 0 = not known empty.
    seen_empty: Vec<AtomicU64>,
    /// One refresh at a time; the others wait for its result instead of sending their own.
    pub(crate) refresh: tokio::sync::Mutex<()>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Some segment had stock when last seen (or was never seen).
    No,
    /// Every segment was seen empty within the last `ttl`.
    All,
    /// Every segment was seen empty, some longer ago than `ttl`: worth one refresh.
    AllButStale,
}

impl DrainedView {
    pub(crate) fn new(segments: u32, ttl: Duration) -> Self {
        DrainedView {
            base: Instant::now(),
            ttl,
            seen_empty: (0..segments).map(|_| AtomicU64::new(0)).collect(),
            refresh: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn with_ttl(&self, ttl: Duration) -> Self {
        DrainedView::new(self.seen_empty.len() as u32, ttl)
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Records a level read from Redis.
    pub(crate) fn note(&self, segment: u32, left: u64) {
        let v = if left == 0 { self.now_micros() + 1 } else { 0 };
        self.seen_empty[segment as usize].store(v, Ordering::Relaxed);
    }

    pub(crate) fn is_drained(&self, segment: u32) -> bool {
        let seen = self.seen_empty[segment as usize].load(Ordering::Relaxed);
        seen != 0 && (self.now_micros() + 1).saturating_sub(seen) < self.ttl.as_micros() as u64
    }

    pub(crate) fn state(&self) -> Drained {
        let now = self.now_micros() + 1;
        let ttl = self.ttl.as_micros() as u64;
        let mut stale = false;
        for seen in &self.seen_empty {
            match seen.load(Ordering::Relaxed) {
                0 => return Drained::No,
                t if now.saturating_sub(t) >= ttl => stale = true,
                _ => {}
            }
        }
        if stale {
            Drained::AllButStale
        } else {
            Drained::All
        }
    }

    pub(crate) fn clear(&self) {
        for seen in &self.seen_empty {
            seen.store(0, Ordering::Relaxed);
        }
    }

    fn now_micros(&self) -> u64 {
        self.base.elapsed().as_micros() as u64
    }
}

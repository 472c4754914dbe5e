//! Which Redis failures are worth trying again, and the pause between tries.
//!
//! Two kinds of failure pass: a broken link (refused, dropped, timed out), after which the
//! request may or may not have run, and a server's "not now" (a restart still loading its
//! dataset, a cluster slot being migrated or a cluster without quorum, a replica cut off from
//! its primary), after which it surely did not. Every request that may be repeated (an acquire
//! within its wait, a release, a renewal, the undo of an orphaned grant) treats both as
//! transient; what each may repeat safely is its own business (a release has its latch, an
//! acquire re-sent under the same owner is answered as the first run was).

use std::time::Duration;

use redis::RedisError;

pub(crate) use crate::error::{
    redis_is_link_error as is_link_error, redis_is_not_now as is_not_now,
};

/// [`is_link_error`] or [`is_not_now`]: a failure that passes.
pub(crate) fn is_transient(e: &RedisError) -> bool {
    is_link_error(e) || is_not_now(e)
}

/// Pauses between tries: 50 ms, doubled after each failure up to a second, so a Redis that
/// stays down (or loads for a long time) is asked about once a second.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff { next: FIRST_PAUSE }
    }

    /// The pause before the next try (without taking it).
    pub(crate) fn peek(&self) -> Duration {
        self.next
    }

    /// The pause before the next try; the one after it is twice as long.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(MAX_PAUSE);
        pause
    }

    /// Back to the first pause: Redis answered.
    pub(crate) fn reset(&mut self) {
        self.next = FIRST_PAUSE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{ErrorKind, ServerErrorKind};

    #[test]
    fn pauses_double_up_to_a_second() {
        let mut b = Backoff::new();
        let pauses: Vec<u64> = (0..7).map(|_| b.next_pause().as_millis() as u64).collect();
        assert_eq!(pauses, [50, 100, 200, 400, 800, 1000, 1000]);
        b.reset();
        assert_eq!(b.peek(), FIRST_PAUSE);
    }

    #[test]
    fn a_server_still_loading_is_not_now_and_a_wrong_type_is_not() {
        let loading = RedisError::from((
            ErrorKind::Server(ServerErrorKind::BusyLoading),
            "Redis is loading the dataset in memory",
        ));
        assert!(is_not_now(&loading) && is_transient(&loading) && !is_link_error(&loading));
        let wrong = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "WRONGTYPE",
        ));
        assert!(!is_transient(&wrong));
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(is_link_error(&reset) && is_transient(&reset));
    }
}

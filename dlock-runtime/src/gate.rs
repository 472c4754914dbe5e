//! The local gate: one FIFO queue per lock key inside a client.
//!
//! Tasks of one process that want the same key queue here first, so only the head of the queue
//! talks to Redis. This is what makes "one release wakes one local waiter" hold (the others are
//! not waiting on Redis at all), keeps Redis load and subscriptions proportional to keys rather
//! than tasks, and stops a releasing task from barging ahead of local tasks that waited longer
//! (tokio's mutex is FIFO). Other processes still compete through Redis and pub/sub.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

#[derive(Default)]
pub(crate) struct Gates {
    map: Arc<Mutex<HashMap<String, Arc<AsyncMutex<()>>>>>,
}

/// Holding this means: this caller is the one contender of this client for the key.
pub(crate) struct GatePass {
    map: Arc<Mutex<HashMap<String, Arc<AsyncMutex<()>>>>>,
    key: String,
    gate: Arc<AsyncMutex<()>>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Gates {
    /// Waits for this caller's turn at `key`. Cancel-safe: dropping the future leaves the queue.
    pub(crate) async fn enter(&self, key: &str) -> GatePass {
        let gate = {
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(key.to_owned()).or_default().clone()
        };
        // Built before awaiting so a cancelled wait still runs the clean-up in Drop.
        let mut pass = GatePass {
            map: self.map.clone(),
            key: key.to_owned(),
            gate,
            guard: None,
        };
        pass.guard = Some(pass.gate.clone().lock_owned().await);
        pass
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }
}

impl Drop for GatePass {
    fn drop(&mut self) {
        // Let the next local task in first, then forget the queue if nobody else uses it.
        // Entries are cloned only under the map lock, so the count check cannot race.
        self.guard.take();
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        // 2 = the map's entry + ours.
        if Arc::strong_count(&self.gate) == 2 {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn entries_are_removed_when_the_last_user_leaves() {
        let gates = Gates::default();
        let a = gates.enter("k").await;
        let waiting = {
            let g = Gates {
                map: gates.map.clone(),
            };
            tokio::spawn(async move { g.enter("k").await })
        };
        drop(a);
        let b = waiting.await.unwrap();
        assert_eq!(gates.len(), 1);
        drop(b);
        assert_eq!(gates.len(), 0);
    }
}

//! Waiting for a release: one pub/sub connection per client, shared by all waiters.
//!
//! Subscriptions are reference-counted per channel. A waiter subscribes *before* its retry, so
//! a release published between a failed try and the subscription is not missed (the race that
//! hung Redisson waiters for a whole TTL before 3.28). A release message wakes one waiter of that
//! key (`Notify::notify_one`, which keeps a permit when nobody is parked yet). If the connection
//! drops, waiters keep their PTTL-bounded sleeps; on reconnect every channel is re-subscribed and
//! every waiter is woken to retry, since releases may have been missed meanwhile.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot, Notify};

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    Unsubscribe(String),
}

struct Channel {
    refs: usize,
    notify: Arc<Notify>,
}

#[derive(Default)]
struct Shared {
    channels: Mutex<HashMap<String, Channel>>,
    connected: AtomicBool,
}

impl Shared {
    fn channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dispatch(&self, channel: &str) {
        if let Some(ch) = self.channels().get(channel) {
            ch.notify.notify_one();
        }
    }

    fn wake_all(&self) {
        for ch in self.channels().values() {
            ch.notify.notify_waiters();
            ch.notify.notify_one();
        }
    }
}

/// The client's half: registers waiters and talks to the subscriber task.
pub(crate) struct Waiters {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
}

/// One waiter's interest in one channel; unsubscribes (when it is the last) on drop.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    channel: String,
    notify: Arc<Notify>,
}

impl Waiters {
    /// Opens the subscriber connection and starts its task; fails if Redis cannot be reached.
    pub(crate) async fn start(
        client: redis::Client,
        connect_timeout: Duration,
    ) -> redis::RedisResult<Self> {
        let first = open(&client, connect_timeout).await?;
        let shared = Arc::new(Shared::default());
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(client, connect_timeout, shared.clone(), rx, first));
        Ok(Waiters {
            shared,
            commands: tx,
        })
    }

    /// Registers interest in `channel` and, while the subscriber is connected, waits until Redis
    /// confirmed the subscription. Never fails: when disconnected the waiter still gets a
    /// subscription that the reconnect will confirm and wake.
    pub(crate) async fn subscribe(&self, channel: &str) -> Subscription {
        let (ack_tx, ack_rx) = oneshot::channel();
        let notify = {
            let mut map = self.shared.channels();
            let ch = map.entry(channel.to_owned()).or_insert_with(|| Channel {
                refs: 0,
                notify: Arc::new(Notify::new()),
            });
            ch.refs += 1;
            // Sent under the map lock so subscribe/unsubscribe reach the task in the order of
            // the reference-count changes. Extra SUBSCRIBEs of a live channel are harmless.
            let _ = self
                .commands
                .send(Command::Subscribe(channel.to_owned(), ack_tx));
            ch.notify.clone()
        };
        let sub = Subscription {
            shared: self.shared.clone(),
            commands: self.commands.clone(),
            channel: channel.to_owned(),
            notify,
        };
        if self.shared.connected.load(Ordering::Acquire) {
            let _ = ack_rx.await;
        }
        sub
    }
}

impl Subscription {
    /// Completes when a release of this channel arrives (or the subscriber reconnected).
    pub(crate) async fn released(&self) {
        self.notify.notified().await
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut map = self.shared.channels();
        if let Some(ch) = map.get_mut(&self.channel) {
            ch.refs -= 1;
            if ch.refs == 0 {
                map.remove(&self.channel);
                let _ = self
                    .commands
                    .send(Command::Unsubscribe(self.channel.clone()));
            }
        }
    }
}

async fn open(client: &redis::Client, timeout: Duration) -> redis::RedisResult<redis::aio::PubSub> {
    match tokio::time::timeout(timeout, client.get_async_pubsub()).await {
        Ok(r) => r,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "timed out opening the pub/sub connection",
        ))),
    }
}

/// The subscriber task: owns the pub/sub connection, reconnects it, ends with the client.
async fn run(
    client: redis::Client,
    connect_timeout: Duration,
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Command>,
    first: redis::aio::PubSub,
) {
    let mut conn = Some(first);
    let mut backoff = Duration::from_millis(50);
    loop {
        let pubsub = match conn.take() {
            Some(c) => c,
            None => match open(&client, connect_timeout).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(error = %e, "dlock subscriber reconnect failed");
                    if !drain_while_down(&mut rx, backoff).await {
                        return;
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            },
        };
        let (mut sink, mut stream) = pubsub.split();
        // Order matters (a waiter that saw "disconnected" skipped its ack wait, so it must be
        // in the snapshot): mark connected, take every command queued while down (their
        // channels are in the map, hence in the snapshot; unsubscribes are moot on a new
        // connection), snapshot, subscribe, then ack and wake.
        shared.connected.store(true, Ordering::Release);
        let mut queued_acks = Vec::new();
        while let Ok(cmd) = rx.try_recv() {
            if let Command::Subscribe(_, ack) = cmd {
                queued_acks.push(ack);
            }
        }
        let live: Vec<String> = shared.channels().keys().cloned().collect();
        let ok = live.is_empty() || sink.subscribe(&live).await.is_ok();
        for ack in queued_acks {
            let _ = ack.send(ok);
        }
        if !ok {
            shared.connected.store(false, Ordering::Release);
            continue;
        }
        backoff = Duration::from_millis(50);
        // Releases published while we were away were lost: let every waiter retry now.
        shared.wake_all();
        let reader_shared = shared.clone();
        let mut reader = tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                reader_shared.dispatch(msg.get_channel_name());
            }
        });
        let client_gone = loop {
            tokio::select! {
                _ = &mut reader => break false,
                cmd = rx.recv() => match cmd {
                    None => break true,
                    Some(cmd) => {
                        if apply(&mut sink, cmd, &mut rx).await.is_err() {
                            break false;
                        }
                    }
                },
            }
        };
        shared.connected.store(false, Ordering::Release);
        reader.abort();
        if client_gone {
            return;
        }
        tracing::warn!("dlock subscriber connection lost; waiters fall back to PTTL retries while it reconnects");
    }
}

/// Applies one command plus every command already queued behind it, batching runs of
/// subscribes into one SUBSCRIBE so a burst of new waiters costs one round trip.
async fn apply(
    sink: &mut redis::aio::PubSubSink,
    first: Command,
    rx: &mut mpsc::UnboundedReceiver<Command>,
) -> redis::RedisResult<()> {
    let mut pending = Some(first);
    while let Some(cmd) = pending.take() {
        match cmd {
            Command::Unsubscribe(ch) => sink.unsubscribe(&ch).await?,
            Command::Subscribe(ch, ack) => {
                let mut channels = vec![ch];
                let mut acks = vec![ack];
                while let Ok(next) = rx.try_recv() {
                    match next {
                        Command::Subscribe(ch, ack) => {
                            channels.push(ch);
                            acks.push(ack);
                        }
                        other => {
                            pending = Some(other);
                            break;
                        }
                    }
                }
                let ok = sink.subscribe(&channels).await;
                for ack in acks {
                    let _ = ack.send(ok.is_ok());
                }
                ok?;
            }
        }
        if pending.is_none() {
            pending = rx.try_recv().ok();
        }
    }
    Ok(())
}

/// While disconnected: fail subscribe acks at once (waiters fall back to PTTL sleeps) for one
/// backoff period. Returns false when the client is gone.
async fn drain_while_down(rx: &mut mpsc::UnboundedReceiver<Command>, backoff: Duration) -> bool {
    let until = tokio::time::Instant::now() + backoff;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(until) => return true,
            cmd = rx.recv() => match cmd {
                None => return false,
                Some(Command::Subscribe(_, ack)) => { let _ = ack.send(false); }
                Some(Command::Unsubscribe(_)) => {}
            },
        }
    }
}

//! Pub/sub placed by slot on a cluster: each channel subscribed on the master serving its slot,
//! and kept there across failovers and slot moves.
//!
//! Two kinds of channel use it ([`ChannelKind`]):
//!
//! * **Shard channels.** Redisson publishes its lock messages with SPUBLISH on a Redis 7
//!   cluster (its sharded mode AUTO). A shard message reaches only the subscribers of the node
//!   serving the channel's slot, so one classic subscriber connection is not enough.
//! * **Classic channels near their publisher.** dlock's own scripts PUBLISH on the key's
//!   master. Every node hears a classic message, but one heard on another node has crossed the
//!   cluster bus, where 1-2 % of messages wait 30-43 ms (measured by
//!   `perf/cluster-bus/publish_latency.py`: 13 in 1,000 on Redis 7.0, 5 in 1,000 on Valkey
//!   8.1, none over 20 ms on the publishing node itself). Subscribing where the message is
//!   published takes the bus out of the wake-up. A channel placed on the wrong node still
//!   hears every message, later: where a classic channel sits decides latency only. What must
//!   be right is the record of where it sits: a channel recorded on a node it is not subscribed
//!   on hears nothing, and one subscribed on two nodes wakes its waiter twice.
//!
//! This task holds one RESP3 connection per master that has channels, subscribes each channel
//! where its slot lives, and moves it when the slot moves. redis-rs's cluster connection drops
//! sharded subscriptions on a failover, so this does not rely on it; it repairs them itself:
//!
//! * a node connection that drops (a push `Disconnection`) or a server-sent `sunsubscribe` (the
//!   node lost the slot) marks its channels unplaced at once;
//! * while any channel is subscribed, every check (`check_interval`) PINGs each node that has
//!   channels (a frozen link closes nothing and says nothing, so only a round trip finds it)
//!   and reads the slot map; a channel whose node did not answer, or whose slot is now served
//!   by another master, is subscribed there;
//! * after channels were moved, every waiter is woken (`resubscribed`) once the slot map has
//!   held still for one check: a release published while its channel was nowhere was missed,
//!   so waiters retry instead of sleeping to the holder's PTTL (and not while the cluster is
//!   still moving, when the retry itself would fail).
//!
//! Every round trip is bounded by the ack timeout; a subscription that cannot be placed is
//! acknowledged as unconfirmed, and its waiters fall back to PTTL-bounded sleeps until the next
//! check places it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store::redis::backend::conn::Pool;
use crate::store::redis::backend::names::cluster_slot;
use crate::store::redis::backend::topology::Topology;

/// A master's address.
type Node = (String, u16);

/// Reads the slot map now: first slot, last slot, master address.
pub(crate) type SlotSource =
    Arc<dyn Fn() -> BoxFuture<'static, Option<Vec<(u16, u16, String, u16)>>> + Send + Sync>;

/// Which pub/sub the subscriber speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChannelKind {
    /// SSUBSCRIBE: shard channels, heard only on the node serving their slot.
    Shard,
    /// SUBSCRIBE on the node serving the channel's slot: classic channels, heard there first.
    Classic,
}

/// Where and how the shard subscriber connects.
pub(crate) struct ShardSource {
    pub(crate) kind: ChannelKind,
    /// The cluster's slot map, read on demand.
    pub(crate) slots: SlotSource,
    /// A client of one node: its credentials and TLS settings are reused for every node.
    pub(crate) template: redis::Client,
    pub(crate) connect_timeout: Duration,
    /// How often the slot map is read while channels are subscribed.
    pub(crate) check_interval: Duration,
    pub(crate) stop: CancellationToken,
}

/// Receives a message heard on a channel: (channel, message).
pub(crate) type Dispatch = Arc<dyn Fn(&str, String) + Send + Sync>;

/// What the shard subscriber tells its owner.
pub(crate) struct ShardHooks {
    /// A message on a channel.
    pub(crate) dispatch: Dispatch,
    /// Channels were moved to another node: messages may have been missed.
    pub(crate) resubscribed: Box<dyn Fn() + Send + Sync>,
    /// Bound on each (S)SUBSCRIBE / (S)UNSUBSCRIBE and PING round trip.
    pub(crate) ack_timeout: Duration,
}

/// Where the shard subscriber of a cluster connects: the seeds' credentials and TLS settings,
/// the slot map read through the command connections; `None` without a seed.
pub(crate) fn source(
    kind: ChannelKind,
    topology: &Topology,
    pool: &Arc<Pool>,
    connect_timeout: Duration,
    stop: &CancellationToken,
) -> Option<ShardSource> {
    let template = (topology.pubsub_source(pool))().into_iter().next()?;
    let pool = pool.clone();
    let slots: SlotSource = Arc::new(move || {
        let mut conn = pool.get();
        Box::pin(async move {
            let masters = conn.slot_masters().await?;
            let masters = masters.into_iter();
            Some(
                masters
                    .map(|(lo, hi, n)| (lo, hi, n.host().to_owned(), n.port()))
                    .collect(),
            )
        })
    });
    Some(ShardSource {
        kind,
        slots,
        template,
        connect_timeout,
        check_interval: CHECK_INTERVAL,
        stop: stop.clone(),
    })
}

/// How often the slot map is read while channels are subscribed: a failover moves a channel's
/// slot, and its waiters hear nothing until it is subscribed on the new master.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Most subscribes sent in one burst: a SUBSCRIBE of a few thousand channels is still one
/// short round trip, and the rest wait for the next.
const BURST: usize = 1024;

/// Whether the deployment has sharded pub/sub: Redisson's test (`PUBSUB SHARDNUMSUB` succeeds).
pub(crate) async fn supported(pool: &Pool) -> bool {
    let mut conn = pool.get();
    let mut cmd = redis::cmd("PUBSUB");
    cmd.arg("SHARDNUMSUB");
    let probe = cmd.query_async::<redis::Value>(&mut conn);
    matches!(
        tokio::time::timeout(Duration::from_secs(5), probe).await,
        Ok(Ok(_))
    )
}

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    Unsubscribe(String),
}

/// The handle: sends subscribe and unsubscribe requests to the task.
#[derive(Clone)]
pub(crate) struct ShardSubscriber {
    commands: mpsc::UnboundedSender<Command>,
}

impl ShardSubscriber {
    /// Starts the task on `rt` (the client's thread, which drives a cluster's command
    /// connections too); it ends with `source.stop` or when every handle is gone.
    pub(crate) fn start(
        source: ShardSource,
        hooks: ShardHooks,
        rt: &tokio::runtime::Handle,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let (events_tx, events) = mpsc::unbounded_channel();
        let stop = source.stop.clone();
        let task = Task {
            source,
            hooks,
            commands: rx,
            events_tx,
            events,
            ranges: Vec::new(),
            conns: HashMap::new(),
            opened: 0,
            channels: HashMap::new(),
            wake_pending: false,
            unreachable: HashMap::new(),
            warned: false,
        };
        rt.spawn(async move {
            let mut task = task;
            stop.run_until_cancelled(task.run()).await
        });
        ShardSubscriber { commands: tx }
    }

    /// Subscribes `channel`; `ack` learns whether the node confirmed it.
    pub(crate) fn subscribe(&self, channel: &str, ack: oneshot::Sender<bool>) {
        let _ = self
            .commands
            .send(Command::Subscribe(channel.to_owned(), ack));
    }

    pub(crate) fn unsubscribe(&self, channel: &str) {
        let _ = self.commands.send(Command::Unsubscribe(channel.to_owned()));
    }
}

struct Task {
    source: ShardSource,
    hooks: ShardHooks,
    commands: mpsc::UnboundedReceiver<Command>,
    /// Pushes of every node connection, tagged with the node and the connection's number.
    events_tx: mpsc::UnboundedSender<(Node, u64, PushInfo)>,
    events: mpsc::UnboundedReceiver<(Node, u64, PushInfo)>,
    /// The slot map as last read.
    ranges: Vec<(u16, u16, Node)>,
    /// One connection per master, numbered so a late push of a replaced one is told apart.
    conns: HashMap<Node, (u64, redis::aio::MultiplexedConnection)>,
    opened: u64,
    /// Subscribed channels and the node they are subscribed on (`None`: nowhere right now).
    channels: HashMap<String, Option<Node>>,
    /// Channels were moved: wake every waiter at the next check that finds nothing to move.
    wake_pending: bool,
    /// Nodes a connection could not be opened to, and when: not tried again for a check's
    /// interval, so a frozen node costs this task one connect timeout per check at most.
    unreachable: HashMap<Node, Instant>,
    /// A refused subscribe (other than a redirect) was logged as a warning already.
    warned: bool,
}

impl Task {
    async fn run(&mut self) {
        let interval = self.source.check_interval;
        let mut next_check = Instant::now() + interval;
        // A command handed back by the last burst (of the other type): applied next, but only
        // after the pushes and the clock were looked at, so a steady churn of waiters coming
        // and going cannot hold up the repairs.
        let mut pending: Option<Command> = None;
        loop {
            let mut check = false;
            if let Some(cmd) = pending.take() {
                pending = self.apply(cmd).await;
                while let Ok((node, serial, push)) = self.events.try_recv() {
                    check |= self.on_push(node, serial, push);
                }
            } else {
                tokio::select! {
                    cmd = self.commands.recv() => match cmd {
                        None => return,
                        Some(first) => pending = self.apply(first).await,
                    },
                    Some((node, serial, push)) = self.events.recv() => {
                        check = self.on_push(node, serial, push);
                    }
                    // Only while channels are subscribed: an idle client reads no slot map.
                    _ = tokio::time::sleep_until(next_check), if !self.channels.is_empty() => {}
                }
            }
            if Instant::now() >= next_check && !self.channels.is_empty() {
                next_check = Instant::now() + interval;
                check = true;
            }
            if check {
                self.repair().await;
            }
        }
    }

    /// Handles one push of a node connection; true when channels must be placed again.
    fn on_push(&mut self, node: Node, serial: u64, push: PushInfo) -> bool {
        match push.kind {
            // Delivered by the connection's forwarder (see `open`), never queued behind this task.
            PushKind::SMessage | PushKind::Message => false,
            PushKind::Disconnection => {
                if self.conns.get(&node).map(|(n, _)| *n) != Some(serial) {
                    return false; // a connection replaced already
                }
                // Its channels hear nothing now: place them again (on a fresh connection).
                self.drop_node(&node)
            }
            // The node dropped shard subscriptions itself (it no longer serves their slot);
            // after a SUNSUBSCRIBE of ours the channel is gone from the map already.
            PushKind::SUnsubscribe => {
                let channel = match push.data.first() {
                    Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                    _ => return false,
                };
                match self.channels.get_mut(&channel) {
                    Some(on) if on.as_ref() == Some(&node) => {
                        *on = None;
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }

    /// Drops the connection to `node`: every channel subscribed there is unplaced with it (the
    /// connection's end sends no `Disconnection` this task would still accept).
    /// True if any channel was there.
    fn drop_node(&mut self, node: &Node) -> bool {
        self.conns.remove(node);
        self.unplace(node)
    }

    /// Marks the channels placed on `node` as unplaced; true if any was.
    fn unplace(&mut self, node: &Node) -> bool {
        let mut any = false;
        for on in self.channels.values_mut() {
            if on.as_ref() == Some(node) {
                *on = None;
                any = true;
            }
        }
        any
    }

    /// Reads the slot map and subscribes every channel not on its slot's master; wakes every
    /// waiter if one moved.
    async fn repair(&mut self) {
        self.probe().await;
        if !self.refresh().await {
            return;
        }
        let misplaced: Vec<String> = self
            .channels
            .iter()
            .filter(|(ch, on)| on.as_ref() != self.owner(ch))
            .map(|(ch, _)| ch.clone())
            .collect();
        if misplaced.is_empty() {
            // The map held still for a whole check since channels moved: the cluster has
            // settled, so the waiters' retries can reach the new masters.
            if std::mem::take(&mut self.wake_pending) {
                (self.hooks.resubscribed)();
            }
            return;
        }
        let count = misplaced.len();
        if !self.place_all(misplaced).await.is_empty() {
            // Woken once a channel is live again and the map has held still for one check
            // (see above): a retry while the slot's master is still down or just being
            // replaced (a master killed, its replica promoted) fails instead of waiting.
            self.wake_pending = true;
        }
        tracing::debug!(channels = count, kind = ?self.source.kind, "dlock: subscriptions moved");
    }

    /// PINGs every node that has channels; one that does not answer within the ack timeout is
    /// dropped and its channels marked unplaced, to be placed again by the caller. A refusal
    /// (an ACL rule against PING) is an answer. A channel recorded on a node with no
    /// connection is unplaced too.
    async fn probe(&mut self) {
        let mut nodes: Vec<Node> = self.channels.values().flatten().cloned().collect();
        nodes.sort();
        nodes.dedup();
        for node in nodes {
            let Some((_, conn)) = self.conns.get_mut(&node) else {
                self.unplace(&node);
                continue;
            };
            let ping = redis::cmd("PING");
            let reply =
                tokio::time::timeout(self.hooks.ack_timeout, ping.query_async::<Value>(conn));
            let alive = match reply.await {
                Ok(Ok(_)) => true,
                Ok(Err(e)) => matches!(e.kind(), redis::ErrorKind::Server(_)),
                Err(_) => false,
            };
            if !alive {
                tracing::debug!(node = %format!("{}:{}", node.0, node.1), "dlock: a subscriber node did not answer PING; its channels are placed again");
                self.drop_node(&node);
            }
        }
    }

    /// Subscribes `channels` where their slots live, with one SUBSCRIBE per node (SSUBSCRIBE per
    /// slot: a shard subscribe may not span slots); the set of those confirmed. A group its node
    /// refused (a shard channel's MOVED, an ACL rule) or whose node could not be reached is
    /// placed one channel at a time after the map is read again; a node found unreachable is
    /// not tried again before the next check (see `connect`), so a frozen node costs one
    /// connect timeout, not one per channel. A group whose node stopped answering is left
    /// unplaced for the next check.
    async fn place_all(&mut self, channels: Vec<String>) -> HashSet<String> {
        let mut placed = HashSet::new();
        if self.ranges.is_empty() {
            self.refresh().await;
        }
        let kind = self.source.kind;
        // Already live on its master: nothing to send. Recorded on another node (its slot
        // moved): it leaves there first.
        let mut todo = Vec::new();
        let mut elsewhere = Vec::new();
        for channel in channels {
            match (self.channels.get(&channel), self.owner(&channel)) {
                (Some(Some(on)), Some(owner)) if on == owner && self.conns.contains_key(on) => {
                    placed.insert(channel);
                }
                (Some(Some(_)), _) => {
                    elsewhere.push(channel.clone());
                    todo.push(channel);
                }
                _ => todo.push(channel),
            }
        }
        if !elsewhere.is_empty() {
            self.leave(elsewhere).await;
        }
        let mut groups: HashMap<(Node, u16), Vec<String>> = HashMap::new();
        let mut one_by_one = Vec::new();
        for channel in todo {
            match self.owner(&channel).cloned() {
                Some(node) => {
                    let slot = match kind {
                        ChannelKind::Shard => cluster_slot(&channel),
                        ChannelKind::Classic => 0,
                    };
                    groups.entry((node, slot)).or_default().push(channel);
                }
                None => one_by_one.push(channel),
            }
        }
        let ack_timeout = self.hooks.ack_timeout;
        for ((node, _), group) in groups {
            let Some(conn) = self.connect(&node).await else {
                // Perhaps a master the map still names after a failover: tried again once
                // the map is read again below (a node just found unreachable is not).
                one_by_one.extend(group);
                continue;
            };
            match send(conn, kind, Subscribing::Subscribe, &group, ack_timeout).await {
                Ok(Ok(())) => {
                    for channel in group {
                        self.channels.insert(channel.clone(), Some(node.clone()));
                        placed.insert(channel);
                    }
                }
                Ok(Err(e)) if matches!(e.kind(), redis::ErrorKind::Server(_)) => {
                    tracing::debug!(channels = group.len(), error = %e, ?kind, "dlock: subscribe refused");
                    one_by_one.extend(group);
                }
                _ => {
                    self.drop_node(&node);
                    for channel in group {
                        self.channels.insert(channel, None);
                    }
                }
            }
        }
        // Refused (a stale map) or unknown: the map read once more for all of them, and each
        // tried once; what is still refused waits for the next check.
        if !one_by_one.is_empty() && self.refresh().await {
            for channel in one_by_one {
                if self.place_once(&channel).await {
                    placed.insert(channel);
                }
            }
        } else {
            for channel in one_by_one {
                self.channels.insert(channel, None);
            }
        }
        placed
    }

    /// Subscribes `channel` on its slot's master by the map as last read, once; records where
    /// it is (`None`: nowhere). True when confirmed.
    async fn place_once(&mut self, channel: &str) -> bool {
        let (ack_timeout, kind) = (self.hooks.ack_timeout, self.source.kind);
        let Some(node) = self.owner(channel).cloned() else {
            self.channels.insert(channel.to_owned(), None);
            return false;
        };
        match self.channels.get(channel) {
            Some(Some(on)) if *on == node && self.conns.contains_key(on) => return true,
            Some(Some(_)) => self.leave(vec![channel.to_owned()]).await,
            _ => {}
        }
        self.channels.insert(channel.to_owned(), None);
        let Some(conn) = self.connect(&node).await else {
            return false;
        };
        let one = [channel.to_owned()];
        match send(conn, kind, Subscribing::Subscribe, &one, ack_timeout).await {
            Ok(Ok(())) => {
                self.channels.insert(channel.to_owned(), Some(node));
                true
            }
            // MOVED (the map was stale) or another refusal (an ACL rule).
            Ok(Err(e)) if matches!(e.kind(), redis::ErrorKind::Server(_)) => {
                let redirect =
                    matches!(e.code(), Some("MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN"));
                if redirect || std::mem::replace(&mut self.warned, true) {
                    tracing::debug!(channel, error = %e, ?kind, "dlock: subscribe refused");
                } else {
                    tracing::warn!(channel, error = %e, ?kind, "dlock subscriber: Redis refused a subscribe; its waiters fall back to PTTL retries (said once)");
                }
                false
            }
            _ => {
                self.drop_node(&node);
                false
            }
        }
    }

    /// Applies `first` and the commands of its type queued right behind it, as one burst: a
    /// burst of new waiters, or of waiters done, costs a round trip per node rather than one
    /// per channel, and this task delivers no message while it waits for one. The first
    /// command of the other type is handed back, to be applied next (in order).
    async fn apply(&mut self, first: Command) -> Option<Command> {
        let mut after = None;
        match first {
            Command::Subscribe(channel, ack) => {
                let mut burst = vec![(channel, ack)];
                while burst.len() < BURST {
                    match self.commands.try_recv() {
                        Ok(Command::Subscribe(channel, ack)) => burst.push((channel, ack)),
                        Ok(other) => {
                            after = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let names = burst.iter().map(|(channel, _)| channel.clone()).collect();
                let placed = self.place_all(names).await;
                for (channel, ack) in burst {
                    let confirmed = placed.contains(&channel);
                    if ack.send(confirmed).is_err() && confirmed {
                        // Its waiter stopped waiting for the answer and retried before the
                        // channel was live: a release in between went unheard.
                        self.wake_pending = true;
                    }
                }
            }
            Command::Unsubscribe(channel) => {
                let mut burst = vec![channel];
                while burst.len() < BURST {
                    match self.commands.try_recv() {
                        Ok(Command::Unsubscribe(channel)) => burst.push(channel),
                        Ok(other) => {
                            after = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                self.unsubscribe_all(burst).await;
            }
        }
        after
    }

    /// Takes `channels` off the nodes they are recorded on, before they are placed elsewhere: a
    /// classic channel left on a slot's old master (a replica now) still hears every message
    /// there, over the bus, and would wake its waiter twice. A shard channel's old node
    /// dropped it itself, and may refuse SUNSUBSCRIBE for a slot it no longer serves.
    async fn leave(&mut self, channels: Vec<String>) {
        match self.source.kind {
            ChannelKind::Classic => self.unsubscribe_all(channels).await,
            ChannelKind::Shard => {
                for channel in channels {
                    self.channels.insert(channel, None);
                }
            }
        }
    }

    /// Unsubscribes `channels` where they are placed: one command per node (per slot for shard
    /// channels, like SSUBSCRIBE).
    async fn unsubscribe_all(&mut self, channels: Vec<String>) {
        let kind = self.source.kind;
        let mut groups: HashMap<(Node, u16), Vec<String>> = HashMap::new();
        for channel in channels {
            if let Some(Some(node)) = self.channels.remove(&channel) {
                let slot = match kind {
                    ChannelKind::Shard => cluster_slot(&channel),
                    ChannelKind::Classic => 0,
                };
                groups.entry((node, slot)).or_default().push(channel);
            }
        }
        for ((node, _), group) in groups {
            let Some((_, conn)) = self.conns.get_mut(&node) else {
                continue;
            };
            let reply = send(
                conn,
                kind,
                Subscribing::Unsubscribe,
                &group,
                self.hooks.ack_timeout,
            );
            if !matches!(reply.await, Ok(Ok(()))) {
                // A connection that cannot answer is replaced when next needed.
                self.drop_node(&node);
            }
        }
    }

    /// The master serving `channel`'s slot in the map as last read.
    fn owner(&self, channel: &str) -> Option<&Node> {
        let slot = cluster_slot(channel);
        self.ranges
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .map(|(_, _, node)| node)
    }

    /// Reads the slot map; false if no node answered.
    async fn refresh(&mut self) -> bool {
        let read = tokio::time::timeout(self.source.connect_timeout, (self.source.slots)()).await;
        let Ok(Some(ranges)) = read else {
            return false;
        };
        self.ranges = ranges
            .into_iter()
            .map(|(lo, hi, host, port)| (lo, hi, (host, port)))
            .collect();
        true
    }

    /// The connection to `node`, opened if there is none.
    async fn connect(&mut self, node: &Node) -> Option<&mut redis::aio::MultiplexedConnection> {
        if !self.conns.contains_key(node) {
            let interval = self.source.check_interval;
            if self
                .unreachable
                .get(node)
                .is_some_and(|at| at.elapsed() < interval)
            {
                return None;
            }
            self.opened += 1;
            let Some(conn) = self.open(node, self.opened).await else {
                self.unreachable.insert(node.clone(), Instant::now());
                return None;
            };
            self.unreachable.remove(node);
            self.conns.insert(node.clone(), (self.opened, conn));
        }
        self.conns.get_mut(node).map(|(_, conn)| conn)
    }

    async fn open(&self, node: &Node, serial: u64) -> Option<redis::aio::MultiplexedConnection> {
        let info = self.source.template.get_connection_info().clone();
        let addr = match info.addr() {
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host: node.0.clone(),
                port: node.1,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => redis::ConnectionAddr::Tcp(node.0.clone(), node.1),
        };
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let info = info.set_addr(addr).set_redis_settings(settings);
        let client = redis::Client::open(info).ok()?;
        let (tx, mut rx) = mpsc::unbounded_channel::<PushInfo>();
        let config = redis::AsyncConnectionConfig::new()
            .set_push_sender(tx)
            .set_connection_timeout(Some(self.source.connect_timeout))
            .set_response_timeout(Some(self.hooks.ack_timeout));
        let conn = match client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!(node = %format!("{}:{}", node.0, node.1), error = %e, "dlock: shard subscriber could not connect");
                return None;
            }
        };
        // Forwards this connection's pushes, tagged, until the connection is gone.
        let (events, node) = (self.events_tx.clone(), node.clone());
        // Messages are handed to their waiters right here, not through the task: the task may
        // be waiting out a round trip (or a connect to a frozen node), and a release must not
        // wait for it.
        let dispatch = self.hooks.dispatch.clone();
        tokio::spawn(async move {
            while let Some(push) = rx.recv().await {
                if matches!(push.kind, PushKind::SMessage | PushKind::Message) {
                    if let (Some(channel), Some(message)) =
                        (text(push.data.first()), text(push.data.get(1)))
                    {
                        dispatch(&channel, message);
                    }
                    continue;
                }
                if events.send((node.clone(), serial, push)).is_err() {
                    return;
                }
            }
        });
        Some(conn)
    }
}

#[derive(Clone, Copy)]
enum Subscribing {
    Subscribe,
    Unsubscribe,
}

/// (Un)subscribes `channels` on `conn`, within `timeout` (`Err` when it ran out). Classic
/// channels go in one command through redis-rs's own `subscribe` / `unsubscribe`, which wait
/// for the server's confirmation of every channel: a raw command would take the first
/// confirmation as its reply and leave the others to be read as the replies of the requests
/// after it (redis-rs#2423), so a later subscribe could read as confirmed before the server
/// had it. redis-rs's connection has no such call for shard channels, so those go one command
/// per channel, each confirmed once.
async fn send(
    conn: &mut redis::aio::MultiplexedConnection,
    kind: ChannelKind,
    what: Subscribing,
    channels: &[String],
    timeout: Duration,
) -> Result<redis::RedisResult<()>, tokio::time::error::Elapsed> {
    tokio::time::timeout(timeout, async {
        match (kind, what) {
            (ChannelKind::Classic, Subscribing::Subscribe) => conn.subscribe(channels).await,
            (ChannelKind::Classic, Subscribing::Unsubscribe) => conn.unsubscribe(channels).await,
            (ChannelKind::Shard, _) => {
                let name = match what {
                    Subscribing::Subscribe => "SSUBSCRIBE",
                    Subscribing::Unsubscribe => "SUNSUBSCRIBE",
                };
                for channel in channels {
                    redis::cmd(name)
                        .arg(channel)
                        .query_async::<Value>(&mut *conn)
                        .await?;
                }
                Ok(())
            }
        }
    })
    .await
}

/// A push's text field (a channel name or a message).
fn text(v: Option<&Value>) -> Option<String> {
    match v {
        Some(Value::BulkString(b)) => String::from_utf8(b.clone()).ok(),
        Some(Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    }
}

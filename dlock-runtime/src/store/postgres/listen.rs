//! Waiting for releases on PostgreSQL: one LISTEN connection per client, shared by all waiters.
//!
//! A release on PostgreSQL is a NOTIFY on the channel `channel::pg_channel` names for the
//! dlock release channel. This task holds one dedicated connection, LISTENs each channel that
//! has waiters and hands every notification back under the dlock channel name(s) it stands
//! for: two dlock channels whose hashes collide share one PostgreSQL channel, and both hear it
//! (a waiter woken for the other lock only retries).
//!
//! It plugs into `Waiters` the way `ShardSubscriber` does: `Waiters` counts the waiters of a
//! dlock channel and asks here on behalf of all of them, `subscribe` for each new waiter and
//! `unsubscribe` when the last one is gone. So a dlock channel here is either subscribed or
//! not (a repeated subscribe only asks for its acknowledgement again), and what is counted is
//! the dlock channels under each PostgreSQL channel: UNLISTEN goes out when none is left.
//! Every request goes through the task, in order, so an UNLISTEN never overtakes the LISTEN of
//! a waiter that came back meanwhile.
//!
//! tokio-postgres delivers notifications only to whoever polls the `Connection`, so each
//! connection has a driver task polling it (`poll_message`), which dispatches notifications at
//! once, on the thread that read them, without passing through this task.
//!
//! The connection can fail loudly (closed, `pg_terminate_backend`, a restart) or silently (a
//! frozen proxy or a dropped NAT entry: nothing arrives and nothing closes). Against the silent
//! case every round trip is bounded by the ack timeout and a `SELECT 1` is sent after each
//! `health_interval` without an answer. Either failure replaces the connection: reconnect with
//! backoff, LISTEN every live channel again, then wake every waiter (`resubscribed`), since a
//! release may have passed unheard in between. Until then waiters keep their lease-bounded
//! sleeps.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::error::Severity;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{AsyncMessage, Client, Config, Connection, NoTls, Socket};
use tokio_util::sync::CancellationToken;

use crate::backend::retry::Backoff;
use crate::store::postgres::channel::pg_channel;

/// Receives a notification: (dlock channel, not the PostgreSQL name; payload).
pub(crate) type Dispatch = Box<dyn Fn(&str, &str) + Send + Sync>;

/// What the listener tells its owner.
pub(crate) struct ListenHooks {
    /// A notification on a subscribed channel.
    pub(crate) dispatch: Dispatch,
    /// The connection was replaced: notifications may have been missed, wake everyone.
    pub(crate) resubscribed: Box<dyn Fn() + Send + Sync>,
    /// Bound on each LISTEN / UNLISTEN / health-query round trip.
    pub(crate) ack_timeout: Duration,
}

/// Why the listener could not start. Not just `tokio_postgres::Error`: the whole connect is
/// bounded here (see `open`), and tokio-postgres has no public way to make a timeout error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error("could not open the PostgreSQL listener connection: {0}")]
    Connect(#[from] tokio_postgres::Error),
    #[error("timed out after {0:?} opening the PostgreSQL listener connection")]
    TimedOut(Duration),
    #[error("the runtime the PostgreSQL listener was to run on has shut down")]
    RuntimeGone,
}

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    Unsubscribe(String),
}

/// The handle: sends subscribe and unsubscribe requests to the task.
#[derive(Clone)]
pub(crate) struct PgListener {
    commands: mpsc::UnboundedSender<Command>,
    stop: CancellationToken,
}

impl PgListener {
    /// Opens the listener's connection (no TLS) within `connect_timeout` and starts its task.
    /// Both run on `rt`, the client's own runtime: the socket belongs to the runtime it was
    /// opened on, and must outlive whichever runtime the caller is on. The task ends with
    /// [`PgListener::stop`] or when every handle is gone.
    pub(crate) async fn start(
        config: Config,
        hooks: ListenHooks,
        rt: &tokio::runtime::Handle,
        connect_timeout: Duration,
        health_interval: Duration,
    ) -> Result<PgListener, StartError> {
        let hooks = Arc::new(hooks);
        let routes = Arc::new(Routes::default());
        let first = {
            let (config, routes, hooks) = (config.clone(), routes.clone(), hooks.clone());
            rt.spawn(async move { open(&config, connect_timeout, routes, hooks).await })
                .await
                .map_err(|_| StartError::RuntimeGone)??
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let task = Task {
            config,
            hooks,
            connect_timeout,
            health_interval,
            commands: rx,
            routes,
            listening: HashSet::new(),
        };
        let token = stop.clone();
        drop(rt.spawn(async move { token.run_until_cancelled(task.run(first)).await }));
        Ok(PgListener { commands: tx, stop })
    }

    /// LISTENs on `channel`'s PostgreSQL channel; `ack` learns whether the server confirmed it
    /// (false at once while the connection is being replaced: the replacement LISTENs it).
    pub(crate) fn subscribe(&self, channel: &str, ack: oneshot::Sender<bool>) {
        let _ = self
            .commands
            .send(Command::Subscribe(channel.to_owned(), ack));
    }

    /// Forgets `channel`; UNLISTENs its PostgreSQL channel if no other channel shares it.
    pub(crate) fn unsubscribe(&self, channel: &str) {
        let _ = self.commands.send(Command::Unsubscribe(channel.to_owned()));
    }

    /// Ends the task; its connection is closed with it.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }
}

/// Which dlock channels each PostgreSQL channel stands for; read by the connection's driver
/// for every notification, changed only by the task.
#[derive(Default)]
struct Routes(Mutex<HashMap<String, Vec<String>>>);

impl Routes {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<String>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `channel` under `pg` (once however often it is subscribed).
    fn add(&self, pg: &str, channel: &str) {
        let mut map = self.map();
        let names = map.entry(pg.to_owned()).or_default();
        if !names.iter().any(|n| n == channel) {
            names.push(channel.to_owned());
        }
    }

    /// Removes `channel` from under `pg`; true when `pg` has no channel left (UNLISTEN it).
    fn remove(&self, pg: &str, channel: &str) -> bool {
        let mut map = self.map();
        let Some(names) = map.get_mut(pg) else {
            return false;
        };
        names.retain(|n| n != channel);
        if names.is_empty() {
            map.remove(pg);
            return true;
        }
        false
    }

    /// The dlock channels a notification on `pg` is for.
    fn targets(&self, pg: &str) -> Vec<String> {
        // Copied out: the dispatch hook runs without this lock held.
        self.map().get(pg).cloned().unwrap_or_default()
    }

    fn pg_channels(&self) -> Vec<String> {
        self.map().keys().cloned().collect()
    }
}

/// One connection: the client the task sends through and the driver polling the connection.
struct Session {
    client: Client,
    driver: Driver,
}

/// Aborts the driver (closing the connection) with its session, however the session ends.
struct Driver(JoinHandle<()>);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Opens a connection within `timeout` and starts its driver on the current runtime.
async fn open(
    config: &Config,
    timeout: Duration,
    routes: Arc<Routes>,
    hooks: Arc<ListenHooks>,
) -> Result<Session, StartError> {
    // Bounded here rather than by the config's own connect timeout, which covers only the TCP
    // connect: a server that accepts and then says nothing (stopped, behind a frozen proxy)
    // would hold the startup exchange forever.
    let (client, connection) = match tokio::time::timeout(timeout, config.connect(NoTls)).await {
        Ok(opened) => opened?,
        Err(_) => return Err(StartError::TimedOut(timeout)),
    };
    let driver = Driver(tokio::spawn(drive(connection, routes, hooks)));
    Ok(Session { client, driver })
}

/// Polls the connection until it ends, dispatching each notification to its dlock channels.
async fn drive(
    mut connection: Connection<Socket, NoTlsStream>,
    routes: Arc<Routes>,
    hooks: Arc<ListenHooks>,
) {
    let mut messages = futures_util::stream::poll_fn(|cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(AsyncMessage::Notification(n)) => {
                for channel in routes.targets(n.channel()) {
                    (hooks.dispatch)(&channel, n.payload());
                }
            }
            Ok(AsyncMessage::Notice(notice)) => {
                tracing::debug!(notice = %notice, "dlock: PostgreSQL listener connection notice");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "dlock: PostgreSQL listener connection failed");
                return;
            }
        }
    }
}

/// How one bounded round trip went.
#[derive(PartialEq, Debug)]
enum Reply {
    Ok,
    /// The server refused the statement (a standby refuses LISTEN): the connection is fine.
    Refused,
    /// No answer in time, or the connection failed: replace it.
    Dead,
}

async fn round_trip<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Reply {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(_)) => Reply::Ok,
        Ok(Err(e)) => match e.as_db_error() {
            // FATAL and PANIC end the session (a terminated backend, a shutdown).
            Some(db)
                if !matches!(
                    db.parsed_severity(),
                    Some(Severity::Fatal | Severity::Panic)
                ) =>
            {
                tracing::warn!(error = %e, "dlock: PostgreSQL refused a LISTEN on the listener connection; waiters fall back to lease-bounded retries");
                Reply::Refused
            }
            _ => Reply::Dead,
        },
        Err(_) => Reply::Dead,
    }
}

/// `name` as a quoted SQL identifier: any case, any character, `"` doubled.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Why one connection's session ended.
enum Ended {
    /// Every handle was dropped: stop.
    ClientGone,
    /// The connection failed (closed, or a round trip timed out): replace it.
    Lost(&'static str),
}

/// The task: owns the connection, replaces it, ends with the listener.
struct Task {
    config: Config,
    hooks: Arc<ListenHooks>,
    connect_timeout: Duration,
    health_interval: Duration,
    commands: mpsc::UnboundedReceiver<Command>,
    routes: Arc<Routes>,
    /// The PostgreSQL channels the server confirmed a LISTEN of on the current connection.
    listening: HashSet<String>,
}

impl Task {
    /// Runs as long as the listener; every pass is bounded by the connect timeout, the ack
    /// timeout or the backoff, so it always gets back to noticing the listener is gone.
    async fn run(mut self, first: Session) {
        let mut next = Some(first);
        let mut backoff = Backoff::new();
        // Set once a connection has served: every later one may follow missed notifications.
        let mut served = false;
        loop {
            let mut session = match next.take() {
                Some(session) => session,
                None => {
                    let (routes, hooks) = (self.routes.clone(), self.hooks.clone());
                    match open(&self.config, self.connect_timeout, routes, hooks).await {
                        Ok(session) => session,
                        Err(e) => {
                            tracing::debug!(error = %e, "dlock: PostgreSQL listener reconnect failed");
                            if !self.wait_while_down(backoff.next_pause()).await {
                                return;
                            }
                            continue;
                        }
                    }
                }
            };
            self.listening.clear();
            if self.relisten(&session).await == Reply::Dead {
                tracing::debug!("dlock: PostgreSQL listener could not LISTEN on a new connection");
                drop(session);
                if !self.wait_while_down(backoff.next_pause()).await {
                    return;
                }
                continue;
            }
            backoff.reset();
            if std::mem::replace(&mut served, true) {
                tracing::debug!(
                    channels = self.listening.len(),
                    "dlock: PostgreSQL listener reconnected"
                );
                (self.hooks.resubscribed)();
            }
            match self.serve(&mut session).await {
                Ended::ClientGone => return,
                Ended::Lost(why) => {
                    tracing::warn!(
                        reason = why,
                        "dlock: PostgreSQL listener connection lost; waiters fall back to lease-bounded retries while it is replaced"
                    );
                }
            }
        }
    }

    /// LISTENs every channel that has waiters on a new connection.
    async fn relisten(&mut self, session: &Session) -> Reply {
        let all = self.routes.pg_channels();
        self.listen(session, all).await
    }

    /// One round trip LISTENing `channels`; records the ones confirmed.
    async fn listen(&mut self, session: &Session, channels: Vec<String>) -> Reply {
        if channels.is_empty() {
            return Reply::Ok;
        }
        // One simple-query message, one round trip however many channels.
        let sql: String = channels
            .iter()
            .map(|pg| format!("LISTEN {};", quote_ident(pg)))
            .collect();
        let reply = round_trip(self.hooks.ack_timeout, session.client.batch_execute(&sql)).await;
        if reply == Reply::Ok {
            self.listening.extend(channels);
        }
        reply
    }

    /// Applies commands and checks the connection's health until it fails or the listener ends.
    async fn serve(&mut self, session: &mut Session) -> Ended {
        let interval = self.health_interval;
        let mut next_check = Instant::now() + interval;
        loop {
            tokio::select! {
                _ = &mut session.driver.0 => return Ended::Lost("connection closed"),
                _ = tokio::time::sleep_until(next_check) => {
                    if self.check(session).await == Reply::Dead {
                        return Ended::Lost("no reply to the health query in time");
                    }
                }
                cmd = self.commands.recv() => match cmd {
                    None => return Ended::ClientGone,
                    Some(cmd) => {
                        if let Err(why) = self.apply(session, cmd).await {
                            return Ended::Lost(why);
                        }
                    }
                },
            }
            // Whatever just completed was an answer from the server: the next check can wait.
            next_check = Instant::now() + interval;
        }
    }

    /// The health check: LISTENs the channels the server refused so far (a standby promoted
    /// since accepts them), or else a `SELECT 1`; either way one bounded round trip.
    async fn check(&mut self, session: &Session) -> Reply {
        let missing: Vec<String> = self
            .routes
            .pg_channels()
            .into_iter()
            .filter(|pg| !self.listening.contains(pg))
            .collect();
        if missing.is_empty() {
            return round_trip(
                self.hooks.ack_timeout,
                session.client.simple_query("SELECT 1"),
            )
            .await;
        }
        let reply = self.listen(session, missing).await;
        if reply == Reply::Ok {
            // Their waiters were told "unconfirmed" and sleep to the holder's lease: wake them.
            (self.hooks.resubscribed)();
        }
        reply
    }

    /// Applies `first` and every command already queued behind it, in order, LISTENing each
    /// run of subscribes in one round trip so a burst of new waiters costs one. Err (why) if
    /// the connection is dead: the subscribes not confirmed then are acknowledged false, and
    /// the next connection LISTENs their channels.
    async fn apply(&mut self, session: &Session, first: Command) -> Result<(), &'static str> {
        let mut batch = vec![first];
        for _ in 0..self.commands.len() {
            match self.commands.try_recv() {
                Ok(cmd) => batch.push(cmd),
                Err(_) => break,
            }
        }
        let mut cmds = batch.into_iter().peekable();
        while let Some(cmd) = cmds.next() {
            match cmd {
                Command::Unsubscribe(channel) => {
                    let pg = pg_channel(&channel);
                    if self.routes.remove(&pg, &channel) && self.listening.remove(&pg) {
                        let sql = format!("UNLISTEN {}", quote_ident(&pg));
                        let reply =
                            round_trip(self.hooks.ack_timeout, session.client.batch_execute(&sql))
                                .await;
                        if reply == Reply::Dead {
                            return Err("no reply to UNLISTEN in time");
                        }
                    }
                }
                Command::Subscribe(channel, ack) => {
                    let mut run = vec![(pg_channel(&channel), channel, ack)];
                    while let Some(Command::Subscribe(channel, ack)) =
                        cmds.next_if(|c| matches!(c, Command::Subscribe(..)))
                    {
                        run.push((pg_channel(&channel), channel, ack));
                    }
                    let mut wanted: Vec<String> = Vec::new();
                    for (pg, channel, _) in &run {
                        self.routes.add(pg, channel);
                        if !self.listening.contains(pg) && !wanted.contains(pg) {
                            wanted.push(pg.clone());
                        }
                    }
                    let reply = self.listen(session, wanted).await;
                    for (pg, _, ack) in run {
                        let _ = ack.send(reply != Reply::Dead && self.listening.contains(&pg));
                    }
                    if reply == Reply::Dead {
                        return Err("no reply to LISTEN in time");
                    }
                }
            }
        }
        Ok(())
    }

    /// While there is no connection: keeps track of subscriptions, acknowledging each as
    /// unconfirmed at once (the next connection LISTENs it and wakes its waiters), for one
    /// backoff pause. False when every handle is gone.
    async fn wait_while_down(&mut self, pause: Duration) -> bool {
        let until = Instant::now() + pause;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => return true,
                cmd = self.commands.recv() => match cmd {
                    None => return false,
                    Some(Command::Subscribe(channel, ack)) => {
                        self.routes.add(&pg_channel(&channel), &channel);
                        let _ = ack.send(false);
                    }
                    Some(Command::Unsubscribe(channel)) => {
                        self.routes.remove(&pg_channel(&channel), &channel);
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests;

//! A fault-injecting TCP proxy on 127.0.0.1, for tests of what the network can do to a client:
//! a silently dead connection (a NAT or load balancer that forgot it), slow replies, and
//! connections cut at once.
//!
//! `Proxy::start(upstream_port)` listens on a free loopback port and forwards every accepted
//! connection to `127.0.0.1:upstream_port`. It runs on its own thread with its own tokio runtime,
//! so a test that stalls or ends its own runtime does not stall the proxy, and it stops (closing
//! every connection) when dropped.
//!
//! * `freeze()` stops forwarding in both directions on every current and future connection, and
//!   `freeze_connection(i)` on connection `i` only. Nothing is closed: no FIN, no RST, not even
//!   one the other side sent meanwhile. The proxy keeps reading and holds the bytes (and any
//!   end-of-stream) in memory; `thaw()` / `thaw_connection(i)` deliver them in order.
//!   A chunk that was already being written when `freeze` was called is still delivered.
//! * `hold_replies(i)` freezes only the upstream -> client direction of connection `i`: what
//!   the client sends still reaches the server (and runs), its replies are held until
//!   `thaw_connection(i)` / `thaw()`. A request in flight then has run in Redis while the
//!   client has not heard so.
//! * `delay_replies(d)` holds every upstream -> client chunk for `d` after it arrived.
//! * `throttle_replies(i, rate)` delivers what the server sends on connection `i` at `rate`
//!   bytes per second at most: a congested link that still carries every byte, in order, so
//!   replies queued behind others arrive late but do arrive.
//! * `kill_all()` closes both sockets of every open connection with FIN (a plain close: the
//!   kernel sends RST instead only if unread bytes were still queued on that socket), and returns
//!   once they are closed, so the client's next command fails.
//!
//! Connections are numbered in accept order from 0. A dlock `LockClient` opens its command
//! connections first (`connections(n)`, default 1, one after the other, each awaited) and then
//! its one pub/sub subscriber connection, so with the default settings connection 0 carries
//! commands and connection 1 is the subscriber (`client.rs`, `from_builder`; checked by
//! `tests/support/proxy.rs`). Connections the client opens later (reconnects) get the next
//! numbers.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

/// How long `kill_all` waits for the killed connections to be closed before it panics.
const KILL_BOUND: Duration = Duration::from_secs(5);

/// A running proxy; stops and closes every connection when dropped.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// State the test thread and the proxy's runtime share.
struct Shared {
    /// True while `freeze()` is in force; every connection watches it.
    frozen_all: watch::Sender<bool>,
    /// The upstream -> client delay, read when a chunk arrives.
    delay: Mutex<Duration>,
    /// Every connection ever accepted, in accept order.
    conns: Mutex<Vec<Slot>>,
    /// Signalled whenever a connection closes (`kill_all` waits on it).
    closed: Condvar,
}

struct Slot {
    conn: Arc<Conn>,
    open: bool,
}

/// The controls of one connection.
struct Conn {
    index: usize,
    frozen: watch::Sender<bool>,
    /// Only the upstream -> client direction frozen (`hold_replies`).
    replies_held: watch::Sender<bool>,
    /// Upstream -> client bytes per second (`throttle_replies`; 0: no limit).
    reply_rate: AtomicUsize,
    /// The local port of the proxy's socket to the server (0 until connected): what the
    /// server sees as this connection's client port.
    upstream_local_port: AtomicUsize,
    killed: watch::Sender<bool>,
    /// Bytes read from either side and not yet delivered to the other.
    held: AtomicUsize,
}

#[derive(Clone, Copy, PartialEq)]
enum Direction {
    ToServer,
    ToClient,
}

/// What one direction read, queued until it may be delivered.
enum Chunk {
    Data {
        due: Instant,
        bytes: Vec<u8>,
    },
    /// The sender closed its side (FIN): passed on as a shutdown of the write side.
    Eof,
    /// Reading failed (e.g. a reset): passed on by tearing the connection down.
    Failed,
}

impl Proxy {
    /// Listens on a free 127.0.0.1 port and forwards to `127.0.0.1:upstream_port`.
    pub fn start(upstream_port: u16) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared {
            frozen_all: watch::Sender::new(false),
            delay: Mutex::new(Duration::ZERO),
            conns: Mutex::new(Vec::new()),
            closed: Condvar::new(),
        });
        let (stop, stopped) = oneshot::channel();
        let runtime_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("proxy runtime");
                rt.block_on(accept_loop(
                    listener,
                    upstream_port,
                    runtime_shared,
                    stopped,
                ));
                // Dropping the runtime drops every connection task, and so every socket.
            })
            .expect("spawn the proxy thread");
        Proxy {
            port,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `redis://127.0.0.1:<port>` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Holds every byte of every current and future connection, in both directions, closing
    /// nothing, until `thaw`.
    pub fn freeze(&self) {
        self.shared.frozen_all.send_replace(true);
    }

    /// Ends `freeze` and every `freeze_connection`, delivering what was held, in order.
    pub fn thaw(&self) {
        self.shared.frozen_all.send_replace(false);
        for slot in self.shared.conns().iter() {
            slot.conn.frozen.send_replace(false);
            slot.conn.replies_held.send_replace(false);
        }
    }

    /// Freezes connection `i` (accept order, from 0) only. Panics if it was not accepted yet.
    pub fn freeze_connection(&self, i: usize) {
        self.conn(i).frozen.send_replace(true);
    }

    /// Ends `freeze_connection(i)` and `hold_replies(i)` (a global `freeze` stays in force).
    pub fn thaw_connection(&self, i: usize) {
        let conn = self.conn(i);
        conn.frozen.send_replace(false);
        conn.replies_held.send_replace(false);
    }

    /// Holds what the server sends on connection `i` (accept order, from 0), closing nothing,
    /// while what the client sends still goes through. Panics if it was not accepted yet.
    pub fn hold_replies(&self, i: usize) {
        self.conn(i).replies_held.send_replace(true);
    }

    /// Delivers what the server sends on connection `i` (accept order, from 0) at
    /// `bytes_per_second` at most, a piece every 10 ms; 0 lifts the limit. Panics if it was not
    /// accepted yet.
    pub fn throttle_replies(&self, i: usize, bytes_per_second: usize) {
        self.conn(i)
            .reply_rate
            .store(bytes_per_second, Ordering::SeqCst);
    }

    /// Holds each upstream -> client chunk for `delay` before delivering it; ZERO turns it off
    /// for chunks arriving from now on.
    pub fn delay_replies(&self, delay: Duration) {
        *self.shared.delay.lock().unwrap_or_else(|e| e.into_inner()) = delay;
    }

    /// Closes both sockets of every open connection (FIN; see the module doc) and returns when
    /// they are closed. Panics if that takes longer than 5 s.
    pub fn kill_all(&self) {
        let conns = self.shared.conns();
        let killed: Vec<usize> = conns
            .iter()
            .filter(|s| s.open)
            .map(|s| {
                s.conn.killed.send_replace(true);
                s.conn.index
            })
            .collect();
        let (_conns, wait) = self
            .shared
            .closed
            .wait_timeout_while(conns, KILL_BOUND, |conns| {
                killed.iter().any(|&i| conns[i].open)
            })
            .unwrap_or_else(|e| e.into_inner());
        assert!(
            !wait.timed_out(),
            "proxy: killed connections still open after {KILL_BOUND:?}"
        );
    }

    /// Connections open right now (accepted and not yet closed on both sides).
    pub fn connections(&self) -> usize {
        self.shared.conns().iter().filter(|s| s.open).count()
    }

    /// Connections accepted since the start, open or not: the next one gets this number.
    pub fn accepted(&self) -> usize {
        self.shared.conns().len()
    }

    /// The port the server sees connection `i` (accept order, from 0) come from (PostgreSQL's
    /// `pg_stat_activity.client_port`, Redis's `CLIENT LIST` addr), once the proxy connected it
    /// upstream (a client that finished connecting through the proxy has). Panics before that.
    pub fn upstream_port(&self, i: usize) -> u16 {
        let port = self.conn(i).upstream_local_port.load(Ordering::SeqCst);
        assert!(
            port != 0,
            "proxy: connection #{i} is not connected upstream yet"
        );
        port as u16
    }

    /// Bytes connection `i` has read and not yet delivered (both directions): while it is
    /// frozen, whatever either side sent since.
    pub fn held_bytes(&self, i: usize) -> usize {
        self.conn(i).held.load(Ordering::SeqCst)
    }

    fn conn(&self, i: usize) -> Arc<Conn> {
        let conns = self.shared.conns();
        let n = conns.len();
        conns
            .get(i)
            .unwrap_or_else(|| panic!("proxy: no connection #{i} accepted yet ({n} so far)"))
            .conn
            .clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn conns(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Numbers a new connection in accept order.
    fn register(&self) -> Arc<Conn> {
        let mut conns = self.conns();
        let conn = Arc::new(Conn {
            index: conns.len(),
            frozen: watch::Sender::new(false),
            replies_held: watch::Sender::new(false),
            reply_rate: AtomicUsize::new(0),
            upstream_local_port: AtomicUsize::new(0),
            killed: watch::Sender::new(false),
            held: AtomicUsize::new(0),
        });
        conns.push(Slot {
            conn: conn.clone(),
            open: true,
        });
        conn
    }

    fn mark_closed(&self, index: usize) {
        self.conns()[index].open = false;
        self.closed.notify_all();
    }

    fn delay(&self) -> Duration {
        *self.delay.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Accepts until the proxy is dropped; each connection is served by its own task.
async fn accept_loop(
    listener: std::net::TcpListener,
    upstream_port: u16,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = TcpListener::from_std(listener).expect("tokio listener");
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let conn = shared.register();
                    tokio::spawn(serve(client, upstream_port, shared.clone(), conn));
                }
                Err(e) => {
                    // E.g. out of file descriptors: back off instead of spinning on the error.
                    eprintln!("proxy: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

/// Forwards one connection until both sides closed it or it is killed.
async fn serve(client: TcpStream, upstream_port: u16, shared: Arc<Shared>, conn: Arc<Conn>) {
    let mut killed = conn.killed.subscribe();
    tokio::select! {
        _ = killed.wait_for(|k| *k) => {}
        r = forward(client, upstream_port, &shared, &conn) => {
            if let Err(e) = r {
                eprintln!("proxy: connection #{} ended: {e}", conn.index);
            }
        }
    }
    // `forward` owned both sockets: once it is dropped or done, they are closed.
    shared.mark_closed(conn.index);
}

async fn forward(
    client: TcpStream,
    upstream_port: u16,
    shared: &Shared,
    conn: &Conn,
) -> io::Result<()> {
    let upstream = TcpStream::connect(("127.0.0.1", upstream_port)).await?;
    conn.upstream_local_port
        .store(upstream.local_addr()?.port().into(), Ordering::SeqCst);
    // Small writes (one command, one reply) must not wait for Nagle.
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    tokio::try_join!(
        pump(
            client_read,
            upstream_write,
            Direction::ToServer,
            shared,
            conn
        ),
        pump(
            upstream_read,
            client_write,
            Direction::ToClient,
            shared,
            conn
        ),
    )?;
    Ok(())
}

/// One direction: a reader that never stops (so held bytes are counted and nothing backs up
/// into TCP flow control) and a writer that delivers each chunk when the connection is not
/// frozen and the chunk is due.
async fn pump(
    src: OwnedReadHalf,
    dst: OwnedWriteHalf,
    dir: Direction,
    shared: &Shared,
    conn: &Conn,
) -> io::Result<()> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::try_join!(
        read_side(src, tx, dir, shared, conn),
        write_side(dst, rx, dir, shared, conn)
    )?;
    Ok(())
}

async fn read_side(
    mut src: OwnedReadHalf,
    tx: mpsc::UnboundedSender<Chunk>,
    dir: Direction,
    shared: &Shared,
    conn: &Conn,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    // Ends at the sender's end of stream or a read error, both queued like data.
    loop {
        let chunk = match src.read(&mut buf).await {
            Ok(0) => Chunk::Eof,
            Ok(n) => {
                conn.held.fetch_add(n, Ordering::SeqCst);
                let delay = if dir == Direction::ToClient {
                    shared.delay()
                } else {
                    Duration::ZERO
                };
                Chunk::Data {
                    due: Instant::now() + delay,
                    bytes: buf[..n].to_vec(),
                }
            }
            Err(_) => Chunk::Failed,
        };
        let last = !matches!(chunk, Chunk::Data { .. });
        if tx.send(chunk).is_err() || last {
            return Ok(());
        }
    }
}

async fn write_side(
    mut dst: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Chunk>,
    dir: Direction,
    shared: &Shared,
    conn: &Conn,
) -> io::Result<()> {
    let mut all = shared.frozen_all.subscribe();
    let mut own = conn.frozen.subscribe();
    // Only replies can be held on their own; requests never are (a sender kept at false).
    let never = watch::Sender::new(false);
    let mut replies = match dir {
        Direction::ToClient => conn.replies_held.subscribe(),
        Direction::ToServer => never.subscribe(),
    };
    // When the next throttled piece may go (`throttle_replies`).
    let mut paced = Instant::now();
    while let Some(chunk) = rx.recv().await {
        let due = match &chunk {
            Chunk::Data { due, .. } => *due,
            Chunk::Eof | Chunk::Failed => Instant::now(),
        };
        until_deliverable(due, &mut all, &mut own, &mut replies).await;
        match chunk {
            Chunk::Data { bytes, .. } => {
                let mut rest = &bytes[..];
                while !rest.is_empty() {
                    // Read per piece, so lifting the limit frees a big chunk at once.
                    let rate = match dir {
                        Direction::ToClient => conn.reply_rate.load(Ordering::SeqCst),
                        Direction::ToServer => 0,
                    };
                    let n = if rate == 0 {
                        rest.len()
                    } else {
                        paced = paced.max(Instant::now());
                        tokio::time::sleep_until(paced).await;
                        paced += Duration::from_millis(10);
                        (rate / 100).clamp(1, rest.len())
                    };
                    let (part, tail) = rest.split_at(n);
                    // Counted as delivered before the write, so a reader that saw the bytes
                    // never sees them still counted as held.
                    conn.held.fetch_sub(part.len(), Ordering::SeqCst);
                    dst.write_all(part).await?;
                    rest = tail;
                }
            }
            Chunk::Eof => return dst.shutdown().await,
            Chunk::Failed => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "the other side failed",
                ))
            }
        }
    }
    Ok(())
}

/// Waits until neither the proxy nor this connection (nor this direction) is frozen and `due`
/// has come. Each pass waits for a change of a freeze flag or for `due`, so it loops only when
/// something changed.
async fn until_deliverable(
    due: Instant,
    all: &mut watch::Receiver<bool>,
    own: &mut watch::Receiver<bool>,
    direction: &mut watch::Receiver<bool>,
) {
    loop {
        let frozen =
            *all.borrow_and_update() || *own.borrow_and_update() || *direction.borrow_and_update();
        if frozen {
            tokio::select! {
                r = all.changed() => if r.is_err() { return },
                r = own.changed() => if r.is_err() { return },
                r = direction.changed() => if r.is_err() { return },
            }
        } else if Instant::now() < due {
            // A freeze may start meanwhile: check again after the sleep.
            tokio::time::sleep_until(due).await;
        } else {
            return;
        }
    }
}

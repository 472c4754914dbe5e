//! A loopback TCP forwarder whose upstream can be changed: the PostgreSQL run puts it between
//! the clients' proxies and the primary, so a promotion repoints every client at once (as a
//! virtual IP or a DNS switch does in production) while each client keeps the one URL it was
//! started with. The proxies in front of it (`proxy.rs`) forward to a fixed port.

use std::io;
use std::net::TcpListener as StdListener;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Switch {
    port: u16,
    upstream: Arc<AtomicU16>,
    /// Bumped by a repoint: every connection open at that moment closes. Dropped to stop.
    generation: Option<watch::Sender<u64>>,
    thread: Option<JoinHandle<()>>,
}

impl Switch {
    /// Listens on a free `127.0.0.1` port and forwards to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> io::Result<Switch> {
        let listener = StdListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let upstream = Arc::new(AtomicU16::new(upstream));
        let (generation, watching) = watch::channel(0u64);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let target = upstream.clone();
        let thread = std::thread::Builder::new()
            .name("chaos-switch".into())
            .spawn(move || rt.block_on(serve(listener, target, watching)))?;
        Ok(Switch {
            port,
            upstream,
            generation: Some(generation),
            thread: Some(thread),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// New connections go to `127.0.0.1:upstream`; the open ones are closed, so no client
    /// keeps talking to the old server through a connection it opened before.
    pub fn repoint(&self, upstream: u16) {
        self.upstream.store(upstream, Ordering::SeqCst);
        if let Some(generation) = &self.generation {
            generation.send_modify(|g| *g += 1);
        }
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        // The accept loop and every connection see the channel close and end.
        drop(self.generation.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: StdListener,
    upstream: Arc<AtomicU16>,
    mut generation: watch::Receiver<u64>,
) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let port = upstream.load(Ordering::SeqCst);
                tokio::spawn(forward(client, port, generation.clone()));
            }
            changed = generation.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

/// Copies both ways until either side closes, the switch is repointed, or it stops. The
/// receiver was cloned at accept time, so a repoint from then on closes this connection even
/// if it raced with the accept (the client reconnects; a connection must never outlive it).
async fn forward(mut client: TcpStream, port: u16, mut generation: watch::Receiver<u64>) {
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = generation.changed() => {}
    }
}

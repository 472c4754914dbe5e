//! One loopback TCP proxy per client in front of the single server (or the PostgreSQL
//! deployment's switch), so the nemesis can partition one client from the store without
//! touching the others. The proxy itself is the one
//! the integration tests use (`tests/common/proxy.rs`: freeze, delay replies, cut).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use crate::tcp_proxy::Proxy;

pub struct Proxies {
    proxies: Vec<Proxy>,
}

impl Proxies {
    /// `count` proxies to `127.0.0.1:upstream_port`.
    pub fn start(count: usize, upstream_port: u16) -> Self {
        Proxies {
            proxies: (0..count).map(|_| Proxy::start(upstream_port)).collect(),
        }
    }

    /// The port client `id` connects to.
    pub fn port(&self, id: usize) -> u16 {
        self.proxies[id].port()
    }

    /// The Redis URL client `id` connects to.
    pub fn url(&self, id: usize) -> String {
        self.proxies[id].url()
    }

    /// Holds every byte both ways on client `id`'s connections, closing nothing.
    pub fn freeze(&self, id: usize) {
        self.proxies[id].freeze();
    }

    pub fn thaw(&self, id: usize) {
        self.proxies[id].thaw();
    }

    /// Delays every reply to client `id` by `delay` (ZERO ends it).
    pub fn delay(&self, id: usize, delay: Duration) {
        self.proxies[id].delay_replies(delay);
    }

    /// Closes every connection of client `id`; false if the proxy could not close them in
    /// time (it panics then, which must not take the nemesis down).
    pub fn cut(&self, id: usize) -> bool {
        catch_unwind(AssertUnwindSafe(|| self.proxies[id].kill_all())).is_ok()
    }
}

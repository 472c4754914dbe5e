//! Loopback TCP proxies per client in front of the single server, the PostgreSQL deployment's
//! switch, or each server of the ZooKeeper ensemble, so the nemesis can partition one client
//! from the store without touching the others. The proxy itself is the one the integration
//! tests use (`tests/common/proxy.rs`: freeze, delay or throttle replies, cut).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use crate::tcp_proxy::Proxy;

pub struct Proxies {
    /// Per client, one proxy per upstream server.
    proxies: Vec<Vec<Proxy>>,
}

impl Proxies {
    /// `count` proxies to `127.0.0.1:upstream_port`.
    pub fn start(count: usize, upstream_port: u16) -> Self {
        Self::start_each(count, &[upstream_port])
    }

    /// For each of `count` clients, one proxy to each of `upstream_ports` (an ensemble's
    /// servers: a client partitioned from one server would only move to another).
    pub fn start_each(count: usize, upstream_ports: &[u16]) -> Self {
        Proxies {
            proxies: (0..count)
                .map(|_| upstream_ports.iter().map(|p| Proxy::start(*p)).collect())
                .collect(),
        }
    }

    /// The port client `id` connects to (its proxy to the first upstream).
    pub fn port(&self, id: usize) -> u16 {
        self.proxies[id][0].port()
    }

    /// Client `id`'s ports, one per upstream, in the upstreams' order.
    pub fn ports(&self, id: usize) -> Vec<u16> {
        self.proxies[id].iter().map(Proxy::port).collect()
    }

    /// The Redis URL client `id` connects to.
    pub fn url(&self, id: usize) -> String {
        self.proxies[id][0].url()
    }

    /// Holds every byte both ways on client `id`'s connections, closing nothing.
    pub fn freeze(&self, id: usize) {
        self.proxies[id].iter().for_each(Proxy::freeze);
    }

    pub fn thaw(&self, id: usize) {
        self.proxies[id].iter().for_each(Proxy::thaw);
    }

    /// Delays every reply to client `id` by `delay` (ZERO ends it).
    pub fn delay(&self, id: usize, delay: Duration) {
        for p in &self.proxies[id] {
            p.delay_replies(delay);
        }
    }

    /// Delivers what the servers send on client `id`'s open connections at `bytes_per_second`
    /// at most (0 ends it): a congested link that still carries every reply, so they queue up
    /// and arrive late. Connections opened meanwhile go at full speed.
    pub fn throttle(&self, id: usize, bytes_per_second: usize) {
        for p in &self.proxies[id] {
            for i in 0..p.accepted() {
                p.throttle_replies(i, bytes_per_second);
            }
        }
    }

    /// Closes every connection of client `id`; false if a proxy could not close them in
    /// time (it panics then, which must not take the nemesis down).
    pub fn cut(&self, id: usize) -> bool {
        // Every proxy of the client is cut, whether or not one before it failed to.
        let cut: Vec<bool> = self.proxies[id]
            .iter()
            .map(|p| catch_unwind(AssertUnwindSafe(|| p.kill_all())).is_ok())
            .collect();
        cut.iter().all(|ok| *ok)
    }
}

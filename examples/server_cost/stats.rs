//! What the Redis servers spent: `INFO commandstats` (the time of the commands a client sends,
//! a script's own calls included) and the main thread's CPU, summed over every node.

use std::time::{Duration, Instant};

use dlock::redis::{self, aio::MultiplexedConnection};

/// The nodes whose time is counted: the one server, or every master of a cluster.
pub struct Servers {
    nodes: Vec<MultiplexedConnection>,
    /// CPU seconds (user, sys) of each node's main thread at the last reset, and when.
    cpu_at_reset: Vec<(f64, f64)>,
    reset_at: Instant,
}

/// One stretch's figures, summed over the nodes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reading {
    /// Calls of the commands asked for (a multi-lock's acquire is several).
    pub calls: u64,
    /// Their total time in µs, as Redis measures it (`usec` of `INFO commandstats`).
    pub usec: u64,
    /// Main-thread CPU µs since the reset (`used_cpu_user_main_thread`, `..._sys_...`): the
    /// scripts plus reading requests and writing replies.
    pub cpu_user_us: f64,
    pub cpu_sys_us: f64,
    pub wall: Duration,
}

impl Servers {
    pub async fn open(urls: &[String]) -> Servers {
        let mut nodes = Vec::new();
        for url in urls {
            let client = redis::Client::open(url.as_str()).expect("redis url");
            nodes.push(
                client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect to a node"),
            );
        }
        let mut s = Servers {
            cpu_at_reset: vec![(0.0, 0.0); nodes.len()],
            nodes,
            reset_at: Instant::now(),
        };
        s.reset().await;
        s
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// `CONFIG RESETSTAT` on every node; the CPU counters (which it leaves alone) are noted.
    pub async fn reset(&mut self) {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(node)
                .await
                .expect("CONFIG RESETSTAT");
            let info = info(node, "cpu").await;
            self.cpu_at_reset[i] = cpu(&info);
        }
        self.reset_at = Instant::now();
    }

    /// The calls and time of the commands `sent` (lower-case names, as `cmdstat_<name>`) and
    /// the CPU since the last reset.
    pub async fn read(&mut self, sent: &[&str]) -> Reading {
        let wall = self.reset_at.elapsed();
        let mut r = Reading {
            wall,
            ..Reading::default()
        };
        for (i, node) in self.nodes.iter_mut().enumerate() {
            // One INFO for both sections, so the CPU read is as close to the stretch's end as
            // the command counts.
            let text = info(node, "cpu commandstats").await;
            for name in sent {
                let (calls, usec) = cmdstat(&text, name);
                r.calls += calls;
                r.usec += usec;
            }
            let (user, sys) = cpu(&text);
            let (u0, s0) = self.cpu_at_reset[i];
            r.cpu_user_us += (user - u0) * 1e6;
            r.cpu_sys_us += (sys - s0) * 1e6;
        }
        r
    }
}

async fn info(node: &mut MultiplexedConnection, sections: &str) -> String {
    let mut cmd = redis::cmd("INFO");
    for s in sections.split_whitespace() {
        cmd.arg(s);
    }
    cmd.query_async(node).await.expect("INFO")
}

/// `calls` and `usec` of `cmdstat_<name>:calls=..,usec=..,usec_per_call=..` (0 if absent).
fn cmdstat(info: &str, name: &str) -> (u64, u64) {
    let prefix = format!("cmdstat_{name}:");
    let Some(line) = info.lines().find_map(|l| l.strip_prefix(prefix.as_str())) else {
        return (0, 0);
    };
    let field = |key: &str| -> u64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("calls="), field("usec="))
}

/// The main thread's (user, sys) CPU seconds; the whole process's where the server does not
/// report its main thread (before 6.2).
fn cpu(info: &str) -> (f64, f64) {
    let field = |key: &str| -> Option<f64> {
        info.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
    };
    let user = field("used_cpu_user_main_thread:").or_else(|| field("used_cpu_user:"));
    let sys = field("used_cpu_sys_main_thread:").or_else(|| field("used_cpu_sys:"));
    (user.unwrap_or(0.0), sys.unwrap_or(0.0))
}

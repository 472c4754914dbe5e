//! The stock of `--store zookeeper`: one znode per stock counter (its data the units left, as
//! decimal text) under one parent node per run, and one session that carries every buyer's
//! requests (the client pipelines them).

use std::time::{Duration, Instant};

use zookeeper_client::{Acls, Client, CreateMode, Error, Stat};

/// How long opening the session may take before the run gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The stock counters of one run, under `root`.
#[derive(Clone)]
pub struct StockTree {
    client: Client,
    root: String,
}

/// `zk://[user:password@]host:port[,host:port][/chroot]` as the client's connect string
/// (`host:port,...[/chroot]`) and its digest credentials, if any.
pub fn connect_string(url: &str) -> (String, Option<String>) {
    let rest = url.strip_prefix("zk://").unwrap_or(url);
    // Credentials end at the last `@` before the chroot's first `/`.
    let (authority, chroot) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{hosts}{chroot}"), Some(auth.to_owned())),
        None => (rest.to_owned(), None),
    }
}

/// The URL with its password hidden, for the header line.
pub fn describe(url: &str) -> String {
    let (hosts, auth) = connect_string(url);
    match auth.as_deref().and_then(|a| a.split_once(':')) {
        Some((user, _)) => format!("zk://{user}:***@{hosts}"),
        None => format!("zk://{hosts}"),
    }
}

impl StockTree {
    /// Opens a session to `url` and creates this run's parent node `root` (`/<name>`).
    pub async fn open(url: &str, root: &str) -> Result<StockTree, Error> {
        let (hosts, auth) = connect_string(url);
        let mut connector = Client::connector().with_session_timeout(Duration::from_secs(30));
        if let Some(auth) = auth {
            connector = connector.with_auth("digest", auth.as_bytes());
        }
        let client = tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(&hosts))
            .await
            .map_err(|_| Error::Timeout)??;
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        match client.create(root, b"", &persistent).await {
            Ok(_) | Err(Error::NodeExists) => {}
            Err(e) => return Err(e),
        }
        Ok(StockTree {
            client,
            root: root.to_owned(),
        })
    }

    fn path(&self, item: &str) -> String {
        format!("{}/{item}", self.root)
    }

    /// Puts `units` in stock for `item`, creating its node if needed.
    pub async fn set(&self, item: &str, units: u64) -> Result<(), Error> {
        let (path, data) = (self.path(item), units.to_string().into_bytes());
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        match self.client.create(&path, &data, &persistent).await {
            Ok(_) => Ok(()),
            Err(Error::NodeExists) => self.client.set_data(&path, &data, None).await.map(drop),
            Err(e) => Err(e),
        }
    }

    /// The units left for `item`, with the node's data version (for a conditional write).
    pub async fn get(&self, item: &str) -> Result<(i64, i32), Error> {
        let (data, stat): (Vec<u8>, Stat) = self.client.get_data(&self.path(item)).await?;
        let units = std::str::from_utf8(&data)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error::UnexpectedError(format!("stock node {item} holds no number")))?;
        Ok((units, stat.version))
    }

    /// Writes `units` for `item`: whatever its version (`None`), or only if it is still
    /// `version` (else `Error::BadVersion`: somebody wrote in between).
    pub async fn write(&self, item: &str, units: i64, version: Option<i32>) -> Result<(), Error> {
        let data = units.to_string().into_bytes();
        self.client
            .set_data(&self.path(item), &data, version)
            .await
            .map(drop)
    }

    /// The median of `samples` sequential `exists` round trips: what the report's ratios use.
    pub async fn exists_rtt(&self, samples: usize) -> Result<Duration, Error> {
        let mut times = Vec::with_capacity(samples);
        for _ in 0..samples.max(1) {
            let sent = Instant::now();
            self.client.check_stat(&self.root).await?;
            times.push(sent.elapsed());
        }
        times.sort();
        Ok(times[times.len() / 2])
    }

    /// Deletes this run's stock nodes and their parent.
    pub async fn delete_run(&self) -> Result<(), Error> {
        for child in self.client.list_children(&self.root).await? {
            match self.client.delete(&self.path(&child), None).await {
                Ok(()) | Err(Error::NoNode) => {}
                Err(e) => return Err(e),
            }
        }
        match self.client.delete(&self.root, None).await {
            Ok(()) | Err(Error::NoNode) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

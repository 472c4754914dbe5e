//! Where the locks are read from: Redis (scanned and read key by key, `deployment.rs`), or a
//! store that answers queries, PostgreSQL or ZooKeeper (asked through the runtime,
//! `stored.rs`). The commands ask this, not a store.

use dlock_runtime::inspect::{self, Kind, Layout};
use dlock_runtime::{LockClient, LockClientBuilder};

use crate::args::{KindArg, Target};
use crate::deployment::Deployment;
use crate::snapshot::{self, LockView};
use crate::{list, scan};

pub enum Source {
    Redis(Deployment),
    #[cfg(any(feature = "postgres", feature = "zookeeper"))]
    Stored(crate::stored::Store),
}

impl Source {
    // `prefix`: a queried store's client is built with it.
    #[cfg_attr(
        not(all(feature = "postgres", feature = "zookeeper")),
        allow(unused_variables)
    )]
    pub async fn open(target: &Target, prefix: &str) -> Result<Source, String> {
        if target.is_postgres() {
            #[cfg(feature = "postgres")]
            return crate::stored::Store::open(target, prefix, crate::stored::Which::Postgres)
                .await
                .map(Source::Stored);
            #[cfg(not(feature = "postgres"))]
            return Err(without_feature(target, "a PostgreSQL store", "postgres"));
        }
        if target.is_zookeeper() {
            #[cfg(feature = "zookeeper")]
            return crate::stored::Store::open(target, prefix, crate::stored::Which::Zookeeper)
                .await
                .map(Source::Stored);
            #[cfg(not(feature = "zookeeper"))]
            return Err(without_feature(target, "a ZooKeeper ensemble", "zookeeper"));
        }
        Deployment::open(target).await.map(Source::Redis)
    }

    /// What was connected to, passwords removed.
    pub fn shown(&self) -> &str {
        match self {
            Source::Redis(dep) => &dep.shown,
            #[cfg(any(feature = "postgres", feature = "zookeeper"))]
            Source::Stored(store) => store.shown(),
        }
    }

    /// Every lock in use, sorted by name and kind, waiters counted where they can be.
    pub async fn list(
        &mut self,
        prefix: &str,
        redisson: bool,
    ) -> Result<Vec<(Layout, LockView)>, String> {
        match self {
            Source::Redis(dep) => {
                let mut views = Vec::new();
                for layout in scan::find(dep, prefix).await? {
                    let view = snapshot::read(&mut dep.keyed, &layout).await?;
                    // Freed between the SCAN and the read: nothing to show any more.
                    if view.in_use() {
                        views.push((layout, view));
                    }
                }
                if redisson {
                    views.extend(scan::find_redisson(dep).await?);
                    views.sort_by(|(a, _), (b, _)| (&a.name, a.kind).cmp(&(&b.name, b.kind)));
                }
                snapshot::count_waiting(dep, &mut views).await?;
                Ok(views)
            }
            #[cfg(any(feature = "postgres", feature = "zookeeper"))]
            Source::Stored(store) => {
                if redisson {
                    return Err(redisson_elsewhere(store));
                }
                store.views(None).await
            }
        }
    }

    /// The views of `name`: of `kind` whatever its state, else of every kind in use.
    pub async fn read_kinds(
        &mut self,
        prefix: &str,
        name: &str,
        kind: Option<KindArg>,
    ) -> Result<Vec<(Layout, LockView)>, String> {
        match self {
            Source::Redis(dep) => list::read_kinds(dep, prefix, name, kind).await,
            #[cfg(any(feature = "postgres", feature = "zookeeper"))]
            Source::Stored(store) => {
                let Some(kind) = kind else {
                    return store.views(Some(name)).await;
                };
                let kind = Kind::from(kind);
                if kind.is_redisson() {
                    return Err(redisson_elsewhere(store));
                }
                let found = store.views(Some(name)).await?;
                let view = found.into_iter().find(|(layout, _)| layout.kind == kind);
                Ok(vec![view.unwrap_or_else(|| {
                    let layout = Layout::new(prefix, kind, name);
                    let view = LockView::empty(&layout);
                    (layout, view)
                })])
            }
        }
    }

    /// The lock of `layout` now (waiters not counted).
    #[cfg_attr(
        not(any(feature = "postgres", feature = "zookeeper")),
        allow(unused_variables)
    )]
    pub async fn read(&mut self, prefix: &str, layout: &Layout) -> Result<LockView, String> {
        match self {
            Source::Redis(dep) => snapshot::read(&mut dep.keyed, layout).await,
            #[cfg(any(feature = "postgres", feature = "zookeeper"))]
            Source::Stored(_) => {
                let kind = kind_arg(layout.kind);
                let mut views = self.read_kinds(prefix, &layout.name, Some(kind)).await?;
                Ok(views.remove(0).1)
            }
        }
    }

    /// The runtime's force unlock of the lock `name` of `kind` (`true`: it was held), through
    /// a lock client of the same store: the kind's own force-unlock script or SQL function, or
    /// on ZooKeeper the deletion of the holders' children; each wakes the lock's waiters.
    pub async fn force_unlock(
        &self,
        target: &Target,
        prefix: &str,
        kind: Kind,
        name: &str,
    ) -> Result<bool, String> {
        match self {
            Source::Redis(_) => {
                let client = redis_client(target, prefix).await?;
                let result = inspect::force_unlock(&client, kind, name).await;
                client.shutdown().await;
                result.map_err(|e| e.to_string())
            }
            #[cfg(any(feature = "postgres", feature = "zookeeper"))]
            Source::Stored(store) => inspect::force_unlock(store.client(), kind, name)
                .await
                .map_err(|e| e.to_string()),
        }
    }

    /// Closes what was opened (a queried store's client: ZooKeeper's session ends at once
    /// rather than at its timeout).
    pub async fn close(self) {
        #[cfg(any(feature = "postgres", feature = "zookeeper"))]
        if let Source::Stored(store) = self {
            store.client().clone().shutdown().await;
        }
    }
}

#[cfg(any(feature = "postgres", feature = "zookeeper"))]
fn redisson_elsewhere(store: &crate::stored::Store) -> String {
    format!(
        "Redisson's layout exists only on Redis: a {} store keeps no Redisson-kind locks",
        store.which().name()
    )
}

/// `--url` names `store`, which this build left out with its cargo `feature`.
#[cfg(not(all(feature = "postgres", feature = "zookeeper")))]
fn without_feature(target: &Target, store: &str, feature: &str) -> String {
    format!(
        "--url {} is {store}, and this dlock was built without the `{feature}` feature: \
         install it with that feature (on by default: `cargo install dlock-redis-cli`)",
        dlock_runtime::inspect::redact_url(&target.single_url())
    )
}

#[cfg(any(feature = "postgres", feature = "zookeeper"))]
fn kind_arg(kind: Kind) -> KindArg {
    match kind {
        Kind::ReadWrite => KindArg::Rw,
        Kind::Fair => KindArg::Fair,
        Kind::Semaphore => KindArg::Semaphore,
        Kind::Redisson => KindArg::Redisson,
        Kind::RedissonReadWrite => KindArg::RedissonRw,
        _ => KindArg::Plain,
    }
}

/// A lock client for the same Redis deployment, as an application would build it.
async fn redis_client(target: &Target, prefix: &str) -> Result<LockClient, String> {
    let mut builder: LockClientBuilder = if !target.cluster.is_empty() {
        LockClient::cluster_builder(target.cluster.iter().cloned())
    } else if !target.sentinel.is_empty() {
        let b = LockClient::sentinel_builder(
            target.sentinel.iter().cloned(),
            target.master.clone().unwrap_or_default(),
        );
        match &target.master_password {
            Some(pw) => b.master_auth(target.master_user.as_deref(), pw),
            None => b,
        }
    } else {
        LockClient::builder(target.single_url())
    };
    if let Some(path) = &target.tls_ca {
        let pem = std::fs::read(path)
            .map_err(|e| format!("cannot read --tls-ca {}: {e}", path.display()))?;
        builder = builder.tls_root_certificates(pem);
    }
    builder
        .key_prefix(prefix)
        .response_timeout(target.timeout)
        .connect_timeout(target.timeout)
        .build()
        .await
        .map_err(|e| e.to_string())
}

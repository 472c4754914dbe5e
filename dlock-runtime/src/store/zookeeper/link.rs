//! `ZkLink`: the seam's operations on ZooKeeper, as Curator's `InterProcessMutex` does them.
//!
//! One session carries every request of this client, in order (ZooKeeper answers a session's
//! requests in the order sent), so a release and a later acquire of one key run in that order.
//! Each request is bounded by the response timeout.

use std::future::Future;
use std::sync::Arc;

use zookeeper_client::{Acls, Client, CreateMode, Error};

use super::errors::ZkError;
use super::names::{child_prefix, lock_path, sequence};
use super::store::{Owned, ZkStore};
use crate::store::redis::backend::names::LockKeys;
use crate::store::redis::kinds::{Claim, LockKind};

/// How one kind's children are named and ordered, as Curator's recipes do.
#[derive(Clone, Copy, Debug)]
pub(super) struct Recipe {
    /// The lock name in this kind's child names (`_c_<uuid>-<name><sequence>`).
    name: &'static str,
    /// Every name whose children share one line (a read-write lock's readers and writers).
    line: &'static [&'static str],
    /// Readers share: held while no writer is ahead (else first of all).
    reader: bool,
    /// Where its children live under the lock's node (a semaphore's two folders).
    pub(super) dir: &'static str,
    /// Whether several owners hold at once (readers, a semaphore's leases): a force unlock
    /// deletes every child, not the first.
    shared: bool,
}

/// Curator's `InterProcessMutex`: `_c_<uuid>-lock-<10-digit sequence>`.
pub(super) const MUTEX: Recipe = Recipe {
    name: "lock-",
    line: &["lock-"],
    reader: false,
    dir: "",
    shared: false,
};

/// Curator's `InterProcessReadWriteLock`: readers `__READ__` and writers `__WRIT__` (names of
/// one length, on purpose) in one line under one node.
pub(super) const READ: Recipe = Recipe {
    name: "__READ__",
    line: &["__READ__", "__WRIT__"],
    reader: true,
    dir: "",
    shared: true,
};
const WRITE: Recipe = Recipe {
    name: "__WRIT__",
    line: &["__READ__", "__WRIT__"],
    reader: false,
    dir: "",
    shared: true,
};

/// Curator's `InterProcessSemaphoreV2`: a permit is a lease child
/// `<lock>/leases/_c_<uuid>-lease-<seq>`, taken under the mutex `<lock>/locks`, so waiters
/// go in one at a time, in order, and only the first watches the leases.
pub(super) const LEASE: Recipe = Recipe {
    name: "lease-",
    line: &["lease-"],
    reader: false,
    dir: "/leases",
    shared: true,
};
pub(super) const SEM_LOCKS: Recipe = Recipe {
    name: "lock-",
    line: &["lock-"],
    reader: false,
    dir: "/locks",
    shared: false,
};

impl Recipe {
    /// `claim`'s entry in the store's owners: an owner may hold both sides of a read-write
    /// lock (a writer reading).
    fn key(self, claim: &Claim) -> String {
        format!("{}\n{}{}", claim.owner, self.dir, self.name)
    }

    /// The node whose children are this kind's line, for the lock at `key`.
    fn path(self, key: &str) -> String {
        format!("{}{}", lock_path(key), self.dir)
    }

    /// A child's place in this kind's line and whether it is a writer's; `None` for a child
    /// of another recipe.
    pub(super) fn place(self, child: &str) -> Option<(i64, bool)> {
        self.line
            .iter()
            .find_map(|name| sequence(child, name).map(|s| (s, *name == WRITE.name)))
    }
}

/// How many times one attempt looks again when the children moved under it (a predecessor
/// gone between the listing and the watch): each look is a round trip; past this the attempt
/// answers "held" and the waiter looks again when woken or after its lease.
const LOOKS: usize = 8;

/// Attempts one acquire makes when the connection breaks under it while the session lives:
/// before each retry, the client is given a response timeout to be connected again.
const TRIES_ON_CONNECTION_LOSS: usize = 3;

/// The kinds this store offers, by `LockKind::id`: the plain lock and the fair lock are both
/// Curator's mutex (first come, first served by construction); the read-write lock's sides
/// are Curator's read-write lock.
fn offered(kind: &dyn LockKind) -> Result<Recipe, ZkError> {
    match kind.id() {
        "plain" | "fair" => Ok(MUTEX),
        "read" => Ok(READ),
        "write" => Ok(WRITE),
        "semaphore" => Ok(LEASE),
        other => Err(ZkError::not_offered(other)),
    }
}

/// The owners-map entry of `owner`'s hold of the kind `kind_id` (see `Recipe::key`), for the
/// machinery's clean-ups that know an owner and a kind; `None` for a kind not offered here.
pub(crate) fn entry_key(owner: &str, kind_id: &str) -> Option<String> {
    let recipe = match kind_id {
        "plain" | "fair" => MUTEX,
        "read" => READ,
        "write" => WRITE,
        "semaphore" => LEASE,
        _ => return None,
    };
    Some(format!("{owner}\n{}{}", recipe.dir, recipe.name))
}

#[derive(Clone)]
pub(crate) struct ZkLink {
    pub(super) store: Arc<ZkStore>,
}

impl ZkLink {
    pub(crate) fn new(store: Arc<ZkStore>) -> Self {
        ZkLink { store }
    }

    /// `call`, bounded by the response timeout, its failure described by `doing`.
    pub(super) async fn bounded<T>(
        &self,
        doing: impl FnOnce() -> String,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<Result<T, Error>, ZkError> {
        match tokio::time::timeout(self.store.response_timeout, call).await {
            Ok(r) => Ok(r),
            Err(_) => Err(ZkError::timeout(doing())),
        }
    }

    /// Takes the lock for `claim.owner` (or one more hold of it, `reentry`): `(count, token)`
    /// when held, `(0, -1)` while another owner holds it (this owner's child stays in line,
    /// and the child before it is watched: its change wakes the waiter's channel).
    ///
    /// A connection that breaks under the attempt while the session lives (a server killed or
    /// restarted, a leader change, a dropped or reset link, a server that stopped answering
    /// for the client's connection timeout) is ridden out here, as Curator's retry loop does:
    /// once the client is connected again (within a response timeout), the attempt runs again,
    /// and a create whose reply was lost is found by its protected name (`adopt`, after a sync
    /// so a server behind the leader cannot hide it; a second child made all the same is
    /// deleted when seen ahead of the owner's own, see `stand_in_line`). dlock's own response
    /// timeout is not ridden out: that request may still be running on a live connection. Without this, an attempt cut between its create and its watch would fail
    /// before any "held" answer, and the machinery gives such a failure to the caller at once,
    /// whatever the wait: right for a store that is down, wrong for a blip ZooKeeper's client
    /// repairs in milliseconds.
    pub(crate) async fn acquire(
        &self,
        kind: &dyn LockKind,
        claim: &Claim,
        reentry: Option<&str>,
    ) -> Result<(i64, i64), ZkError> {
        let mut tries = 1;
        loop {
            match self.acquire_once(kind, claim, reentry).await {
                Err(e)
                    if e.is_connection_drop()
                        && tries < TRIES_ON_CONNECTION_LOSS
                        && self
                            .store
                            .reconnected(tokio::time::Instant::now() + self.store.response_timeout)
                            .await =>
                {
                    tracing::debug!(lock = %claim.name, error = %e, "dlock: ZooKeeper connection lost during an acquire; trying again on the new connection");
                    tries += 1;
                }
                other => return other,
            }
        }
    }

    async fn acquire_once(
        &self,
        kind: &dyn LockKind,
        claim: &Claim,
        reentry: Option<&str>,
    ) -> Result<(i64, i64), ZkError> {
        let recipe = offered(kind)?;
        let client = self.store.live_client().await;
        let session = client.session_id().0;
        if claim.hard {
            return Err(ZkError::refused(
                format!("taking {} with a hard lease", claim.name),
                "on ZooKeeper the lease is the client's session, renewed while it lives: a hard `lease` cannot be kept; use `ttl` (not used here either) or none",
            ));
        }
        if let Some(marker) = reentry {
            // One round trip all the same: the machinery counts a re-entry's answer as a
            // renewal, and only the ensemble's answer proves the session alive.
            let held = match self.store.owners().get(&recipe.key(claim)) {
                Some(o) if o.count > 0 && o.session == session => Some(o.path.clone()),
                _ => None,
            };
            let child = match held {
                Some(child) => child,
                None if recipe.reader => {
                    return self.read_as_writer(&client, claim, marker).await;
                }
                None => return Ok((0, -1)),
            };
            let checked = self
                .bounded(|| format!("checking {child}"), client.check_stat(&child))
                .await?;
            return match checked {
                Ok(Some(stat)) if stat.ephemeral_owner == session => {
                    let mut owners = self.store.owners();
                    Ok(match owners.get_mut(&recipe.key(claim)) {
                        Some(o) if o.count > 0 => {
                            o.count += 1;
                            o.markers.push(marker.to_owned());
                            (o.count, 0)
                        }
                        _ => (0, -1),
                    })
                }
                Ok(_) => Ok((0, -1)),
                Err(e) => Err(ZkError::client(format!("checking {child}"), e)),
            };
        }
        if recipe.dir == LEASE.dir {
            return self.acquire_permit(kind, claim, &client).await;
        }
        let path = lock_path(&claim.keys.key);
        let known = {
            let mut owners = self.store.owners();
            match owners.get(&recipe.key(claim)) {
                Some(o) if o.session == session => Some((o.path.clone(), o.czxid)),
                // A child of an ended session is gone with it.
                Some(_) => {
                    owners.remove(&recipe.key(claim));
                    None
                }
                None => None,
            }
        };
        let (mut mine, mut czxid) = match known {
            Some((child, czxid)) if !child.is_empty() => (child, czxid),
            // A create of this owner whose reply never came: its child may be there.
            Some(_) => self.adopt(&client, &path, claim, recipe).await?,
            None => self.create(&client, &path, claim, recipe).await?,
        };
        match self
            .stand_in_line(kind, claim, &client, &path, recipe, (&mut mine, &mut czxid))
            .await
        {
            Err(e) if !e.is_link_error() => {
                // Refused after this owner's child was made: take the child back now, or
                // nothing would (the machinery reads a refusal as "nothing ran").
                self.forget_child(&client, claim, recipe).await;
                Err(e)
            }
            other => other,
        }
    }

    /// A semaphore's permit, as Curator's `InterProcessSemaphoreV2` takes one: first the
    /// mutex `<lock>/locks` (a waiter behind another watches the one before it); then, first
    /// there, a lease child under `<lock>/leases`, held if the leases are at most the permits
    /// (the mutex is given back), else the leases are watched by this head waiter alone (it
    /// keeps the mutex, as Curator's does). The permit count is kept as the lock node's data
    /// while any child lives, so clients that disagree on it are told.
    async fn acquire_permit(
        &self,
        kind: &dyn LockKind,
        claim: &Claim,
        client: &Client,
    ) -> Result<(i64, i64), ZkError> {
        let permits = kind
            .permits()
            .ok_or_else(|| ZkError::refused("using a semaphore", "its permit count is unknown"))?;
        let session = client.session_id().0;
        let held = match self.store.owners().get(&LEASE.key(claim)) {
            Some(o) if o.count > 0 && o.session == session => Some(o.czxid),
            _ => None,
        };
        if let Some(czxid) = held {
            // A re-sent attempt of a permit already granted.
            return Ok((1, czxid));
        }
        self.ensure_base(client, &lock_path(&claim.keys.key), permits)
            .await?;
        // The mutex first.
        let locks = SEM_LOCKS.path(&claim.keys.key);
        let known = match self.store.owners().get(&SEM_LOCKS.key(claim)) {
            Some(o) if o.session == session => Some((o.path.clone(), o.czxid)),
            _ => None,
        };
        let (mut mine, mut czxid) = match known {
            Some((child, czxid)) if !child.is_empty() => (child, czxid),
            Some(_) => self.adopt(client, &locks, claim, SEM_LOCKS).await?,
            None => self.create(client, &locks, claim, SEM_LOCKS).await?,
        };
        let (first, _) = self
            .stand_in_line(
                kind,
                claim,
                client,
                &locks,
                SEM_LOCKS,
                (&mut mine, &mut czxid),
            )
            .await?;
        if first == 0 {
            return Ok((0, -1));
        }
        // First at the mutex: a lease.
        let leases = LEASE.path(&claim.keys.key);
        let known = match self.store.owners().get(&LEASE.key(claim)) {
            Some(o) if o.session == session => Some((o.path.clone(), o.czxid)),
            _ => None,
        };
        let (lease, lease_zxid) = match known {
            Some((child, czxid)) if !child.is_empty() => (child, czxid),
            Some(_) => self.adopt(client, &leases, claim, LEASE).await?,
            None => self.create(client, &leases, claim, LEASE).await?,
        };
        let watched = self
            .bounded(
                || format!("watching the children of {leases}"),
                client.get_and_watch_children(&leases),
            )
            .await?;
        let (children, _, watcher) = match watched {
            Ok(w) => w,
            Err(e) => return Err(ZkError::client(format!("watching {leases}"), e)),
        };
        let name = lease.rsplit('/').next().unwrap_or_default();
        if !children.iter().any(|c| c == name) {
            // Our lease is gone (force-unlocked): the next attempt makes another.
            self.store.owners().remove(&LEASE.key(claim));
            return Ok((0, -1));
        }
        // A second lease of this owner (a create whose reply was lost, missed by the look for
        // it) would hold a permit until the session ends: deleted, and not counted.
        let protected = child_prefix(&claim.owner, LEASE.name);
        let mut strays = 0;
        for stray in children
            .iter()
            .filter(|c| c.starts_with(&protected) && c.as_str() != name)
        {
            let stray = format!("{leases}/{stray}");
            tracing::warn!(lock = %claim.name, child = %stray, "dlock: deleting a second lease of this owner, left by a create whose reply was lost");
            let deleted = self
                .bounded(|| format!("deleting {stray}"), client.delete(&stray, None))
                .await?;
            match deleted {
                Ok(()) | Err(Error::NoNode) => strays += 1,
                Err(e) => return Err(ZkError::client(format!("deleting {stray}"), e)),
            }
        }
        let live = children.iter().filter(|c| LEASE.place(c).is_some()).count() - strays;
        if live <= permits as usize {
            if let Some(o) = self.store.owners().get_mut(&LEASE.key(claim)) {
                o.count = 1;
            }
            // The mutex goes back: the next waiter takes its turn at the leases.
            self.forget_child(client, claim, SEM_LOCKS).await;
            return Ok((1, lease_zxid));
        }
        // Full: this head waiter watches the leases (one watch per change, none piled up).
        let (store, channel) = (Arc::downgrade(&self.store), kind.wait_channel(claim));
        self.store.rt().spawn(async move {
            let _ = watcher.changed().await;
            if let Some(s) = store.upgrade() {
                s.dispatch(&channel);
            }
        });
        Ok((0, -1))
    }

    /// The semaphore's node, made with the permit count as its data, or found with it: another
    /// count there is refused with the count it holds. A node with no data (made by Curator,
    /// which keeps no count) is taken as it is.
    async fn ensure_base(&self, client: &Client, base: &str, permits: u32) -> Result<(), ZkError> {
        let container = CreateMode::Container.with_acls(Acls::anyone_all());
        let count = permits.to_string();
        let made = self
            .bounded(
                || format!("creating {base}"),
                client.create(base, count.as_bytes(), &container),
            )
            .await?;
        match made {
            Ok(_) => return Ok(()),
            Err(Error::NodeExists) => {}
            Err(Error::NoNode) => {
                return Err(ZkError::refused(
                    format!("creating {base}"),
                    "the URL's chroot does not exist: create it first",
                ))
            }
            Err(e) => return Err(ZkError::client(format!("creating {base}"), e)),
        }
        let read = self
            .bounded(|| format!("reading {base}"), client.get_data(base))
            .await?;
        match read {
            Ok((data, _)) => match std::str::from_utf8(&data).ok().and_then(|t| t.parse().ok()) {
                Some(stored) if stored != permits => Err(ZkError::permits(base, stored)),
                _ => Ok(()),
            },
            // Gone meanwhile (an empty container swept): the next attempt makes it again.
            Err(Error::NoNode) => Ok(()),
            Err(e) => Err(ZkError::client(format!("reading {base}"), e)),
        }
    }

    /// Permits free now: the count less the leases.
    pub(crate) async fn available(&self, permits: u32, key: &str) -> Result<i64, ZkError> {
        let leases = LEASE.path(key);
        let listed = self
            .bounded(
                || format!("listing the children of {leases}"),
                self.store.live_client().await.list_children(&leases),
            )
            .await?;
        let held = match listed {
            Ok(c) => c.iter().filter(|c| LEASE.place(c).is_some()).count(),
            Err(Error::NoNode) => 0,
            Err(e) => return Err(ZkError::client(format!("listing {leases}"), e)),
        };
        Ok(i64::from(permits) - i64::try_from(held).unwrap_or(i64::MAX))
    }

    /// A writer taking the read side of its own lock (a downgrade, inside its write scope): held
    /// at once, as Curator grants it, with a read child that is not sequential but carries the
    /// writer's own sequence, so it sorts just before the writer's child and keeps every later
    /// writer out once the write side is released; its token is the writer's. `(0, -1)` if the
    /// owner holds no write here.
    async fn read_as_writer(
        &self,
        client: &Client,
        claim: &Claim,
        marker: &str,
    ) -> Result<(i64, i64), ZkError> {
        let session = client.session_id().0;
        let (writer, token) = match self.store.owners().get(&WRITE.key(claim)) {
            Some(o) if o.count > 0 && o.session == session => (o.path.clone(), o.czxid),
            _ => return Ok((0, -1)),
        };
        let Some(seq) = sequence(&writer, WRITE.name) else {
            return Ok((0, -1));
        };
        let path = lock_path(&claim.keys.key);
        // Named after this read (its marker) rather than the owner: a writer's next read
        // makes a child of its own even while the last one's delete is on its way.
        let protected = child_prefix(&format!("{}{marker}", claim.owner), READ.name);
        let child = format!("{path}/{protected}{seq:010}");
        // Recorded first, as every create is (see `create`): a reply lost on the way is found
        // again by its name.
        self.store.owners().insert(
            READ.key(claim),
            Owned {
                path: String::new(),
                lock: path.clone(),
                protected: protected.clone(),
                czxid: 0,
                count: 0,
                markers: Vec::new(),
                session,
                watched: None,
            },
        );
        let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        let created = self
            .bounded(
                || format!("creating {child}"),
                client.create(&child, claim.owner.as_bytes(), &ephemeral),
            )
            .await?;
        let czxid = match created {
            Ok((stat, _)) => stat.czxid,
            // Made by an attempt whose reply was lost: ours all the same.
            Err(Error::NodeExists) => {
                match self
                    .bounded(|| format!("checking {child}"), client.check_stat(&child))
                    .await?
                {
                    Ok(Some(stat)) if stat.ephemeral_owner == session => stat.czxid,
                    Ok(_) => return Ok((0, -1)),
                    Err(e) => return Err(ZkError::client(format!("checking {child}"), e)),
                }
            }
            Err(e) => return Err(ZkError::client(format!("creating {child}"), e)),
        };
        self.store.owners().insert(
            READ.key(claim),
            Owned {
                path: child,
                lock: path,
                protected,
                czxid,
                count: 1,
                markers: vec![marker.to_owned()],
                session,
                watched: None,
            },
        );
        // The read is taken under the writer's token, as on the other stores.
        Ok((1, token))
    }

    /// Deletes `claim.owner`'s recorded child, best effort, and forgets it.
    async fn forget_child(&self, client: &Client, claim: &Claim, recipe: Recipe) {
        let child = self
            .store
            .owners()
            .remove(&recipe.key(claim))
            .map(|o| o.path);
        if let Some(child) = child.filter(|c| !c.is_empty()) {
            let _ = self.bounded(String::new, client.delete(&child, None)).await;
        }
    }

    /// The rest of an acquire once `claim.owner` has its child `mine` (creation zxid `czxid`):
    /// held if first in line, else the child before it watched.
    async fn stand_in_line(
        &self,
        kind: &dyn LockKind,
        claim: &Claim,
        client: &Client,
        path: &str,
        recipe: Recipe,
        (mine, czxid): (&mut String, &mut i64),
    ) -> Result<(i64, i64), ZkError> {
        for _ in 0..LOOKS {
            let listed = self
                .bounded(
                    || format!("listing the children of {path}"),
                    client.list_children(path),
                )
                .await?;
            let children = match listed {
                Ok(c) => c,
                Err(Error::NoNode) => Vec::new(),
                Err(e) => return Err(ZkError::client(format!("listing {path}"), e)),
            };
            // Sorted by sequence, then by name: a writer's own read child carries the writer's
            // sequence (see `read_as_writer`) and sorts just before it.
            let mut line: Vec<(i64, bool, &String)> = children
                .iter()
                .filter_map(|c| recipe.place(c).map(|(s, w)| (s, w, c)))
                .collect();
            line.sort();
            let name = mine.rsplit('/').next().unwrap_or_default();
            let Some(at) = line.iter().position(|(_, _, c)| c.as_str() == name) else {
                // Our child is gone (force-unlocked while we waited): stand in line again.
                self.store.owners().remove(&recipe.key(claim));
                (*mine, *czxid) = self.create(client, path, claim, recipe).await?;
                continue;
            };
            // A child of this owner ahead of its own is a create whose reply was lost and
            // that a look for it missed (a server behind the leader; ZOOKEEPER-22): nobody
            // else would ever delete it, and this owner would wait behind itself until its
            // session ended. Deleted, then the line read again.
            let protected = child_prefix(&claim.owner, recipe.name);
            let strays: Vec<String> = line[..at]
                .iter()
                .filter(|(_, _, c)| c.starts_with(&protected))
                .map(|(_, _, c)| format!("{path}/{c}"))
                .collect();
            if !strays.is_empty() {
                for stray in &strays {
                    tracing::warn!(lock = %claim.name, child = %stray, "dlock: deleting a second child of this owner, left by a create whose reply was lost");
                    let deleted = self
                        .bounded(|| format!("deleting {stray}"), client.delete(stray, None))
                        .await?;
                    match deleted {
                        Ok(()) | Err(Error::NoNode) => {}
                        Err(e) => return Err(ZkError::client(format!("deleting {stray}"), e)),
                    }
                }
                continue;
            }
            // Curator's rules: a reader waits only for a writer ahead of it (the first one),
            // anybody else for the child just before its own.
            let blocker = if recipe.reader {
                line[..at].iter().find(|(_, writer, _)| *writer)
            } else {
                at.checked_sub(1).map(|i| &line[i])
            };
            let Some((_, _, blocker)) = blocker else {
                if let Some(o) = self.store.owners().get_mut(&recipe.key(claim)) {
                    o.count = 1;
                }
                return Ok((1, *czxid));
            };
            let before = format!("{path}/{blocker}");
            let watched = self
                .bounded(
                    || format!("watching {before}"),
                    client.get_and_watch_data(&before),
                )
                .await?;
            match watched {
                Ok((_, _, watcher)) => {
                    // One watch task per owner and child watched: a waiter that looks again
                    // (after its lease, or a try-lock polled) does not pile them up.
                    let first_watch = match self.store.owners().get_mut(&recipe.key(claim)) {
                        Some(o) if o.watched.as_deref() == Some(before.as_str()) => false,
                        Some(o) => {
                            o.watched = Some(before.clone());
                            true
                        }
                        None => false,
                    };
                    if !first_watch {
                        return Ok((0, -1));
                    }
                    let (store, channel) = (Arc::downgrade(&self.store), kind.wait_channel(claim));
                    let key = recipe.key(claim);
                    self.store.rt().spawn(async move {
                        // Fires when the child before ours changes or goes, or the session ends.
                        let _ = watcher.changed().await;
                        if let Some(s) = store.upgrade() {
                            if let Some(o) = s.owners().get_mut(&key) {
                                if o.watched.as_deref() == Some(before.as_str()) {
                                    o.watched = None;
                                }
                            }
                            s.dispatch(&channel);
                        }
                    });
                    return Ok((0, -1));
                }
                // Gone between the listing and the watch: look again.
                Err(Error::NoNode) => continue,
                Err(e) => return Err(ZkError::client(format!("watching {before}"), e)),
            }
        }
        Ok((0, -1))
    }

    /// Creates `claim.owner`'s child of the lock at `path` (its parent as a container node
    /// when missing), records it, and returns its path and creation zxid. Curator's protected
    /// mode: the owner is recorded as "may have a child" before the create is sent, so a create
    /// whose reply never came (a dropped connection, the response timeout, a cancelled future)
    /// is found again by its protected name by the owner's next attempt ([`ZkLink::adopt`]),
    /// its release, or its give-up, instead of leaving a second child in line.
    async fn create(
        &self,
        client: &Client,
        path: &str,
        claim: &Claim,
        recipe: Recipe,
    ) -> Result<(String, i64), ZkError> {
        let protected = child_prefix(&claim.owner, recipe.name);
        let prefix = format!("{path}/{protected}");
        self.store.owners().insert(
            recipe.key(claim),
            Owned {
                path: String::new(),
                lock: path.to_owned(),
                protected: protected.clone(),
                czxid: 0,
                count: 0,
                markers: Vec::new(),
                session: client.session_id().0,
                watched: None,
            },
        );
        for _ in 0..2 {
            let ephemeral = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
            let created = self
                .bounded(
                    || format!("creating a child of {path}"),
                    client.create(&prefix, claim.owner.as_bytes(), &ephemeral),
                )
                .await?;
            match created {
                Ok((stat, seq)) => {
                    let child = format!("{prefix}{seq}");
                    if let Some(o) = self.store.owners().get_mut(&recipe.key(claim)) {
                        o.path = child.clone();
                        o.czxid = stat.czxid;
                    }
                    return Ok((child, stat.czxid));
                }
                Err(Error::NoNode) => {
                    let container = CreateMode::Container.with_acls(Acls::anyone_all());
                    let made = self
                        .bounded(
                            || format!("creating {path}"),
                            client.create(path, &[], &container),
                        )
                        .await?;
                    match made {
                        Ok(_) | Err(Error::NodeExists) => {}
                        Err(Error::NoNode) => {
                            self.store.owners().remove(&recipe.key(claim));
                            return Err(ZkError::refused(
                                format!("creating {path}"),
                                "the URL's chroot does not exist: create it first",
                            ));
                        }
                        Err(e) => return Err(ZkError::client(format!("creating {path}"), e)),
                    }
                }
                Err(e) => {
                    let e = ZkError::client(format!("creating a child of {path}"), e);
                    if !e.is_link_error() {
                        // The server refused it: no child was made.
                        self.store.owners().remove(&recipe.key(claim));
                    }
                    return Err(e);
                }
            }
        }
        Err(ZkError::refused(
            format!("creating a child of {path}"),
            "its parent went away twice while it was created",
        ))
    }

    /// The child of an owner whose create's reply never came, found by its protected name
    /// and recorded; or a new one, if that create never ran.
    async fn adopt(
        &self,
        client: &Client,
        path: &str,
        claim: &Claim,
        recipe: Recipe,
    ) -> Result<(String, i64), ZkError> {
        let protected = child_prefix(&claim.owner, recipe.name);
        // The server this client is connected to now may not have applied the lost create
        // yet (it went to another, which handed it to the leader): a sync brings this server
        // up to the leader first, so the listing below sees it if it ran.
        let synced = self
            .bounded(|| format!("syncing {path}"), client.sync(path))
            .await?;
        match synced {
            Ok(()) | Err(Error::NoNode) => {}
            Err(e) => return Err(ZkError::client(format!("syncing {path}"), e)),
        }
        let listed = self
            .bounded(
                || format!("listing the children of {path}"),
                client.list_children(path),
            )
            .await?;
        let found = match listed {
            Ok(children) => children.into_iter().find(|c| c.starts_with(&protected)),
            Err(Error::NoNode) => None,
            Err(e) => return Err(ZkError::client(format!("listing {path}"), e)),
        };
        let Some(found) = found else {
            return self.create(client, path, claim, recipe).await;
        };
        let child = format!("{path}/{found}");
        let checked = self
            .bounded(|| format!("checking {child}"), client.check_stat(&child))
            .await?;
        match checked {
            Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => {
                if let Some(o) = self.store.owners().get_mut(&recipe.key(claim)) {
                    o.path = child.clone();
                    o.czxid = stat.czxid;
                }
                Ok((child, stat.czxid))
            }
            // Gone meanwhile, or another session's (it ends with it): stand in line anew.
            Ok(_) => self.create(client, path, claim, recipe).await,
            Err(e) => Err(ZkError::client(format!("checking {child}"), e)),
        }
    }

    /// Gives back one hold of `claim.owner`: `(holds left, listeners)`, `(-1, None)` when it
    /// held none (its child, if it had one in line, is deleted all the same). An owner this
    /// client has no record of may still have a child whose create's reply was lost: it is
    /// found by its protected name and deleted.
    pub(crate) async fn release(
        &self,
        kind: &dyn LockKind,
        claim: &Claim,
    ) -> Result<(i64, Option<i64>), ZkError> {
        let recipe = offered(kind)?;
        let client = self.store.live_client().await;
        let session = client.session_id().0;
        if recipe.dir == LEASE.dir && self.store.owners().contains_key(&SEM_LOCKS.key(claim)) {
            // A waiter giving up at the head of the mutex: its turn goes to the next.
            self.store.abandon(vec![SEM_LOCKS.key(claim)]);
        }
        // The record goes before the delete is sent, so an acquire of the same owner that
        // follows at once (a writer's second read, through a release only written) makes a
        // new child instead of counting on the one being deleted. A delete that fails puts it
        // back for the retry.
        let key = recipe.key(claim);
        let entry = {
            let mut owners = self.store.owners();
            match owners.get_mut(&key) {
                Some(o) if o.count > 1 => {
                    o.count -= 1;
                    // The re-entry this release ends can no longer be undone.
                    o.markers.pop();
                    return Ok((o.count, None));
                }
                Some(_) => owners.remove(&key),
                None => None,
            }
        };
        let Some(owned) = entry else {
            self.delete_unrecorded(&client, claim, recipe).await?;
            return Ok((-1, None));
        };
        // A child of an ended session went with it: nothing was held any more.
        let mut held = owned.count == 1 && owned.session == session;
        if owned.session == session && owned.path.is_empty() {
            // Its create was never answered: its child, if made, is found by its name.
            let deleted = self
                .bounded(
                    || {
                        format!(
                            "deleting the children of {} named {}",
                            owned.lock, owned.protected
                        )
                    },
                    super::store::delete_child(&client, "", &owned.lock, &owned.protected),
                )
                .await
                .and_then(|r| {
                    r.map_err(|e| ZkError::client(format!("deleting in {}", owned.lock), e))
                });
            if let Err(e) = deleted {
                self.store.owners().entry(key).or_insert(owned);
                return Err(e);
            }
            held = false;
        } else if owned.session == session {
            let child = owned.path.clone();
            let deleted = match self
                .bounded(|| format!("deleting {child}"), client.delete(&child, None))
                .await
            {
                Ok(deleted) => deleted,
                Err(e) => {
                    self.store.owners().entry(key).or_insert(owned);
                    return Err(e);
                }
            };
            match deleted {
                Ok(()) => {}
                // Deleted by someone else (a force unlock): it was no longer ours.
                Err(Error::NoNode) => held = false,
                Err(e) => {
                    self.store.owners().entry(key).or_insert(owned);
                    return Err(ZkError::client(format!("deleting {child}"), e));
                }
            }
        }
        // The store cannot count who was woken.
        Ok(if held { (0, Some(-2)) } else { (-1, None) })
    }

    /// Deletes `claim.owner`'s children of its lock found by their protected name (a create
    /// whose reply never came, an acquire cancelled mid-way).
    async fn delete_unrecorded(
        &self,
        client: &Client,
        claim: &Claim,
        recipe: Recipe,
    ) -> Result<(), ZkError> {
        let path = recipe.path(&claim.keys.key);
        let listed = self
            .bounded(
                || format!("listing the children of {path}"),
                client.list_children(&path),
            )
            .await?;
        let children = match listed {
            Ok(c) => c,
            Err(Error::NoNode) => return Ok(()),
            Err(e) => return Err(ZkError::client(format!("listing {path}"), e)),
        };
        let prefix = child_prefix(&claim.owner, recipe.name);
        for child in children.iter().filter(|c| c.starts_with(&prefix)) {
            let child = format!("{path}/{child}");
            let deleted = self
                .bounded(|| format!("deleting {child}"), client.delete(&child, None))
                .await?;
            match deleted {
                Ok(()) | Err(Error::NoNode) => {}
                Err(e) => return Err(ZkError::client(format!("deleting {child}"), e)),
            }
        }
        Ok(())
    }

    /// Undoes a re-entry whose caller never saw the reply, if its marker says it ran.
    pub(crate) fn undo_reentry(&self, kind: &dyn LockKind, claim: &Claim, marker: &str) {
        let Ok(recipe) = offered(kind) else { return };
        if let Some(o) = self.store.owners().get_mut(&recipe.key(claim)) {
            if let Some(i) = o.markers.iter().position(|m| m == marker) {
                o.markers.swap_remove(i);
                o.count -= 1;
            }
        }
    }

    /// The lock's children that stand in line, sorted (empty when the lock node is missing).
    async fn line(&self, kind: &dyn LockKind, key: &str) -> Result<Vec<String>, ZkError> {
        let recipe = offered(kind)?;
        let path = recipe.path(key);
        let listed = self
            .bounded(
                || format!("listing the children of {path}"),
                self.store.live_client().await.list_children(&path),
            )
            .await?;
        let children = match listed {
            Ok(c) => c,
            Err(Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(ZkError::client(format!("listing {path}"), e)),
        };
        let mut line: Vec<(i64, String)> = children
            .into_iter()
            .filter_map(|c| recipe.place(&c).map(|(s, _)| (s, c)))
            .collect();
        line.sort();
        Ok(line
            .into_iter()
            .map(|(_, c)| format!("{path}/{c}"))
            .collect())
    }

    /// Deletes the holder's child, whoever it is: the next in line takes the lock. 1 if it
    /// was held.
    pub(crate) async fn force_unlock(
        &self,
        kind: &dyn LockKind,
        keys: &LockKeys,
    ) -> Result<i64, ZkError> {
        let recipe = offered(kind)?;
        let line = self.line(kind, &keys.key).await?;
        // A mutex's holder is its first child; a read-write lock's holders may be many
        // readers: every child goes (waiters find theirs gone and stand in line again).
        let doomed = if recipe.shared {
            &line[..]
        } else {
            &line[..line.len().min(1)]
        };
        let mut freed = 0;
        for child in doomed {
            let deleted = self
                .bounded(
                    || format!("deleting {child}"),
                    self.store.live_client().await.delete(child, None),
                )
                .await?;
            match deleted {
                Ok(()) => freed = 1,
                Err(Error::NoNode) => {}
                Err(e) => return Err(ZkError::client(format!("deleting {child}"), e)),
            }
        }
        Ok(freed)
    }

    /// Whether anybody holds the lock.
    pub(crate) async fn exists(&self, kind: &dyn LockKind, key: &str) -> Result<bool, ZkError> {
        Ok(!self.line(kind, key).await?.is_empty())
    }

    /// The lease left in ms, -2 when free. A held lock lives as long as its holder's session,
    /// so what is left is at most one session timeout (how long it would outlive a holder that
    /// died now): that is the answer, as every client of the ensemble is granted about the same.
    pub(crate) async fn pttl(&self, kind: &dyn LockKind, key: &str) -> Result<i64, ZkError> {
        Ok(if self.exists(kind, key).await? {
            i64::try_from(self.store.session_timeout().as_millis()).unwrap_or(i64::MAX)
        } else {
            -2
        })
    }

    /// Renews holds: 1 for each whose child still exists in this client's session (the
    /// answer itself proves the session alive when the request arrived), 0 for one that is
    /// gone (force-unlocked, or its session ended).
    pub(crate) async fn renew(
        &self,
        kind: &dyn LockKind,
        claims: &[&Claim],
    ) -> Result<Vec<i64>, ZkError> {
        let recipe = offered(kind)?;
        let client = self.store.live_client().await;
        let session = client.session_id().0;
        let children: Vec<Option<String>> = {
            let owners = self.store.owners();
            claims
                .iter()
                .map(|c| {
                    owners
                        .get(&recipe.key(c))
                        .filter(|o| o.count > 0 && o.session == session)
                        .map(|o| o.path.clone())
                })
                .collect()
        };
        let checks = children.iter().map(|child| {
            let client = client.clone();
            async move {
                let Some(child) = child else { return Ok(0) };
                match self
                    .bounded(|| format!("checking {child}"), client.check_stat(child))
                    .await?
                {
                    Ok(Some(stat)) if stat.ephemeral_owner == session => Ok(1),
                    Ok(_) => Ok(0),
                    Err(e) => Err(ZkError::client(format!("checking {child}"), e)),
                }
            }
        });
        futures_util::future::join_all(checks)
            .await
            .into_iter()
            .collect()
    }
}

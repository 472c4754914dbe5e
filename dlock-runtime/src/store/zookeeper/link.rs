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

/// The lock name in a mutex child's name (`_c_<uuid>-lock-<sequence>`), as Curator's
/// `InterProcessMutex` writes it.
const MUTEX: &str = "lock-";

/// How many times one attempt looks again when the children moved under it (a predecessor
/// gone between the listing and the watch): each look is a round trip; past this the attempt
/// answers "held" and the waiter looks again when woken or after its lease.
const LOOKS: usize = 8;

/// The kinds this store offers, by `LockKind::id`: the plain lock and the fair lock are both
/// Curator's mutex (first come, first served by construction).
fn offered(kind: &dyn LockKind) -> Result<&'static str, ZkError> {
    match kind.id() {
        "plain" | "fair" => Ok(MUTEX),
        other => Err(ZkError::not_offered(other)),
    }
}

#[derive(Clone)]
pub(crate) struct ZkLink {
    store: Arc<ZkStore>,
}

impl ZkLink {
    pub(crate) fn new(store: Arc<ZkStore>) -> Self {
        ZkLink { store }
    }

    /// `call`, bounded by the response timeout, its failure described by `doing`.
    async fn bounded<T>(
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
    pub(crate) async fn acquire(
        &self,
        kind: &dyn LockKind,
        claim: &Claim,
        reentry: Option<&str>,
    ) -> Result<(i64, i64), ZkError> {
        let lock_name = offered(kind)?;
        let client = self.store.client();
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
            let child = match self.store.owners().get(&claim.owner) {
                Some(o) if o.count > 0 && o.session == session => o.path.clone(),
                _ => return Ok((0, -1)),
            };
            let checked = self
                .bounded(|| format!("checking {child}"), client.check_stat(&child))
                .await?;
            return match checked {
                Ok(Some(stat)) if stat.ephemeral_owner == session => {
                    let mut owners = self.store.owners();
                    Ok(match owners.get_mut(&claim.owner) {
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
        let path = lock_path(&claim.keys.key);
        let known = {
            let mut owners = self.store.owners();
            match owners.get(&claim.owner) {
                Some(o) if o.session == session => Some((o.path.clone(), o.czxid)),
                // A child of an ended session is gone with it.
                Some(_) => {
                    owners.remove(&claim.owner);
                    None
                }
                None => None,
            }
        };
        let (mut mine, mut czxid) = match known {
            Some((child, czxid)) if !child.is_empty() => (child, czxid),
            // A create of this owner whose reply never came: its child may be there.
            Some(_) => self.adopt(&client, &path, claim, lock_name).await?,
            None => self.create(&client, &path, claim, lock_name).await?,
        };
        match self
            .stand_in_line(
                kind,
                claim,
                &client,
                &path,
                lock_name,
                (&mut mine, &mut czxid),
            )
            .await
        {
            Err(e) if !e.is_link_error() => {
                // Refused after this owner's child was made: take the child back now, or
                // nothing would (the machinery reads a refusal as "nothing ran").
                self.forget_child(&client, claim).await;
                Err(e)
            }
            other => other,
        }
    }

    /// Deletes `claim.owner`'s recorded child, best effort, and forgets it.
    async fn forget_child(&self, client: &Client, claim: &Claim) {
        let child = self.store.owners().remove(&claim.owner).map(|o| o.path);
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
        lock_name: &str,
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
            let mut line: Vec<(i64, &String)> = children
                .iter()
                .filter_map(|c| sequence(c, lock_name).map(|s| (s, c)))
                .collect();
            line.sort();
            let name = mine.rsplit('/').next().unwrap_or_default();
            let Some(at) = line.iter().position(|(_, c)| c.as_str() == name) else {
                // Our child is gone (force-unlocked while we waited): stand in line again.
                self.store.owners().remove(&claim.owner);
                (*mine, *czxid) = self.create(client, path, claim, lock_name).await?;
                continue;
            };
            if at == 0 {
                if let Some(o) = self.store.owners().get_mut(&claim.owner) {
                    o.count = 1;
                }
                return Ok((1, *czxid));
            }
            let before = format!("{path}/{}", line[at - 1].1);
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
                    let first_watch = match self.store.owners().get_mut(&claim.owner) {
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
                    self.store.rt().spawn(async move {
                        // Fires when the child before ours changes or goes, or the session ends.
                        let _ = watcher.changed().await;
                        if let Some(s) = store.upgrade() {
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
        lock_name: &str,
    ) -> Result<(String, i64), ZkError> {
        let protected = child_prefix(&claim.owner, lock_name);
        let prefix = format!("{path}/{protected}");
        self.store.owners().insert(
            claim.owner.clone(),
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
                    if let Some(o) = self.store.owners().get_mut(&claim.owner) {
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
                            self.store.owners().remove(&claim.owner);
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
                        self.store.owners().remove(&claim.owner);
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
        lock_name: &str,
    ) -> Result<(String, i64), ZkError> {
        let protected = child_prefix(&claim.owner, lock_name);
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
            return self.create(client, path, claim, lock_name).await;
        };
        let child = format!("{path}/{found}");
        let checked = self
            .bounded(|| format!("checking {child}"), client.check_stat(&child))
            .await?;
        match checked {
            Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => {
                if let Some(o) = self.store.owners().get_mut(&claim.owner) {
                    o.path = child.clone();
                    o.czxid = stat.czxid;
                }
                Ok((child, stat.czxid))
            }
            // Gone meanwhile, or another session's (it ends with it): stand in line anew.
            Ok(_) => self.create(client, path, claim, lock_name).await,
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
        let lock_name = offered(kind)?;
        let client = self.store.client();
        let session = client.session_id().0;
        let entry = {
            let mut owners = self.store.owners();
            match owners.get_mut(&claim.owner) {
                Some(o) if o.count > 1 => {
                    o.count -= 1;
                    // The re-entry this release ends can no longer be undone.
                    o.markers.pop();
                    return Ok((o.count, None));
                }
                Some(o) => Some((o.count, o.path.clone(), o.session)),
                None => None,
            }
        };
        let Some((count, child, made_in)) = entry else {
            self.delete_unrecorded(&client, claim, lock_name).await?;
            return Ok((-1, None));
        };
        // A child of an ended session went with it: nothing was held any more.
        let mut held = count == 1 && made_in == session;
        if made_in == session && child.is_empty() {
            // Its create was never answered: its child, if made, is found by its name.
            self.delete_unrecorded(&client, claim, lock_name).await?;
            held = false;
        } else if made_in == session {
            let deleted = self
                .bounded(|| format!("deleting {child}"), client.delete(&child, None))
                .await?;
            match deleted {
                Ok(()) => {}
                // Deleted by someone else (a force unlock): it was no longer ours.
                Err(Error::NoNode) => held = false,
                Err(e) => return Err(ZkError::client(format!("deleting {child}"), e)),
            }
        }
        self.store.owners().remove(&claim.owner);
        // The store cannot count who was woken.
        Ok(if held { (0, Some(-2)) } else { (-1, None) })
    }

    /// Deletes `claim.owner`'s children of its lock found by their protected name (a create
    /// whose reply never came, an acquire cancelled mid-way).
    async fn delete_unrecorded(
        &self,
        client: &Client,
        claim: &Claim,
        lock_name: &str,
    ) -> Result<(), ZkError> {
        let path = lock_path(&claim.keys.key);
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
        let prefix = child_prefix(&claim.owner, lock_name);
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
    pub(crate) fn undo_reentry(&self, claim: &Claim, marker: &str) {
        if let Some(o) = self.store.owners().get_mut(&claim.owner) {
            if let Some(i) = o.markers.iter().position(|m| m == marker) {
                o.markers.swap_remove(i);
                o.count -= 1;
            }
        }
    }

    /// The lock's children that stand in line, sorted (empty when the lock node is missing).
    async fn line(&self, kind: &dyn LockKind, key: &str) -> Result<Vec<String>, ZkError> {
        let lock_name = offered(kind)?;
        let path = lock_path(key);
        let listed = self
            .bounded(
                || format!("listing the children of {path}"),
                self.store.client().list_children(&path),
            )
            .await?;
        let children = match listed {
            Ok(c) => c,
            Err(Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(ZkError::client(format!("listing {path}"), e)),
        };
        let mut line: Vec<(i64, String)> = children
            .into_iter()
            .filter_map(|c| sequence(&c, lock_name).map(|s| (s, c)))
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
        let line = self.line(kind, &keys.key).await?;
        let Some(holder) = line.first() else {
            return Ok(0);
        };
        let deleted = self
            .bounded(
                || format!("deleting {holder}"),
                self.store.client().delete(holder, None),
            )
            .await?;
        match deleted {
            Ok(()) => Ok(1),
            Err(Error::NoNode) => Ok(0),
            Err(e) => Err(ZkError::client(format!("deleting {holder}"), e)),
        }
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
        offered(kind)?;
        let client = self.store.client();
        let session = client.session_id().0;
        let children: Vec<Option<String>> = {
            let owners = self.store.owners();
            claims
                .iter()
                .map(|c| {
                    owners
                        .get(&c.owner)
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

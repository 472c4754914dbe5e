//! Reentrancy that follows the call chain, not the thread or the task.
//!
//! `LockGuard::scope(fut)` runs `fut` with a task-local list of the holds its ancestors own.
//! The list is immutable and extended per scope (a linked list of `Arc`s), so two futures joined
//! in one task each see only their own ancestors: a `join!` of two top-level acquires are two
//! owners, while an acquire nested inside a holder's `scope` re-enters its hold. A spawned task
//! starts with no scope, so it is another owner too. Children run concurrently inside one scope
//! share the ancestor's hold when they re-enter its key (documented on `LockGuard::scope`).

use std::sync::Arc;

use crate::machinery::hold::Hold;

pub(crate) struct ScopeNode {
    hold: Arc<Hold>,
    /// The URL of the hold's client (password removed): tells a hold of the same deployment
    /// taken through another client from a same-named lock elsewhere.
    url: Arc<str>,
    parent: Option<Arc<ScopeNode>>,
}

tokio::task_local! {
    static HELD: Option<Arc<ScopeNode>>;
}

/// The hold an enclosing scope owns for this client's `key`, if any.
pub(crate) fn enclosing(client_id: &str, key: &str) -> Option<Arc<Hold>> {
    HELD.try_with(|top| {
        let mut node = top.as_ref();
        while let Some(n) = node {
            if n.hold.keys.key == key && n.hold.client_id == client_id {
                return Some(n.hold.clone());
            }
            node = n.parent.as_ref();
        }
        None
    })
    .ok()
    .flatten()
}

/// Runs `fut` with `hold` (of the client talking to `url`) added to the current scope.
pub(crate) fn with_hold<F: std::future::Future>(
    url: &str,
    hold: Arc<Hold>,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Option<Arc<ScopeNode>>, F> {
    let parent = HELD.try_with(|top| top.clone()).ok().flatten();
    let url = Arc::from(url);
    HELD.scope(Some(Arc::new(ScopeNode { hold, url, parent })), fut)
}

/// An enclosing scope's hold of `key` on the deployment at `url` taken through another client
/// than `client_id`: acquiring it again would wait for the caller itself.
pub(crate) fn held_through_another_client(
    client_id: &str,
    url: &str,
    key: &str,
) -> Option<Arc<Hold>> {
    HELD.try_with(|top| {
        let mut node = top.as_ref();
        while let Some(n) = node {
            if n.hold.keys.key == key && n.hold.client_id != client_id && &*n.url == url {
                return Some(n.hold.clone());
            }
            node = n.parent.as_ref();
        }
        None
    })
    .ok()
    .flatten()
}

/// The hold of the innermost enclosing scope, whatever its client or key.
pub(crate) fn innermost() -> Option<Arc<Hold>> {
    HELD.try_with(|top| top.as_ref().map(|n| n.hold.clone()))
        .ok()
        .flatten()
}

/// Runs `fut` inside scopes of `holds` (outermost first, each with its client's URL), as
/// nested `LockGuard::scope`s would: for callers whose call chain is a thread (the blocking
/// API keeps the holds of the guards alive on it).
pub(crate) fn with_holds<F: std::future::Future>(
    holds: &[(Arc<str>, Arc<Hold>)],
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Option<Arc<ScopeNode>>, F> {
    let mut top = None;
    for (url, hold) in holds {
        top = Some(Arc::new(ScopeNode {
            hold: hold.clone(),
            url: url.clone(),
            parent: top,
        }));
    }
    HELD.scope(top, fut)
}

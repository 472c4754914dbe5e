//! `list` and `show`: read locks and print them.

use dlock_runtime::inspect::{Kind, Layout};

use crate::args::{KindArg, Target};
use crate::deployment::Deployment;
use crate::snapshot::{self, LockView};
use crate::source::Source;
use crate::{output, table};

/// Every lock in use under `prefix`, on every master; with `redisson`, the locks in Redisson's
/// layout too.
pub async fn list(target: &Target, prefix: &str, json: bool, redisson: bool) -> Result<(), String> {
    let mut source = Source::open(target, prefix).await?;
    let views = source.list(prefix, redisson).await;
    let shown = source.shown().to_owned();
    source.close().await;
    let views: Vec<LockView> = views?.into_iter().map(|(_, v)| v).collect();
    if json {
        output::json(&views);
    } else if views.is_empty() {
        let redisson = match (redisson, target.is_postgres() || target.is_zookeeper()) {
            (_, true) => "",
            (true, false) => " nor in Redisson's layout",
            (false, false) => " (Redisson-layout locks are looked for with --redisson)",
        };
        eprintln!("no lock held under prefix `{prefix}`{redisson} on {shown}");
    } else {
        output::text(&table::list(&views));
    }
    Ok(())
}

/// The lock `name`: the given kind (held or not), or every kind of that name in use.
pub async fn show(
    target: &Target,
    prefix: &str,
    json: bool,
    name: &str,
    kind: Option<KindArg>,
) -> Result<(), String> {
    let mut source = Source::open(target, prefix).await?;
    let views = source.read_kinds(prefix, name, kind).await;
    source.close().await;
    let views = views?;
    if json {
        output::json(&views.iter().map(|(_, v)| v).collect::<Vec<_>>());
    } else if views.is_empty() {
        eprintln!("`{name}` is not held, as any kind of lock, under prefix `{prefix}`");
    } else {
        let parts: Vec<String> = views.iter().map(|(_, v)| table::detail(v)).collect();
        output::text(&parts.join("\n"));
    }
    Ok(())
}

/// The views of `name`: of `kind` whatever its state, else of every kind in use (in
/// Redisson's layout too, when the key `name` is a hash of that shape); waiters counted.
pub async fn read_kinds(
    dep: &mut Deployment,
    prefix: &str,
    name: &str,
    kind: Option<KindArg>,
) -> Result<Vec<(Layout, LockView)>, String> {
    let kinds: Vec<Kind> = match kind {
        Some(k) => vec![k.into()],
        // One read of the key `name` tells which Redisson kind it is.
        None => Kind::ALL.into_iter().chain([Kind::Redisson]).collect(),
    };
    let mut views = Vec::new();
    for k in kinds {
        let layout = Layout::new(prefix, k, name);
        let (layout, view) = if k.is_redisson() {
            snapshot::read_redisson(&mut dep.keyed, &layout).await?
        } else {
            let view = snapshot::read(&mut dep.keyed, &layout).await?;
            (layout, view)
        };
        // Unasked, the bare key `name` is shown only when it is a Redisson lock: any other
        // data there is somebody else's, not a lock of the wrong type.
        let shown = match kind {
            Some(_) => true,
            None if k.is_redisson() => view.held,
            None => view.in_use(),
        };
        if shown {
            views.push((layout, view));
        }
    }
    snapshot::count_waiting(dep, &mut views).await?;
    Ok(views)
}

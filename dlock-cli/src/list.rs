//! `list` and `show`: read locks and print them.

use dlock_runtime::inspect::{Kind, Layout};

use crate::args::{KindArg, Target};
use crate::deployment::Deployment;
use crate::snapshot::{self, LockView};
use crate::{output, scan, table};

/// Every lock in use under `prefix`, on every master.
pub async fn list(target: &Target, prefix: &str, json: bool) -> Result<(), String> {
    let mut dep = Deployment::open(target).await?;
    let layouts = scan::find(&mut dep, prefix).await?;
    let mut views = Vec::with_capacity(layouts.len());
    for layout in layouts {
        let view = snapshot::read(&mut dep.keyed, &layout).await?;
        // Freed between the SCAN and the read: nothing to show any more.
        if view.in_use() {
            views.push((layout, view));
        }
    }
    snapshot::count_waiting(&mut dep, &mut views).await?;
    let views: Vec<LockView> = views.into_iter().map(|(_, v)| v).collect();
    if json {
        output::json(&views);
    } else if views.is_empty() {
        eprintln!("no lock held under prefix `{prefix}` on {}", dep.shown);
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
    let mut dep = Deployment::open(target).await?;
    let views = read_kinds(&mut dep, prefix, name, kind).await?;
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

/// The views of `name`: of `kind` whatever its state, else of every kind in use; waiters
/// counted.
pub async fn read_kinds(
    dep: &mut Deployment,
    prefix: &str,
    name: &str,
    kind: Option<KindArg>,
) -> Result<Vec<(Layout, LockView)>, String> {
    let kinds: Vec<Kind> = match kind {
        Some(k) => vec![k.into()],
        None => Kind::ALL.to_vec(),
    };
    let mut views = Vec::new();
    for k in kinds {
        let layout = Layout::new(prefix, k, name);
        let view = snapshot::read(&mut dep.keyed, &layout).await?;
        if kind.is_some() || view.in_use() {
            views.push((layout, view));
        }
    }
    snapshot::count_waiting(dep, &mut views).await?;
    Ok(views)
}

//! `unlock NAME --force`: the library's force unlock, after a confirmation.
//!
//! The deletion goes through the runtime (`dlock_runtime::inspect::force_unlock`), so it is
//! exactly the kind's own force-unlock script: the keys go in one step and the script
//! publishes on the lock's channel, which wakes the waiters. Re-implementing it here could
//! drift from the scripts the clients run.

use std::io::BufRead;

use dlock_runtime::inspect::{Kind, Layout};
use serde::Serialize;

use crate::args::{KindArg, Target};
use crate::snapshot::LockView;
use crate::source::Source;
use crate::{output, table};

/// What `--json` prints.
#[derive(Serialize)]
struct Unlocked<'a> {
    name: &'a str,
    kind: Option<&'static str>,
    /// Whether the lock was held when the script deleted it.
    unlocked: bool,
}

/// Whether the user confirmed (or `--yes`): `false` when they declined.
pub async fn run(
    target: &Target,
    prefix: &str,
    json: bool,
    name: &str,
    kind: Option<KindArg>,
    yes: bool,
) -> Result<bool, String> {
    let mut source = Source::open(target, prefix).await?;
    let views = source.read_kinds(prefix, name, kind).await;
    let unlocked = match views {
        Ok(views) => unlock(&source, target, prefix, json, name, kind, yes, views).await,
        Err(e) => Err(e),
    };
    source.close().await;
    unlocked
}

/// Force-unlocks the one lock of `views` that is held, after asking.
#[allow(clippy::too_many_arguments)]
async fn unlock(
    source: &Source,
    target: &Target,
    prefix: &str,
    json: bool,
    name: &str,
    kind: Option<KindArg>,
    yes: bool,
    views: Vec<(Layout, LockView)>,
) -> Result<bool, String> {
    // Somebody else's data under a lock's key: the force-unlock scripts refuse to delete it,
    // and so does this command, before asking anything.
    if let Some(w) = views.iter().flat_map(|(_, v)| &v.wrong_type).next() {
        return Err(format!(
            "`{name}` is not a lock: {}; dlock does not delete data it did not write",
            table::wrong_type(w)
        ));
    }
    let held: Vec<_> = views.iter().filter(|(_, v)| v.held).collect();
    let (layout, view) = match held.as_slice() {
        [one] => *one,
        [] => {
            if json {
                output::json(&Unlocked {
                    name,
                    kind: kind.map(|k| Kind::from(k).as_str()),
                    unlocked: false,
                });
            } else {
                eprintln!("`{name}` is not held; nothing to unlock");
            }
            return Ok(true);
        }
        several => {
            let kinds: Vec<&str> = several.iter().map(|(_, v)| v.kind).collect();
            return Err(format!(
                "`{name}` is held as several kinds of lock ({}); pick one with --kind",
                kinds.join(", ")
            ));
        }
    };
    if !yes && !confirm(&table::detail(view), name, view.kind)? {
        eprintln!("not unlocked");
        return Ok(false);
    }
    let unlocked = source
        .force_unlock(target, prefix, layout.kind, name)
        .await?;
    if json {
        output::json(&Unlocked {
            name,
            kind: Some(view.kind),
            unlocked,
        });
    } else if unlocked {
        output::text(&format!(
            "unlocked {} lock `{name}`; waiters were woken, and its holders find it lost at \
             their next renewal\n",
            view.kind
        ));
    } else {
        output::text(&format!("`{name}` was freed meanwhile; nothing deleted\n"));
    }
    Ok(true)
}

/// Shows what is about to go and reads a yes on stdin (the prompt goes to stderr, so
/// `--json` output stays clean).
fn confirm(detail: &str, name: &str, kind: &str) -> Result<bool, String> {
    eprint!("{detail}\nForce-unlock the {kind} lock `{name}`? Its holders lose it while they may still be working. [y/N] ");
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| format!("reading the confirmation: {e}"))?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

//! Every script dlock sends through its own connections, as one Redis FUNCTION library.
//!
//! On Redis 7+ the library is loaded once (`FUNCTION LOAD` at connect, and again wherever a
//! call finds it missing) and each script is called with FCALL. Unlike the script cache, a
//! library is replicated and persisted with the data, so a promoted replica or a restart from
//! RDB/AOF answers the first call after a failover at once instead of with NOSCRIPT.
//!
//! The library's name carries dlock's version and a hash of its code
//! (`dlock_<version>_<hash>`): clients of two versions each find their own library during a
//! rolling deploy, and neither replaces the other's. Old libraries stay until someone deletes
//! them: `FUNCTION DELETE` of any `dlock_*` library is safe at any time, since a client that
//! still uses it loads it again on its next call.
//!
//! Where FUNCTION is unavailable (Redis 6.2, or an ACL user without `+function`/`+fcall`) a
//! client uses EVALSHA, as it does for every call when the builder turns functions off.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

/// One script's source, and how Redis may run it.
pub(crate) struct Source {
    /// The function's name within the library.
    pub(crate) name: &'static str,
    /// Whether the script only keeps or frees what exists (a release, a renewal, a read). Such
    /// scripts carry `allow-oom`: a full server must still let a lock go.
    pub(crate) frees: bool,
    pub(crate) text: &'static str,
}

macro_rules! sources {
    ($($id:ident = $name:literal, $frees:literal, $text:expr;)*) => {
        $(pub(crate) const $id: Source = Source { name: $name, frees: $frees, text: $text };)*
        /// Every script in the library, in a fixed order (the library's hash depends on it).
        const ALL: &[Source] = &[$($id),*];
    };
}

sources! {
    LOCK_ACQUIRE = "lock_acquire", false, include_str!("../../lua/lock/acquire.lua");
    LOCK_RELEASE = "lock_release", true, include_str!("../../lua/lock/release.lua");
    LOCK_UNDO_REENTRY = "lock_undo_reentry", true, include_str!("../../lua/lock/undo_reentry.lua");
    LOCK_RENEW = "lock_renew", true, include_str!("../../lua/lock/renew.lua");
    LOCK_RENEW_NODE = "lock_renew_node", true, include_str!("../../lua/lock/renew_node.lua");
    LOCK_FORCE_UNLOCK = "lock_force_unlock", true, include_str!("../../lua/lock/force_unlock.lua");
    RW_ACQUIRE = "rw_acquire", false, include_str!("../../lua/rw/acquire.lua");
    RW_RELEASE = "rw_release", true, include_str!("../../lua/rw/release.lua");
    RW_RENEW = "rw_renew", true, include_str!("../../lua/rw/renew.lua");
    RW_FORCE_UNLOCK = "rw_force_unlock", true, include_str!("../../lua/rw/force_unlock.lua");
    FAIR_ACQUIRE = "fair_acquire", false,
        concat!(include_str!("../../lua/fair/common.lua"), include_str!("../../lua/fair/acquire.lua"));
    FAIR_RELEASE = "fair_release", true,
        concat!(include_str!("../../lua/fair/common.lua"), include_str!("../../lua/fair/release.lua"));
    FAIR_UNDO_REENTRY = "fair_undo_reentry", true,
        concat!(include_str!("../../lua/fair/common.lua"), include_str!("../../lua/fair/undo_reentry.lua"));
    SEMAPHORE_ACQUIRE = "semaphore_acquire", false, include_str!("../../lua/semaphore/acquire.lua");
    SEMAPHORE_RELEASE = "semaphore_release", true, include_str!("../../lua/semaphore/release.lua");
    SEMAPHORE_RENEW = "semaphore_renew", true, include_str!("../../lua/semaphore/renew.lua");
    SEMAPHORE_AVAILABLE = "semaphore_available", true, include_str!("../../lua/semaphore/available.lua");
    SEMAPHORE_FORCE_UNLOCK = "semaphore_force_unlock", true,
        include_str!("../../lua/semaphore/force_unlock.lua");
    STOCK_META = "stock_meta", true, include_str!("../../lua/stock/meta.lua");
    STOCK_INIT = "stock_init", false, include_str!("../../lua/stock/init.lua");
    STOCK_TAKE = "stock_take", false, include_str!("../../lua/stock/take.lua");
    STOCK_GIVE_BACK = "stock_give_back", true, include_str!("../../lua/stock/give_back.lua");
    STOCK_AUDIT = "stock_audit", true, include_str!("../../lua/stock/audit.lua");
}

/// The library: its name and the code `FUNCTION LOAD` takes.
pub(crate) struct Library {
    pub(crate) name: String,
    pub(crate) code: String,
}

/// Built once, from [`ALL`].
pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| Library::build(ALL));

impl Library {
    fn build(sources: &[Source]) -> Library {
        let name = library_name(sources);
        let mut code = format!("#!lua name={name}\n");
        for source in sources {
            code.push_str(&registration(&name, source));
        }
        Library { name, code }
    }

    /// The FCALL name of `source`'s function.
    pub(crate) fn function(&self, source: &Source) -> String {
        format!("{}_{}", self.name, source.name)
    }
}

/// `dlock_<version>_<first 12 hex digits of the SHA1 of every source>`: a library's name
/// changes whenever its code does, even between two builds of one version.
fn library_name(sources: &[Source]) -> String {
    let mut all = String::new();
    for s in sources {
        all.push_str(&format!("{}\0{}\0{}\0", s.name, s.frees, s.text));
    }
    let hash = redis::Script::new(&all).get_hash().to_owned();
    let version: String = env!("CARGO_PKG_VERSION")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("dlock_{version}_{}", &hash[..12])
}

/// One `redis.register_function` call. The script's body becomes the callback with `KEYS` and
/// `ARGV` as its parameters, so the same text serves FCALL and EVAL; flags from a `#!lua`
/// line (meant for EVAL) move into the registration.
fn registration(library: &str, source: &Source) -> String {
    let (mut flags, body) = split_shebang(source.text);
    if source.frees {
        flags.push("allow-oom");
    }
    let flags: Vec<String> = flags.iter().map(|f| format!("'{f}'")).collect();
    format!(
        "redis.register_function{{function_name='{library}_{}', flags={{{}}}, \
         callback=function(KEYS, ARGV)\n{body}\nend}}\n",
        source.name,
        flags.join(", ")
    )
}

/// The flags of a leading `#!lua flags=a,b` line, and the text after it.
fn split_shebang(text: &str) -> (Vec<&str>, &str) {
    let Some(rest) = text.strip_prefix("#!lua") else {
        return (Vec::new(), text);
    };
    let (line, body) = rest.split_once('\n').unwrap_or((rest, ""));
    let flags = line
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("flags="))
        .flat_map(|list| list.split(','))
        .filter(|f| !f.is_empty())
        .collect();
    (flags, body)
}

/// Whether one client calls the library (FCALL) or the script cache (EVALSHA). Shared by every
/// connection of the client; it only ever turns from functions to scripts.
#[derive(Debug)]
pub(crate) struct Mode(AtomicBool);

impl Mode {
    pub(crate) fn new(functions: bool) -> Self {
        Mode(AtomicBool::new(functions))
    }

    pub(crate) fn functions(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn use_scripts(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// The server lost the library (FUNCTION FLUSH or DELETE, a restart without persistence, a
/// node that joined later).
pub(crate) fn is_missing(e: &redis::RedisError) -> bool {
    e.code() == Some("ERR") && e.detail().is_some_and(|d| d.contains("Function not found"))
}

/// The server has no FUNCTION (before 7.0), or the user may not load or call functions.
pub(crate) fn is_unavailable(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM")
        || (e.code() == Some("ERR") && e.detail().is_some_and(|d| d.contains("unknown command")))
}

/// `FUNCTION LOAD` found the library there already (another client loaded it).
pub(crate) fn is_loaded_already(e: &redis::RedisError) -> bool {
    e.detail().is_some_and(|d| d.contains("already exists"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shebang_gives_its_flags_and_is_cut_from_the_body() {
        let (flags, body) = split_shebang("#!lua flags=allow-cross-slot-keys,no-writes\nreturn 1");
        assert_eq!(flags, ["allow-cross-slot-keys", "no-writes"]);
        assert_eq!(body, "return 1");
        assert_eq!(split_shebang("return 2"), (Vec::new(), "return 2"));
    }

    #[test]
    fn the_name_is_versioned_and_follows_the_code() {
        let a = Source {
            name: "a",
            frees: false,
            text: "return 1",
        };
        let b = Source {
            text: "return 2",
            ..a
        };
        let (one, two) = (library_name(&[a]), library_name(&[b]));
        assert_ne!(one, two);
        assert!(one.starts_with("dlock_"), "{one}");
        assert!(
            one.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{one}"
        );
    }

    #[test]
    fn every_lua_file_but_shared_helpers_is_in_the_library() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
        let mut missing = Vec::new();
        for kind in std::fs::read_dir(&dir).unwrap() {
            let kind = kind.unwrap().path();
            for file in std::fs::read_dir(&kind).unwrap() {
                let file = file.unwrap().path();
                let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
                let folder = kind.file_name().unwrap().to_string_lossy().into_owned();
                // Not sent by dlock's own connections: helpers, and the fenced write, which
                // runs on the caller's connection (see `fence`).
                if stem == "common" || folder == "fence" {
                    continue;
                }
                let name = format!("{folder}_{stem}");
                if !ALL.iter().any(|s| s.name == name) {
                    missing.push(name);
                }
            }
        }
        assert!(missing.is_empty(), "not in the library: {missing:?}");
    }
}

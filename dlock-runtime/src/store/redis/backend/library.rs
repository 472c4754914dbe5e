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

/// What a script does to the data, which decides the flags Redis runs it with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// It may create what was not there (an acquire, a take): refused on a full server, like
    /// any write that grows memory.
    Takes,
    /// It only keeps or frees what exists (a release, a renewal, an undo): `allow-oom`, so a
    /// full server still lets a lock go.
    Frees,
    /// It only reads: `no-writes` (and `allow-oom`), so it also runs where writes are refused
    /// (too few replicas for `min-replicas-to-write`, a failed RDB save).
    Reads,
}

impl Class {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Class::Takes => &[],
            Class::Frees => &["allow-oom"],
            Class::Reads => &["no-writes", "allow-oom"],
        }
    }
}

/// One script's source, and how Redis may run it.
pub(crate) struct Source {
    /// The function's name within the library.
    pub(crate) name: &'static str,
    pub(crate) class: Class,
    pub(crate) text: &'static str,
}

impl Source {
    /// Its flags: the class's, plus those of a `#!lua flags=...` line in the text.
    fn flags(&self) -> Vec<&'static str> {
        let (mut flags, _) = split_shebang(self.text);
        for f in self.class.flags() {
            if !flags.contains(f) {
                flags.push(f);
            }
        }
        flags
    }

    /// The text for EVAL on a server that has flags (Redis 7+): the class's flags in a
    /// `#!lua` line, so the fallback of a lost library runs as the function would.
    pub(crate) fn flagged_text(&self) -> String {
        let (_, body) = split_shebang(self.text);
        format!("#!lua flags={}\n{body}", self.flags().join(","))
    }
}

macro_rules! sources {
    ($($id:ident = $name:literal, $class:ident, $text:expr;)*) => {
        $(pub(crate) const $id: Source = Source { name: $name, class: Class::$class, text: $text };)*
        /// Every script in the library, in a fixed order (the library's hash depends on it).
        const ALL: &[Source] = &[$($id),*];
    };
}

sources! {
    LOCK_ACQUIRE = "lock_acquire", Takes, include_str!("../../../../lua/lock/acquire.lua");
    LOCK_REENTER = "lock_reenter", Takes, include_str!("../../../../lua/lock/reenter.lua");
    LOCK_RELEASE = "lock_release", Frees, include_str!("../../../../lua/lock/release.lua");
    LOCK_UNDO_REENTRY = "lock_undo_reentry", Frees, include_str!("../../../../lua/lock/undo_reentry.lua");
    LOCK_RENEW = "lock_renew", Frees, include_str!("../../../../lua/lock/renew.lua");
    LOCK_RENEW_NODE = "lock_renew_node", Frees, include_str!("../../../../lua/lock/renew_node.lua");
    LOCK_FORCE_UNLOCK = "lock_force_unlock", Frees, include_str!("../../../../lua/lock/force_unlock.lua");
    RW_ACQUIRE = "rw_acquire", Takes, include_str!("../../../../lua/rw/acquire.lua");
    RW_RELEASE = "rw_release", Frees, include_str!("../../../../lua/rw/release.lua");
    RW_RENEW = "rw_renew", Frees, include_str!("../../../../lua/rw/renew.lua");
    RW_FORCE_UNLOCK = "rw_force_unlock", Frees, include_str!("../../../../lua/rw/force_unlock.lua");
    FAIR_ACQUIRE = "fair_acquire", Takes,
        concat!(include_str!("../../../../lua/fair/common.lua"), include_str!("../../../../lua/fair/acquire.lua"));
    FAIR_RELEASE = "fair_release", Frees,
        concat!(include_str!("../../../../lua/fair/common.lua"), include_str!("../../../../lua/fair/release.lua"));
    FAIR_UNDO_REENTRY = "fair_undo_reentry", Frees,
        concat!(include_str!("../../../../lua/fair/common.lua"), include_str!("../../../../lua/fair/undo_reentry.lua"));
    SEMAPHORE_ACQUIRE = "semaphore_acquire", Takes, include_str!("../../../../lua/semaphore/acquire.lua");
    SEMAPHORE_RELEASE = "semaphore_release", Frees, include_str!("../../../../lua/semaphore/release.lua");
    SEMAPHORE_RENEW = "semaphore_renew", Frees, include_str!("../../../../lua/semaphore/renew.lua");
    SEMAPHORE_AVAILABLE = "semaphore_available", Reads, include_str!("../../../../lua/semaphore/available.lua");
    SEMAPHORE_FORCE_UNLOCK = "semaphore_force_unlock", Frees,
        include_str!("../../../../lua/semaphore/force_unlock.lua");
    REDISSON_LOCK_ACQUIRE = "redisson_lock_acquire", Takes,
        include_str!("../../../../lua/redisson/lock_acquire.lua");
    REDISSON_LOCK_REENTER = "redisson_lock_reenter", Takes,
        include_str!("../../../../lua/redisson/lock_reenter.lua");
    REDISSON_FENCED_LOCK_ACQUIRE = "redisson_fenced_lock_acquire", Takes,
        include_str!("../../../../lua/redisson/fenced_lock_acquire.lua");
    REDISSON_LOCK_RELEASE = "redisson_lock_release", Frees,
        include_str!("../../../../lua/redisson/lock_release.lua");
    REDISSON_LOCK_UNDO_REENTRY = "redisson_lock_undo_reentry", Frees,
        include_str!("../../../../lua/redisson/lock_undo_reentry.lua");
    REDISSON_LOCK_FORCE_UNLOCK = "redisson_lock_force_unlock", Frees,
        include_str!("../../../../lua/redisson/lock_force_unlock.lua");
    REDISSON_READ_ACQUIRE = "redisson_read_acquire", Takes,
        include_str!("../../../../lua/redisson/read_acquire.lua");
    REDISSON_READ_RELEASE = "redisson_read_release", Frees,
        include_str!("../../../../lua/redisson/read_release.lua");
    REDISSON_READ_RENEW = "redisson_read_renew", Frees,
        include_str!("../../../../lua/redisson/read_renew.lua");
    REDISSON_WRITE_ACQUIRE = "redisson_write_acquire", Takes,
        include_str!("../../../../lua/redisson/write_acquire.lua");
    REDISSON_WRITE_RELEASE = "redisson_write_release", Frees,
        include_str!("../../../../lua/redisson/write_release.lua");
    REDISSON_RW_FORCE_UNLOCK = "redisson_rw_force_unlock", Frees,
        include_str!("../../../../lua/redisson/rw_force_unlock.lua");
    STOCK_META = "stock_meta", Takes, include_str!("../../../../lua/stock/meta.lua");
    STOCK_INIT = "stock_init", Takes, include_str!("../../../../lua/stock/init.lua");
    STOCK_TAKE = "stock_take", Takes, include_str!("../../../../lua/stock/take.lua");
    STOCK_GIVE_BACK = "stock_give_back", Frees, include_str!("../../../../lua/stock/give_back.lua");
    STOCK_AUDIT = "stock_audit", Reads, include_str!("../../../../lua/stock/audit.lua");
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
        // Named after a hash of the code it loads (wrapping and flags included), with a
        // placeholder where the name goes.
        let draft = Library::code(PLACEHOLDER, sources);
        let hash = redis::Script::new(&draft).get_hash().to_owned();
        let version: String = env!("CARGO_PKG_VERSION")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let name = format!("dlock_{version}_{}", &hash[..12]);
        Library {
            code: Library::code(&name, sources),
            name,
        }
    }

    /// The code `FUNCTION LOAD` takes for a library called `name`.
    fn code(name: &str, sources: &[Source]) -> String {
        let mut code = format!("#!lua name={name}\n");
        for source in sources {
            code.push_str(&registration(name, source));
        }
        code
    }

    /// The FCALL name of `source`'s function.
    pub(crate) fn function(&self, source: &Source) -> String {
        format!("{}_{}", self.name, source.name)
    }
}

/// Stands for the library's name while its hash is computed.
const PLACEHOLDER: &str = "dlock_library";

/// One `redis.register_function` call. The script's body becomes the callback with `KEYS` and
/// `ARGV` as its parameters, so the same text serves FCALL and EVAL; flags from a `#!lua`
/// line (meant for EVAL) move into the registration.
fn registration(library: &str, source: &Source) -> String {
    let (_, body) = split_shebang(source.text);
    let flags: Vec<String> = source.flags().iter().map(|f| format!("'{f}'")).collect();
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

/// The server has no FUNCTION (before 7.0), or the user may not load or call functions. Only
/// a refusal of the command itself counts: a NOPERM for a key or channel inside a script says
/// nothing about FCALL.
pub(crate) fn is_unavailable(e: &redis::RedisError) -> bool {
    let detail = e.detail().unwrap_or_default().to_ascii_lowercase();
    match e.code() {
        Some("NOPERM") => detail.contains("'fcall'") || detail.contains("'function|load'"),
        Some("ERR") => detail.contains("unknown command"),
        _ => false,
    }
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
            class: Class::Takes,
            text: "return 1",
        };
        let b = Source {
            text: "return 2",
            ..a
        };
        let c = Source {
            class: Class::Frees,
            ..a
        };
        let name = |s: Source| Library::build(&[s]).name;
        let (one, two, three) = (name(a), name(b), name(c));
        assert_ne!(one, two);
        assert_ne!(one, three, "the flags are part of the code");
        assert!(one.starts_with("dlock_"), "{one}");
        assert!(
            one.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{one}"
        );
    }

    #[test]
    fn the_eval_fallback_carries_the_functions_flags() {
        assert_eq!(
            LOCK_RENEW_NODE.flagged_text().lines().next(),
            Some("#!lua flags=allow-cross-slot-keys,allow-oom")
        );
        assert!(SEMAPHORE_AVAILABLE
            .flagged_text()
            .starts_with("#!lua flags=no-writes,allow-oom\n"));
        assert!(LOCK_ACQUIRE.flagged_text().starts_with("#!lua flags=\n"));
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

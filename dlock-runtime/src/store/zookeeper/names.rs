//! Where a lock lives in ZooKeeper: one node path per lock key, and the child names Curator's
//! recipes give the owners that ask for it.

/// The node of the lock whose key is `key` (`<prefix>{<name>}<kind suffix>`, see
/// `store/redis/backend/names.rs`): `/` and the key, with what a ZooKeeper node name cannot hold
/// percent-escaped (`/`, control characters, the code points ZooKeeper reserves (a Rust string
/// holds no surrogates, the rest of its U+D800-U+F8FF range), and a whole
/// name `.` or `..`). The key's own `%` are already escaped, so the escape is unambiguous, and
/// the inspector reads the key back by unescaping.
pub(crate) fn lock_path(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 1);
    out.push('/');
    if key == "." || key == ".." {
        for b in key.bytes() {
            out.push_str(&format!("%{b:02X}"));
        }
        return out;
    }
    for c in key.chars() {
        let reserved = matches!(c, '/' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
            | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}');
        if reserved {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The key a lock node's path stands for (the inverse of [`lock_path`]): the inspector reads
/// the keys back from the nodes it lists, and the tests show with it that the escaping loses
/// nothing. `None` for a path that is no escaped key (not valid UTF-8 once unescaped).
pub(crate) fn key_of(path: &str) -> Option<String> {
    let escaped = path.strip_prefix('/')?;
    let mut bytes = Vec::with_capacity(escaped.len());
    let raw = escaped.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        // Only the escapes `lock_path` writes are undone: `%2F` and the like. A key's own `%`
        // is always followed by `25`, `7B` or `7D`, which stay as they are.
        if raw[i] == b'%' && i + 2 < raw.len() {
            let hex = std::str::from_utf8(&raw[i + 1..i + 3]).ok()?;
            let b = u8::from_str_radix(hex, 16).ok()?;
            if !matches!(hex, "25" | "7B" | "7D") {
                bytes.push(b);
                i += 3;
                continue;
            }
        }
        bytes.push(raw[i]);
        i += 1;
    }
    String::from_utf8(bytes).ok()
}

/// A 128-bit id of `owner` in Curator's UUID form (8-4-4-4-12 hex digits), the same every time
/// for one owner, so a create whose reply was lost finds its child again by its name (Curator's
/// protected mode). FNV-1a over the owner id, which holds the client's 128 random bits: two
/// owners never share it in practice, and nothing here needs it to be secret.
pub(crate) fn owner_uuid(owner: &str) -> String {
    let mut h: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for b in owner.bytes() {
        h ^= u128::from(b);
        h = h.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    let hex = format!("{h:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The name prefix of `owner`'s child of a lock, before the sequence ZooKeeper appends:
/// `_c_<uuid>-<lock name>`, as Curator's protected mode writes it (`lock-` for a mutex).
pub(crate) fn child_prefix(owner: &str, lock_name: &str) -> String {
    format!("_c_{}-{lock_name}", owner_uuid(owner))
}

/// The sequence of a lock's child, read after the last `lock_name` in it as Curator sorts
/// them; `None` for a child of another recipe.
pub(crate) fn sequence(child: &str, lock_name: &str) -> Option<i64> {
    let at = child.rfind(lock_name)?;
    child[at + lock_name.len()..].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_escape_what_zookeeper_refuses_and_read_back() {
        for key in [
            "dlock:{order:7}",
            "a/b",
            "x\u{1}y",
            ".",
            "..",
            "dlock:{50%25}",
            "é\u{fff5}",
        ] {
            let path = lock_path(key);
            assert!(!path[1..].contains('/'), "{path}");
            assert_eq!(key_of(&path).as_deref(), Some(key), "{path}");
        }
        assert_eq!(lock_path("dlock:{a/b}"), "/dlock:{a%2Fb}");
        assert_eq!(lock_path(".."), "/%2E%2E");
    }

    #[test]
    fn children_are_named_and_sorted_as_curator_does() {
        let prefix = child_prefix("abc:1@host/label", "lock-");
        assert!(
            prefix.starts_with("_c_") && prefix.ends_with("-lock-"),
            "{prefix}"
        );
        assert_eq!(prefix.len(), 3 + 36 + 1 + 5);
        assert_eq!(owner_uuid("o"), owner_uuid("o"));
        assert_ne!(owner_uuid("o:1"), owner_uuid("o:2"));
        assert_eq!(sequence(&format!("{prefix}0000000042"), "lock-"), Some(42));
        assert_eq!(sequence("_c_x-__READ__0000000001", "lock-"), None);
    }
}

//! Holder labels: who holds a lock, in words a person reads during an incident ("which host,
//! which function?"), carried inside the owner id every store already writes.
//!
//! An owner id is `<client id>:<sequence>@<client name>[/<lock label>]`: the client id (32 hex
//! digits) and sequence are what makes it unique; the client name (the builder's
//! [`name`](crate::LockClientBuilder::name), `host:pid` by default) and the lock's label (the
//! attribute's key template or function name, or [`Lock::label`](crate::Lock::label)) are
//! what a person reads. Riding in the owner id costs no extra write, key or round trip on any
//! store: the label lives exactly as long as the hold, is renewed with it and goes with it.
//!
//! Both labels are percent-escaped (`%`, `/`, `@`, whitespace and control characters) so the
//! id holds no space (a fair lock's grant message is `<owner> <token>`) and reads back
//! unambiguously, and are cut to a bounded length so an owner id stays small.

use std::fmt::Write;

/// Longest client name, in bytes, as given to the builder.
pub(crate) const MAX_CLIENT_NAME: usize = 64;

/// Longest lock label kept in an owner id, in characters before escaping (a longer template
/// is cut, and ends in `…`).
const MAX_LOCK_LABEL: usize = 80;

/// The default client name: `<host name>:<process id>`.
pub(crate) fn default_client_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    let mut name = format!("{host}:{}", std::process::id());
    cut(&mut name, MAX_CLIENT_NAME);
    name
}

/// Why `name` cannot be a client name, if it cannot.
pub(crate) fn client_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("the client name is empty: leave it unset for `host:pid`".into());
    }
    if name.len() > MAX_CLIENT_NAME {
        return Some(format!(
            "the client name is {} bytes long, above the limit of {MAX_CLIENT_NAME}: it rides in every owner id",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Some(format!(
            "the client name {name:?} holds a control character"
        ));
    }
    None
}

/// What follows the unique part of every owner id of a client called `client_name`:
/// `@<client name, escaped>`. Made once per client, not per hold.
pub(crate) fn client_tag(client_name: &str) -> String {
    let mut out = String::with_capacity(client_name.len() + 1);
    out.push('@');
    escape_into(&mut out, client_name);
    out
}

/// Appends `/<lock label, escaped and cut>` to an owner id (nothing for no label).
pub(crate) fn push_label(owner: &mut String, lock_label: Option<&str>) {
    if let Some(label) = lock_label.filter(|l| !l.is_empty()) {
        owner.push('/');
        if label.chars().count() > MAX_LOCK_LABEL {
            let cut: String = label.chars().take(MAX_LOCK_LABEL - 1).collect();
            escape_into(owner, &cut);
            owner.push('…');
        } else {
            escape_into(owner, label);
        }
    }
}

/// The part of an owner id after its unique part: `@<client name>[/<lock label>]`.
#[cfg(test)]
fn suffix(client_name: &str, lock_label: Option<&str>) -> String {
    let mut out = client_tag(client_name);
    push_label(&mut out, lock_label);
    out
}

/// The unique part of an owner id (`<client id>:<sequence>`), without its labels.
pub(crate) fn unique_part(owner: &str) -> &str {
    owner.split_once('@').map_or(owner, |(id, _)| id)
}

/// Whether `text` is an owner id a dlock client wrote: its unique part is a client id (32 hex
/// digits), `:` and a decimal sequence. Tells dlock's children of a ZooKeeper lock from those
/// of Curator clients on the same path, whose data is their host's address.
#[cfg_attr(not(feature = "zookeeper"), allow(dead_code))]
pub(crate) fn is_owner_id(text: &str) -> bool {
    let Some((client, seq)) = unique_part(text).split_once(':') else {
        return false;
    };
    client.len() == 32
        && client.bytes().all(|b| b.is_ascii_hexdigit())
        && !seq.is_empty()
        && seq.bytes().all(|b| b.is_ascii_digit())
}

/// An owner id read back: what makes it unique and who it says holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// `<client id>:<sequence>`: the client id is the holder's
    /// [`LockClient::client_id`](crate::LockClient::client_id).
    pub owner_id: String,
    /// The holder's client name (`host:pid` unless its builder named it); `None` for an owner
    /// id without labels (an older client, or Redisson's `<uuid>:<thread id>`).
    pub client: Option<String>,
    /// The lock's label: the attribute's key template or function name, or what
    /// [`Lock::label`](crate::Lock::label) set.
    pub label: Option<String>,
}

impl Holder {
    /// Reads an owner id as a store keeps it (a lock hash's field, a semaphore's member, a
    /// PostgreSQL `holds.owner` without its `r:` / `w:` side).
    ///
    /// ```
    /// # extern crate dlock_runtime as dlock;
    /// use dlock::inspect::Holder;
    /// let h = Holder::parse("5f0c:17@web-3:4411/order:%7Border.id%7D");
    /// assert_eq!(h.owner_id, "5f0c:17");
    /// assert_eq!(h.client.as_deref(), Some("web-3:4411"));
    /// assert_eq!(h.label.as_deref(), Some("order:{order.id}"));
    /// ```
    pub fn parse(owner: &str) -> Holder {
        let Some((id, rest)) = owner.split_once('@') else {
            return Holder {
                owner_id: owner.to_owned(),
                client: None,
                label: None,
            };
        };
        let (client, label) = match rest.split_once('/') {
            Some((c, l)) => (c, Some(unescape(l))),
            None => (rest, None),
        };
        Holder {
            owner_id: id.to_owned(),
            client: Some(unescape(client)),
            label,
        }
    }
}

fn must_escape(c: char) -> bool {
    matches!(c, '%' | '/' | '@') || c.is_whitespace() || c.is_control()
}

fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        if must_escape(c) {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                let _ = write!(out, "%{b:02X}");
            }
        } else {
            out.push(c);
        }
    }
}

/// The inverse of `escape_into`; a malformed escape is kept as it is (an owner id written by
/// something else must still read back as some text, never fail).
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Cuts `text` to at most `max` bytes, at a character boundary.
fn cut(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_are_told_from_other_data() {
        let id = format!("{:032x}:17", 0xabc_u128);
        assert!(is_owner_id(&id));
        assert!(is_owner_id(&format!("{id}@web-3:4411/order")));
        for other in [
            "127.0.1.1",
            "",
            "abc:1",
            &format!("{:032x}:", 1),
            &format!("{:032x}:1x", 1),
        ] {
            assert!(!is_owner_id(other), "{other}");
        }
    }

    #[test]
    fn labels_read_back_as_written() {
        let owner = format!("abc:1{}", suffix("web 3@x/y", Some("order:{id} / 100%\n")));
        assert!(!owner.contains(' ') && !owner.contains('\n'), "{owner}");
        let h = Holder::parse(&owner);
        assert_eq!(h.owner_id, "abc:1");
        assert_eq!(h.client.as_deref(), Some("web 3@x/y"));
        assert_eq!(h.label.as_deref(), Some("order:{id} / 100%\n"));
        assert_eq!(unique_part(&owner), "abc:1");
    }

    #[test]
    fn owners_without_labels_and_malformed_escapes_read_back() {
        let h = Holder::parse("abc:1");
        assert_eq!(
            (h.owner_id.as_str(), h.client, h.label),
            ("abc:1", None, None)
        );
        let h = Holder::parse("abc:1@host%4/x%zz%");
        assert_eq!(h.client.as_deref(), Some("host%4"));
        assert_eq!(h.label.as_deref(), Some("x%zz%"));
        assert_eq!(unique_part("abc:1"), "abc:1");
    }

    #[test]
    fn long_labels_are_cut_and_names_checked() {
        let label = "é".repeat(500);
        let s = suffix("h", Some(&label));
        let h = Holder::parse(&format!("a:1{s}"));
        let read = h.label.unwrap();
        assert_eq!(read.chars().count(), MAX_LOCK_LABEL);
        assert!(read.ends_with('…'));
        assert!(client_name_problem("").is_some());
        assert!(client_name_problem(&"x".repeat(65)).is_some());
        assert!(client_name_problem("a\u{7}b").is_some());
        assert!(client_name_problem("web-3:4411").is_none());
        let name = default_client_name();
        assert!(client_name_problem(&name).is_none(), "{name}");
        assert!(
            name.ends_with(&format!(":{}", std::process::id())),
            "{name}"
        );
    }
}

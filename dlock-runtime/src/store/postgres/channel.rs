//! PostgreSQL channel names for dlock's release channels.
//!
//! A NOTIFY channel is an identifier: at most 63 bytes, and LISTEN folds it unless quoted. Lock
//! names are user text of any length, so a channel is named by a 64-bit FNV-1a hash of the
//! release channel dlock would use on Redis. Both sides compute it here (the release passes it
//! to the SQL function), so nothing depends on the server's hash functions. Two channels that
//! collide only share wake-ups: a waiter woken for the other lock retries and waits again.

/// The PostgreSQL channel carrying the releases of `channel`.
pub(crate) fn pg_channel(channel: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in channel.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("dlock_{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::pg_channel;

    #[test]
    fn channel_names_are_short_stable_identifiers() {
        let long = "x".repeat(10_000);
        let name = pg_channel(&long);
        assert!(name.len() <= 63, "{name}");
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        assert_eq!(
            pg_channel("dlock:{a}:released"),
            pg_channel("dlock:{a}:released")
        );
        assert_ne!(
            pg_channel("dlock:{a}:released"),
            pg_channel("dlock:{b}:released")
        );
        // FNV-1a of the empty string is its offset basis.
        assert_eq!(pg_channel(""), "dlock_cbf29ce484222325");
    }
}

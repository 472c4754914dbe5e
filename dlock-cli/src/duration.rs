//! Durations in and out: `250ms`, `30s`, `2m`, `1h` on the command line (as the attribute
//! takes them), and a lock's remaining TTL for people.

use std::time::Duration;

/// `<whole number><ms|s|m|h>`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{s}` has no unit: write e.g. 500ms, 10s, 2m or 1h"))?;
    let (number, unit) = s.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{s}` does not start with a whole number"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (ms, s, m or h)")),
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("`{s}` is too long"))
}

/// A PTTL as people read it: `850ms`, `29.8s`, `4m05s`, `2h10m`; `no expiry` for -1.
pub fn format_pttl(ms: i64) -> String {
    match ms {
        ms if ms < 0 => "no expiry".to_owned(),
        ms if ms < 1_000 => format!("{ms}ms"),
        ms if ms < 60_000 => format!("{:.1}s", ms as f64 / 1_000.0),
        ms if ms < 3_600_000 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1_000),
        ms => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("3 days").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
    }

    #[test]
    fn ttls_read_at_a_glance() {
        assert_eq!(format_pttl(-1), "no expiry");
        assert_eq!(format_pttl(850), "850ms");
        assert_eq!(format_pttl(29_849), "29.8s");
        assert_eq!(format_pttl(245_000), "4m05s");
        assert_eq!(format_pttl(7_800_000), "2h10m");
    }
}

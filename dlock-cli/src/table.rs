//! Plain-text output: the `list` table and `show`'s details.

use crate::duration::format_pttl;
use crate::snapshot::{Holder, LockView, WrongType};

/// Holders shown per row of `list`; the rest are counted (`show` lists all).
const HOLDERS_PER_ROW: usize = 3;

/// Columns padded to their widest cell (counted in characters), two spaces apart, no
/// trailing blanks.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `list`: one row per lock.
pub fn list(views: &[LockView]) -> String {
    let headers = [
        "NAME",
        "KIND",
        "HOLDERS",
        "TTL",
        "WAITING CLIENTS",
        "QUEUE",
        "PERMITS",
    ];
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            let mut holders: Vec<String> = v
                .holders
                .iter()
                .take(HOLDERS_PER_ROW)
                .map(holder_cell)
                .collect();
            if v.holders.len() > HOLDERS_PER_ROW {
                holders.push(format!("+{} more", v.holders.len() - HOLDERS_PER_ROW));
            }
            // Not a lock's data: said where the holders would be, so the row cannot be
            // mistaken for a free lock.
            holders.extend(
                v.wrong_type
                    .iter()
                    .map(|w| format!("WRONG TYPE: {}", wrong_type(w))),
            );
            vec![
                v.name.clone(),
                v.kind.to_owned(),
                or_dash(holders.join(", ")),
                v.pttl_ms.map_or_else(|| "-".to_owned(), format_pttl),
                v.waiting_clients
                    .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                v.queue
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |q| q.len().to_string()),
                v.permits.map_or_else(
                    || "-".to_owned(),
                    |p| match p.total {
                        Some(total) => format!("{}/{total}", p.used),
                        None => format!("{}/?", p.used),
                    },
                ),
            ]
        })
        .collect();
    render(&headers, &rows)
}

/// `show`: every detail of one lock, owners in full.
pub fn detail(v: &LockView) -> String {
    let mut facts = vec![
        ("lock", v.name.clone()),
        ("kind", v.kind.to_owned()),
        ("key", v.key.clone()),
        ("state", if v.held { "held" } else { "free" }.to_owned()),
        ("ttl", v.pttl_ms.map_or_else(|| "-".to_owned(), format_pttl)),
    ];
    for w in &v.wrong_type {
        facts.push((
            "wrong type",
            format!(
                "{}; dlock's clients fail with WrongType on this lock: move that data elsewhere",
                wrong_type(w)
            ),
        ));
    }
    if let Some(n) = v.waiting_clients {
        facts.push((
            "waiting",
            format!(
                "{n} client(s) subscribed (a client counts once however many of its tasks \
                 wait; the holder's own waiting tasks are not visible)"
            ),
        ));
    }
    if let Some(mode) = &v.mode {
        facts.push(("mode", mode.clone()));
    }
    if let Some(writer) = &v.writer_waiting {
        facts.push(("next writer", writer.clone()));
    }
    if let Some(queue) = &v.queue {
        facts.push(("queue", format!("{} waiting", queue.len())));
    }
    if let Some(p) = v.permits {
        let total = p.total.map_or_else(|| "?".to_owned(), |t| t.to_string());
        facts.push(("permits", format!("{} used of {total}", p.used)));
    }
    let width = facts.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, value) in &facts {
        out.push_str(&format!("{k:width$}  {value}\n"));
    }
    if !v.holders.is_empty() {
        let rows: Vec<Vec<String>> = v
            .holders
            .iter()
            .map(|h| {
                vec![
                    h.owner.clone(),
                    Some(h.who())
                        .filter(|w| !w.is_empty())
                        .unwrap_or_else(|| "-".into()),
                    h.count.to_string(),
                    h.side.unwrap_or("-").to_owned(),
                    h.ttl_ms.map_or_else(|| "-".to_owned(), format_pttl),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&render(&["HOLDER", "WHO", "COUNT", "SIDE", "TTL"], &rows));
    }
    if let Some(queue) = v.queue.as_ref().filter(|q| !q.is_empty()) {
        out.push('\n');
        let rows: Vec<Vec<String>> = queue
            .iter()
            .enumerate()
            .map(|(i, o)| vec![(i + 1).to_string(), o.clone()])
            .collect();
        out.push_str(&render(&["#", "QUEUED"], &rows));
    }
    out
}

/// One holder in a `list` row: `r 3f2a9c1d…:7 (web-3:4411 order:{id}) x2`.
pub fn holder_cell(h: &Holder) -> String {
    let side = match h.side {
        Some("read") => "r ",
        Some("write") => "w ",
        _ => "",
    };
    let times = if h.count > 1 {
        format!(" x{}", h.count)
    } else {
        String::new()
    };
    let who = h.who();
    let who = if who.is_empty() {
        who
    } else {
        format!(" ({who})")
    };
    format!("{side}{}{who}{times}", short_owner(&h.owner))
}

/// An owner id `<32 hex client id>:<sequence>` shortened to the client id's first 8 digits:
/// enough to tell clients apart in a table (`show` and `--json` give it whole).
pub fn short_owner(owner: &str) -> String {
    // The labels after `@` are shown apart (see `Holder::who`).
    let owner = dlock_runtime::inspect::Holder::parse(owner).owner_id;
    match owner.split_once(':') {
        Some((client, seq))
            if client.len() == 32 && client.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            format!("{}…:{seq}", &client[..8])
        }
        _ => owner,
    }
}

/// `` `dlock:{x}` holds a string, not a hash ``.
pub fn wrong_type(w: &WrongType) -> String {
    format!("`{}` holds a {}, not a {}", w.key, w.holds, w.expected)
}

fn or_dash(s: String) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::Permits;

    const CLIENT: &str = "0123456789abcdef0123456789abcdef";

    fn view(name: &str, kind: &'static str) -> LockView {
        LockView {
            name: name.to_owned(),
            kind,
            key: format!("dlock:{{{name}}}"),
            held: false,
            holders: vec![],
            pttl_ms: None,
            waiting_clients: Some(0),
            mode: None,
            writer_waiting: None,
            queue: None,
            permits: None,
            wrong_type: vec![],
        }
    }

    fn holder(seq: u32, count: i64, side: Option<&'static str>) -> Holder {
        Holder::new(format!("{CLIENT}:{seq}"), count, side, None)
    }

    #[test]
    fn columns_line_up_and_lines_end_without_blanks() {
        let out = render(
            &["A", "BB"],
            &[
                vec!["long cell".into(), "x".into()],
                vec!["é".into(), "".into()],
            ],
        );
        assert_eq!(out, "A          BB\nlong cell  x\né\n");
    }

    #[test]
    fn a_list_row_per_kind() {
        let mut plain = view("order:1", "plain");
        plain.held = true;
        plain.holders = vec![holder(7, 2, None)];
        plain.pttl_ms = Some(29_849);
        plain.waiting_clients = Some(1);
        let mut sem = view("exports", "semaphore");
        sem.holders = (1..=5).map(|i| holder(i, 1, None)).collect();
        sem.permits = Some(Permits {
            used: 5,
            total: Some(8),
        });
        let mut fair = view("report", "fair");
        fair.queue = Some(vec![format!("{CLIENT}:3")]);
        let mut rw = view("prices", "rw");
        rw.holders = vec![holder(1, 1, Some("read")), holder(2, 1, Some("read"))];
        let out = list(&[plain, sem, fair, rw]);
        let expected = "\
NAME     KIND       HOLDERS                                         TTL    WAITING CLIENTS  QUEUE  PERMITS
order:1  plain      01234567…:7 x2                                  29.8s  1                -      -
exports  semaphore  01234567…:1, 01234567…:2, 01234567…:3, +2 more  -      0                -      5/8
report   fair       -                                               -      0                1      -
prices   rw         r 01234567…:1, r 01234567…:2                    -      0                -      -
";
        assert_eq!(out, expected);
    }

    #[test]
    fn owners_that_are_not_client_ids_stay_whole() {
        assert_eq!(short_owner(&format!("{CLIENT}:12")), "01234567…:12");
        assert_eq!(short_owner("someone:1"), "someone:1");
        assert_eq!(short_owner("no-colon"), "no-colon");
    }

    #[test]
    fn details_give_owners_in_full() {
        let mut v = view("exports", "semaphore");
        v.held = true;
        v.holders = vec![Holder {
            ttl_ms: Some(4_000),
            ..holder(1, 1, None)
        }];
        v.pttl_ms = Some(4_000);
        v.permits = Some(Permits {
            used: 1,
            total: Some(3),
        });
        let out = detail(&v);
        assert!(
            out.contains(&format!("{CLIENT}:1  -    1      -     4.0s")),
            "{out}"
        );
        assert!(out.contains("permits  1 used of 3\n"), "{out}");
        assert!(out.starts_with("lock     exports\n"), "{out}");
    }
}

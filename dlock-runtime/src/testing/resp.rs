//! A minimal blocking RESP2 client: enough to ask a node PING, INFO, ROLE, CLUSTER and SENTINEL
//! questions. The harness is synchronous (a test may call it from inside a runtime or from a
//! plain `#[test]`), so it does not borrow the crate's async connections.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One reply. Error replies are returned as `Err` by [`call`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Status(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
}

/// Bounds on what one reply may hold, so a confused peer cannot make the harness allocate or
/// recurse without limit.
const MAX_LINE: u64 = 64 * 1024;
const MAX_BULK: usize = 16 << 20;
const MAX_ITEMS: usize = 1 << 20;
const MAX_DEPTH: usize = 8;

/// Sends one command to `127.0.0.1:port` on a fresh connection and reads its reply, each step
/// bounded by `timeout`.
pub(crate) fn call(port: u16, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    (&stream).write_all(&encode(args))?;
    read_reply(&mut BufReader::new(stream), 0).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("`{}` on 127.0.0.1:{port}: {e}", args.join(" ")),
        )
    })
}

/// [`call`] for a reply that is text (status or bulk string), e.g. INFO or CLUSTER NODES.
pub(crate) fn call_text(port: u16, args: &[&str], timeout: Duration) -> io::Result<String> {
    call(port, args, timeout)?.into_text()
}

/// Whether a Redis answers PING on `port` within a short time.
pub(crate) fn ping(port: u16) -> bool {
    matches!(
        call(port, &["PING"], Duration::from_millis(500)),
        Ok(Reply::Status(s)) if s == "PONG"
    )
}

/// The `key:value` lines of an INFO reply.
pub(crate) fn info_field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

impl Reply {
    pub(crate) fn into_text(self) -> io::Result<String> {
        match self {
            Reply::Status(s) => Ok(s),
            Reply::Bulk(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
            other => Err(unexpected("text", &other)),
        }
    }

    pub(crate) fn into_array(self) -> io::Result<Vec<Reply>> {
        match self {
            Reply::Array(items) => Ok(items),
            other => Err(unexpected("an array", &other)),
        }
    }

    /// A flat `[field, value, field, value, ...]` array (SENTINEL MASTER, SENTINEL REPLICAS
    /// entries) as a map.
    pub(crate) fn into_map(self) -> io::Result<HashMap<String, String>> {
        let mut map = HashMap::new();
        let mut items = self.into_array()?.into_iter();
        while let (Some(k), Some(v)) = (items.next(), items.next()) {
            map.insert(k.into_text()?, v.into_text()?);
        }
        Ok(map)
    }
}

fn unexpected(wanted: &str, got: &Reply) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("expected {wanted}, got {got:?}"),
    )
}

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn read_reply<R: BufRead>(r: &mut R, depth: usize) -> io::Result<Reply> {
    let line = read_line(r)?;
    let (kind, rest) = line.split_at(1.min(line.len()));
    match kind {
        "+" => Ok(Reply::Status(rest.to_owned())),
        "-" => Err(io::Error::other(rest.to_owned())),
        ":" => Ok(Reply::Int(number(rest)?)),
        "$" => match number(rest)? {
            -1 => Ok(Reply::Nil),
            n if (0..=MAX_BULK as i64).contains(&n) => {
                let mut body = vec![0; n as usize + 2];
                r.read_exact(&mut body)?;
                if !body.ends_with(b"\r\n") {
                    return Err(bad("bulk string not ended by CRLF"));
                }
                body.truncate(n as usize);
                Ok(Reply::Bulk(body))
            }
            n => Err(bad(&format!("bulk length {n}"))),
        },
        "*" => match number(rest)? {
            -1 => Ok(Reply::Nil),
            _ if depth >= MAX_DEPTH => Err(bad("arrays nested too deep")),
            n if (0..=MAX_ITEMS as i64).contains(&n) => (0..n)
                .map(|_| read_reply(r, depth + 1))
                .collect::<io::Result<_>>()
                .map(Reply::Array),
            n => Err(bad(&format!("array length {n}"))),
        },
        _ => Err(bad(&format!("unknown reply line {line:?}"))),
    }
}

fn read_line<R: BufRead>(r: &mut R) -> io::Result<String> {
    let mut buf = Vec::new();
    r.by_ref().take(MAX_LINE).read_until(b'\n', &mut buf)?;
    if !buf.ends_with(b"\r\n") {
        return Err(bad("connection closed or line not ended by CRLF"));
    }
    buf.truncate(buf.len() - 2);
    String::from_utf8(buf).map_err(|_| bad("reply line is not UTF-8"))
}

fn number(text: &str) -> io::Result<i64> {
    text.parse()
        .map_err(|_| bad(&format!("not a number: {text:?}")))
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("bad RESP: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Reply> {
        read_reply(&mut &bytes[..], 0)
    }

    #[test]
    fn parses_every_reply_kind() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Reply::Status("OK".into()));
        assert_eq!(parse(b":-3\r\n").unwrap(), Reply::Int(-3));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Nil);
        assert_eq!(
            parse(b"$4\r\na\r\nb\r\n").unwrap(),
            Reply::Bulk(b"a\r\nb".to_vec())
        );
        assert_eq!(
            parse(b"*2\r\n$6\r\nmaster\r\n:7\r\n").unwrap(),
            Reply::Array(vec![Reply::Bulk(b"master".to_vec()), Reply::Int(7)])
        );
        let err = parse(b"-ERR unknown command\r\n").unwrap_err();
        assert_eq!(err.to_string(), "ERR unknown command");
    }

    #[test]
    fn refuses_malformed_or_unbounded_replies() {
        assert!(parse(b"+OK").is_err());
        assert!(parse(b"$5\r\nab\r\n").is_err());
        assert!(parse(b"$99999999999\r\n").is_err());
        assert!(parse(b"?\r\n").is_err());
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn reads_info_fields() {
        let info = "# Replication\r\nrole:slave\r\nmaster_link_status:up\r\n";
        assert_eq!(info_field(info, "master_link_status"), Some("up"));
        assert_eq!(info_field(info, "role"), Some("slave"));
        assert_eq!(info_field(info, "master"), None);
    }
}

//! `CLUSTER NODES`, read: which nodes a cluster has and which are masters. Chosen over
//! `CLUSTER SHARDS` because Redis 6.2, which dlock supports, lacks the latter.

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub host: String,
    pub port: u16,
    pub master: bool,
}

/// The reachable-looking nodes: lines flagged `fail`, `handshake` or `noaddr`, or without an
/// address, are left out (asking them would only time out).
pub fn parse(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _id = fields.next()?;
            // `ip:port@cport[,hostname]`
            let addr = fields.next()?.split(['@', ',']).next()?;
            let flags: Vec<&str> = fields.next()?.split(',').collect();
            if flags
                .iter()
                .any(|f| matches!(*f, "fail" | "handshake" | "noaddr"))
            {
                return None;
            }
            let (host, port) = addr.rsplit_once(':')?;
            let port = port.parse().ok().filter(|p| *p != 0)?;
            if host.is_empty() {
                return None;
            }
            Some(ClusterNode {
                host: host.trim_matches(['[', ']']).to_owned(),
                port,
                master: flags.contains(&"master"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_and_replicas_are_told_apart_and_failed_nodes_left_out() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002,node-b master - 0 1426238316232 2 connected 5461-10922
292f 127.0.0.1:30003@40003 myself,master - 0 0 3 connected 10923-16383
6ec2 127.0.0.1:30005@40005 master,fail - 1426238316232 1426238315231 5 disconnected
824f :0@0 handshake - 0 0 0 disconnected
aaaa ::1:30006@40006 slave 292f 0 0 3 connected
";
        let nodes = parse(text);
        let node = |host: &str, port, master| ClusterNode {
            host: host.to_owned(),
            port,
            master,
        };
        assert_eq!(
            nodes,
            vec![
                node("127.0.0.1", 30004, false),
                node("127.0.0.1", 30002, true),
                node("127.0.0.1", 30003, true),
                node("::1", 30006, false),
            ]
        );
    }
}

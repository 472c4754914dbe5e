//! What one node says about the cluster (CLUSTER NODES), reduced to what the harness compares
//! between nodes: who is master of which slots, who replicates whom.
//!
//! CLUSTER NODES rather than CLUSTER SHARDS: SHARDS arrived in 7.0, and the harness supports 6.2.

use std::ops::RangeInclusive;

/// Slots in a Redis Cluster.
pub(crate) const SLOTS: u32 = 16_384;

/// A node's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// Serves slots and takes writes.
    Master,
    /// Replicates a master; promoted by a failover.
    Replica,
}

/// One node as a cluster member sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeState {
    pub(crate) id: String,
    pub(crate) port: u16,
    pub(crate) role: Role,
    /// The master a replica follows.
    pub(crate) master_port: Option<u16>,
    /// Sorted, inclusive ranges; empty for replicas.
    pub(crate) slots: Vec<RangeInclusive<u16>>,
}

/// A line of CLUSTER NODES:
/// `<id> <ip:port@cport[,host]> <flags> <master-id|-> <ping> <pong> <epoch> <link> <slot>...`
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    id: String,
    port: u16,
    flags: Vec<String>,
    master_id: Option<String>,
    slots: Vec<RangeInclusive<u16>>,
}

/// The members in `ports` as one node's CLUSTER NODES reply describes them, sorted by port,
/// plus what makes that view unsettled (a member unknown, still in handshake, or flagged as
/// failing).
pub(crate) fn view_of(
    nodes_reply: &str,
    ports: &[u16],
) -> Result<(Vec<NodeState>, Vec<String>), String> {
    let lines = nodes_reply
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(parse_line)
        .collect::<Result<Vec<_>, _>>()?;
    let mut problems = Vec::new();
    let mut view = Vec::new();
    let mut ports = ports.to_vec();
    ports.sort_unstable();
    for port in ports {
        let Some(line) = lines.iter().find(|l| l.port == port) else {
            problems.push(format!("127.0.0.1:{port} is not a member yet"));
            continue;
        };
        let bad: Vec<&str> = line
            .flags
            .iter()
            .map(String::as_str)
            .filter(|f| matches!(*f, "fail" | "fail?" | "handshake" | "noaddr"))
            .collect();
        if !bad.is_empty() {
            problems.push(format!("127.0.0.1:{port} is flagged {}", bad.join(",")));
        }
        let master_port = line
            .master_id
            .as_ref()
            .and_then(|id| lines.iter().find(|l| &l.id == id))
            .map(|m| m.port);
        view.push(NodeState {
            id: line.id.clone(),
            port,
            role: if line.flags.iter().any(|f| f == "master") {
                Role::Master
            } else {
                Role::Replica
            },
            master_port,
            slots: line.slots.clone(),
        });
    }
    Ok((view, problems))
}

/// The master serving `slot` in `view`.
pub(crate) fn owner(view: &[NodeState], slot: u16) -> Option<&NodeState> {
    view.iter()
        .find(|n| n.role == Role::Master && n.slots.iter().any(|r| r.contains(&slot)))
}

/// How many slots the masters in `view` serve together.
pub(crate) fn served(view: &[NodeState]) -> u32 {
    view.iter()
        .flat_map(|n| &n.slots)
        .map(|r| u32::from(*r.end() - *r.start()) + 1)
        .sum()
}

fn parse_line(line: &str) -> Result<Line, String> {
    let bad = || format!("unexpected CLUSTER NODES line: {line:?}");
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 8 {
        return Err(bad());
    }
    // "127.0.0.1:30001@40001" or, from 7.0, "127.0.0.1:30001@40001,hostname".
    let addr = fields[1].split(['@', ',']).next().unwrap_or_default();
    let port = addr
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .ok_or_else(bad)?;
    let mut slots = Vec::new();
    for field in &fields[8..] {
        // "[slot->-node]" / "[slot-<-node]": a slot being migrated, not owned.
        if field.starts_with('[') {
            continue;
        }
        let (a, b) = field.split_once('-').unwrap_or((field, field));
        let (a, b): (u16, u16) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        slots.push(a..=b);
    }
    slots.sort_unstable_by_key(|r| *r.start());
    Ok(Line {
        id: fields[0].to_owned(),
        port,
        flags: fields[2].split(',').map(str::to_owned).collect(),
        master_id: Some(fields[3]).filter(|m| *m != "-").map(str::to_owned),
        slots,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
a1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:30002@40002,host master - 0 1 2 connected 5461-10922 [10923->-c3]
c3 127.0.0.1:30003@40003 master - 0 1 3 connected 10923-16383
d4 127.0.0.1:30004@40004 slave a1 0 1 1 connected
e5 127.0.0.1:30005@40005 slave,fail b2 0 1 2 disconnected
";

    #[test]
    fn reads_roles_slots_and_problems() {
        let (view, problems) = view_of(NODES, &[30004, 30001, 30002, 30003, 30005, 30006]).unwrap();
        assert_eq!(view.len(), 5);
        assert_eq!(view[0].port, 30001);
        assert_eq!(view[0].slots, vec![0..=5460]);
        assert_eq!(view[1].slots, vec![5461..=10922]);
        assert_eq!(view[3].role, Role::Replica);
        assert_eq!(view[3].master_port, Some(30001));
        assert_eq!(served(&view), SLOTS);
        assert_eq!(owner(&view, 10923).map(|n| n.port), Some(30003));
        assert_eq!(
            problems,
            vec![
                "127.0.0.1:30005 is flagged fail".to_string(),
                "127.0.0.1:30006 is not a member yet".to_string()
            ]
        );
    }

    #[test]
    fn refuses_garbage() {
        assert!(view_of("hello world", &[]).is_err());
        assert!(view_of("a 127.0.0.1:x@1 master - 0 0 1 connected", &[]).is_err());
    }
}

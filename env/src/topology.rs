//! Fabric topologies: nodes, links, and the routes between hosts.
//!
//! A topology is data: a list of nodes and a list of links. Interface numbers follow the order
//! of the links, as in the HPCC simulator (the reference runs' "Numbering",
//! `shared/reference/README.md`), so an imported HPCC topology gives
//! the same port numbering. Routing is shortest path with every equal-cost next hop kept for
//! ECMP.

use crate::text::{shown, without_bom, word};
use crate::units::{BitsPerSec, Nanos};
use std::collections::VecDeque;

/// The slowest link a fabric may have. ECN thresholds scale with link speed (REFERENCE.md §5):
/// far below this they round to 0 bytes, and DCQCN's rate floors (§2) exceed the link.
pub const MIN_LINK_RATE: BitsPerSec = BitsPerSec::from_gbps(1);

/// The fastest link a fabric may have. A packet's serialization takes whole nanoseconds, as
/// in the reference (83 ns for 1036 B at 100G: the reference runs' "Packets", `shared/reference/README.md`): at 800G a 1036 B packet takes
/// 10 ns for 10.36, so links run up to a few percent off their rate, and far above this
/// packets would take 0 ns and links be infinitely fast.
pub const MAX_LINK_RATE: BitsPerSec = BitsPerSec::from_gbps(1600);

/// The most nodes (hosts and switches) a topology may have. The simulator's routing tables
/// hold an entry per pair of nodes: 4096 nodes take about 100 MB, and a larger fabric would
/// exhaust a laptop's memory long before its first packet.
pub const MAX_NODES: u64 = 4096;

/// The longest link delay accepted. PFC headroom grows with delay (3 × rate × delay), so a
/// slip of units (`1000s`) would otherwise surface as a switch buffer too small for it.
pub const MAX_LINK_DELAY: Nanos = Nanos(10_000_000);

/// The most links a topology may have (a full mesh of [`MAX_NODES`] switches is far beyond any
/// fabric a run can simulate).
pub const MAX_LINKS: u64 = 1_000_000;

fn check_size(nodes: u64, links: u64) -> Result<(), String> {
    if nodes > MAX_NODES {
        return Err(format!("{nodes} nodes, more than the {MAX_NODES} a simulation may hold"));
    }
    if links > MAX_LINKS {
        return Err(format!("{links} links, more than the {MAX_LINKS} a simulation may hold"));
    }
    Ok(())
}

/// Index of a node in [`Topology::nodes`].
pub type NodeId = u32;

/// Host or switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// An end host with one RDMA NIC.
    Host,
    /// A switch with a shared buffer.
    Switch,
}

/// A node of the fabric.
#[derive(Debug, Clone)]
pub struct Node {
    /// Name used in telemetry (`leaf0`, `spine1`, `host3`, `sw16`).
    pub name: String,
    /// Host or switch.
    pub kind: NodeKind,
}

/// A full-duplex link between two nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// One end.
    pub a: NodeId,
    /// The other end.
    pub b: NodeId,
    /// Line rate, each direction.
    pub rate: BitsPerSec,
    /// One-way propagation delay.
    pub delay: Nanos,
}

/// A fabric: nodes and links.
#[derive(Debug, Clone, Default)]
pub struct Topology {
    /// Every node; hosts are identified by their node id (as HPCC flow files do).
    pub nodes: Vec<Node>,
    /// Every link, in interface-numbering order.
    pub links: Vec<Link>,
}

/// Why a topology cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TopologyError {
    /// A line of an HPCC topology file did not parse.
    #[error("line {line}: {why}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        why: String,
    },
    /// The graph is not a usable fabric.
    #[error("{0}")]
    Invalid(String),
}

impl Topology {
    /// A two-tier leaf-spine: hosts first (leaf by leaf), then leaves, then spines; host links
    /// first, then leaf-spine links leaf by leaf — the layout of the reference `ls16` files.
    pub fn leaf_spine(
        leaves: u32,
        spines: u32,
        hosts_per_leaf: u32,
        host_link: BitsPerSec,
        fabric_link: BitsPerSec,
        delay: Nanos,
    ) -> Result<Self, TopologyError> {
        if leaves == 0 || spines == 0 || hosts_per_leaf == 0 {
            return Err(TopologyError::Invalid("leaves, spines and hosts_per_leaf must all be at least 1".into()));
        }
        let (l, s, h) = (u64::from(leaves), u64::from(spines), u64::from(hosts_per_leaf));
        check_size(l * h + l + s, l * h + l * s).map_err(TopologyError::Invalid)?;
        let hosts = leaves * hosts_per_leaf;
        let mut t = Topology::default();
        for h in 0..hosts {
            t.nodes.push(Node { name: format!("host{h}"), kind: NodeKind::Host });
        }
        for l in 0..leaves {
            t.nodes.push(Node { name: format!("leaf{l}"), kind: NodeKind::Switch });
        }
        for s in 0..spines {
            t.nodes.push(Node { name: format!("spine{s}"), kind: NodeKind::Switch });
        }
        for h in 0..hosts {
            t.links.push(Link { a: h, b: hosts + h / hosts_per_leaf, rate: host_link, delay });
        }
        for l in 0..leaves {
            for s in 0..spines {
                t.links.push(Link { a: hosts + l, b: hosts + leaves + s, rate: fabric_link, delay });
            }
        }
        t.validate()?;
        Ok(t)
    }

    /// Parse the HPCC simulator's topology format (REFERENCE.md §4): `nodes switches links`,
    /// the switch ids, then `src dst rate delay error_rate` per link.
    pub fn parse_hpcc(text: &str) -> Result<Self, TopologyError> {
        let mut lines =
            without_bom(text).lines().enumerate().map(|(i, l)| (i + 1, l.trim())).filter(|(_, l)| !l.is_empty());
        let perr = |line: usize, why: String| TopologyError::Parse { line, why };
        let (ln, header) = lines.next().ok_or_else(|| perr(1, "empty file".into()))?;
        let nums: Vec<u64> =
            header.split_whitespace().map(|x| x.parse::<u64>()).collect::<Result<_, _>>().map_err(|_| {
                perr(ln, format!("expected 'node_count switch_count link_count', got {}", shown(header)))
            })?;
        let [n_nodes, n_switches, n_links] = nums[..] else {
            return Err(perr(ln, format!("expected 3 numbers, got {}", nums.len())));
        };
        check_size(n_nodes, n_links).map_err(|why| perr(ln, why))?;
        let mut kinds = vec![NodeKind::Host; n_nodes as usize];
        if n_switches > 0 {
            let (ln, sw) = lines.next().ok_or_else(|| perr(ln + 1, "missing switch id line".into()))?;
            let ids: Vec<u64> = sw
                .split_whitespace()
                .map(|x| x.parse::<u64>())
                .collect::<Result<_, _>>()
                .map_err(|_| perr(ln, format!("switch ids must be integers: {}", shown(sw))))?;
            if ids.len() as u64 != n_switches {
                return Err(perr(ln, format!("expected {n_switches} switch ids, got {}", ids.len())));
            }
            for id in ids {
                let slot = kinds
                    .get_mut(id as usize)
                    .ok_or_else(|| perr(ln, format!("switch id {id} is not below node_count {n_nodes}")))?;
                *slot = NodeKind::Switch;
            }
        }
        let mut t = Topology::default();
        for (i, k) in kinds.into_iter().enumerate() {
            let name = match k {
                NodeKind::Host => format!("host{i}"),
                NodeKind::Switch => format!("sw{i}"),
            };
            t.nodes.push(Node { name, kind: k });
        }
        for (ln, l) in lines {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Exactly HPCC's five: it reads five tokens a link, so a fourth-field line would
            // take the next line's src for its error rate, and a sixth field the next src.
            if f.len() != 5 {
                return Err(perr(ln, format!("expected 'src dst rate delay error_rate', got {}", shown(l))));
            }
            let node = |s: &str| -> Result<NodeId, TopologyError> {
                let v: u32 = s.parse().map_err(|_| perr(ln, format!("node id {} is not an integer", word(s))))?;
                if v as u64 >= n_nodes {
                    return Err(perr(ln, format!("node id {v} is not below node_count {n_nodes}")));
                }
                Ok(v)
            };
            let rate: BitsPerSec = f[2].parse().map_err(|e| perr(ln, format!("{e}")))?;
            let delay: Nanos = f[3].parse().map_err(|e| perr(ln, format!("{e}")))?;
            let e = f[4];
            let er: f64 = e.parse().map_err(|_| perr(ln, format!("error_rate {} is not a number", word(e))))?;
            if er != 0.0 {
                return Err(perr(ln, "links with a non-zero error rate are not supported".into()));
            }
            t.links.push(Link { a: node(f[0])?, b: node(f[1])?, rate, delay });
        }
        if t.links.len() as u64 != n_links {
            return Err(TopologyError::Invalid(format!(
                "header announces {n_links} links but the file has {}",
                t.links.len()
            )));
        }
        t.validate()?;
        Ok(t)
    }

    /// Check the fabric is usable: at most [`MAX_NODES`] nodes and [`MAX_LINKS`] links, every
    /// host has exactly one link, links run between [`MIN_LINK_RATE`] and [`MAX_LINK_RATE`], no self-loops, and
    /// every host reaches every other host.
    pub fn validate(&self) -> Result<(), TopologyError> {
        check_size(self.nodes.len() as u64, self.links.len() as u64).map_err(TopologyError::Invalid)?;
        let mut degree = vec![0u32; self.nodes.len()];
        for (i, l) in self.links.iter().enumerate() {
            if l.a == l.b {
                return Err(TopologyError::Invalid(format!("link {i} connects node {} to itself", l.a)));
            }
            if l.delay > MAX_LINK_DELAY {
                return Err(TopologyError::Invalid(format!(
                    "link {i} has a delay of {}, above the maximum, {MAX_LINK_DELAY}",
                    l.delay
                )));
            }
            if l.rate < MIN_LINK_RATE {
                return Err(TopologyError::Invalid(format!(
                    "link {i} runs at {}, below the minimum, {MIN_LINK_RATE}",
                    l.rate
                )));
            }
            if l.rate > MAX_LINK_RATE {
                return Err(TopologyError::Invalid(format!(
                    "link {i} runs at {}, above the maximum, {MAX_LINK_RATE}",
                    l.rate
                )));
            }
            degree[l.a as usize] += 1;
            degree[l.b as usize] += 1;
        }
        let hosts = self.hosts();
        if hosts.len() < 2 {
            return Err(TopologyError::Invalid("a fabric needs at least two hosts".into()));
        }
        for &h in &hosts {
            if degree[h as usize] != 1 {
                return Err(TopologyError::Invalid(format!(
                    "host {h} has {} links; each host needs exactly one NIC link",
                    degree[h as usize]
                )));
            }
        }
        for (a, b) in self.links.iter().map(|l| (l.a, l.b)) {
            if self.nodes[a as usize].kind == NodeKind::Host && self.nodes[b as usize].kind == NodeKind::Host {
                return Err(TopologyError::Invalid(format!("hosts {a} and {b} are linked directly")));
            }
        }
        let dist = self.distances_from(hosts[0]);
        if let Some(&h) = hosts.iter().find(|&&h| dist[h as usize] == u32::MAX) {
            return Err(TopologyError::Invalid(format!("host {h} is not reachable from host {}", hosts[0])));
        }
        Ok(())
    }

    /// Node ids of the hosts, ascending.
    pub fn hosts(&self) -> Vec<NodeId> {
        (0..self.nodes.len() as u32).filter(|&i| self.nodes[i as usize].kind == NodeKind::Host).collect()
    }

    /// The line rate of each host's link (a host has exactly one), in [`Topology::hosts`] order.
    pub fn host_rates(&self) -> Vec<BitsPerSec> {
        self.hosts()
            .into_iter()
            .map(|h| self.links.iter().find(|l| l.a == h || l.b == h).map_or(BitsPerSec::from_gbps(100), |l| l.rate))
            .collect()
    }

    /// The NIC speed: the slowest host link (100 Gb/s for an empty fabric). DCQCN's
    /// bandwidth-scaled defaults and the PFC threshold shifts are relative to it.
    pub fn nic_rate(&self) -> BitsPerSec {
        let is_host = |n: NodeId| self.nodes[n as usize].kind == NodeKind::Host;
        self.links
            .iter()
            .filter(|l| is_host(l.a) || is_host(l.b))
            .map(|l| l.rate)
            .min()
            .unwrap_or(BitsPerSec::from_gbps(100))
    }

    /// Links of each node, in link order: `(link index, neighbour)`.
    pub fn adjacency(&self) -> Vec<Vec<(usize, NodeId)>> {
        let mut adj = vec![Vec::new(); self.nodes.len()];
        for (i, l) in self.links.iter().enumerate() {
            adj[l.a as usize].push((i, l.b));
            adj[l.b as usize].push((i, l.a));
        }
        adj
    }

    /// Hop counts from `src` to every node, not passing through hosts.
    pub fn distances_from(&self, src: NodeId) -> Vec<u32> {
        self.distances_over(&self.adjacency(), src)
    }

    /// [`Topology::distances_from`] over an [`Topology::adjacency`] built once: building it
    /// for every host made a large fabric's setup quadratic.
    pub fn distances_over(&self, adj: &[Vec<(usize, NodeId)>], src: NodeId) -> Vec<u32> {
        let mut dist = vec![u32::MAX; self.nodes.len()];
        dist[src as usize] = 0;
        let mut q = VecDeque::from([src]);
        while let Some(n) = q.pop_front() {
            if n != src && self.nodes[n as usize].kind == NodeKind::Host {
                continue;
            }
            for &(_, m) in &adj[n as usize] {
                if dist[m as usize] == u32::MAX {
                    dist[m as usize] = dist[n as usize] + 1;
                    q.push_back(m);
                }
            }
        }
        dist
    }

    /// One shortest path from `src` to `dst` over `adj` ([`Topology::adjacency`]), as link
    /// indices (the first equal-cost choice at each hop; in the symmetric fabrics we build
    /// every choice has the same rates and delays).
    pub fn path(&self, adj: &[Vec<(usize, NodeId)>], src: NodeId, dst: NodeId, dist_to_dst: &[u32]) -> Vec<usize> {
        let mut path = Vec::new();
        let mut n = src;
        while n != dst {
            let Some(&(link, next)) =
                adj[n as usize].iter().find(|&&(_, m)| dist_to_dst[m as usize] + 1 == dist_to_dst[n as usize])
            else {
                break;
            };
            path.push(link);
            n = next;
        }
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_spine_matches_ls16_layout() {
        let t =
            Topology::leaf_spine(2, 2, 8, BitsPerSec::from_gbps(100), BitsPerSec::from_gbps(400), Nanos(1000)).unwrap();
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/reference/ls16/topology.txt"))
                .expect("shared/reference/ls16 must sit beside the checkout");
        let r = Topology::parse_hpcc(&text).unwrap();
        assert_eq!(t.links, r.links);
        assert_eq!(
            t.nodes.iter().map(|n| n.kind).collect::<Vec<_>>(),
            r.nodes.iter().map(|n| n.kind).collect::<Vec<_>>()
        );
    }

    #[test]
    fn hpcc_parse_errors_name_the_line() {
        let e = Topology::parse_hpcc("3 1 2\n2\n0 2 100Gbps 1000ns 0\n1 9 100Gbps 1000ns 0\n").unwrap_err();
        assert_eq!(e, TopologyError::Parse { line: 4, why: "node id 9 is not below node_count 3".into() });
        let e = Topology::parse_hpcc("3 1 2\n2\n0 2 100Gbps 1000ns 0\n1 2 fast 1000ns 0\n").unwrap_err();
        assert!(matches!(e, TopologyError::Parse { line: 4, .. }), "{e}");
        // HPCC reads five tokens a link: four or six would shift every later link.
        for link in ["1 2 100Gbps 1000ns", "1 2 100Gbps 1000ns 0 7"] {
            let e = Topology::parse_hpcc(&format!("3 1 2\n2\n0 2 100Gbps 1000ns 0\n{link}\n")).unwrap_err();
            assert!(matches!(e, TopologyError::Parse { line: 4, .. }), "{link}: {e}");
        }
    }

    #[test]
    fn unreachable_host_is_rejected() {
        let t = Topology {
            nodes: vec![
                Node { name: "h0".into(), kind: NodeKind::Host },
                Node { name: "h1".into(), kind: NodeKind::Host },
                Node { name: "s2".into(), kind: NodeKind::Switch },
                Node { name: "s3".into(), kind: NodeKind::Switch },
            ],
            links: vec![
                Link { a: 0, b: 2, rate: BitsPerSec(1), delay: Nanos(1) },
                Link { a: 1, b: 3, rate: BitsPerSec(1), delay: Nanos(1) },
            ],
        };
        assert!(t.validate().is_err());
    }

    /// Links between 1 Gb/s and 1.6 Tb/s: beyond, packets serialize in 0 whole ns and a
    /// link is infinitely fast (a 10 MB flow at 100 Tb/s took 4 µs, its propagation alone).
    #[test]
    fn link_rates_are_bounded_both_ways() {
        let t = |rate| Topology::parse_hpcc(&format!("3 1 2\n2\n0 2 {rate} 1000ns 0\n1 2 100Gbps 1000ns 0\n"));
        assert!(t("1600Gbps").is_ok_and(|t| t.validate().is_ok()));
        let e = t("1601Gbps").unwrap_err().to_string();
        assert!(e.contains("link 0 runs at 1601Gbps, above the maximum, 1600Gbps"), "{e}");
        assert!(t("999Mbps").unwrap_err().to_string().contains("below the minimum"));
    }
}

//! The standard flow-size distributions, embedded so that built-in scenarios need no files.
//!
//! Format (REFERENCE.md §4): one `size_bytes cdf_percent` pair per line, from `0 0` to `… 100`.

/// A built-in flow-size CDF: its name, aliases, where it comes from, and its text.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinCdf {
    /// Canonical name used in scenario files (`cdf = "websearch"`).
    pub name: &'static str,
    /// Other accepted names.
    pub aliases: &'static [&'static str],
    /// Provenance, for `--help` and the README.
    pub source: &'static str,
    /// The CDF text.
    pub text: &'static str,
}

/// Every built-in CDF.
pub const BUILTIN_CDFS: &[BuiltinCdf] = &[
    BuiltinCdf {
        name: "websearch",
        aliases: &["web-search", "WebSearch_distribution.txt"],
        source: "web search, DCTCP paper (mean 1.71 MB)",
        text: include_str!("../workloads/WebSearch_distribution.txt"),
    },
    BuiltinCdf {
        name: "hadoop",
        aliases: &["fb-hadoop", "fbhdp", "FbHdp_distribution.txt"],
        source: "Facebook Hadoop, as used by the HPCC paper (mean 120 KB)",
        text: include_str!("../workloads/FbHdp_distribution.txt"),
    },
    BuiltinCdf {
        name: "alistorage",
        aliases: &["AliStorage2019.txt"],
        source: "Alibaba storage 2019 (mean 41 KB)",
        text: include_str!("../workloads/AliStorage2019.txt"),
    },
    BuiltinCdf {
        name: "googlerpc",
        aliases: &["GoogleRPC2008.txt"],
        source: "Google RPC 2008 (mean 2.9 KB)",
        text: include_str!("../workloads/GoogleRPC2008.txt"),
    },
    BuiltinCdf {
        name: "meta-hadoop",
        aliases: &["hadoop-all.txt"],
        source: "Meta 2015 datacenter trace, Hadoop cluster",
        text: include_str!("../workloads/hadoop-all.txt"),
    },
    BuiltinCdf {
        name: "meta-webserver",
        aliases: &["webserver-all.txt"],
        source: "Meta 2015 datacenter trace, web servers",
        text: include_str!("../workloads/webserver-all.txt"),
    },
    BuiltinCdf {
        name: "meta-cachefollower",
        aliases: &["cachefollower-all.txt"],
        source: "Meta 2015 datacenter trace, cache followers",
        text: include_str!("../workloads/cachefollower-all.txt"),
    },
];

/// Look a built-in CDF up by name or alias (case-insensitive).
pub fn builtin_cdf(name: &str) -> Option<&'static BuiltinCdf> {
    BUILTIN_CDFS
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(name) || c.aliases.iter().any(|a| a.eq_ignore_ascii_case(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The env crate owns the real CDF parser; this independent one guards the embedded files
    /// themselves, so that a bad edit to a workload file fails here, next to the data.
    fn parse(text: &str) -> Result<Vec<(u64, f64)>, String> {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                let parts: Vec<&str> = l.split_whitespace().collect();
                match parts[..] {
                    [size, pct] => Ok((
                        size.parse().map_err(|_| format!("line {}: bad size `{size}`", i + 1))?,
                        pct.parse().map_err(|_| format!("line {}: bad percent `{pct}`", i + 1))?,
                    )),
                    _ => Err(format!("line {}: expected `size percent`, got `{l}`", i + 1)),
                }
            })
            .collect()
    }

    #[test]
    fn builtin_cdfs_are_monotone_and_end_at_100() {
        for cdf in BUILTIN_CDFS {
            let points = parse(cdf.text).unwrap_or_else(|e| panic!("{}: {e}", cdf.name));
            assert!(points.len() >= 2, "{}: too few points", cdf.name);
            assert_eq!(points[0], (0, 0.0), "{}: must start at `0 0`", cdf.name);
            assert_eq!(points.last().unwrap().1, 100.0, "{}: must end at 100", cdf.name);
            for w in points.windows(2) {
                let ((s0, p0), (s1, p1)) = (w[0], w[1]);
                assert!(s1 > s0, "{}: sizes not increasing at {s0} -> {s1}", cdf.name);
                assert!(p1 >= p0, "{}: percent decreasing at size {s1}", cdf.name);
                assert!((0.0..=100.0).contains(&p1), "{}: percent {p1} out of range", cdf.name);
            }
        }
    }

    #[test]
    fn lookup_by_name_and_alias() {
        assert_eq!(builtin_cdf("WEBSEARCH").unwrap().name, "websearch");
        assert_eq!(builtin_cdf("FbHdp_distribution.txt").unwrap().name, "hadoop");
        assert!(builtin_cdf("nope").is_none());
    }
}

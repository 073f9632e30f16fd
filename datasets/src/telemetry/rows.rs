//! Row-level checks shared by the Parquet and CSV sources: a batch of decoded rows, the
//! queue-identity interner, and the checks that need one row only (finite, non-negative,
//! setting within bounds).

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::problem::{Collector, ProblemKind};
use super::{QueueKey, QueueSample, ReadOptions};

/// The fastest line rate a row may state: 100 Tb/s, far above any port (1.6 Tb/s in 2026), so
/// that a rate in the wrong unit or a garbage value is caught before it scales every rate.
pub(crate) const MAX_LINK_BPS: u64 = 100_000_000_000_000;
/// The slowest port a file may claim: 100 Mb/s, far below any port that carries RoCE (our
/// simulator's slowest is 1 Gb/s). Below it, the rate is in another unit: Gb/s (100 for
/// 100 Gb/s) or Mb/s (400 000 for 400 Gb/s, 51 200 000 for 51.2 Tb/s).
pub(crate) const MIN_LINK_BPS: u64 = 100_000_000;

/// Rows decoded from one row group (Parquet) or one chunk of lines (CSV).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// 1-based data row of the first row.
    pub(crate) first_row: u64,
    pub(crate) samples: Vec<QueueSample>,
    /// Queue index per row (valid where `ok`).
    pub(crate) queues: Vec<u8>,
    /// Interned queue identity per row (valid where `ok`).
    pub(crate) ids: Vec<u32>,
    /// False for a row with a problem of its own; such rows go no further.
    pub(crate) ok: Vec<bool>,
    /// Each row's data row number where they are not consecutive from `first_row` (CSV: blank
    /// lines and records spanning lines leave gaps); empty otherwise.
    pub(crate) row_numbers: Vec<u64>,
}

impl Batch {
    /// Empties the batch for `len` rows starting at data row `first_row`, keeping capacity.
    pub(crate) fn reset(&mut self, first_row: u64, len: usize) {
        self.first_row = first_row;
        self.samples.clear();
        self.samples.resize(len, QueueSample::default());
        self.queues.clear();
        self.queues.resize(len, 0);
        self.ids.clear();
        self.ids.resize(len, 0);
        self.ok.clear();
        self.ok.resize(len, true);
        self.row_numbers.clear();
    }

    /// Appends a default row numbered `row` (CSV rows arrive one by one) and returns its index.
    pub(crate) fn push_row(&mut self, row: u64) -> usize {
        self.row_numbers.push(row);
        self.samples.push(QueueSample::default());
        self.queues.push(0);
        self.ids.push(0);
        self.ok.push(true);
        self.samples.len() - 1
    }

    pub(crate) fn len(&self) -> usize {
        self.samples.len()
    }

    pub(crate) fn row(&self, i: usize) -> u64 {
        self.row_numbers.get(i).copied().unwrap_or(self.first_row + i as u64)
    }

    /// Marks row `i` bad and records why.
    pub(crate) fn reject(&mut self, i: usize, column: &'static str, kind: ProblemKind, problems: &mut Collector) {
        self.ok[i] = false;
        problems.push(Some(self.row(i)), Some(column), kind, false);
    }
}

/// Queue identities seen so far, each a dense id. Rows arrive in a repeating pattern (every
/// queue once per interval, or one queue after another), so the interner first tries the id
/// that followed the previous row's id last time and compares strings; only a miss hashes.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    switches: FxHashMap<Box<str>, u32>,
    switch_names: Vec<Arc<str>>,
    ports: FxHashMap<Box<str>, u32>,
    port_names: Vec<Arc<str>>,
    ids: FxHashMap<(u32, u32, u8), u32>,
    pub(crate) keys: Vec<QueueKey>,
    /// For each id, the id of the row that followed it last time.
    successor: Vec<u32>,
    previous: Option<u32>,
}

fn name_id(map: &mut FxHashMap<Box<str>, u32>, names: &mut Vec<Arc<str>>, name: &str) -> u32 {
    if let Some(&id) = map.get(name) {
        return id;
    }
    let id = names.len() as u32;
    map.insert(name.into(), id);
    names.push(name.into());
    id
}

impl Interner {
    /// The id of `(switch, port, queue)`, and whether it is new.
    pub(crate) fn id(&mut self, switch: &str, port: &str, queue: u8) -> (u32, bool) {
        let matches = |k: &QueueKey| k.queue == queue && *k.port == *port && *k.switch == *switch;
        if let Some(prev) = self.previous {
            let guess = self.successor[prev as usize];
            for candidate in [guess, prev] {
                if candidate != u32::MAX && matches(&self.keys[candidate as usize]) {
                    self.previous = Some(candidate);
                    return (candidate, false);
                }
            }
        }
        let s = name_id(&mut self.switches, &mut self.switch_names, switch);
        let p = name_id(&mut self.ports, &mut self.port_names, port);
        let (id, new) = match self.ids.get(&(s, p, queue)) {
            Some(&id) => (id, false),
            None => {
                let id = self.keys.len() as u32;
                self.ids.insert((s, p, queue), id);
                self.keys.push(QueueKey {
                    switch: self.switch_names[s as usize].clone(),
                    port: self.port_names[p as usize].clone(),
                    queue,
                });
                self.successor.push(u32::MAX);
                (id, true)
            }
        };
        if let Some(prev) = self.previous {
            self.successor[prev as usize] = id;
        }
        self.previous = Some(id);
        (id, new)
    }
}

/// The checks that need one row only; rows that fail are marked not ok.
pub(crate) fn check_rows(batch: &mut Batch, opts: &ReadOptions, problems: &mut Collector) {
    for i in 0..batch.len() {
        if !batch.ok[i] {
            continue;
        }
        let s = batch.samples[i];
        if s.link_bps == 0 {
            batch.reject(i, "link_bps", ProblemKind::OutOfRange("link rate 0 b/s".into()), problems);
            continue;
        }
        if s.link_bps < MIN_LINK_BPS {
            let msg = format!(
                "link rate {} b/s, below {MIN_LINK_BPS} (100 Mb/s; is it in bits per second? 100 Gb/s is 100000000000)",
                s.link_bps
            );
            batch.reject(i, "link_bps", ProblemKind::OutOfRange(msg), problems);
            continue;
        }
        if s.link_bps > MAX_LINK_BPS {
            let msg = format!("link rate {} b/s, above {MAX_LINK_BPS} (is it in bits per second?)", s.link_bps);
            batch.reject(i, "link_bps", ProblemKind::OutOfRange(msg), problems);
            continue;
        }
        if s.kmin_bytes > s.kmax_bytes {
            let msg = format!("kmin_bytes {} is above kmax_bytes {}", s.kmin_bytes, s.kmax_bytes);
            batch.reject(i, "kmin_bytes", ProblemKind::BadSetting(msg), problems);
            continue;
        }
        if !(0.0..=1.0).contains(&s.pmax) {
            let msg = format!("pmax {} is not a probability in [0, 1]", s.pmax);
            batch.reject(i, "pmax", ProblemKind::BadSetting(msg), problems);
            continue;
        }
        if let Some(b) = &opts.bounds {
            let out = if s.kmin_bytes < b.kmin_min_bytes {
                Some(("kmin_bytes", format!("kmin_bytes {} is below the bound {}", s.kmin_bytes, b.kmin_min_bytes)))
            } else if s.kmax_bytes > b.kmax_max_bytes {
                Some(("kmax_bytes", format!("kmax_bytes {} is above the bound {}", s.kmax_bytes, b.kmax_max_bytes)))
            } else if s.pmax < b.pmax_min || s.pmax > b.pmax_max {
                Some(("pmax", format!("pmax {} is outside the bounds [{}, {}]", s.pmax, b.pmax_min, b.pmax_max)))
            } else {
                None
            };
            if let Some((column, msg)) = out {
                batch.reject(i, column, ProblemKind::BadSetting(msg), problems);
            }
        }
    }
}

/// A float cell: finite and not negative.
pub(crate) fn check_float(v: f64) -> Option<ProblemKind> {
    if !v.is_finite() {
        Some(ProblemKind::NotFinite(v))
    } else if v < 0.0 {
        Some(ProblemKind::Negative(v.to_string()))
    } else {
        None
    }
}

/// The queue column: a priority index 0–7.
pub(crate) fn queue_index(v: u64) -> Result<u8, ProblemKind> {
    if v <= 7 {
        Ok(v as u8)
    } else {
        Err(ProblemKind::OutOfRange(format!("queue {v} is not a priority index 0-7")))
    }
}

/// A `switch` or `port` name without the spaces around it (a CSV written with `", "`
/// between fields, a padded export: the switch's own names have none); `None` for a missing
/// or blank name, which is an empty value whatever the format.
pub(crate) fn queue_name(name: Option<&str>) -> Option<&str> {
    name.map(str::trim).filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interner_gives_stable_dense_ids() {
        let mut i = Interner::default();
        assert_eq!(i.id("leaf0", "eth1", 3), (0, true));
        assert_eq!(i.id("leaf0", "eth2", 3), (1, true));
        assert_eq!(i.id("leaf1", "eth1", 3), (2, true));
        for _ in 0..3 {
            assert_eq!(i.id("leaf0", "eth1", 3), (0, false));
            assert_eq!(i.id("leaf0", "eth2", 3), (1, false));
            assert_eq!(i.id("leaf1", "eth1", 3), (2, false));
        }
        assert_eq!(i.id("leaf0", "eth1", 4), (3, true));
        assert_eq!(i.id("leaf0", "eth1", 3), (0, false));
        assert_eq!(&*i.keys[2].switch, "leaf1");
    }
}

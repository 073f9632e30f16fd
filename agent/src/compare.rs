//! Paired comparison of a policy against a reference run on the same seeds: the relative change
//! of a metric's mean, with a 95% confidence interval from the seed-by-seed pairs.
//!
//! Every policy in an `eval` runs each scenario on the same seeds, so seed k offers every policy
//! the same flows. A tail percentile of a few hundred small flows per run spreads more from seed
//! to seed than the effects we measure (docs/learning-experiments.md, "Variance is the caveat");
//! differences taken seed by seed cancel the part of that spread that the traffic causes, and
//! their spread says how far a mean change can be trusted.

use serde::Serialize;

/// A relative change of a mean, as a fraction (−0.1 = 10% lower), with its 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Change {
    /// The change of the mean.
    pub mean: f64,
    /// Lower end of the 95% interval; `None` with a single seed.
    pub low: Option<f64>,
    /// Upper end of the 95% interval; `None` with a single seed.
    pub high: Option<f64>,
    /// Seeds that entered: those with a value for both the policy and the reference; for a
    /// mean over scenarios, the fewest of any scenario.
    pub seeds: usize,
}

/// One scenario's metric by seed: (the policy's, the reference's); `None` where no flow of the
/// metric's size finished.
pub type Paired<'a> = (&'a [Option<f64>], &'a [Option<f64>]);

/// The mean over scenarios of the relative change of `policy` against `reference`, with
/// `scenarios[s] = (policy, reference)` and `policy[k]` the metric on seed k; one scenario gives
/// that scenario's change. In each scenario, the seeds where either side lacks a value (no flow
/// of that size finished) are left out of that scenario. `None` when a scenario has no seed
/// left or a reference mean that is not positive.
///
/// The estimate is the mean over scenarios of R_s − 1, where R_s = x̄_s / r̄_s is the ratio of
/// the policy's mean to the reference's over the scenario's seeds: the change of the means that
/// the tables report, so that the mean row is the mean of the scenario rows. Its interval is the
/// delta method's for a ratio of means: in scenario s, seed k contributes
/// e_sk = (x_sk − R_s · r_sk) / r̄_s, the first-order effect of that seed on R_s. Scenarios
/// with the same usable seeds are paired seed by seed (a seed offers every scenario the same
/// random draws, so their errors need not be independent): a group G of them on n seeds adds
/// Σ_k (Σ_{s∈G} e_sk)² / (n (n − 1)) to S² times the variance, and groups on other seeds add
/// independently. Where every scenario has the same n seeds this is the variance of e_k =
/// mean over s of e_sk, divided by n. The interval is estimate ± t(0.975, n − 1) · √variance,
/// n the fewest seeds of any scenario. A policy that is the same fraction better on every seed thus has an interval of
/// zero width, whatever the seeds' scale; differences x_sk − r_sk, scaled by r̄_s alone, would
/// count the reference's own seed spread, times the change, as uncertainty.
pub fn mean_paired_change(scenarios: &[Paired<'_>]) -> Option<Change> {
    let usable = |v: Option<f64>| v.filter(|x| x.is_finite());
    // Per scenario: each usable seed with its e_sk, and R_s.
    let mut effects: Vec<Vec<(usize, f64)>> = Vec::with_capacity(scenarios.len());
    let mut changes = Vec::with_capacity(scenarios.len());
    for (p, r) in scenarios {
        let pairs: Vec<(usize, f64, f64)> =
            p.iter().zip(r.iter()).enumerate().filter_map(|(k, (&x, &y))| Some((k, usable(x)?, usable(y)?))).collect();
        if pairs.is_empty() {
            return None;
        }
        let n = pairs.len() as f64;
        let reference_mean = pairs.iter().map(|&(_, _, y)| y).sum::<f64>() / n;
        if reference_mean <= 0.0 {
            return None;
        }
        let ratio = pairs.iter().map(|&(_, x, _)| x).sum::<f64>() / n / reference_mean;
        changes.push(ratio - 1.0);
        effects.push(pairs.iter().map(|&(k, x, y)| (k, (x - ratio * y) / reference_mean)).collect());
    }
    let scenario_count = scenarios.len() as f64;
    let mean = changes.iter().sum::<f64>() / scenario_count;
    let fewest = effects.iter().map(Vec::len).min()?;
    let (low, high) = if fewest > 1 {
        // Scenarios with the same seeds are paired seed by seed (a seed offers each the same
        // random draws, so their errors need not be independent); groups of scenarios with
        // other seeds are taken as independent. Each group's sum of squares is not negative,
        // where covariances estimated over partly shared seeds could make the total so.
        let mut groups: Vec<(Vec<usize>, Vec<f64>)> = Vec::new();
        for e in &effects {
            let seeds: Vec<usize> = e.iter().map(|&(k, _)| k).collect();
            let at = match groups.iter().position(|(g, _)| *g == seeds) {
                Some(i) => i,
                None => {
                    groups.push((seeds, vec![0.0; e.len()]));
                    groups.len() - 1
                }
            };
            for (sum, &(_, effect)) in groups[at].1.iter_mut().zip(e) {
                *sum += effect;
            }
        }
        let variance: f64 = groups
            .iter()
            .map(|(seeds, sums)| {
                let n = seeds.len() as f64;
                sums.iter().map(|x| x * x).sum::<f64>() / (n * (n - 1.0))
            })
            .sum::<f64>()
            / (scenario_count * scenario_count);
        let half = student_t_975(fewest - 1) * variance.sqrt();
        (Some(mean - half), Some(mean + half))
    } else {
        (None, None)
    };
    Some(Change { mean, low, high, seeds: fewest })
}

/// The 97.5th percentile of Student's t with `df` degrees of freedom (`df` ≥ 1): the table up to
/// 30, then the Cornish–Fisher expansion z + (z³ + z) / (4·df) + (5z⁵ + 16z³ + 3z) / (96·df²),
/// within 0.001 of the exact value beyond.
fn student_t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    const Z: f64 = 1.959_964;
    match df {
        0 => f64::NAN,
        1..=30 => TABLE[df - 1],
        _ => {
            let df = df as f64;
            Z + (Z.powi(3) + Z) / (4.0 * df) + (5.0 * Z.powi(5) + 16.0 * Z.powi(3) + 3.0 * Z) / (96.0 * df * df)
        }
    }
}

/// `-6.5% [-9.1, -3.9]`: a change and its interval, in percent.
pub fn format_change(c: Option<Change>) -> String {
    match c {
        None => "-".into(),
        Some(Change { mean, low: Some(low), high: Some(high), .. }) => {
            format!("{:+.1}% [{:+.1}, {:+.1}]", mean * 100.0, low * 100.0, high * 100.0)
        }
        Some(c) => format!("{:+.1}%", c.mean * 100.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn some(v: &[f64]) -> Vec<Option<f64>> {
        v.iter().copied().map(Some).collect()
    }

    fn paired_change(policy: &[Option<f64>], reference: &[Option<f64>]) -> Option<Change> {
        mean_paired_change(&[(policy, reference)])
    }

    #[test]
    fn a_constant_ratio_has_no_spread() {
        // 10% better on every seed, at very different scales: the change is certain.
        let c = paired_change(&some(&[9.0, 18.0, 27.0]), &some(&[10.0, 20.0, 30.0])).unwrap();
        assert!((c.mean + 0.1).abs() < 1e-12, "{c:?}");
        assert!((c.low.unwrap() - c.mean).abs() < 1e-12 && (c.high.unwrap() - c.mean).abs() < 1e-12, "{c:?}");
        assert_eq!(c.seeds, 3);
    }

    #[test]
    fn the_interval_is_the_delta_method_for_a_ratio_of_means() {
        // x̄ = 4, r̄ = 5, R = 0.8; e_k = (x_k − 0.8 r_k) / 5 = (0.4, −0.8, 0.4) / 5 = (0.08, −0.16, 0.08).
        let c = paired_change(&some(&[4.0, 3.2, 4.8]), &some(&[4.5, 5.0, 5.5])).unwrap();
        assert!((c.mean + 0.2).abs() < 1e-12, "{c:?}");
        let sd = ((0.08f64.powi(2) * 2.0 + 0.16f64.powi(2)) / 2.0).sqrt();
        let half = 4.303 * sd / 3f64.sqrt();
        assert!((c.low.unwrap() - (-0.2 - half)).abs() < 1e-9 && (c.high.unwrap() - (-0.2 + half)).abs() < 1e-9);
    }

    #[test]
    fn the_mean_change_is_the_change_of_the_means() {
        let (p, r) = (some(&[4.0, 7.0, 5.5, 6.0]), some(&[5.0, 6.0, 6.5, 5.0]));
        let c = paired_change(&p, &r).unwrap();
        let mean = |v: &[Option<f64>]| v.iter().flatten().sum::<f64>() / v.len() as f64;
        assert!((c.mean - (mean(&p) / mean(&r) - 1.0)).abs() < 1e-12);
        assert!(c.low.unwrap() < c.mean && c.mean < c.high.unwrap());
    }

    #[test]
    fn scenarios_are_averaged_with_equal_weight() {
        let (a, ra) = (some(&[8.0, 8.0]), some(&[10.0, 10.0]));
        let (b, rb) = (some(&[110.0, 110.0]), some(&[100.0, 100.0]));
        let c = mean_paired_change(&[(&a, &ra), (&b, &rb)]).unwrap();
        // −20% and +10% average to −5%, whatever the scale of each scenario.
        assert!((c.mean + 0.05).abs() < 1e-12, "{c:?}");
        assert!((c.low.unwrap() - c.mean).abs() < 1e-12 && (c.high.unwrap() - c.mean).abs() < 1e-12, "{c:?}");
    }

    /// A seed without a value in one scenario is left out of that scenario only: the mean row
    /// is the mean of the scenarios' changes as their rows give them, even where the scenarios
    /// share no seed.
    #[test]
    fn seeds_missing_a_value_are_left_out_of_their_scenario() {
        let (a, ra) = (vec![Some(1.0), None, Some(3.0)], some(&[2.0, 2.0, 4.0]));
        let (b, rb) = (some(&[1.0, 1.0, 1.0]), vec![Some(1.0), Some(1.0), None]);
        let row_a = paired_change(&a, &ra).unwrap();
        let row_b = paired_change(&b, &rb).unwrap();
        assert_eq!((row_a.seeds, row_b.seeds), (2, 2));
        assert!((row_a.mean - (4.0 / 6.0 - 1.0)).abs() < 1e-12 && row_b.mean.abs() < 1e-12);
        let c = mean_paired_change(&[(&a, &ra), (&b, &rb)]).unwrap();
        assert_eq!(c.seeds, 2);
        assert!((c.mean - (row_a.mean + row_b.mean) / 2.0).abs() < 1e-12, "{c:?}");
        // No seed in common: still the mean of the two, with no interval from one seed each.
        let (d, rd) = (vec![Some(2.0), None], vec![Some(1.0), Some(1.0)]);
        let (e, re) = (vec![None, Some(1.0)], vec![Some(1.0), Some(2.0)]);
        let c = mean_paired_change(&[(&d, &rd), (&e, &re)]).unwrap();
        assert!((c.mean - (1.0 - 0.5) / 2.0).abs() < 1e-12, "{c:?}");
        assert_eq!((c.seeds, c.low, c.high), (1, None, None));
        assert_eq!(paired_change(&[None], &[Some(1.0)]), None);
        assert_eq!(paired_change(&some(&[1.0]), &some(&[0.0])), None);
    }

    /// Scenarios on different seeds count as independent: the mean row's variance is the sum of
    /// the rows' (a covariance estimated over partly shared seeds could come out negative and
    /// hide the spread behind a zero-width interval).
    #[test]
    fn scenarios_on_different_seeds_add_their_variances() {
        let (a, ra) = (some(&[2.0, 1.0]), some(&[1.0, 1.0]));
        let (b, rb) = (vec![Some(1.0), Some(3.0), Some(2.0)], some(&[1.0, 1.0, 1.0]));
        let b_short = vec![Some(1.0), Some(3.0), None];
        for (b, seeds_b) in [(&b, 3.0), (&b_short, 2.0)] {
            let (row_a, row_b) = (paired_change(&a, &ra).unwrap(), paired_change(b, &rb).unwrap());
            let var = |c: Change, n: f64| ((c.high.unwrap() - c.mean) / student_t_975(n as usize - 1)).powi(2);
            let c = mean_paired_change(&[(&a, &ra), (b, &rb)]).unwrap();
            let want = student_t_975(1) * (var(row_a, 2.0) + var(row_b, seeds_b)).sqrt() / 2.0;
            if seeds_b == 3.0 {
                assert!((c.high.unwrap() - c.mean - want).abs() < 1e-12, "{c:?}, want ±{want}");
            } else {
                // The same two seeds as `a`: paired seed by seed, as with every seed usable.
                let full = mean_paired_change(&[(&a, &ra), (&b[..2], &rb[..2])]).unwrap();
                assert_eq!(c, full);
            }
        }
    }

    /// With the same seeds in every scenario, the variance is that of the seeds' effects
    /// averaged over the scenarios, as it was computed before scenarios could differ in seeds.
    #[test]
    fn with_the_same_seeds_everywhere_the_effects_are_averaged_seed_by_seed() {
        let (a, ra) = (some(&[4.0, 3.2, 4.8, 5.1]), some(&[4.5, 5.0, 5.5, 5.2]));
        let (b, rb) = (some(&[9.0, 12.0, 8.0, 10.5]), some(&[10.0, 10.0, 9.0, 11.0]));
        let c = mean_paired_change(&[(&a, &ra), (&b, &rb)]).unwrap();
        let effects = |x: &[Option<f64>], r: &[Option<f64>]| {
            let (xm, rm) = (x.iter().flatten().sum::<f64>() / 4.0, r.iter().flatten().sum::<f64>() / 4.0);
            x.iter().zip(r).map(|(x, r)| (x.unwrap() - xm / rm * r.unwrap()) / rm).collect::<Vec<_>>()
        };
        let (ea, eb) = (effects(&a, &ra), effects(&b, &rb));
        let e: Vec<f64> = ea.iter().zip(&eb).map(|(x, y)| (x + y) / 2.0).collect();
        let sd = (e.iter().map(|v| v * v).sum::<f64>() / 3.0).sqrt();
        let half = 3.182 * sd / 2.0;
        assert!((c.high.unwrap() - c.mean - half).abs() < 1e-12, "{c:?} against ±{half}");
    }

    #[test]
    fn t_quantiles_join_smoothly() {
        assert_eq!(student_t_975(1), 12.706);
        assert!((student_t_975(31) - 2.0395).abs() < 0.001);
        assert!((student_t_975(120) - 1.9799).abs() < 0.001);
        assert!(student_t_975(30) > student_t_975(31));
    }

    #[test]
    fn changes_print_in_percent() {
        let c = Change { mean: -0.065, low: Some(-0.091), high: Some(-0.039), seeds: 3 };
        assert_eq!(format_change(Some(c)), "-6.5% [-9.1, -3.9]");
        assert_eq!(format_change(Some(Change { low: None, high: None, ..c })), "-6.5%");
        assert_eq!(format_change(None), "-");
    }
}

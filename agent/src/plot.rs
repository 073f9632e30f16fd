//! PNG charts: slowdown by flow-size bucket (`eval --out`) and training curves.
//!
//! Text is drawn with DejaVu Sans, embedded in the binary from the `dejavu` crate (the crate is
//! MIT/Apache-2.0; the DejaVu fonts are under the Bitstream Vera / DejaVu licence, a permissive
//! free licence), through plotters' `ab_glyph` backend. No system font is looked up, so charts
//! have their labels on a host with no font packages installed.

use crate::error::CliError;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::Path;
use std::sync::OnceLock;

/// The flow-size buckets of a slowdown chart, in order (REFERENCE.md §4).
pub const BUCKETS: [&str; 4] = ["<10KB", "10KB–100KB", "100KB–1MB", "≥1MB"];

/// One named series of a slowdown chart: p50 and p99 slowdown per bucket of [`BUCKETS`]
/// (`None` where the bucket had no flows).
pub struct BucketSeries<'a> {
    /// Legend name (a policy).
    pub name: &'a str,
    /// Median slowdown per bucket.
    pub p50: [Option<f64>; 4],
    /// 99th-percentile slowdown per bucket.
    pub p99: [Option<f64>; 4],
}

/// Line colours, one per series in order (Tableau 10), then again from the start.
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

const FONT: &str = "sans-serif";

/// Register the embedded font once per process.
fn ensure_font() -> Result<(), CliError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok());
    if ok {
        Ok(())
    } else {
        Err(CliError::Failed("the embedded DejaVu Sans font did not load".into()))
    }
}

/// Map any drawing error to a [`CliError::Failed`] naming the file.
fn failed<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> CliError + '_ {
    move |e| CliError::Failed(format!("{}: {e}", path.display()))
}

/// A log-scale range that shows every value with some room above and below. It reaches down
/// to 1 at least: slowdown is never below 1, and plotters labels a log axis only from the
/// first power of ten inside it, so an axis from 3 to 30 would show no label under 10.
fn log_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return 1.0..10.0;
    }
    let lo = (lo / 1.25).min(1.0);
    let hi = (hi * 1.5).max(lo * 4.0);
    lo..hi
}

/// Write a PNG of slowdown by flow-size bucket: p50 on the left, p99 on the right, both on a
/// log scale, one line per series.
pub fn slowdown_by_bucket(path: &Path, title: &str, series: &[BucketSeries]) -> Result<(), CliError> {
    ensure_font()?;
    let fail = failed(path);
    let root = BitMapBackend::new(path, (1400, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(&fail)?;
    let root = root.titled(title, (FONT, 26)).map_err(&fail)?;
    let panels = root.split_evenly((1, 2));
    for (panel, p99) in panels.iter().zip([false, true]) {
        let caption = if p99 { "p99 slowdown" } else { "p50 slowdown" };
        let pick = |s: &BucketSeries| if p99 { s.p99 } else { s.p50 };
        let y = log_range(series.iter().flat_map(pick).flatten());
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, (FONT, 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d((0..BUCKETS.len() as i32 - 1).into_segmented(), y.log_scale())
            .map_err(&fail)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("flow size")
            .y_desc("slowdown (FCT / ideal)")
            // One light line between labels: more, and plotters crowds them just above a
            // power of ten.
            .y_max_light_lines(1)
            .x_label_style((FONT, 15))
            .y_label_style((FONT, 14))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                    BUCKETS.get(*i as usize).copied().unwrap_or_default().to_string()
                }
                SegmentValue::Last => String::new(),
            })
            .draw()
            .map_err(&fail)?;
        for (k, s) in series.iter().enumerate() {
            let colour = COLOURS[k % COLOURS.len()];
            let at = |(i, v): (usize, f64)| (SegmentValue::CenterOf(i as i32), v);
            let stretches = present_stretches(&pick(s));
            // The first stretch (perhaps empty) carries the legend entry; a line never bridges
            // an empty bucket, which would read as a value there.
            for (n, stretch) in stretches.iter().enumerate() {
                let line = chart
                    .draw_series(LineSeries::new(stretch.iter().copied().map(at), colour.stroke_width(2)))
                    .map_err(&fail)?;
                if n == 0 {
                    line.label(s.name)
                        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
                }
            }
            let points = stretches.into_iter().flatten().map(at);
            chart.draw_series(points.map(|p| Circle::new(p, 4, colour.filled()))).map_err(&fail)?;
        }
        if !series.is_empty() {
            draw_legend(&mut chart, SeriesLabelPosition::UpperLeft).map_err(&fail)?;
        }
    }
    root.present().map_err(&fail)?;
    Ok(())
}

/// The legend box both chart kinds share, at `position`.
fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .position(position)
        .draw()
}

/// Write a PNG line chart of several named series sharing an x axis (e.g. training step), with
/// a legend. Non-finite points are left out; an empty chart still gets its axes and title.
pub fn training_curve(
    path: &Path,
    title: &str,
    x_label: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> Result<(), CliError> {
    ensure_font()?;
    let fail = failed(path);
    let clean: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(name, pts)| (*name, pts.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect()))
        .collect();
    let span = |get: fn(&(f64, f64)) -> f64| {
        let (lo, hi) = clean
            .iter()
            .flat_map(|(_, pts)| pts.iter().map(get))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if lo > hi {
            (0.0, 1.0)
        } else if lo == hi {
            (lo - 0.5_f64.max(lo.abs() * 0.1), hi + 0.5_f64.max(hi.abs() * 0.1))
        } else {
            (lo, hi)
        }
    };
    let (x0, x1) = span(|p| p.0);
    let (y0, y1) = span(|p| p.1);
    let pad = (y1 - y0) * 0.05;

    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(&fail)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 24))
        .margin(15)
        // Room for the last x label ("200000"), centred on the right edge.
        .margin_right(40)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))
        .map_err(&fail)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .x_label_style((FONT, 14))
        .y_label_style((FONT, 14))
        // Whole numbers (training steps) without a ".0".
        .x_label_formatter(&|x| if x.fract() == 0.0 { format!("{x:.0}") } else { format!("{x}") })
        .draw()
        .map_err(&fail)?;
    for (k, (name, pts)) in clean.into_iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        // Short series get a marker per point, so that a lone point shows.
        let markers = if pts.len() <= 50 { pts.clone() } else { Vec::new() };
        chart
            .draw_series(LineSeries::new(pts, colour.stroke_width(2)))
            .map_err(&fail)?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
        chart.draw_series(markers.into_iter().map(|p| Circle::new(p, 3, colour.filled()))).map_err(&fail)?;
    }
    if !series.is_empty() {
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight).map_err(&fail)?;
    }
    root.present().map_err(&fail)?;
    Ok(())
}

/// The finite values of `values` by index, in stretches of neighbouring buckets: one line each.
/// Always at least one stretch, empty when no value is.
fn present_stretches(values: &[Option<f64>]) -> Vec<Vec<(usize, f64)>> {
    let mut stretches = vec![Vec::new()];
    for (i, v) in values.iter().enumerate() {
        match v.filter(|v| v.is_finite()) {
            Some(v) => stretches.last_mut().expect("never empty").push((i, v)),
            None if !stretches.last().expect("never empty").is_empty() => stretches.push(Vec::new()),
            None => {}
        }
    }
    if stretches.len() > 1 && stretches.last().is_some_and(Vec::is_empty) {
        stretches.pop();
    }
    stretches
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

    /// A fresh scratch directory for one test; the test removes it when done.
    fn scratch(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ecn-tuner-plot-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn slowdown_chart_is_a_png() {
        let dir = scratch("slowdown");
        let path = dir.join("slowdown.png");
        let series = [
            BucketSeries { name: "a", p50: [Some(1.1), Some(1.5), Some(2.0), Some(3.0)], p99: [Some(9.0); 4] },
            BucketSeries { name: "b", p50: [None, Some(1.2), Some(1.8), Some(3.5)], p99: [None, None, None, None] },
        ];
        slowdown_by_bucket(&path, "test", &series).unwrap();
        assert_eq!(std::fs::read(&path).unwrap()[..8], PNG_SIGNATURE);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Lines join neighbouring buckets only: one with no flows breaks the line.
    #[test]
    fn a_line_breaks_at_an_empty_bucket() {
        let (a, b) = (Some(2.0), Some(5.0));
        assert_eq!(present_stretches(&[a, None, None, b]), [vec![(0, 2.0)], vec![(3, 5.0)]]);
        assert_eq!(present_stretches(&[a, b, None, Some(f64::NAN)]), [vec![(0, 2.0), (1, 5.0)]]);
        assert_eq!(present_stretches(&[None, a, b]), [vec![(1, 2.0), (2, 5.0)]]);
        assert_eq!(present_stretches(&[None, None]), [Vec::<(usize, f64)>::new()]);
    }

    #[test]
    fn slowdown_axis_reaches_down_to_one_and_holds_every_value() {
        // A p99 panel from 3.7 to 21 must still label the values under 10.
        let r = log_range([3.7, 21.0, f64::NAN, 0.0].into_iter());
        assert!(r.start <= 1.0 && r.start > 0.0, "{r:?}");
        assert!(r.end > 21.0, "{r:?}");
        // Values under 1 (not a slowdown, but a chart must still hold them) keep room below.
        let r = log_range([0.5, 2.0].into_iter());
        assert!(r.start < 0.5 && r.end > 2.0, "{r:?}");
        assert_eq!(log_range(std::iter::empty()), 1.0..10.0);
    }

    #[test]
    fn training_curve_handles_empty_flat_and_non_finite_series() {
        let dir = scratch("curve");
        let path = dir.join("curve.png");
        let series = [
            ("reward", vec![(0.0, 1.0), (1.0, 2.0), (2.0, f64::NAN), (3.0, 1.5)]),
            ("flat", vec![(0.0, 1.0), (3.0, 1.0)]),
            ("empty", vec![]),
        ];
        training_curve(&path, "training", "step", &series).unwrap();
        assert_eq!(std::fs::read(&path).unwrap()[..8], PNG_SIGNATURE);
        training_curve(&dir.join("empty.png"), "nothing", "step", &[]).unwrap();
        training_curve(&dir.join("point.png"), "one point", "step", &[("x", vec![(5.0, 5.0)])]).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_unwritable_path_is_a_failure_naming_it() {
        let e = training_curve(Path::new("/nonexistent-dir/x.png"), "t", "step", &[]).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(e.to_string().contains("/nonexistent-dir/x.png"), "{e}");
    }
}

//! Plots of results, each written as both PNG and SVG: response-time
//! histograms (small multiples, one panel per configuration), the tail
//! "fraction of samples exceeding x" on a log scale and the cumulative
//! distribution, time series, and each client's min/mean/max (one panel
//! per configuration), and stacked bars (a run's misses by cause).
//!
//! Owns figure layout, colours and the embedded font (DejaVu Sans, see
//! assets/DejaVuSans-LICENSE.txt). It must never compute statistics itself
//! ([`crate::stats`] does) and never draw a legend over data: legends get a
//! strip of their own below the chart.

mod bars;
mod counts;

pub use bars::StackedBar;
pub use counts::{CountLine, CountPanel};

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};

use crate::histogram::{LatencyHistogram, NS_PER_US};
use crate::series::Series;
use crate::stats::Summary;
use crate::units::format_value;

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FONT_FAMILY: &str = "sans-serif";

const WIDTH: u32 = 1000;
const TITLE_HEIGHT: u32 = 44;
const PANEL_HEIGHT: u32 = 290;
const CHART_HEIGHT: u32 = 540;
const LEGEND_ROW: u32 = 26;
const LEGEND_PADDING: u32 = 12;
const HISTOGRAM_BINS: usize = 100;
/// A histogram with a deadline spans at most this many deadlines: a
/// configuration that falls apart (seconds late) would otherwise squeeze
/// every other one into its first bar. Later samples go in the last bar.
const HISTOGRAM_SPAN_DEADLINES: f64 = 3.0;
/// An exceedance plot whose values span more than this ratio gets a
/// logarithmic x axis.
const LOG_AXIS_SPAN: f64 = 100.0;
/// A range plot whose values (deadlines included) span more than this
/// ratio gets a logarithmic y axis: a deadline far above the service times
/// would squeeze them onto the axis.
const RANGE_LOG_SPAN: f64 = 10.0;
/// Longer series are drawn as their min/max envelope over this many chunks.
const ENVELOPE_CHUNKS: usize = 2000;

/// Tableau 10 without its red, which marks deadlines.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
];
const DEADLINE_COLOR: RGBColor = RGBColor(214, 39, 40);

/// The two files of one plot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlotFiles {
    pub png: PathBuf,
    pub svg: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot draw plot {}: {message}", .path.display())]
pub struct PlotError {
    pub path: PathBuf,
    pub message: String,
}

/// Data with the name it has in legends and captions (usually the
/// configuration's name).
#[derive(Clone, Copy, Debug)]
pub struct Labelled<'a, T> {
    pub label: &'a str,
    pub data: &'a T,
}

/// Response-time histograms, one panel per configuration on a shared µs
/// axis, each captioned with count, mean, p99, max and missed deadlines,
/// with the deadline as a dashed red line. Writes `<stem>.png` and `<stem>.svg`.
pub fn latency_histograms(
    stem: &Path,
    title: &str,
    quantity: &str,
    configurations: &[Labelled<LatencyHistogram>],
    deadline_us: Option<f64>,
) -> Result<PlotFiles, PlotError> {
    render(
        stem,
        &HistogramFigure {
            title,
            quantity,
            configurations,
            deadline_us,
        },
    )
}

/// "Fraction of samples exceeding x" against x in µs, log y from 1 down to
/// below 1/count, one line per configuration, the deadline dashed.
pub fn exceedance(
    stem: &Path,
    title: &str,
    quantity: &str,
    configurations: &[Labelled<LatencyHistogram>],
    deadline_us: Option<f64>,
) -> Result<PlotFiles, PlotError> {
    distribution(stem, (title, quantity), configurations, deadline_us, false)
}

/// The cumulative distribution: "fraction of samples ≤ x" (linear, 0 to 1)
/// against x in µs, one line per configuration, the deadline dashed.
pub fn cdf(
    stem: &Path,
    title: &str,
    quantity: &str,
    configurations: &[Labelled<LatencyHistogram>],
    deadline_us: Option<f64>,
) -> Result<PlotFiles, PlotError> {
    distribution(stem, (title, quantity), configurations, deadline_us, true)
}

/// [`exceedance`] (`cumulative` false) or [`cdf`].
fn distribution(
    stem: &Path,
    (title, quantity): (&str, &str),
    configurations: &[Labelled<LatencyHistogram>],
    deadline_us: Option<f64>,
    cumulative: bool,
) -> Result<PlotFiles, PlotError> {
    render(
        stem,
        &ExceedanceFigure {
            title,
            quantity,
            configurations,
            deadline_us,
            cumulative,
        },
    )
}

/// One client's values: a bar from `min` to `max` with a tick at `mean`,
/// in the colour of its `group` (an index into the figure's groups).
#[derive(Clone, Debug, PartialEq)]
pub struct RangeBar {
    pub label: String,
    pub group: usize,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
}

/// One panel of [`ranges`]: a configuration's clients.
#[derive(Clone, Debug, PartialEq)]
pub struct RangePanel {
    pub caption: String,
    pub bars: Vec<RangeBar>,
}

/// A group of clients: its legend entry, and its deadline drawn dashed in
/// its colour.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeGroup {
    pub label: String,
    pub deadline: Option<f64>,
}

/// Each client's min, mean and max (seed 003's Figures 6–9): one panel per
/// configuration on a shared y axis, `quantity` in `unit` (logarithmic
/// when the values span more than a decade), clients along x.
pub fn ranges(
    stem: &Path,
    title: &str,
    (quantity, unit): (&str, &str),
    groups: &[RangeGroup],
    panels: &[RangePanel],
) -> Result<PlotFiles, PlotError> {
    render(
        stem,
        &RangeFigure {
            title,
            quantity,
            unit,
            groups,
            panels,
        },
    )
}

/// Series against time in seconds: one panel per configuration on shared
/// axes (y labelled `y_label`, name and unit), each series name in the same
/// colour in every panel. Series longer than 4000 points are drawn as their
/// min/max envelope over 2000 chunks, so spikes stay visible.
pub fn time_series(
    stem: &Path,
    title: &str,
    y_label: &str,
    panels: &[SeriesPanel],
) -> Result<PlotFiles, PlotError> {
    render(
        stem,
        &SeriesFigure {
            title,
            y_label,
            panels,
        },
    )
}

/// Distinct series names in the panels, in order of first appearance (a
/// name's index is its colour).
pub fn series_names<'a>(panels: &[SeriesPanel<'a>]) -> Vec<&'a str> {
    crate::distinct_in_order(
        panels
            .iter()
            .flat_map(|p| &p.series)
            .map(|s| s.name.as_str()),
    )
}

/// Counts against a size that doubles (xruns against the buffer size):
/// one panel per label on shared axes, one line per name; x logarithmic in
/// base 2 with a tick at every size drawn, y logarithmic in base 10 with a
/// count of zero on the bottom edge, labelled 0. Writes `<stem>.png` and
/// `<stem>.svg`.
pub fn counts_by_size(
    stem: &Path,
    title: &str,
    (x_label, y_label): (&str, &str),
    panels: &[CountPanel],
) -> Result<PlotFiles, PlotError> {
    render(
        stem,
        &counts::CountFigure {
            title,
            x_label,
            y_label,
            panels,
        },
    )
}

/// Stacked horizontal bars, one per label, a segment per name (its count
/// along x, labelled `x_label`), each name in the same colour in every
/// bar. Writes `<stem>.png` and `<stem>.svg`.
pub fn stacked_bars(
    stem: &Path,
    title: &str,
    x_label: &str,
    names: &[&str],
    bars: &[StackedBar],
) -> Result<PlotFiles, PlotError> {
    render(
        stem,
        &bars::BarsFigure {
            title,
            x_label,
            names,
            bars,
        },
    )
}

/// One panel of [`time_series`]: the series of one configuration.
#[derive(Clone, Debug)]
pub struct SeriesPanel<'a> {
    pub label: &'a str,
    pub series: Vec<&'a Series>,
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A figure drawable on any backend, so PNG and SVG share one layout.
trait Figure {
    fn height(&self) -> u32;
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB>;
}

fn render(stem: &Path, figure: &impl Figure) -> Result<PlotFiles, PlotError> {
    register_embedded_font();
    let files = PlotFiles {
        png: with_suffix(stem, "png"),
        svg: with_suffix(stem, "svg"),
    };
    let size = (WIDTH, figure.height());
    let error = |path: &Path| {
        let path = path.to_path_buf();
        move |message| PlotError { path, message }
    };
    draw_on(
        BitMapBackend::new(&files.png, size).into_drawing_area(),
        figure,
    )
    .map_err(error(&files.png))?;
    draw_on(
        SVGBackend::new(&files.svg, size).into_drawing_area(),
        figure,
    )
    .map_err(error(&files.svg))?;
    Ok(files)
}

fn draw_on<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    figure: &impl Figure,
) -> Result<(), String> {
    root.fill(&WHITE)
        .and_then(|()| figure.draw(&root))
        .and_then(|()| root.present())
        .map_err(|e| e.to_string())
}

fn register_embedded_font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        register_font(FONT_FAMILY, FontStyle::Normal, FONT)
            .unwrap_or_else(|_| panic!("the embedded DejaVu Sans font is a valid TrueType font"));
    });
}

fn with_suffix(stem: &Path, extension: &str) -> PathBuf {
    let mut path = stem.as_os_str().to_owned();
    path.push(".");
    path.push(extension);
    path.into()
}

fn colour(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

fn text(size: u32) -> TextStyle<'static> {
    (FONT_FAMILY, size).into_font().color(&BLACK)
}

/// Splits off the title strip and the legend strip, returning the chart area.
fn frame<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    legend: &[LegendEntry],
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    let (title_area, rest) = root.split_vertically(TITLE_HEIGHT);
    title_area.draw_text(
        title,
        &text(22).pos(Pos::new(HPos::Center, VPos::Center)),
        (WIDTH as i32 / 2, TITLE_HEIGHT as i32 / 2),
    )?;
    let chart_height = rest.dim_in_pixel().1 - legend_height(legend.len());
    let (chart, legend_area) = rest.split_vertically(chart_height);
    draw_legend(&legend_area, legend)?;
    Ok(chart)
}

struct LegendEntry {
    label: String,
    colour: RGBColor,
    dashed: bool,
}

fn deadline_entry(deadline_us: Option<f64>) -> Option<LegendEntry> {
    deadline_us.map(|d| LegendEntry {
        label: format!("deadline ({} µs)", format_value(d)),
        colour: DEADLINE_COLOR,
        dashed: true,
    })
}

/// A lone panel gets the height of a full chart.
fn panels_height(panels: usize) -> u32 {
    match panels {
        0 | 1 => CHART_HEIGHT,
        n => n as u32 * PANEL_HEIGHT,
    }
}

fn legend_height(entries: usize) -> u32 {
    match entries {
        0 => 0,
        n => n as u32 * LEGEND_ROW + 2 * LEGEND_PADDING,
    }
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
) -> DrawResult<DB> {
    const LEFT: i32 = 90;
    const SAMPLE: i32 = 40;
    for (i, entry) in entries.iter().enumerate() {
        let y = (LEGEND_PADDING + i as u32 * LEGEND_ROW + LEGEND_ROW / 2) as i32;
        let style = entry.colour.stroke_width(3);
        let dash = if entry.dashed { 10 } else { SAMPLE };
        for x in (LEFT..LEFT + SAMPLE).step_by(2 * dash as usize) {
            area.draw(&PathElement::new(
                vec![(x, y), ((x + dash).min(LEFT + SAMPLE), y)],
                style,
            ))?;
        }
        area.draw_text(
            &entry.label,
            &text(16).pos(Pos::new(HPos::Left, VPos::Center)),
            (LEFT + SAMPLE + 12, y),
        )?;
    }
    Ok(())
}

fn us(ns: u64) -> f64 {
    ns as f64 / NS_PER_US
}

/// The µs range covering every histogram and the deadline, padded.
fn latency_range_us(
    histograms: &[Labelled<LatencyHistogram>],
    deadline_us: Option<f64>,
) -> Range<f64> {
    let recorded = histograms.iter().map(|h| h.data).filter(|h| h.count() > 0);
    let extremes = recorded.flat_map(|h| [us(h.min_ns()), us(h.max_ns())]);
    padded_range(extremes.chain(deadline_us))
}

/// `(min, max)` of some values, padded by 5 % (by 1 if they are all equal)
/// but never below zero if they are all non-negative; `0..1` for none.
fn padded_range(values: impl Iterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() {
        return 0.0..1.0;
    }
    let pad = if hi > lo { (hi - lo) * 0.05 } else { 1.0 };
    let start = if lo >= 0.0 {
        (lo - pad).max(0.0)
    } else {
        lo - pad
    };
    start..hi + pad
}

/// A panel caption's font size: smaller for long captions, so they fit the
/// 1000-pixel width.
fn caption_size(caption: &str) -> u32 {
    match caption.chars().count() {
        0..=95 => 17,
        96..=115 => 14,
        _ => 12,
    }
}

/// A chart builder for one panel of a stacked figure: its caption above,
/// room for the axes' labels.
fn panel_chart<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(caption, text(17))
        .margin(8)
        .margin_right(30)
        .x_label_area_size(48)
        .y_label_area_size(90);
    builder
}

/// Tick labels without floating-point noise (1000, not 1000.0000000001).
fn axis_value(v: &f64) -> String {
    let magnitude = 10f64.powi(6 - v.abs().max(1e-12).log10().ceil() as i32);
    format!("{}", (v * magnitude).round() / magnitude)
}

struct HistogramFigure<'a> {
    title: &'a str,
    /// What the x axis measures ("response time"), in µs.
    quantity: &'a str,
    configurations: &'a [Labelled<'a, LatencyHistogram>],
    deadline_us: Option<f64>,
}

impl HistogramFigure<'_> {
    fn legend(&self) -> Vec<LegendEntry> {
        deadline_entry(self.deadline_us).into_iter().collect()
    }

    fn caption(&self, configuration: &Labelled<LatencyHistogram>) -> String {
        let s = Summary::from_histogram(configuration.data, self.deadline_us);
        let misses = s
            .misses
            .map_or(String::new(), |m| format!(", {m} missed deadlines"));
        let beyond = match self.deadline_us.map(|d| HISTOGRAM_SPAN_DEADLINES * d) {
            Some(edge) if s.max > edge => {
                let n: u64 = configuration
                    .data
                    .buckets()
                    .filter(|b| us(b.low_ns) > edge)
                    .map(|b| b.count)
                    .sum();
                format!(" ({n} past the axis)")
            }
            _ => String::new(),
        };
        format!(
            "{}: n = {}, mean = {} µs, p99 = {} µs, max = {} µs{misses}{beyond}",
            configuration.label,
            s.count,
            format_value(s.mean),
            format_value(s.p99),
            format_value(s.max)
        )
    }

    fn draw_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        index: usize,
        grid: &BinGrid,
    ) -> DrawResult<DB> {
        let configuration = &self.configurations[index];
        let caption = self.caption(configuration);
        let counts = grid.counts(configuration.data);
        let y_max = counts.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.08;
        let mut chart = ChartBuilder::on(area)
            .caption(&caption, text(caption_size(&caption)))
            .margin(8)
            .margin_right(30)
            .x_label_area_size(48)
            .y_label_area_size(80)
            .build_cartesian_2d(grid.range(), 0.0..y_max)?;
        chart
            .configure_mesh()
            .x_desc(format!("{} (µs)", self.quantity))
            .y_desc("count")
            .y_labels(6)
            .label_style(text(14))
            .axis_desc_style(text(15))
            .light_line_style(BLACK.mix(0.04))
            .x_label_formatter(&axis_value)
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()?;
        let fill = colour(index).filled();
        chart.draw_series(
            counts
                .iter()
                .enumerate()
                .filter(|&(_, &c)| c > 0)
                .map(|(i, &c)| {
                    let x0 = grid.start + i as f64 * grid.width;
                    Rectangle::new([(x0, 0.0), (x0 + grid.width, c as f64)], fill)
                }),
        )?;
        if let Some(d) = self.deadline_us {
            chart.draw_series(DashedLineSeries::new(
                [(d, 0.0), (d, y_max)],
                10,
                8,
                DEADLINE_COLOR.stroke_width(2),
            ))?;
        }
        Ok(())
    }
}

/// Equal histogram bins of a round width (1, 2 or 5 × 10^k µs), at most
/// `HISTOGRAM_BINS` of them, aligned to multiples of the width so bars start
/// at readable values.
struct BinGrid {
    start: f64,
    width: f64,
    bins: usize,
}

impl BinGrid {
    fn covering(range: &Range<f64>) -> BinGrid {
        let raw = (range.end - range.start) / HISTOGRAM_BINS as f64;
        let decade = 10f64.powf(raw.log10().floor());
        let width = [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .map(|m| m * decade)
            .find(|&w| w >= raw)
            .unwrap_or(raw);
        let start = (range.start / width).floor() * width;
        let bins = ((range.end - start) / width).ceil().max(1.0) as usize;
        BinGrid { start, width, bins }
    }

    fn range(&self) -> Range<f64> {
        self.start..self.start + self.bins as f64 * self.width
    }

    /// Samples per bin, each histogram bucket counted at its midpoint.
    fn counts(&self, histogram: &LatencyHistogram) -> Vec<u64> {
        let mut counts = vec![0u64; self.bins];
        for bucket in histogram.buckets() {
            let mid_us = us(bucket.low_ns) / 2.0 + us(bucket.high_ns) / 2.0;
            let index = ((mid_us - self.start) / self.width).floor().max(0.0) as usize;
            counts[index.min(self.bins - 1)] += bucket.count;
        }
        counts
    }
}

impl Figure for HistogramFigure<'_> {
    fn height(&self) -> u32 {
        TITLE_HEIGHT + panels_height(self.configurations.len()) + legend_height(self.legend().len())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let chart = frame(root, self.title, &self.legend())?;
        let range = latency_range_us(self.configurations, self.deadline_us);
        let grid = BinGrid::covering(&match self.deadline_us {
            Some(d) => {
                range.start
                    ..range
                        .end
                        .min(HISTOGRAM_SPAN_DEADLINES * d)
                        .max(range.start + 1.0)
            }
            None => range,
        });
        let panels = chart.split_evenly((self.configurations.len().max(1), 1));
        for (index, panel) in panels.iter().enumerate().take(self.configurations.len()) {
            self.draw_panel(panel, index, &grid)?;
        }
        Ok(())
    }
}

struct ExceedanceFigure<'a> {
    title: &'a str,
    /// What the x axis measures ("response time"), in µs.
    quantity: &'a str,
    configurations: &'a [Labelled<'a, LatencyHistogram>],
    deadline_us: Option<f64>,
    /// The distribution (fraction ≤ x, linear) instead of its tail.
    cumulative: bool,
}

impl ExceedanceFigure<'_> {
    fn legend(&self) -> Vec<LegendEntry> {
        let lines = self.configurations.iter().enumerate().map(|(i, c)| {
            let s = Summary::from_histogram(c.data, None);
            LegendEntry {
                label: format!(
                    "{}: p99.9 = {} µs, max = {} µs",
                    c.label,
                    format_value(s.p999),
                    format_value(s.max)
                ),
                colour: colour(i),
                dashed: false,
            }
        });
        lines.chain(deadline_entry(self.deadline_us)).collect()
    }

    /// The decade just below half of 1/count of the largest configuration,
    /// so the last step (a single sample) stays visible above the axis.
    fn y_floor(&self) -> f64 {
        let most = self
            .configurations
            .iter()
            .map(|c| c.data.count())
            .max()
            .unwrap_or(0);
        10f64.powf((0.5 / most.max(1) as f64).log10().floor())
    }
}

/// The step function "fraction of samples exceeding x", clamped to `floor`;
/// it drops to `floor` at the maximum.
fn exceedance_steps(histogram: &LatencyHistogram, x_start: f64, floor: f64) -> Vec<(f64, f64)> {
    let total = histogram.count() as f64;
    let mut above = histogram.count();
    let mut steps = vec![(x_start, 1.0)];
    for bucket in histogram.buckets() {
        let x = us(bucket.high_ns);
        steps.push((x, (above as f64 / total).max(floor)));
        above -= bucket.count;
        steps.push((x, (above as f64 / total).max(floor)));
    }
    steps
}

impl Figure for ExceedanceFigure<'_> {
    fn height(&self) -> u32 {
        TITLE_HEIGHT + CHART_HEIGHT + legend_height(self.legend().len())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let area = frame(root, self.title, &self.legend())?;
        let x_range = latency_range_us(self.configurations, self.deadline_us);
        let floor = match self.cumulative {
            true => 0.0,
            false => self.y_floor(),
        };
        let mut builder = ChartBuilder::on(&area);
        builder
            .margin(10)
            .margin_right(30)
            .x_label_area_size(50)
            .y_label_area_size(90);
        // Across more than two decades (a configuration seconds late beside
        // ones at the deadline) a linear axis would squeeze the good ones
        // onto its origin. A logarithmic axis starts a little below the
        // smallest sample, not at the linear padding's (often 0, hence 1 µs).
        let smallest = self
            .configurations
            .iter()
            .filter(|c| c.data.count() > 0)
            .map(|c| us(c.data.min_ns()))
            .fold(f64::INFINITY, f64::min);
        let start = (smallest.min(x_range.end) / 1.25)
            .max(x_range.start)
            .max(1.0);
        match x_range.end / start > LOG_AXIS_SPAN {
            true => {
                let x = (start..x_range.end).log_scale();
                self.with_y(&mut builder, x, (start, floor), "log scale")
            }
            false => self.with_y(&mut builder, x_range.clone(), (x_range.start, floor), ""),
        }
    }
}

impl ExceedanceFigure<'_> {
    /// The chart on `x` with the y axis of the figure's kind: the
    /// fraction exceeding x (logarithmic, down to `floor`) or ≤ x (linear).
    fn with_y<DB: DrawingBackend, X>(
        &self,
        builder: &mut ChartBuilder<'_, '_, DB>,
        x: X,
        (x_start, floor): (f64, f64),
        scale: &str,
    ) -> DrawResult<DB>
    where
        X: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
        X::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
    {
        match self.cumulative {
            true => self.plot(
                builder.build_cartesian_2d(x, 0.0..1.02)?,
                x_start,
                floor,
                scale,
            ),
            false => {
                let y = (floor..1.5).log_scale();
                self.plot(builder.build_cartesian_2d(x, y)?, x_start, floor, scale)
            }
        }
    }
}

impl ExceedanceFigure<'_> {
    fn plot<DB: DrawingBackend, X, Y>(
        &self,
        mut chart: ChartContext<'_, DB, Cartesian2d<X, Y>>,
        x_start: f64,
        floor: f64,
        scale: &str,
    ) -> DrawResult<DB>
    where
        X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
        Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
    {
        let x_desc = match scale {
            "" => format!("{} x (µs)", self.quantity),
            s => format!("{} x (µs, {s})", self.quantity),
        };
        let (y_desc, y_format): (&str, &dyn Fn(&f64) -> String) = match self.cumulative {
            true => ("fraction of samples ≤ x", &|v| format!("{v:.1}")),
            false => ("fraction of samples exceeding x", &|v| format!("{v:.0e}")),
        };
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .label_style(text(14))
            .axis_desc_style(text(15))
            .light_line_style(BLACK.mix(0.04))
            .x_label_formatter(&axis_value)
            .y_label_formatter(y_format)
            .draw()?;
        for (i, c) in self
            .configurations
            .iter()
            .enumerate()
            .filter(|(_, c)| c.data.count() > 0)
        {
            let mut steps = exceedance_steps(c.data, x_start, floor);
            if self.cumulative {
                steps.iter_mut().for_each(|p| p.1 = 1.0 - p.1);
            }
            chart.draw_series(LineSeries::new(steps, colour(i).stroke_width(2)))?;
        }
        if let Some(d) = self.deadline_us {
            chart.draw_series(DashedLineSeries::new(
                [(d, floor), (d, 1.0)],
                10,
                8,
                DEADLINE_COLOR.stroke_width(2),
            ))?;
        }
        Ok(())
    }
}

struct RangeFigure<'a> {
    title: &'a str,
    quantity: &'a str,
    unit: &'a str,
    groups: &'a [RangeGroup],
    panels: &'a [RangePanel],
}

impl RangeFigure<'_> {
    fn legend(&self) -> Vec<LegendEntry> {
        let bars = self.groups.iter().enumerate().map(|(i, g)| LegendEntry {
            label: format!("{}: bar min to max, tick at the mean", g.label),
            colour: colour(i),
            dashed: false,
        });
        let deadlines = self.groups.iter().enumerate().filter_map(|(i, g)| {
            g.deadline.map(|d| LegendEntry {
                label: format!("{}: deadline ({} {})", g.label, format_value(d), self.unit),
                colour: colour(i),
                dashed: true,
            })
        });
        bars.chain(deadlines).collect()
    }

    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        let bars = self.panels.iter().flat_map(|p| &p.bars);
        let deadlines = self.groups.iter().filter_map(|g| g.deadline);
        bars.flat_map(|b| [b.min, b.max]).chain(deadlines)
    }

    fn draw_bars<DB: DrawingBackend, X, Y>(
        &self,
        mut chart: ChartContext<'_, DB, Cartesian2d<X, Y>>,
        panel: &RangePanel,
    ) -> DrawResult<DB>
    where
        X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
        Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
    {
        let label = |x: &f64| {
            let i = x.round();
            match (i - x).abs() < 1e-6 && i >= 0.0 {
                true => panel
                    .bars
                    .get(i as usize)
                    .map_or(String::new(), |b| b.label.clone()),
                false => String::new(),
            }
        };
        chart
            .configure_mesh()
            .x_desc("client")
            .y_desc(format!("{} ({})", self.quantity, self.unit))
            // Whole numbers (the clients) fall on the ticks; others are blank.
            .x_labels(panel.bars.len() + 2)
            .y_labels(6)
            .label_style(text(14))
            .axis_desc_style(text(15))
            .light_line_style(BLACK.mix(0.04))
            .x_label_formatter(&label)
            .y_label_formatter(&axis_value)
            .draw()?;
        for (i, bar) in panel.bars.iter().enumerate() {
            let (x, c) = (i as f64, colour(bar.group));
            chart.draw_series([Rectangle::new(
                [(x - 0.18, bar.min), (x + 0.18, bar.max)],
                c.mix(0.35).filled(),
            )])?;
            chart.draw_series(LineSeries::new(
                [(x - 0.3, bar.mean), (x + 0.3, bar.mean)],
                c.stroke_width(3),
            ))?;
        }
        let end = panel.bars.len().max(1) as f64 - 0.5;
        for (i, g) in self.groups.iter().enumerate() {
            if let Some(d) = g.deadline {
                chart.draw_series(DashedLineSeries::new(
                    [(-0.5, d), (end, d)],
                    10,
                    8,
                    colour(i).stroke_width(2),
                ))?;
            }
        }
        Ok(())
    }
}

/// 1, 2 and 5 times the powers of ten within `lo..=hi`: a logarithmic
/// axis's labels (plotters' own may be a single power of ten).
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let first = lo.max(f64::MIN_POSITIVE).log10().floor() as i32;
    let last = hi.max(f64::MIN_POSITIVE).log10().ceil() as i32;
    (first..=last)
        .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
        .filter(|v| (lo..=hi).contains(v))
        .collect()
}

impl Figure for RangeFigure<'_> {
    fn height(&self) -> u32 {
        TITLE_HEIGHT + panels_height(self.panels.len()) + legend_height(self.legend().len())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let chart = frame(root, self.title, &self.legend())?;
        let (lo, hi) = self
            .values()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                (lo.min(v), hi.max(v))
            });
        let log_y = lo > 0.0 && hi / lo > RANGE_LOG_SPAN;
        let areas = chart.split_evenly((self.panels.len().max(1), 1));
        for (panel, area) in self.panels.iter().zip(&areas) {
            let n = panel.bars.len().max(1);
            let x = || -0.5..n as f64 - 0.5;
            let mut builder = ChartBuilder::on(area);
            builder
                .caption(&panel.caption, text(caption_size(&panel.caption)))
                .margin(8)
                .margin_right(30)
                .x_label_area_size(48)
                .y_label_area_size(90);
            match log_y {
                true => {
                    let (lo, hi) = (lo / 1.2, hi * 1.2);
                    let y = (lo..hi).log_scale().with_key_points(log_ticks(lo, hi));
                    self.draw_bars(builder.build_cartesian_2d(x(), y)?, panel)?
                }
                false => {
                    let y = padded_range(self.values());
                    self.draw_bars(builder.build_cartesian_2d(x(), y)?, panel)?
                }
            }
        }
        Ok(())
    }
}

struct SeriesFigure<'a> {
    title: &'a str,
    y_label: &'a str,
    panels: &'a [SeriesPanel<'a>],
}

impl SeriesFigure<'_> {
    fn all_series(&self) -> impl Iterator<Item = &Series> {
        self.panels.iter().flat_map(|p| p.series.iter().copied())
    }

    fn legend(&self) -> Vec<LegendEntry> {
        let entry = |(i, name): (usize, &str)| {
            let dropped: u64 = self
                .all_series()
                .filter(|s| s.name == name)
                .map(|s| s.overflow)
                .sum();
            LegendEntry {
                label: match dropped {
                    0 => name.to_string(),
                    n => format!("{name} ({n} points dropped: series full)"),
                },
                colour: colour(i),
                dashed: false,
            }
        };
        series_names(self.panels)
            .into_iter()
            .enumerate()
            .map(entry)
            .collect()
    }

    fn draw_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        panel: &SeriesPanel,
        ranges: &(Range<f64>, Range<f64>),
    ) -> DrawResult<DB> {
        let mut chart = panel_chart(area, panel.label)
            .build_cartesian_2d(ranges.0.clone(), ranges.1.clone())?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc(self.y_label)
            .y_labels(6)
            .label_style(text(14))
            .axis_desc_style(text(15))
            .light_line_style(BLACK.mix(0.04))
            .x_label_formatter(&axis_value)
            .y_label_formatter(&axis_value)
            .draw()?;
        let names = series_names(self.panels);
        for series in &panel.series {
            let index = names.iter().position(|&n| n == series.name).unwrap_or(0);
            chart.draw_series(LineSeries::new(
                envelope(&series.points),
                colour(index).stroke_width(1),
            ))?;
        }
        Ok(())
    }
}

/// At most `2 * ENVELOPE_CHUNKS` points keeping each chunk's minimum and
/// maximum in time order; shorter series are returned whole.
fn envelope(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= 2 * ENVELOPE_CHUNKS {
        return points.to_vec();
    }
    let by_value = |a: &&(f64, f64), b: &&(f64, f64)| a.1.total_cmp(&b.1);
    points
        .chunks(points.len().div_ceil(ENVELOPE_CHUNKS))
        .flat_map(|chunk| {
            let low = *chunk.iter().min_by(by_value).expect("chunks are non-empty");
            let high = *chunk.iter().max_by(by_value).expect("chunks are non-empty");
            if low.0 <= high.0 {
                [low, high]
            } else {
                [high, low]
            }
        })
        .collect()
}

impl Figure for SeriesFigure<'_> {
    fn height(&self) -> u32 {
        TITLE_HEIGHT + panels_height(self.panels.len()) + legend_height(self.legend().len())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let chart = frame(root, self.title, &self.legend())?;
        let points = || self.all_series().flat_map(|s| &s.points);
        let ranges = (
            padded_range(points().map(|p| p.0)),
            padded_range(points().map(|p| p.1)),
        );
        let areas = chart.split_evenly((self.panels.len().max(1), 1));
        for (panel, area) in self.panels.iter().zip(&areas) {
            self.draw_panel(area, panel, &ranges)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latency(mean_us: u64, spread_us: u64, n: u64) -> LatencyHistogram {
        let mut h = LatencyHistogram::new(100_000_000);
        // A deterministic skewed distribution with a long tail.
        for i in 0..n {
            let u = (i * 7919 % n) as f64 / n as f64;
            let tail = (-(1.0 - u).ln() * spread_us as f64) as u64;
            h.record((mean_us - spread_us + tail) * 1_000);
        }
        h
    }

    fn out_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-plot-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn assert_sane(files: &PlotFiles) {
        let png = std::fs::metadata(&files.png).unwrap().len();
        assert!(
            (5_000..2_000_000).contains(&png),
            "{} is {png} bytes",
            files.png.display()
        );
        let svg = std::fs::read_to_string(&files.svg).unwrap();
        assert!(svg.contains("<svg"), "{} is no SVG", files.svg.display());
    }

    #[test]
    fn all_plot_kinds_render_png_and_svg() {
        let dir = out_dir("kinds");
        let (alone, together) = (latency(997, 35, 50_000), latency(1024, 37, 50_000));
        let configurations = [
            Labelled {
                label: "group 1 alone",
                data: &alone,
            },
            Labelled {
                label: "groups 1 and 2",
                data: &together,
            },
        ];
        let deadline = Some(1405.9);
        assert_sane(
            &latency_histograms(
                &dir.join("histogram"),
                "Response time",
                "response time",
                &configurations,
                deadline,
            )
            .unwrap(),
        );
        assert_sane(
            &exceedance(
                &dir.join("exceedance"),
                "Response time tail",
                "response time",
                &configurations,
                deadline,
            )
            .unwrap(),
        );
        assert_sane(
            &cdf(
                &dir.join("cdf"),
                "Response time distribution",
                "response time",
                &configurations,
                deadline,
            )
            .unwrap(),
        );
        let bar = |label: &str, group, mean: f64| RangeBar {
            label: label.into(),
            group,
            min: mean / 2.0,
            mean,
            max: mean * 3.0,
        };
        let groups = [
            RangeGroup {
                label: "30 fps".into(),
                deadline: Some(33.3),
            },
            RangeGroup {
                label: "60 fps".into(),
                deadline: Some(16.7),
            },
        ];
        // Spanning more than two decades: a logarithmic axis.
        let panels = [
            RangePanel {
                caption: "service: 0 missed".into(),
                bars: vec![bar("30fps-1", 0, 4.0), bar("60fps-1", 1, 5.0)],
            },
            RangePanel {
                caption: "baseline: 1500 missed".into(),
                bars: vec![bar("30fps-1", 0, 200.0), bar("60fps-1", 1, 300.0)],
            },
        ];
        assert_sane(
            &ranges(
                &dir.join("ranges"),
                "Service times",
                ("service time", "ms"),
                &groups,
                &panels,
            )
            .unwrap(),
        );

        let mut period = Series::with_capacity("period", "us", 20_000);
        let mut driver_end = Series::with_capacity("driver end", "us", 20_000);
        for i in 0..20_000 {
            let t = i as f64 * 0.001333;
            period.push(
                t,
                1333.0 + ((i * 37) % 11) as f64 - 5.0 + if i % 5000 == 0 { 40.0 } else { 0.0 },
            );
            driver_end.push(t, 400.0 + ((i * 13) % 29) as f64);
        }
        let panels = [
            SeriesPanel {
                label: "reservation",
                series: vec![&period, &driver_end],
            },
            SeriesPanel {
                label: "FIFO",
                series: vec![&driver_end],
            },
        ];
        assert_sane(
            &time_series(&dir.join("series"), "Driver timing", "time (µs)", &panels).unwrap(),
        );
        let line = |name, points: &[(f64, f64)]| CountLine {
            name,
            points: points.to_vec(),
        };
        let panels = [
            CountPanel {
                label: "jackd: plain 512, guarded 128",
                lines: vec![
                    line("plain", &[(128.0, 5200.0), (512.0, 0.0), (256.0, 3.0)]),
                    line("guarded", &[(128.0, 0.0), (64.0, 12.0)]),
                ],
            },
            CountPanel {
                label: "pipewire: none held",
                lines: vec![line("plain", &[(1024.0, 1.0)])],
            },
        ];
        assert_sane(
            &counts_by_size(
                &dir.join("counts"),
                "xruns against the buffer",
                ("buffer (frames)", "xruns"),
                &panels,
            )
            .unwrap(),
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn empty_inputs_still_render() {
        let dir = out_dir("empty");
        let empty = LatencyHistogram::new(1_000);
        let configurations = [Labelled {
            label: "nothing",
            data: &empty,
        }];
        latency_histograms(
            &dir.join("h"),
            "empty",
            "response time",
            &configurations,
            None,
        )
        .unwrap();
        exceedance(&dir.join("e"), "empty", "response time", &[], Some(1.0)).unwrap();
        time_series(&dir.join("s"), "empty", "value", &[]).unwrap();
        cdf(&dir.join("c"), "empty", "service time", &[], None).unwrap();
        ranges(&dir.join("r"), "empty", ("service time", "ms"), &[], &[]).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unwritable_path_names_the_file() {
        let err = time_series(Path::new("/nonexistent-dir/plot"), "t", "v", &[]).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent-dir/plot.png"),
            "{err}"
        );
    }

    #[test]
    fn exceedance_steps_from_one_down_to_the_floor() {
        let mut h = LatencyHistogram::new(1_000_000);
        [1_000, 2_000, 2_000, 4_000]
            .iter()
            .for_each(|&v| h.record(v));
        let steps = exceedance_steps(&h, 0.0, 0.01);
        let ys: Vec<f64> = steps.iter().map(|p| p.1).collect();
        assert_eq!(ys, vec![1.0, 1.0, 0.75, 0.75, 0.25, 0.25, 0.01]);
        let max_us = steps.last().unwrap().0;
        assert!(
            (4.0..4.01).contains(&max_us),
            "ends at the maximum, {max_us}"
        );
    }

    #[test]
    fn ranges_and_tick_labels() {
        assert_eq!(padded_range([10.0, 20.0].into_iter()), 9.5..20.5);
        assert_eq!(padded_range([0.1, 20.0].into_iter()).start, 0.0);
        assert_eq!(padded_range([-1.0, 1.0].into_iter()), -1.1..1.1);
        assert_eq!(padded_range([5.0].into_iter()), 4.0..6.0);
        assert_eq!(padded_range(std::iter::empty()), 0.0..1.0);
        assert_eq!(axis_value(&1000.0000000001), "1000");
        assert_eq!(axis_value(&0.30000000000000004), "0.3");
        assert_eq!(axis_value(&0.0), "0");
        assert_eq!(log_ticks(1.3, 45.0), [2.0, 5.0, 10.0, 20.0]);
    }

    #[test]
    fn envelope_keeps_extremes_and_bounds_size() {
        let points: Vec<(f64, f64)> = (0..100_000)
            .map(|i| (i as f64, if i == 77_777 { 1e6 } else { (i % 10) as f64 }))
            .collect();
        let env = envelope(&points);
        assert!(env.len() <= 2 * ENVELOPE_CHUNKS);
        assert!(env.contains(&(77_777.0, 1e6)));
        assert!(env.windows(2).all(|w| w[0].0 <= w[1].0), "time order kept");
        assert_eq!(envelope(&points[..10]), points[..10].to_vec());
    }

    #[test]
    fn bins_count_every_sample() {
        let h = latency(1000, 50, 10_000);
        let range = latency_range_us(
            &[Labelled {
                label: "a",
                data: &h,
            }],
            Some(1405.9),
        );
        assert!(range.start < us(h.min_ns()) && range.end > 1405.9);
        let grid = BinGrid::covering(&range);
        assert!(grid.bins <= HISTOGRAM_BINS);
        assert!(grid.range().start <= range.start && grid.range().end >= range.end);
        assert_eq!(grid.counts(&h).iter().sum::<u64>(), 10_000);
        assert_eq!(BinGrid::covering(&(950.0..1410.0)).width, 5.0);
    }
}

//! Stacked horizontal bars — a run's misses by cause — one bar per label
//! (a configuration, or a configuration's metric), one segment per name in
//! the same colour in every bar, its length the segment's count.
//!
//! Owns that figure's layout only; like the rest of `plot`, it computes no
//! statistics and never draws a legend over data.

use super::{colour, frame, text, DrawResult, Figure, LegendEntry, LEGEND_ROW};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Room for the bars' labels left of the chart.
const LABEL_AREA: u32 = 330;
/// Height of one bar's row.
const BAR_ROW: u32 = 2 * LEGEND_ROW;

/// One bar: its label and each named segment's length, in the order of
/// the figure's names.
#[derive(Clone, Debug, PartialEq)]
pub struct StackedBar {
    pub label: String,
    pub segments: Vec<f64>,
}

pub(super) struct BarsFigure<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub names: &'a [&'a str],
    pub bars: &'a [StackedBar],
}

impl BarsFigure<'_> {
    /// The names some bar has a segment of: the legend's entries.
    fn drawn(&self) -> Vec<usize> {
        (0..self.names.len())
            .filter(|&i| self.bars.iter().any(|b| b.segments.get(i) > Some(&0.0)))
            .collect()
    }
}

impl Figure for BarsFigure<'_> {
    fn height(&self) -> u32 {
        super::TITLE_HEIGHT
            + 100
            + self.bars.len().max(1) as u32 * BAR_ROW
            + super::legend_height(self.drawn().len())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let legend: Vec<LegendEntry> = self
            .drawn()
            .into_iter()
            .map(|i| LegendEntry {
                label: self.names[i].to_string(),
                colour: colour(i),
                dashed: false,
            })
            .collect();
        let area = frame(root, self.title, &legend)?;
        let longest = self
            .bars
            .iter()
            .map(|b| b.segments.iter().sum::<f64>())
            .fold(1.0, f64::max);
        let rows = self.bars.len().max(1);
        let mut chart = ChartBuilder::on(&area)
            .margin(8)
            .margin_right(30)
            .x_label_area_size(48)
            .y_label_area_size(LABEL_AREA)
            .build_cartesian_2d(0.0..longest * 1.05, -0.5..rows as f64 - 0.5)?;
        let labels: Vec<&str> = self.bars.iter().map(|b| b.label.as_str()).collect();
        chart
            .configure_mesh()
            .x_desc(self.x_label)
            .label_style(text(14))
            .axis_desc_style(text(15))
            .light_line_style(BLACK.mix(0.04))
            .y_labels(rows)
            .y_label_formatter(&|y| {
                let i = y.round();
                match (i - y).abs() < 0.01 && i >= 0.0 {
                    true => labels.get(i as usize).map_or("", |l| l).to_string(),
                    false => String::new(),
                }
            })
            .draw()?;
        for (row, bar) in self.bars.iter().enumerate() {
            let y = row as f64;
            let mut start = 0.0;
            for (i, &length) in bar.segments.iter().enumerate() {
                if length <= 0.0 {
                    continue;
                }
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(start, y - 0.35), (start + length, y + 0.35)],
                    colour(i).filled(),
                )))?;
                start += length;
            }
        }
        Ok(())
    }
}

//! Counts against a size that doubles — xruns against the buffer size —
//! on log axes: x in base 2 with a tick at every size, y in base 10 with
//! zero drawn on the bottom edge and labelled 0 (a logarithmic axis has no
//! zero, and a count of zero is the figure that matters). One panel per
//! label on shared axes, one line per name in the same colour in every
//! panel, a marker at every point.
//!
//! Owns that figure's layout only; like the rest of `plot`, it computes no
//! statistics and never draws a legend over data.

use super::{colour, frame, panel_chart, panels_height, text, DrawResult, Figure, LegendEntry};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Where a count of zero is drawn: half way (in log terms) below 1.
const ZERO_AT: f64 = 0.3;

/// One named line of a panel: (size, count) points.
#[derive(Clone, Debug, PartialEq)]
pub struct CountLine<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// One panel of [`super::counts_by_size`].
#[derive(Clone, Debug, PartialEq)]
pub struct CountPanel<'a> {
    pub label: &'a str,
    pub lines: Vec<CountLine<'a>>,
}

pub(super) struct CountFigure<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub panels: &'a [CountPanel<'a>],
}

impl CountFigure<'_> {
    fn names(&self) -> Vec<&str> {
        crate::distinct_in_order(self.panels.iter().flat_map(|p| &p.lines).map(|l| l.name))
    }

    fn points(&self) -> impl Iterator<Item = &(f64, f64)> {
        self.panels
            .iter()
            .flat_map(|p| &p.lines)
            .flat_map(|l| &l.points)
    }

    /// Every size drawn, ascending: the x axis's ticks.
    fn sizes(&self) -> Vec<f64> {
        let mut sizes: Vec<f64> = self.points().map(|p| p.0).filter(|x| *x > 0.0).collect();
        sizes.sort_by(f64::total_cmp);
        sizes.dedup();
        sizes
    }

    /// Zero, then the powers of ten up to the largest count.
    fn count_ticks(top: f64) -> Vec<f64> {
        let mut ticks = vec![ZERO_AT];
        let mut tick = 1.0;
        while tick <= top {
            ticks.push(tick);
            tick *= 10.0;
        }
        ticks
    }

    fn draw_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        panel: &CountPanel,
        sizes: &[f64],
        top: f64,
    ) -> DrawResult<DB> {
        let (first, last) = (sizes[0], sizes[sizes.len() - 1]);
        let x = (first / 1.5..last * 1.5)
            .log_scale()
            .with_key_points(sizes.to_vec());
        let y = (ZERO_AT / 1.5..top)
            .log_scale()
            .with_key_points(Self::count_ticks(top));
        let mut chart = panel_chart(area, panel.label).build_cartesian_2d(x, y)?;
        chart
            .configure_mesh()
            .x_desc(self.x_label)
            .y_desc(self.y_label)
            .label_style(text(14))
            .axis_desc_style(text(15))
            .light_line_style(BLACK.mix(0.04))
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| match *v < 1.0 {
                true => "0".to_string(),
                false => format!("{v:.0}"),
            })
            .draw()?;
        let names = self.names();
        for line in &panel.lines {
            let index = names.iter().position(|&n| n == line.name).unwrap_or(0);
            let style = colour(index);
            let mut points: Vec<(f64, f64)> = line
                .points
                .iter()
                .map(|&(x, count)| (x, count.max(ZERO_AT)))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart.draw_series(LineSeries::new(points.clone(), style.stroke_width(2)))?;
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 5, style.filled())),
            )?;
        }
        Ok(())
    }
}

impl Figure for CountFigure<'_> {
    fn height(&self) -> u32 {
        super::TITLE_HEIGHT
            + panels_height(self.panels.len())
            + super::legend_height(self.names().len())
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let legend: Vec<LegendEntry> = self
            .names()
            .into_iter()
            .enumerate()
            .map(|(i, name)| LegendEntry {
                label: name.to_string(),
                colour: colour(i),
                dashed: false,
            })
            .collect();
        let chart = frame(root, self.title, &legend)?;
        let sizes = self.sizes();
        if sizes.is_empty() {
            return Ok(());
        }
        let most = self.points().map(|p| p.1).fold(1.0, f64::max);
        let top = most * 2.0;
        let areas = chart.split_evenly((self.panels.len().max(1), 1));
        for (panel, area) in self.panels.iter().zip(&areas) {
            self.draw_panel(area, panel, &sizes, top)?;
        }
        Ok(())
    }
}

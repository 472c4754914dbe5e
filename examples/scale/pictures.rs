//! The sweeps' curves drawn with plotters: one picture per sweep, a panel per figure, a line per
//! store (and key count), each written as SVG and PNG.

use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

/// A named line: its points in the order they were measured.
type Line = (String, Vec<(f64, f64)>);

/// Points of every line of every panel.
#[derive(Default)]
pub struct Curves {
    panels: Vec<(String, Vec<Line>)>,
}

impl Curves {
    /// Adds the point (x, y) to the line `series` of the panel `panel`.
    pub fn add(&mut self, panel: &str, series: &str, x: f64, y: f64) {
        let at = match self.panels.iter().position(|(p, _)| p == panel) {
            Some(at) => at,
            None => {
                self.panels.push((panel.to_owned(), Vec::new()));
                self.panels.len() - 1
            }
        };
        let lines = &mut self.panels[at].1;
        match lines.iter_mut().find(|(s, _)| s == series) {
            Some((_, points)) => points.push((x, y)),
            None => lines.push((series.to_owned(), vec![(x, y)])),
        }
    }

    fn lines(&self, panel: &str) -> &[Line] {
        self.panels
            .iter()
            .find(|(p, _)| p == panel)
            .map_or(&[], |(_, lines)| lines.as_slice())
    }
}

struct Panel {
    key: &'static str,
    title: &'static str,
    x: &'static str,
    y: &'static str,
    /// A logarithmic y axis, for a figure that spans orders of magnitude.
    log_y: bool,
}

const fn panel(
    key: &'static str,
    title: &'static str,
    x: &'static str,
    y: &'static str,
    log_y: bool,
) -> Panel {
    Panel {
        key,
        title,
        x,
        y,
        log_y,
    }
}

const HELD: &str = "locks held by one client";
const WAITING: &str = "tasks waiting in one client";
const PROCESSES: &str = "processes, one task each";

/// Each picture: its file name and its panels.
const PICTURES: &[(&str, &[Panel])] = &[
    (
        "held",
        &[
            panel("held-memory", "Memory per held lock", HELD, "bytes", false),
            panel("held-renewals", "Server time per renewal", HELD, "µs", true),
            panel("held-tick", "Watchdog tick", HELD, "ms", true),
        ],
    ),
    (
        "waiters",
        &[
            panel(
                "waiters-wake-p50",
                "Release to next holder, p50",
                WAITING,
                "ms",
                true,
            ),
            panel(
                "waiters-wake-p99",
                "Release to next holder, p99",
                WAITING,
                "ms",
                true,
            ),
            panel(
                "waiters-memory",
                "Client memory per waiter",
                WAITING,
                "bytes",
                false,
            ),
            panel(
                "waiters-connections",
                "Server connections",
                WAITING,
                "connections",
                false,
            ),
        ],
    ),
    (
        "processes",
        &[
            panel(
                "processes-throughput",
                "Locks per second",
                PROCESSES,
                "locks/s",
                false,
            ),
            panel(
                "processes-wait-p99",
                "Acquire wait, p99",
                PROCESSES,
                "ms",
                true,
            ),
            panel(
                "processes-share-min",
                "Smallest process share",
                PROCESSES,
                "of the mean",
                false,
            ),
        ],
    ),
];

/// Panel size in pixels.
const PANEL: (u32, u32) = (520, 360);

/// Draws every picture that has points; returns the files written.
pub fn draw(curves: &Curves, out: &Path, font: Option<&Path>) -> Result<Vec<PathBuf>, String> {
    register_font(font)?;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut written = Vec::new();
    for (name, panels) in PICTURES {
        let panels: Vec<&Panel> = panels
            .iter()
            .filter(|p| !curves.lines(p.key).is_empty())
            .collect();
        if panels.is_empty() {
            continue;
        }
        // Two panels a row, so that a picture reads at a README's width.
        let (cols, rows) = (panels.len().min(2) as u32, panels.len().div_ceil(2) as u32);
        let size = (PANEL.0 * cols, PANEL.1 * rows);
        let svg = out.join(format!("{name}.svg"));
        picture(
            SVGBackend::new(&svg, size).into_drawing_area(),
            &panels,
            curves,
        )?;
        let png = out.join(format!("{name}.png"));
        picture(
            BitMapBackend::new(&png, size).into_drawing_area(),
            &panels,
            curves,
        )?;
        written.extend([svg, png]);
    }
    Ok(written)
}

/// Text needs a TrueType font: `--font`, else the first of the usual Debian ones.
fn register_font(font: Option<&Path>) -> Result<(), String> {
    let candidates = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    ];
    let path = match font {
        Some(path) => path.to_path_buf(),
        None => candidates
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or("no TrueType font found; pass --font PATH")?,
    };
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    // plotters keeps fonts for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{}: not a TrueType font", path.display()))
}

fn picture<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    panels: &[&Panel],
    curves: &Curves,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (cols, rows) = (panels.len().min(2), panels.len().div_ceil(2));
    for (area, panel) in root.split_evenly((rows, cols)).iter().zip(panels) {
        let lines = curves.lines(panel.key);
        let points = || lines.iter().flat_map(|(_, p)| p.iter());
        let (x_min, x_max) = bounds(points().map(|p| p.0));
        let (y_min, y_max) = bounds(points().map(|p| p.1));
        // The x axes are counts over orders of magnitude (or doublings): always logarithmic.
        let x = (x_min * 0.8)..(x_max * 1.25);
        if panel.log_y {
            let y = (y_min.max(1e-3) * 0.5)..(y_max.max(1e-3) * 2.0);
            plot(area, panel, lines, x.log_scale(), y.log_scale())?;
        } else {
            let y = 0.0..(y_max * 1.2).max(1e-9);
            plot(area, panel, lines, x.log_scale(), y)?;
        }
    }
    root.present().map_err(|e| e.to_string())
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

fn plot<DB, X, Y>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    lines: &[Line],
    x: X,
    y: Y,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x, y)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(panel.x)
        .y_desc(panel.y)
        .label_style(("sans-serif", 12))
        .x_label_formatter(&|v| round_label(*v))
        .y_label_formatter(&|v| {
            if panel.log_y {
                round_label(*v)
            } else {
                compact(*v)
            }
        })
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, points)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 11))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())
}

/// `10`, `2k`, `50k`, `0.5` for round values (leading digit 1, 2 or 5, then zeros), nothing for
/// the others: a log axis puts a mark at every digit, too many to label.
fn round_label(v: f64) -> String {
    if v <= 0.0 {
        return if v == 0.0 { "0".into() } else { String::new() };
    }
    let magnitude = 10f64.powf(v.log10().floor());
    let lead = v / magnitude;
    let round = [1.0, 2.0, 5.0].iter().any(|d| (lead - d).abs() < 1e-6 * d);
    if round {
        compact(v)
    } else {
        String::new()
    }
}

/// `2k`, `1.5M`, `0.25`.
fn compact(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{}k", v / 1e3)
    } else {
        format!("{}", (v * 1e6).round() / 1e6)
    }
}

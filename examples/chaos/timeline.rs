//! timeline.svg: one lane per client with its holds as bars (labelled with the token's last
//! digits, the whole hold in a tooltip), fault bands behind them (data-loss faults orange),
//! and violations as red marks.
//!
//! Written by hand: rectangles, lines and text are all it needs, and a plotting crate would
//! add a dependency tree for the same few dozen lines.

use std::fmt::Write;

use crate::checker::{secs, Report, Violation};

const LANE: f64 = 28.0;
const TOP: f64 = 60.0;
const LEFT: f64 = 50.0;

pub fn render(title: &str, clients: usize, report: &Report) -> String {
    let end = report
        .holds
        .iter()
        .map(|h| h.end)
        .chain(report.faults.iter().map(|f| f.end))
        .max()
        .unwrap_or(1)
        .max(1);
    let seconds = secs(end);
    // Wide enough to tell holds apart, within what a browser renders comfortably.
    let px_per_s = (30_000.0 / seconds).min(60.0).max(1_200.0 / seconds);
    let x = |ns: u64| LEFT + secs(ns) * px_per_s;
    let width = x(end) + 20.0;
    // Lane 0 is the servers' faults; client c is lane c + 1.
    let lane_y = |lane: usize| TOP + lane as f64 * LANE;
    let height = lane_y(clients + 1) + 30.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="monospace" font-size="10">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="4" y="14" font-size="13">{} ({} violations, {} explained by data loss)</text>"#,
        esc(title),
        report.violations.len(),
        report.explained.len()
    );
    let _ = writeln!(
        svg,
        r#"<text x="4" y="30">bars: holds (token's last 4 digits), colour by lock; bands: faults (orange: data loss); red: violations</text>"#
    );
    // A tick every 10 s (every second on short runs).
    let step = if seconds > 60.0 { 10 } else { 1 };
    for s in (0..=seconds as u64).step_by(step) {
        let xs = x(s * 1_000_000_000);
        let _ = writeln!(
            svg,
            r##"<line x1="{xs:.1}" y1="{:.1}" x2="{xs:.1}" y2="{:.1}" stroke="#eee"/><text x="{xs:.1}" y="{:.1}" fill="#888">{s}s</text>"##,
            TOP - 12.0,
            height - 20.0,
            height - 8.0
        );
    }
    for lane in 0..=clients {
        let label = if lane == 0 {
            "redis".to_owned()
        } else {
            format!("c{}", lane - 1)
        };
        let _ = writeln!(
            svg,
            r#"<text x="4" y="{:.1}">{label}</text>"#,
            lane_y(lane) + 16.0
        );
    }
    for f in &report.faults {
        let colour = if f.data_loss {
            "#f5a623"
        } else {
            fault_colour(&f.kind)
        };
        let (y, h) = match f
            .target
            .strip_prefix('c')
            .and_then(|c| c.parse::<usize>().ok())
        {
            Some(c) => (lane_y(c + 1), LANE),
            None => (lane_y(0), LANE * (clients + 1) as f64),
        };
        let w = (x(f.end) - x(f.start)).max(2.0);
        let _ = writeln!(
            svg,
            r##"<rect x="{:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{colour}" opacity="0.35"><title>fault #{} {} on {} {:.3}-{:.3}s{}</title></rect><text x="{:.1}" y="{:.1}" fill="#555">{}</text>"##,
            x(f.start),
            f.id,
            esc(&f.kind),
            esc(&f.target),
            secs(f.start),
            secs(f.end),
            if f.data_loss { " (data loss)" } else { "" },
            x(f.start),
            y + 10.0,
            esc(&f.kind)
        );
    }
    for h in &report.holds {
        let Ok(lane) = usize::try_from(h.p + 1) else {
            continue;
        };
        let y = lane_y(lane) + 12.0;
        let w = (x(h.end) - x(h.grant)).max(1.0);
        let token = h
            .token
            .map_or(String::new(), |t| format!("{:04}", t % 10_000));
        let _ = write!(
            svg,
            r#"<rect x="{:.1}" y="{y:.1}" width="{w:.1}" height="12" fill="{}"><title>c{} op {} {} {} token {} {:.3}-{:.3}s ({})</title></rect>"#,
            x(h.grant),
            lock_colour(&h.lock),
            h.p,
            h.op,
            esc(&h.mode),
            esc(&h.lock),
            h.token.map_or("-".into(), |t| t.to_string()),
            secs(h.grant),
            secs(h.end),
            esc(&h.ended_by)
        );
        if w > 26.0 && !token.is_empty() {
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" font-size="8">{token}</text>"#,
                x(h.grant) + 1.0,
                y + 9.0
            );
        }
        svg.push('\n');
    }
    marks(&mut svg, &report.explained, "#e67e00", &x, &lane_y);
    marks(&mut svg, &report.violations, "#d00", &x, &lane_y);
    svg.push_str("</svg>\n");
    svg
}

fn marks(
    svg: &mut String,
    violations: &[Violation],
    colour: &str,
    x: &impl Fn(u64) -> f64,
    lane_y: &impl Fn(usize) -> f64,
) {
    for v in violations {
        for &(t, p) in &v.at {
            let Ok(lane) = usize::try_from(p + 1) else {
                continue;
            };
            let _ = writeln!(
                svg,
                r#"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="{colour}" stroke-width="2"><title>{3}: {4}</title></line>"#,
                x(t),
                lane_y(lane),
                lane_y(lane) + LANE,
                v.property,
                esc(&v.text)
            );
        }
    }
}

fn fault_colour(kind: &str) -> &'static str {
    match kind {
        "pause" | "kill" => "#9b9b9b",
        "freeze" | "delay" | "throttle" | "cut" => "#7fb3d5",
        "failover" | "kill_master" | "pause_master" | "debug_sleep" | "promote" => "#c39bd3",
        "pause_server" => "#d7bde2",
        "migrate" => "#f7dc6f",
        "restart_loading" | "kill_inflight" | "restart" => "#e59866",
        _ => "#a9dfbf",
    }
}

/// A stable colour per lock name.
fn lock_colour(lock: &str) -> String {
    let hue = lock
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
        % 360;
    format!("hsl({hue},55%,55%)")
}

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

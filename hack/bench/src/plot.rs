//! Small SVG line charts for the benchmark reports: failover timelines (cumulative
//! counts against seconds) and latency CDFs (log-scale x), with dashed vertical
//! marker lines for thresholds. Uses `std` only, and is deterministic: the same
//! chart always renders to the same bytes.

use std::fmt::Write as _;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 400.0;
const BOTTOM: f64 = 48.0;
/// Rough average glyph width of 11 px sans-serif, for layout estimates.
const CHAR_W: f64 = 6.2;
const ROW_H: f64 = 13.0;
const LABEL_ROWS: usize = 3;
const PALETTE: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];
const MAX_POINTS: usize = 1000;
const DOWNSAMPLE_ABOVE: usize = 2000;

/// One line on a chart: `points` are (x, y) in data units, drawn in the given order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A dashed vertical line at `x` (data units) with `label` above the plot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Marker {
    pub x: f64,
    pub label: String,
}

/// A line chart. With `log_x`, points and markers with x <= 0 are dropped. The y
/// axis is linear and always includes 0.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub series: Vec<Series>,
    pub markers: Vec<Marker>,
}

/// Renders the chart as a standalone 720×400 SVG document.
pub fn render(chart: &Chart) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">"##
    );
    let _ = writeln!(out, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    text(&mut out, WIDTH / 2.0, 22.0, r#" text-anchor="middle" font-size="15" font-weight="bold""#, &chart.title);
    match frame(chart) {
        Some(f) => {
            draw_axes(&mut out, &f, chart);
            draw_series(&mut out, &f, chart);
            draw_markers(&mut out, &f, chart);
            draw_legend(&mut out, &f, chart);
        }
        None => text(&mut out, WIDTH / 2.0, HEIGHT / 2.0, r##" text-anchor="middle" font-size="14" fill="#888888""##, "no data"),
    }
    out.push_str("</svg>\n");
    out
}

/// Empirical CDF of `samples` as a step line: sorted ascending, each distinct value v
/// gives (v, fraction below v) then (v, fraction <= v); ends at y = 1. NaN and
/// infinities are dropped. Above 2,000 points it is thinned evenly to about 1,000,
/// always keeping the first and last.
pub fn cdf(samples: &[f64]) -> Vec<(f64, f64)> {
    let sorted = sorted_finite(samples);
    downsample(steps(&sorted, sorted.len() as f64))
}

/// Cumulative count of events at `times` (seconds) as a step line that starts at
/// (0, 0) (or at the earliest time, if negative) and rises by one per event. NaN and
/// infinities are dropped; thinned like [`cdf`].
pub fn cumulative(times: &[f64]) -> Vec<(f64, f64)> {
    let sorted = sorted_finite(times);
    let start = sorted.first().map_or(0.0, |&t| t.min(0.0));
    let mut points = vec![(start, 0.0)];
    points.extend(steps(&sorted, 1.0).into_iter().skip_while(|&p| p == (start, 0.0)));
    downsample(points)
}

fn sorted_finite(values: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Step points for sorted values: y is the count so far divided by `per`, and equal
/// values make a single step.
fn steps(sorted: &[f64], per: f64) -> Vec<(f64, f64)> {
    let mut points = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let j = i + sorted[i..].iter().take_while(|&&v| v == sorted[i]).count();
        points.push((sorted[i], i as f64 / per));
        points.push((sorted[i], j as f64 / per));
        i = j;
    }
    points
}

fn downsample(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= DOWNSAMPLE_ABOVE {
        return points;
    }
    let last = points.len() - 1;
    (0..MAX_POINTS).map(|k| points[k * last / (MAX_POINTS - 1)]).collect()
}

struct Tick {
    v: f64,
    label: Option<String>,
    major: bool,
}

struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    ticks: Vec<Tick>,
}

impl Axis {
    fn frac(&self, v: f64) -> f64 {
        let t = |x: f64| if self.log { x.log10() } else { x };
        (t(v) - t(self.lo)) / (t(self.hi) - t(self.lo))
    }
}

fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let mult = [1.0, 2.0, 5.0].into_iter().find(|&m| norm <= m * 1.000_001).unwrap_or(10.0);
    mult * mag
}

fn linear_axis(lo: f64, hi: f64) -> Axis {
    let hi = if hi > lo { hi } else { lo + lo.abs().max(1.0) };
    let step = nice_step((hi - lo) / 5.0);
    let (lo, hi) = ((lo / step).floor() * step, (hi / step).ceil() * step);
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    let n = ((hi - lo) / step).round().clamp(0.0, 50.0) as usize;
    let ticks = (0..=n).map(|i| lo + i as f64 * step).map(|v| Tick { v, label: Some(fmt_num(v, decimals)), major: true }).collect();
    Axis { lo, hi, log: false, ticks }
}

/// Log axis over whole decades; 2 and 5 minor ticks are labelled when it spans at most two.
fn log_axis(lo: f64, hi: f64) -> Axis {
    let lo_e = lo.log10().floor().clamp(-300.0, 300.0) as i32;
    let hi_e = (hi.log10().ceil().clamp(-300.0, 300.0) as i32).max(lo_e + 1);
    let label_minor = hi_e - lo_e <= 2;
    let mut ticks = Vec::new();
    for e in lo_e..=hi_e {
        let decimals = (-e).max(0) as usize;
        for (m, major) in [(1.0, true), (2.0, false), (5.0, false)] {
            if major || e < hi_e {
                let v = m * 10f64.powi(e);
                let label = (major || label_minor).then(|| fmt_num(v, decimals));
                ticks.push(Tick { v, label, major });
            }
        }
    }
    Axis { lo: 10f64.powi(lo_e), hi: 10f64.powi(hi_e), log: true, ticks }
}

/// Formats with at most `decimals` decimals, no trailing zeros, and thousands commas.
fn fmt_num(v: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals.min(12), v);
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { &s };
    let (neg, digits) = s.strip_prefix('-').map_or((false, s), |d| (true, d));
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let grouped = crate::report::grouped(int);
    let sign = if neg && (int != "0" || !frac.is_empty()) { "-" } else { "" };
    let dot = if frac.is_empty() { "" } else { "." };
    format!("{sign}{grouped}{dot}{frac}")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn text(out: &mut String, x: f64, y: f64, attrs: &str, content: &str) {
    let _ = writeln!(out, r#"<text x="{x:.1}" y="{y:.1}"{attrs}>{}</text>"#, esc(content));
}

fn line(out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), attrs: &str) {
    let _ = writeln!(out, r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}"{attrs}/>"#);
}

fn text_w(s: &str) -> f64 {
    s.chars().count() as f64 * CHAR_W
}

/// The plot area in pixels, its axes, and the label row of each marker.
struct Frame {
    l: f64,
    r: f64,
    t: f64,
    b: f64,
    x: Axis,
    y: Axis,
    rows: Vec<Option<usize>>,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        self.l + self.x.frac(x) * (self.r - self.l)
    }
    fn py(&self, y: f64) -> f64 {
        self.b - self.y.frac(y) * (self.b - self.t)
    }
}

fn usable_x(x: f64, log_x: bool) -> bool {
    x.is_finite() && (!log_x || x > 0.0)
}

fn usable(p: &(f64, f64), log_x: bool) -> bool {
    usable_x(p.0, log_x) && p.1.is_finite()
}

fn extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// Lays out the chart; `None` when there is no point to draw.
fn frame(chart: &Chart) -> Option<Frame> {
    let log = chart.log_x;
    let pts = || chart.series.iter().flat_map(|s| s.points.iter()).filter(move |p| usable(p, log));
    let (ylo, yhi) = extent(pts().map(|p| p.1))?;
    let marker_xs = chart.markers.iter().map(|m| m.x).filter(|&x| usable_x(x, log));
    let (xlo, xhi) = extent(pts().map(|p| p.0).chain(marker_xs))?;
    let x = if log { log_axis(xlo, xhi) } else { linear_axis(xlo, xhi) };
    let y = linear_axis(ylo.min(0.0), yhi.max(0.0));
    let longest = chart.series.iter().map(|s| text_w(&s.name)).fold(0.0, f64::max);
    let r = WIDTH - (longest + 60.0).clamp(110.0, 300.0);
    let widest = y.ticks.iter().filter_map(|t| t.label.as_deref()).map(text_w).fold(0.0, f64::max);
    let mut f = Frame { l: (widest + 34.0).max(56.0), r, t: 0.0, b: HEIGHT - BOTTOM, x, y, rows: Vec::new() };
    f.rows = marker_rows(&f, chart);
    let used = f.rows.iter().flatten().max().map_or(0, |m| m + 1);
    f.t = 34.0 + used as f64 * ROW_H;
    Some(f)
}

/// A marker label's left and right edges and anchor: it starts just right of its line,
/// or ends just left of it where it would leave the canvas.
fn label_box(f: &Frame, m: &Marker) -> (f64, f64, &'static str) {
    let (x, w) = (f.px(m.x), text_w(&m.label));
    if x + 3.0 + w <= WIDTH - 2.0 {
        (x + 3.0, x + 3.0 + w, "start")
    } else {
        (x - 3.0 - w, x - 3.0, "end")
    }
}

/// Greedy stagger, right to left: each label takes the lowest row where it ends before
/// the labels already there start, so no marker's line crosses a lower row's label.
fn marker_rows(f: &Frame, chart: &Chart) -> Vec<Option<usize>> {
    let mut order: Vec<usize> = (0..chart.markers.len()).filter(|&i| usable_x(chart.markers[i].x, chart.log_x)).collect();
    order.sort_by(|&a, &b| chart.markers[b].x.total_cmp(&chart.markers[a].x));
    let mut rows = vec![None; chart.markers.len()];
    let mut starts = [f64::INFINITY; LABEL_ROWS];
    for i in order {
        let (left, right, _) = label_box(f, &chart.markers[i]);
        let fits = (0..LABEL_ROWS).find(|&r| right + 6.0 <= starts[r]);
        let row = fits.unwrap_or_else(|| (0..LABEL_ROWS).max_by(|&a, &b| starts[a].total_cmp(&starts[b])).unwrap_or(0));
        starts[row] = starts[row].min(left);
        rows[i] = Some(row);
    }
    rows
}

fn draw_axes(out: &mut String, f: &Frame, chart: &Chart) {
    for t in &f.x.ticks {
        let (x, grid) = (f.px(t.v), if t.major { "#dddddd" } else { "#f0f0f0" });
        line(out, (x, f.t), (x, f.b), &format!(r#" stroke="{grid}""#));
        line(out, (x, f.b), (x, f.b + if t.major { 5.0 } else { 3.0 }), r##" stroke="#333333""##);
        if let Some(label) = &t.label {
            text(out, x, f.b + 17.0, r#" text-anchor="middle""#, label);
        }
    }
    for t in &f.y.ticks {
        let y = f.py(t.v);
        line(out, (f.l, y), (f.r, y), r##" stroke="#dddddd""##);
        line(out, (f.l - 5.0, y), (f.l, y), r##" stroke="#333333""##);
        if let Some(label) = &t.label {
            text(out, f.l - 8.0, y + 4.0, r#" text-anchor="end""#, label);
        }
    }
    line(out, (f.l, f.t), (f.l, f.b), r##" stroke="#333333""##);
    line(out, (f.l, f.b), (f.r, f.b), r##" stroke="#333333""##);
    text(out, (f.l + f.r) / 2.0, HEIGHT - 10.0, r#" text-anchor="middle""#, &chart.x_label);
    let cy = (f.t + f.b) / 2.0;
    let _ = writeln!(out, r#"<text transform="translate(15,{cy:.1}) rotate(-90)" text-anchor="middle">{}</text>"#, esc(&chart.y_label));
}

/// Colour of series `i`, dashed once the palette has been used up.
fn style(i: usize) -> (&'static str, &'static str) {
    let dash = if i >= PALETTE.len() { r#" stroke-dasharray="6 3""# } else { "" };
    (PALETTE[i % PALETTE.len()], dash)
}

fn draw_series(out: &mut String, f: &Frame, chart: &Chart) {
    for (i, s) in chart.series.iter().enumerate() {
        let mut coords: Vec<String> = Vec::new();
        for p in s.points.iter().filter(|p| usable(p, chart.log_x)) {
            let c = format!("{:.1},{:.1}", f.px(p.0), f.py(p.1));
            if coords.last() != Some(&c) {
                coords.push(c);
            }
        }
        let (colour, dash) = style(i);
        if let [only] = coords.as_slice() {
            let (x, y) = only.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(out, r#"<circle cx="{x}" cy="{y}" r="2.5" fill="{colour}"/>"#);
        } else if !coords.is_empty() {
            let _ = writeln!(
                out,
                r#"<polyline points="{}" fill="none" stroke="{colour}"{dash} stroke-width="1.8" stroke-linejoin="round"/>"#,
                coords.join(" ")
            );
        }
    }
}

fn draw_markers(out: &mut String, f: &Frame, chart: &Chart) {
    for (m, row) in chart.markers.iter().zip(&f.rows) {
        let Some(row) = row else { continue };
        let (x, y) = (f.px(m.x), f.t - 5.0 - *row as f64 * ROW_H);
        line(out, (x, y - 9.0), (x, f.b), r##" stroke="#444444" stroke-dasharray="5 4""##);
        let (left, right, anchor) = label_box(f, m);
        let tx = if anchor == "start" { left } else { right };
        text(out, tx, y, &format!(r##" text-anchor="{anchor}" fill="#333333""##), &m.label);
    }
}

fn draw_legend(out: &mut String, f: &Frame, chart: &Chart) {
    let x = f.r + 16.0;
    for (i, s) in chart.series.iter().enumerate() {
        let y = f.t + 10.0 + i as f64 * 18.0;
        let (colour, dash) = style(i);
        line(out, (x, y - 4.0), (x + 18.0, y - 4.0), &format!(r#" stroke="{colour}"{dash} stroke-width="3""#));
        text(out, x + 24.0, y, "", &s.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that tags nest and close, and that no raw `<`/`&` leaks into text.
    fn assert_well_formed(svg: &str) {
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"), "{svg}");
        let mut stack: Vec<&str> = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            let text = &rest[..open];
            assert!(!text.contains('>'), "stray > in {text:?}");
            for (i, _) in text.match_indices('&') {
                let entity = &text[i..text[i..].find(';').map_or(text.len(), |e| i + e + 1)];
                assert!(["&amp;", "&lt;", "&gt;", "&quot;"].contains(&entity), "bad entity {entity:?}");
            }
            let close = open + rest[open..].find('>').expect("unclosed tag");
            let tag = &rest[open + 1..close];
            assert!(!tag.contains('<'), "< inside tag {tag:?}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop(), Some(name), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap_or(""));
            }
            rest = &rest[close + 1..];
        }
        assert!(stack.is_empty(), "unclosed {stack:?}");
    }

    fn sample_chart() -> Chart {
        Chart {
            title: "Failover <kill> & \"recover\"".into(),
            x_label: "seconds since kill".into(),
            y_label: "Deployments".into(),
            log_x: false,
            series: vec![
                Series { name: "moved".into(), points: cumulative(&[1.5, 2.0, 2.0, 3.5]) },
                Series { name: "Available again".into(), points: cumulative(&[4.0, 5.5, 6.0]) },
            ],
            markers: vec![
                Marker { x: 0.8, label: "loss detected".into() },
                Marker { x: 8.0, label: "grace 8 s".into() },
                Marker { x: 13.0, label: "target 13 s".into() },
            ],
        }
    }

    #[test]
    fn cdf_sorts_and_ends_at_one() {
        let c = cdf(&[3.0, 1.0, f64::NAN, 2.0, f64::INFINITY]);
        assert_eq!(c, vec![(1.0, 0.0), (1.0, 1.0 / 3.0), (2.0, 1.0 / 3.0), (2.0, 2.0 / 3.0), (3.0, 2.0 / 3.0), (3.0, 1.0)]);
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(cdf(&[1.0, 1.0, 2.0]), vec![(1.0, 0.0), (1.0, 2.0 / 3.0), (2.0, 2.0 / 3.0), (2.0, 1.0)]);
        assert!(cdf(&[]).is_empty() && cdf(&[f64::NAN]).is_empty());
        let many: Vec<f64> = (0..49).map(f64::from).collect();
        assert_eq!(cdf(&many).last(), Some(&(48.0, 1.0)), "exactly 1, not 0.999…");
    }

    #[test]
    fn cumulative_counts_from_zero() {
        let c = cumulative(&[2.0, 0.5, f64::NAN, 2.0]);
        assert_eq!(c, vec![(0.0, 0.0), (0.5, 0.0), (0.5, 1.0), (2.0, 1.0), (2.0, 3.0)]);
        assert_eq!(cumulative(&[]), vec![(0.0, 0.0)]);
        assert_eq!(cumulative(&[0.0]), vec![(0.0, 0.0), (0.0, 1.0)]);
        assert_eq!(cumulative(&[-1.0]), vec![(-1.0, 0.0), (-1.0, 1.0)]);
    }

    #[test]
    fn downsampling_keeps_ends_and_bounds_count() {
        let samples: Vec<f64> = (0..10_000).map(|i| ((i * 7919) % 10_000) as f64 + 0.5).collect();
        let c = cdf(&samples);
        assert!(c.len() <= MAX_POINTS, "{}", c.len());
        assert_eq!((c[0], c[c.len() - 1]), ((0.5, 0.0), (9_999.5, 1.0)));
        assert!(c.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let t = cumulative(&samples);
        assert!(t.len() <= MAX_POINTS);
        assert_eq!((t[0], t[t.len() - 1]), ((0.0, 0.0), (9_999.5, 10_000.0)));
        assert_eq!(cdf(&samples[..900]).len(), 1800, "small inputs are kept whole");
    }

    #[test]
    fn render_is_well_formed_and_labelled() {
        let svg = render(&sample_chart());
        assert_well_formed(&svg);
        assert!(svg.contains(r#"font-family="sans-serif""#));
        assert!(svg.contains("Failover &lt;kill&gt; &amp; &quot;recover&quot;"));
        for label in ["moved", "Available again", "loss detected", "grace 8 s", "target 13 s", "seconds since kill", "Deployments"] {
            assert!(svg.contains(&format!(">{label}</text>")), "missing {label}");
        }
        assert_eq!(svg.matches("<polyline").count(), 2, "one per series");
        assert_eq!(svg.matches("stroke-dasharray").count(), 3);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
        assert_eq!(svg, render(&sample_chart()), "deterministic");
    }

    #[test]
    fn log_axis_ticks_decades() {
        let chart = Chart {
            log_x: true,
            series: vec![Series { name: "p".into(), points: vec![(0.5, 0.0), (500.0, 1.0), (0.0, 0.5), (-3.0, 0.7)] }],
            markers: vec![Marker { x: 30.0, label: "floor".into() }, Marker { x: 0.0, label: "dropped".into() }],
            ..Chart::default()
        };
        let svg = render(&chart);
        assert_well_formed(&svg);
        for label in ["0.1", "1", "10", "100", "1,000"] {
            assert!(svg.contains(&format!(">{label}</text>")), "missing tick {label}");
        }
        assert!(!svg.contains(">20</text>") && !svg.contains("dropped") && !svg.contains("NaN"));
        let narrow: Vec<_> = log_axis(3.0, 50.0).ticks.into_iter().filter_map(|t| t.label).collect();
        assert_eq!(narrow, ["1", "2", "5", "10", "20", "50", "100"]);
    }

    #[test]
    fn linear_ticks_are_nice() {
        let labels = |a: Axis| a.ticks.into_iter().filter_map(|t| t.label).collect::<Vec<_>>();
        assert_eq!(labels(linear_axis(0.0, 1.0)), ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        assert_eq!(labels(linear_axis(0.0, 13.0)), ["0", "5", "10", "15"]);
        assert_eq!(labels(linear_axis(0.0, 4200.0)), ["0", "1,000", "2,000", "3,000", "4,000", "5,000"]);
        assert_eq!(labels(linear_axis(0.0, 0.0)), ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        assert_eq!(fmt_num(0.30000000000000004, 1), "0.3");
        assert_eq!(fmt_num(-0.00001, 2), "0");
        assert_eq!(fmt_num(-1234567.5, 1), "-1,234,567.5");
    }

    #[test]
    fn empty_chart_says_no_data() {
        for chart in [
            Chart::default(),
            Chart { series: vec![Series { name: "x".into(), points: vec![(f64::NAN, 1.0)] }], ..Chart::default() },
            Chart { log_x: true, series: vec![Series { name: "x".into(), points: vec![(0.0, 1.0)] }], ..Chart::default() },
        ] {
            let svg = render(&chart);
            assert_well_formed(&svg);
            assert!(svg.contains(">no data</text>"));
        }
    }

    #[test]
    fn escapes_text_and_staggers_close_markers() {
        let mut chart = sample_chart();
        chart.title = r#"a<b & "c""#.into();
        chart.markers = vec![Marker { x: 8.0, label: "grace 8 s".into() }, Marker { x: 8.2, label: "detect".into() }];
        let svg = render(&chart);
        assert_well_formed(&svg);
        assert!(svg.contains(">a&lt;b &amp; &quot;c&quot;</text>"));
        let f = frame(&chart).expect("has data");
        assert_eq!(f.rows, [Some(1), Some(0)], "the left label goes up");
    }
}

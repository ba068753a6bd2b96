//! A report's spending per bucket as bars.

use super::*;

/// A report's stacked bars (`/reports`): one bar per bucket, one layer
/// per group (the first seven groups by total, the rest summed as
/// "others"), in `unit`. Drawn by hand as SVG (bars need no plotters):
/// the y axis at a round step, every label that fits on the x axis, and
/// a legend wrapping onto rows. Negative amounts (refunds beyond use)
/// are drawn as zero; the values table shows them.
pub fn report_chart(
    title: &str,
    buckets: &[String],
    layers: &[(String, Vec<f64>)],
    unit: &str,
    frame: Frame,
) -> String {
    let class = "chart-report";
    if buckets.is_empty() || layers.is_empty() {
        return message_svg(class, title, "nothing spent in this range", frame);
    }
    let (w, h) = (frame.w as f64, frame.h as f64);
    let tp = frame.text_px;
    let line = frame.line_h() as f64;
    // Legend rows.
    let mut legend = String::new();
    let (mut lx, mut ly) = (8.0, line * 0.8);
    for (i, (name, _)) in layers.iter().enumerate() {
        let label: String = name.chars().take(28).collect();
        let lw = frame.text_w(&label) as f64 + tp + 14.0;
        if lx + lw > w - 8.0 && lx > 8.0 {
            lx = 8.0;
            ly += line;
        }
        legend.push_str(&format!(
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"{tp:.1}\" height=\"{tp:.1}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{ly:.1}\" font-family=\"sans-serif\" font-size=\"{tp}\" fill=\"#1D2330\">{}</text>\n",
            ly - tp * 0.85,
            layer_colour(i),
            lx + tp + 4.0,
            escape_text(&label)
        ));
        lx += lw;
    }
    let totals: Vec<f64> = (0..buckets.len())
        .map(|b| {
            layers
                .iter()
                .map(|(_, v)| v.get(b).copied().unwrap_or(0.0).max(0.0))
                .sum()
        })
        .collect();
    let top = totals.iter().copied().fold(0.0, f64::max);
    let (step, ticks) = round_step(top);
    let y_max = step * ticks as f64;
    let tick_label = |v: f64| crate_group(v);
    let label_w = (0..=ticks)
        .map(|i| frame.text_w(&tick_label(step * i as f64)))
        .max()
        .unwrap_or(0) as f64;
    let (x0, x1) = (label_w + 12.0, w - 8.0);
    // Below the legend, a row of its own for the unit, then the bars.
    let unit_y = ly + line;
    let (y0, y1) = (unit_y + line * 0.7, h - line * 1.6);
    let yv = |v: f64| y1 - (y1 - y0) * if y_max > 0.0 { v / y_max } else { 0.0 };
    let mut body = String::new();
    for i in 0..=ticks {
        let v = step * i as f64;
        let y = yv(v);
        body.push_str(&format!(
            "<line x1=\"{x0:.1}\" x2=\"{x1:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#E4E7EC\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-family=\"sans-serif\" font-size=\"{tp}\" fill=\"#667085\">{}</text>\n",
            x0 - 6.0,
            y + tp * 0.35,
            tick_label(v)
        ));
    }
    let slot = (x1 - x0) / buckets.len() as f64;
    let bar = (slot * 0.7).max(1.0);
    for (b, label) in buckets.iter().enumerate() {
        let x = x0 + slot * b as f64 + (slot - bar) / 2.0;
        let mut base = 0.0;
        for (i, (name, values)) in layers.iter().enumerate() {
            let v = values.get(b).copied().unwrap_or(0.0).max(0.0);
            if v <= 0.0 {
                continue;
            }
            let (ya, yb) = (yv(base + v), yv(base));
            body.push_str(&format!(
                "<rect x=\"{x:.1}\" y=\"{ya:.1}\" width=\"{bar:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{} · {}: {} {}</title></rect>\n",
                (yb - ya).max(0.5),
                layer_colour(i),
                escape_text(label),
                escape_text(name),
                crate_group(v),
                escape_text(unit)
            ));
            base += v;
        }
    }
    // x labels: as many as fit, evenly.
    let widest = buckets.iter().map(|l| frame.text_w(l)).max().unwrap_or(0) as f64 + 8.0;
    let every = ((widest / slot).ceil() as usize).max(1);
    for (b, label) in buckets.iter().enumerate().step_by(every) {
        // Centred under its bar, but never past the chart's edges (the
        // last day's date was cut at the right).
        let half = frame.text_w(label) as f64 / 2.0;
        let x = (x0 + slot * (b as f64 + 0.5)).clamp(half + 2.0, (w - half - 2.0).max(half + 2.0));
        body.push_str(&format!(
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"{tp}\" fill=\"#667085\">{}</text>\n",
            y1 + line,
            escape_text(label)
        ));
    }
    body.push_str(&format!(
        "<text x=\"{x0:.1}\" y=\"{unit_y:.1}\" font-family=\"sans-serif\" font-size=\"{tp}\" fill=\"#667085\">{}</text>\n",
        escape_text(unit)
    ));
    format!(
        "{}<rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#FFFFFF\"/>\n{legend}{body}</svg>\n",
        svg_open(class, title, frame, None)
    )
}

/// A round step for an axis up to `top`: 1, 2 or 5 × 10^n, and how many
/// steps reach it (at least one).
pub(super) fn round_step(top: f64) -> (f64, usize) {
    if top <= 0.0 || !top.is_finite() {
        return (1.0, 1);
    }
    let rough = top / 4.0;
    let mag = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * mag);
    (step, ((top / step).ceil() as usize).max(1))
}

/// An axis number with thousands separated: `12,500`, `0.25`.
pub(super) fn crate_group(v: f64) -> String {
    let text = if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}").trim_end_matches('0').to_string()
    };
    quota::readable::group_thousands(&text)
}

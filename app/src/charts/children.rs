//! What a parent's children use, stacked over time.

use super::*;

/// Fill colours of children in a stacked chart, in order; the last one
/// also stands for "other children" beyond the first seven.
const LAYERS: [RGBColor; 8] = [
    RGBColor(0x2e, 0x90, 0xfa),
    RGBColor(0x12, 0xb7, 0x6a),
    RGBColor(0x7a, 0x5a, 0xf8),
    RGBColor(0xf7, 0x90, 0x09),
    RGBColor(0xee, 0x46, 0xbc),
    RGBColor(0x15, 0xb7, 0x9e),
    RGBColor(0x9e, 0x77, 0x42),
    RGBColor(0x98, 0xa2, 0xb3),
];

/// The colour a stacked chart gives its `i`-th layer (as [`children_layers`] orders them).
pub fn layer_colour(i: usize) -> String {
    let c = LAYERS[i.min(LAYERS.len() - 1)];
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// The layers a stacked chart draws: the first seven children as they
/// are, the rest summed as "other children".
pub fn children_layers(stack: &Stack) -> Vec<(String, Vec<Quantity>)> {
    let keep = LAYERS.len() - 1;
    let mut layers: Vec<(String, Vec<Quantity>)> =
        stack.layers.iter().take(keep).cloned().collect();
    if stack.layers.len() > keep {
        let mut rest = vec![Quantity::ZERO; stack.times.len()];
        for (_, values) in &stack.layers[keep..] {
            for (r, v) in rest.iter_mut().zip(values) {
                *r = r.saturating_add(*v);
            }
        }
        layers.push((
            format!("{} other children", stack.layers.len() - keep),
            rest,
        ));
    }
    layers
}

/// The children's use of `key`, stacked, with this quota's hard as a
/// step line (from `own`, its own samples): what each child holds of it.
pub fn children_chart(
    stack: &Stack,
    own: &[Sample],
    key: &str,
    cfg: &KeyConfig,
    frame: Frame,
) -> String {
    let title = format!("{}: used by children", crate::key_name(key, cfg));
    let layers = children_layers(stack);
    if layers.is_empty() || stack.times.is_empty() {
        return message_svg("chart-children", &title, "no child uses it", frame);
    }
    let (per, unit) = unit_of(key, cfg);
    let times = &stack.times;
    // Running totals: layer i is drawn between tops[i] and tops[i + 1].
    let mut tops: Vec<Vec<f64>> = vec![vec![0.0; times.len()]];
    for (_, values) in &layers {
        let below = tops.last().cloned().unwrap_or_default();
        tops.push(
            below
                .iter()
                .zip(values)
                .map(|(b, v)| b + to_f64(v.nanos(), per))
                .collect(),
        );
    }
    let own = sorted(own);
    let own_times: Vec<i64> = own.iter().map(|s| s.at_ms).collect();
    let hard: Vec<Option<i128>> = own
        .iter()
        .map(|s| s.hard.get(key).map(Quantity::nanos))
        .collect();
    let first = times[0].min(own_times.first().copied().unwrap_or(times[0]));
    let last = times[times.len() - 1].max(own_times.last().copied().unwrap_or(0));
    let (t0, t1) = time_span(first, last);
    let top = tops
        .last()
        .into_iter()
        .flatten()
        .copied()
        .chain(hard.iter().flatten().map(|h| to_f64(*h, per)))
        .fold(0.0, f64::max);
    let mut legend: Vec<(&str, Swatch)> = layers
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            (
                name.as_str(),
                Swatch::Stack(LAYERS[i.min(LAYERS.len() - 1)]),
            )
        })
        .collect();
    if hard.iter().any(Option::is_some) {
        legend.push(("hard", Swatch::Line(HARD)));
    }
    render(
        "chart-children",
        &title,
        None,
        frame,
        &legend,
        |root, top_px| {
            let mut chart = time_chart(root, frame, top_px, t0..t1, 0.0..headroom(top), unit)?;
            for (i, pair) in tops.windows(2).enumerate() {
                let colour = LAYERS[i.min(LAYERS.len() - 1)];
                // Each value holds until the next point: steps, as sampled.
                let upper = steps(times, &pair[1]);
                let mut poly = upper.clone();
                poly.extend(steps(times, &pair[0]).into_iter().rev());
                chart.draw_series(std::iter::once(Polygon::new(
                    poly,
                    colour.mix(0.55).filled(),
                )))?;
                chart.draw_series(LineSeries::new(upper, colour.stroke_width(1)))?;
            }
            for run in hard_steps(&own_times, &hard, per) {
                draw_line(&mut chart, &run, HARD)?;
            }
            Ok(Some(mapping(&chart, t0..t1)))
        },
    )
}

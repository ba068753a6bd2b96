//! The usage chart: used against hard over time, one key.

use super::*;

/// Used over time with hard as a step line; breaks the lines across gaps.
pub fn usage_chart(samples: &[Sample], key: &str, cfg: &KeyConfig, frame: Frame) -> String {
    let title = format!("{}: in use and hard", crate::key_name(key, cfg));
    let pts = sorted(samples);
    if pts.is_empty() {
        return message_svg("chart-usage", &title, "no data yet", frame);
    }
    let (per, unit) = unit_of(key, cfg);
    let times: Vec<i64> = pts.iter().map(|s| s.at_ms).collect();
    let used: Vec<(i64, f64)> = pts
        .iter()
        .map(|s| (s.at_ms, to_f64(resources::get(&s.used, key).nanos(), per)))
        .collect();
    let hard: Vec<Option<i128>> = pts
        .iter()
        .map(|s| s.hard.get(key).map(Quantity::nanos))
        .collect();
    let (t0, t1) = time_span(times[0], times[times.len() - 1]);
    let top = used
        .iter()
        .map(|p| p.1)
        .chain(hard.iter().flatten().map(|h| to_f64(*h, per)))
        .fold(0.0, f64::max);
    let mut legend = vec![("in use", Swatch::Area(USED))];
    if hard.iter().any(Option::is_some) {
        legend.push(("hard", Swatch::Line(HARD)));
    }
    render(
        "chart-usage",
        &title,
        None,
        frame,
        &legend,
        |root, top_px| {
            let mut chart = time_chart(root, frame, top_px, t0..t1, 0.0..headroom(top), unit)?;
            let cols = chart.plotting_area().dim_in_pixel().0 as usize;
            for seg in segments(&times) {
                draw_line_with_area(
                    &mut chart,
                    &decimate(&used[seg.clone()], t0, t1, cols),
                    USED,
                    0.0,
                )?;
                for run in hard_steps(&times[seg.clone()], &hard[seg], per) {
                    draw_line(&mut chart, &run, HARD)?;
                }
            }
            Ok(Some(mapping(&chart, t0..t1)))
        },
    )
}

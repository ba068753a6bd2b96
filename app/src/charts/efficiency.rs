//! Allocated against used: GPU cards held and cards busy over time (real
//! usage, docs/real-usage.md), each point the average over its bucket.

use super::*;

/// Cards allocated (grey area) and busy (green) over time; the gap between
/// is what was held and not used.
pub fn efficiency_chart(points: &[(i64, f64, f64)], frame: Frame) -> String {
    let title = "GPUs: allocated against busy";
    if points.is_empty() {
        return message_svg(
            "chart-efficiency",
            title,
            "no real usage read in this range",
            frame,
        );
    }
    let times: Vec<i64> = points.iter().map(|p| p.0).collect();
    let allocated: Vec<(i64, f64)> = points.iter().map(|p| (p.0, p.1)).collect();
    let busy: Vec<(i64, f64)> = points.iter().map(|p| (p.0, p.2)).collect();
    let (t0, t1) = time_span(times[0], times[times.len() - 1]);
    let top = points.iter().map(|p| p.1.max(p.2)).fold(0.0, f64::max);
    let legend = [
        ("allocated", Swatch::Area(MUTED)),
        ("busy", Swatch::Area(OK)),
    ];
    render(
        "chart-efficiency",
        title,
        None,
        frame,
        &legend,
        |root, top_px| {
            let mut chart = time_chart(root, frame, top_px, t0..t1, 0.0..headroom(top), "cards")?;
            let cols = chart.plotting_area().dim_in_pixel().0 as usize;
            for seg in segments(&times) {
                draw_line_with_area(
                    &mut chart,
                    &decimate(&allocated[seg.clone()], t0, t1, cols),
                    MUTED,
                    0.0,
                )?;
                draw_line_with_area(&mut chart, &decimate(&busy[seg], t0, t1, cols), OK, 0.0)?;
            }
            Ok(Some(mapping(&chart, t0..t1)))
        },
    )
}

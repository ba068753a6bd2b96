//! A budget's burn-down: what is left over time and its forecast.

use super::*;

/// Remaining cash budget over time, with a dashed forecast from the latest
/// point to the budget's run-out date (`outlook`, its one forecast: the
/// date and words every page shows).
pub fn burn_down_chart(
    samples: &[Sample],
    outlook: &quota::forecast::Outlook,
    now_ms: i64,
    cfg: &KeyConfig,
    frame: Frame,
) -> String {
    let cash_key = outlook.key.as_str();
    let title = format!("{}: remaining budget", crate::key_name(cash_key, cfg));
    let pts: Vec<&Sample> = sorted(samples)
        .into_iter()
        .filter(|s| s.at_ms <= now_ms)
        .collect();
    if pts.is_empty() {
        return message_svg("chart-burn-down", &title, "no data yet", frame);
    }
    let f = outlook.as_forecast();
    let (per, unit) = unit_of(cash_key, cfg);
    let times: Vec<i64> = pts.iter().map(|s| s.at_ms).collect();
    let rem: Vec<(i64, f64)> = pts
        .iter()
        .map(|s| {
            let left = resources::get(&s.hard, cash_key)
                .nanos()
                .saturating_sub(resources::get(&s.used, cash_key).nanos());
            (s.at_ms, to_f64(left, per))
        })
        .collect();
    let (t_first, t_last) = (times[0], times[times.len() - 1]);
    let last = rem[rem.len() - 1];
    // Show at most as much future as there is history (a day at least), so
    // a far-off date does not squash the history into a sliver.
    let horizon = (t_last - t_first).max(MS_PER_DAY);
    // Where the forecast ends and how it is labelled. The line starts at
    // the latest point and falls at the forecast's rate, so it meets zero
    // exactly at the date named, or leaves the chart at its right edge.
    let (forecast_line, mark, t_end) = match f.exhausted_at_ms {
        _ if f.remaining.nanos() <= 0 => (
            None,
            Mark::Date(now_ms, "exhausted".to_string()),
            now_ms + horizon / 20,
        ),
        Some(at) if at.saturating_sub(now_ms) <= horizon => {
            let end = at.max(last.0);
            (
                Some(vec![last, (end, 0.0)]),
                Mark::Date(end, format!("runs out {}", date(at))),
                end + (end - t_first) / 20,
            )
        }
        Some(at) => {
            let end = now_ms + horizon;
            let v = last.1 * (1.0 - (end - last.0) as f64 / (at - last.0).max(1) as f64);
            (
                Some(vec![last, (end, v)]),
                Mark::Beyond((end, v), format!("runs out {} →", date(at))),
                end,
            )
        }
        None => {
            let end = now_ms + horizon / 10;
            (
                Some(vec![last, (end, last.1)]),
                // Below the level line: above it sits the "now" label.
                Mark::End((end, last.1), "not burning".into(), VPos::Top),
                end,
            )
        }
    };
    let (t0, t1) = time_span(t_first, t_end.max(t_last));
    let lo = rem.iter().map(|p| p.1).fold(0.0, f64::min);
    let hi = rem.iter().map(|p| p.1).fold(0.0, f64::max);
    let y = if lo < 0.0 {
        lo * 1.1..headroom(hi)
    } else {
        0.0..headroom(hi)
    };
    let mut legend = vec![("remaining", Swatch::Area(USED))];
    if forecast_line.is_some() {
        legend.push(("forecast (what runs now)", Swatch::Dashed(WARN)));
    }
    let summary = describe_outlook(outlook, cfg);
    render(
        "chart-burn-down",
        &title,
        Some(&summary),
        frame,
        &legend,
        |root, top_px| {
            let mut chart = time_chart(root, frame, top_px, t0..t1, y.clone(), unit)?;
            let cols = chart.plotting_area().dim_in_pixel().0 as usize;
            if y.start < 0.0 {
                draw_line(&mut chart, &[(t0, 0.0), (t1, 0.0)], FG)?;
            }
            chart.draw_series(DashedLineSeries::new(
                vec![(now_ms, y.start), (now_ms, y.end)],
                3,
                3,
                MUTED.stroke_width(1),
            ))?;
            chart.draw_series(std::iter::once(
                EmptyElement::at((now_ms, y.end))
                    + Text::new(
                        "now",
                        (-4, 2),
                        frame.font(MUTED).pos(Pos::new(HPos::Right, VPos::Top)),
                    ),
            ))?;
            for seg in segments(&times) {
                draw_line_with_area(&mut chart, &decimate(&rem[seg], t0, t1, cols), USED, 0.0)?;
            }
            if let Some(line) = forecast_line {
                chart.draw_series(DashedLineSeries::new(line, 6, 4, WARN.stroke_width(2)))?;
            }
            let below_now = frame.line_h() + 2;
            match mark {
                Mark::Date(at, label) => {
                    chart.draw_series(DashedLineSeries::new(
                        vec![(at, y.start), (at, y.end)],
                        3,
                        3,
                        WARN.stroke_width(1),
                    ))?;
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((at, 0.0)) + Circle::new((0, 0), 4, WARN.filled()),
                    ))?;
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((at, y.end))
                            + Text::new(
                                label,
                                (-4, below_now),
                                frame.font(FG).pos(Pos::new(HPos::Right, VPos::Top)),
                            ),
                    ))?;
                }
                Mark::Beyond(at, label) => {
                    // The dot where the line leaves the chart; the words at
                    // the top right, under "now": beside a low dot they sat
                    // on the axis's dates.
                    chart.draw_series(std::iter::once(
                        EmptyElement::at(at) + Circle::new((0, 0), 4, WARN.filled()),
                    ))?;
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((at.0, y.end))
                            + Text::new(
                                label,
                                (-4, below_now),
                                frame.font(FG).pos(Pos::new(HPos::Right, VPos::Top)),
                            ),
                    ))?;
                }
                Mark::End(at, label, v) => {
                    // Words under a dot in the lowest third would sit on the
                    // axis's dates: above it then.
                    let low = at.1 - y.start < (y.end - y.start) / 3.0;
                    let v = if low && matches!(v, VPos::Top) {
                        VPos::Bottom
                    } else {
                        v
                    };
                    let dy = if matches!(v, VPos::Top) { 6 } else { -6 };
                    chart.draw_series(std::iter::once(
                        EmptyElement::at(at)
                            + Circle::new((0, 0), 4, WARN.filled())
                            + Text::new(
                                label,
                                (-6, dy),
                                frame.font(FG).pos(Pos::new(HPos::Right, v)),
                            ),
                    ))?;
                }
            }
            Ok(Some(mapping(&chart, t0..t1)))
        },
    )
}

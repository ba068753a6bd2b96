//! Usage by model: each model's share of a key, against its hard.

use super::*;

/// Horizontal bars of the models under a generic key (`A100`, `V100`, … under
/// `requests.nvidia.com/gpu`): used against hard where a model has one, plus
/// what the generic key counts that no model accounts for.
pub fn model_breakdown_chart(
    used: &ResourceList,
    hard: &ResourceList,
    generic_key: &str,
    cfg: &KeyConfig,
    frame: Frame,
) -> String {
    let title = model_breakdown_title(used, hard, generic_key, cfg);
    let (per, unit) = unit_of(generic_key, cfg);
    let generic_used = resources::get(used, generic_key).nanos();
    let prefix = format!("{generic_key}.");
    let model_of = |k: &'_ str| -> Option<String> {
        k.strip_prefix(&prefix)
            .filter(|m| keys::is_model_name(m))
            .map(str::to_string)
    };
    let mut models: BTreeMap<String, (i128, Option<i128>)> = BTreeMap::new();
    for (k, q) in used {
        if let Some(m) = model_of(k) {
            models.entry(m).or_default().0 = q.nanos();
        }
    }
    for (k, q) in hard {
        if let Some(m) = model_of(k) {
            models.entry(m).or_default().1 = Some(q.nanos());
        }
    }
    let modelled: i128 = models.values().map(|v| v.0).sum();
    // A model with no hard and no use is not drawn (a row of "0 / 0").
    let mut rows: Vec<(String, i128, Option<i128>)> = models
        .into_iter()
        .filter(|(_, (u, h))| *u != 0 || h.is_some_and(|h| h != 0))
        .map(|(m, (u, h))| (m, u, h))
        .collect();
    if generic_used - modelled > 0 {
        rows.push(("other".into(), (generic_used - modelled).max(0), None));
    }
    if rows.is_empty() {
        return message_svg("chart-models", &title, "no data yet", frame);
    }
    let n = rows.len();
    let top = rows
        .iter()
        .map(|r| r.1.max(r.2.unwrap_or(0)))
        .max()
        .unwrap_or(0);
    // Room on the right for the value labels.
    let x_max = if top > 0 {
        to_f64(top, per) * 1.45
    } else {
        1.0
    };
    let names: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
    let label_px = names.iter().map(|s| frame.text_w(s)).max().unwrap_or(0) + 14;
    // Rows are 100 y-units tall; row i is centred at 100·(n − i) − 50 so
    // the first model is at the top. (Integer y: plotters' f64 axis does not
    // take a label formatter once its key points are given.)
    let centre = |i: usize| 100 * (n - i) as i64 - 50;
    // The legend names exactly the colours drawn.
    let colours: Vec<RGBColor> = rows.iter().map(|r| bar_colour(r.1, r.2)).collect();
    let mut legend = vec![("in use", Swatch::Bar(OK))];
    if colours.contains(&WARN) {
        legend.push(("≥ 80 % of hard", Swatch::Bar(WARN)));
    }
    if colours.contains(&BAD) {
        legend.push(("over hard", Swatch::Bar(BAD)));
    }
    if rows.iter().any(|r| r.2.is_some()) {
        legend.push(("hard", Swatch::Track));
    }
    render(
        "chart-models",
        &title,
        None,
        frame,
        &legend,
        |root, top_px| {
            let centres: Vec<i64> = (0..n).map(centre).collect();
            let mut chart = ChartBuilder::on(root)
                .margin_top(top_px)
                .margin_right(16)
                .margin_left(8)
                .margin_bottom(6)
                .x_label_area_size(frame.line_h() as u32 * 2 + 6)
                .y_label_area_size(label_px.clamp(40, frame.w as i32 / 3) as u32)
                .build_cartesian_2d(0.0..x_max, (0..100 * n as i64).with_key_points(centres))?;
            let name_at = |v: &i64| {
                let i = n as i64 - 1 - v.div_euclid(100);
                usize::try_from(i)
                    .ok()
                    .and_then(|i| names.get(i))
                    .cloned()
                    .unwrap_or_default()
            };
            chart
                .configure_mesh()
                .disable_y_mesh()
                .bold_line_style(GRID)
                .light_line_style(TRANSPARENT)
                .axis_style(MUTED)
                .label_style(frame.font(MUTED))
                .axis_desc_style(frame.font(FG))
                .x_labels((frame.w as usize / (frame.text_px as usize * 6)).clamp(3, 8))
                .x_label_formatter(&|v| fmt_tick_value(*v))
                .y_label_formatter(&name_at)
                .x_desc(unit)
                .draw()?;
            for (i, (_, u, h)) in rows.iter().enumerate() {
                let y = centre(i);
                let uf = to_f64(*u, per);
                if let Some(h) = h {
                    chart.draw_series(std::iter::once(Rectangle::new(
                        [(0.0, y - 30), (to_f64(*h, per), y + 30)],
                        TRACK.filled(),
                    )))?;
                }
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y - 30), (uf, y + 30)],
                    colours[i].filled(),
                )))?;
                // The hard tick goes on top, so an overrun bar still shows it.
                if let Some(h) = h {
                    let hf = to_f64(*h, per);
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(hf, y - 40), (hf, y + 40)],
                        FG.stroke_width(2),
                    )))?;
                }
                let label = match h {
                    Some(h) => format!("{} / {}", decimal(*u, per, 2), decimal(*h, per, 2)),
                    None => decimal(*u, per, 2),
                };
                let end = uf.max(h.map_or(0.0, |h| to_f64(h, per)));
                chart.draw_series(std::iter::once(
                    EmptyElement::at((end, y))
                        + Text::new(
                            label,
                            (6, 0),
                            frame.font(FG).pos(Pos::new(HPos::Left, VPos::Center)),
                        ),
                ))?;
            }
            Ok(None)
        },
    )
}

/// "GPUs by model: 1,400 of 2,000 cards in use" (thousands grouped, as
/// every figure on the pages).
pub fn model_breakdown_title(
    used: &ResourceList,
    hard: &ResourceList,
    generic_key: &str,
    cfg: &KeyConfig,
) -> String {
    let (per, unit) = unit_of(generic_key, cfg);
    let generic_used = resources::get(used, generic_key).nanos();
    match hard.get(generic_key).map(Quantity::nanos) {
        Some(h) => format!(
            "{} by model: {} of {} {unit} in use",
            crate::key_name(generic_key, cfg),
            grouped(generic_used, per, 2),
            grouped(h, per, 2)
        ),
        None => format!(
            "{} by model: {} {unit} in use",
            crate::key_name(generic_key, cfg),
            grouped(generic_used, per, 2)
        ),
    }
}

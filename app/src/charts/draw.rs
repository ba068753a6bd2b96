//! What every chart draws with: the colours, the SVG frame and header,
//! the time axis and its lines, on plotters.

use super::*;

pub(super) type Area<'b> = DrawingArea<SVGBackend<'b>, Shift>;

pub(super) type TimeChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<WithKeyPoints<RangedCoordi64>, RangedCoordf64>>;

pub(super) type Drawn<T = ()> = Result<T, Box<dyn Error>>;

// The console palette (style/bizrq.css).
pub(super) const FG: RGBColor = RGBColor(0x1d, 0x23, 0x30);

pub(super) const MUTED: RGBColor = RGBColor(0x66, 0x70, 0x85);

pub(super) const GRID: RGBColor = RGBColor(0xe4, 0xe7, 0xec);

pub(super) const TRACK: RGBColor = RGBColor(0xd0, 0xd5, 0xdd);

pub(super) const USED: RGBColor = RGBColor(0x2e, 0x90, 0xfa);

pub(super) const HARD: RGBColor = RGBColor(0xd9, 0x2d, 0x20);

pub(super) const OK: RGBColor = RGBColor(0x12, 0xb7, 0x6a);

pub(super) const WARN: RGBColor = RGBColor(0xf7, 0x90, 0x09);

pub(super) const BAD: RGBColor = RGBColor(0xd9, 0x2d, 0x20);

/// How the burn-down marks the forecast: a date line with its label at the
/// top, or a label at the end of the forecast line (above or below it).
pub(super) enum Mark {
    Date(i64, String),
    End((i64, f64), String, VPos),
    /// The forecast leaves the chart at this point before its date: a dot
    /// there, the words at the top right.
    Beyond((i64, f64), String),
}

/// A legend entry's picture: drawn the way its series is.
pub(super) enum Swatch {
    Line(RGBColor),
    Dashed(RGBColor),
    /// A line over its light fill (usage, remaining budget).
    Area(RGBColor),
    /// A stacked layer: stronger fill, thin top line.
    Stack(RGBColor),
    Bar(RGBColor),
    /// The hard of a model: a grey track with a dark tick.
    Track,
}

/// Where a time chart's x axis is, for the pointer's readout.
pub(super) struct Mapping {
    x: Range<i32>,
    t: Range<i64>,
}

pub(super) fn mapping(chart: &TimeChart<'_, '_>, t: Range<i64>) -> Mapping {
    Mapping {
        x: chart.plotting_area().get_pixel_range().0,
        t,
    }
}

pub(super) fn font(size: f64, colour: RGBColor) -> TextStyle<'static> {
    let style = ("sans-serif", size).into_font();
    TextStyle {
        font: style,
        color: colour.to_backend_color(),
        pos: Pos::new(HPos::Left, VPos::Top),
    }
}

/// Draws the frame (background, legend) and then `body`, and wraps the
/// result as inline SVG. A drawing error becomes a message, not a panic.
pub(super) fn render(
    class: &str,
    title: &str,
    summary: Option<&str>,
    frame: Frame,
    legend: &[(&str, Swatch)],
    body: impl FnOnce(&Area<'_>, u32) -> Drawn<Option<Mapping>>,
) -> String {
    let mut buf = String::new();
    let map = Cell::new(None);
    let drawn: Drawn = (|| {
        let root = SVGBackend::with_string(&mut buf, (frame.w, frame.h)).into_drawing_area();
        root.fill(&WHITE)?;
        let top = header(&root, frame, legend)?;
        map.set(body(&root, top)?);
        root.present()?;
        Ok(())
    })();
    match drawn {
        Ok(()) => {
            let body = buf.split_once('\n').map_or("", |(_, rest)| rest);
            let label = match summary {
                Some(s) => format!("{title}. {s}"),
                None => title.to_string(),
            };
            format!("{}{body}", svg_open(class, &label, frame, map.take()))
        }
        Err(e) => message_svg(
            class,
            title,
            &format!("chart could not be drawn: {e}"),
            frame,
        ),
    }
}

pub(super) fn svg_open(class: &str, title: &str, frame: Frame, map: Option<Mapping>) -> String {
    let t = escape_text(title);
    let (w, h) = (frame.w, frame.h);
    let data = map.map_or(String::new(), |m| {
        format!(
            " data-x0=\"{}\" data-x1=\"{}\" data-t0=\"{}\" data-t1=\"{}\"",
            m.x.start, m.x.end, m.t.start, m.t.end
        )
    });
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart {class}\" viewBox=\"0 0 {w} {h}\" width=\"100%\" role=\"img\" aria-label=\"{t}\"{data}>\n<title>{t}</title>\n"
    )
}

/// A chart-sized frame holding a message ("no data yet").
pub(super) fn message_svg(class: &str, title: &str, message: &str, frame: Frame) -> String {
    let (w, h) = (frame.w, frame.h);
    format!(
        "{}<rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#FFFFFF\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"{}\" fill=\"#667085\">{}</text>\n</svg>\n",
        svg_open(class, &format!("{title}: {message}"), frame, None),
        w / 2,
        h / 2,
        frame.text_px,
        escape_text(message)
    )
}

/// The legend, left to right, wrapping onto more rows where the width
/// ends; returns the height it takes.
pub(super) fn header(root: &Area<'_>, frame: Frame, legend: &[(&str, Swatch)]) -> Drawn<u32> {
    let line = frame.line_h();
    let (mut x, mut y) = (12, 8 + line / 2);
    let entry_w = |label: &str| 16 + 6 + frame.text_w(label) + 16;
    for (label, swatch) in legend {
        if x > 12 && x + entry_w(label) > frame.w as i32 - 8 {
            x = 12;
            y += line;
        }
        match swatch {
            Swatch::Line(c) => root.draw(&PathElement::new(
                vec![(x, y), (x + 16, y)],
                c.stroke_width(2),
            ))?,
            Swatch::Dashed(c) => {
                root.draw(&PathElement::new(
                    vec![(x, y), (x + 6, y)],
                    c.stroke_width(2),
                ))?;
                root.draw(&PathElement::new(
                    vec![(x + 10, y), (x + 16, y)],
                    c.stroke_width(2),
                ))?;
            }
            Swatch::Area(c) => {
                root.draw(&Rectangle::new(
                    [(x, y - 5), (x + 16, y + 5)],
                    c.mix(0.15).filled(),
                ))?;
                root.draw(&PathElement::new(
                    vec![(x, y - 5), (x + 16, y - 5)],
                    c.stroke_width(2),
                ))?;
            }
            Swatch::Stack(c) => {
                root.draw(&Rectangle::new(
                    [(x, y - 5), (x + 16, y + 5)],
                    c.mix(0.55).filled(),
                ))?;
                root.draw(&PathElement::new(
                    vec![(x, y - 5), (x + 16, y - 5)],
                    c.stroke_width(1),
                ))?;
            }
            Swatch::Bar(c) => {
                root.draw(&Rectangle::new([(x, y - 5), (x + 16, y + 5)], c.filled()))?
            }
            Swatch::Track => {
                root.draw(&Rectangle::new(
                    [(x, y - 5), (x + 16, y + 5)],
                    TRACK.filled(),
                ))?;
                root.draw(&PathElement::new(
                    vec![(x + 15, y - 7), (x + 15, y + 7)],
                    FG.stroke_width(2),
                ))?;
            }
        }
        root.draw(&Text::new(
            label.to_string(),
            (x + 22, y),
            frame.font(FG).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
        x += entry_w(label);
    }
    Ok((y + line / 2 + 6) as u32)
}

/// A chart with time (UTC) on x, ticked at calendar boundaries, and the
/// key's unit on y.
pub(super) fn time_chart<'a, 'b>(
    root: &'a Area<'b>,
    frame: Frame,
    top: u32,
    t: Range<i64>,
    y: Range<f64>,
    unit: &str,
) -> Drawn<TimeChart<'a, 'b>> {
    let y_labels = (frame.text_px * 5.0) as u32;
    let plot_w = root.dim_in_pixel().0.saturating_sub(y_labels + 24) as usize;
    // A tick label ("Nov 23", "14:00") is about six characters wide.
    let tick_w = (frame.text_px * 6.0) as usize;
    let (ticks, step) = time_ticks(t.start, t.end, (plot_w / tick_w).clamp(2, 12));
    let mut chart = ChartBuilder::on(root)
        .margin_top(top)
        .margin_right(24)
        .margin_left(8)
        .margin_bottom(6)
        .x_label_area_size(frame.line_h() as u32 * 2 + 6)
        .y_label_area_size(y_labels)
        .build_cartesian_2d(t.clone().with_key_points(ticks), y)?;
    let x_desc = match step {
        Step::Ms(s) if s < MS_PER_DAY => format!("time (UTC), from {}", date(t.start)),
        _ => "date (UTC)".to_string(),
    };
    chart
        .configure_mesh()
        .bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        .axis_style(MUTED)
        .label_style(frame.font(MUTED))
        .axis_desc_style(frame.font(FG))
        .y_labels(
            ((frame.h as usize).saturating_sub(top as usize) / (frame.line_h() as usize * 2))
                .clamp(3, 6),
        )
        .x_label_formatter(&|t| tick_label(*t, step))
        .y_label_formatter(&|v| fmt_tick_value(*v))
        .x_desc(x_desc)
        .y_desc(unit)
        .draw()?;
    Ok(chart)
}

pub(super) fn draw_line(
    chart: &mut TimeChart<'_, '_>,
    pts: &[(i64, f64)],
    colour: RGBColor,
) -> Drawn {
    match pts {
        [] => {}
        [p] => {
            chart.draw_series(std::iter::once(Circle::new(*p, 3, colour.filled())))?;
        }
        _ => {
            chart.draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))?;
        }
    }
    Ok(())
}

pub(super) fn draw_line_with_area(
    chart: &mut TimeChart<'_, '_>,
    pts: &[(i64, f64)],
    colour: RGBColor,
    base: f64,
) -> Drawn {
    if let (Some(first), Some(last)) = (pts.first(), pts.last()) {
        if pts.len() > 1 {
            let mut poly = pts.to_vec();
            poly.push((last.0, base));
            poly.push((first.0, base));
            chart.draw_series(std::iter::once(Polygon::new(
                poly,
                colour.mix(0.15).filled(),
            )))?;
        }
    }
    draw_line(chart, pts, colour)
}

/// The hard line as steps: each value holds until the next sample changes
/// it. Splits where the key had no hard (unlimited then).
pub(super) fn hard_steps(times: &[i64], hard: &[Option<i128>], per: i128) -> Vec<Vec<(i64, f64)>> {
    let mut runs = Vec::new();
    let mut run: Vec<(i64, f64)> = Vec::new();
    let mut prev: Option<i128> = None;
    for (&t, &h) in times.iter().zip(hard) {
        match (prev, h) {
            (_, None) => {
                if let Some(p) = prev {
                    run.push((t, to_f64(p, per)));
                }
                runs.push(std::mem::take(&mut run));
            }
            (None, Some(h)) => run.push((t, to_f64(h, per))),
            (Some(p), Some(h)) if p != h => {
                run.push((t, to_f64(p, per)));
                run.push((t, to_f64(h, per)));
            }
            _ => {}
        }
        prev = h;
    }
    if let (Some(p), Some(&t)) = (prev, times.last()) {
        if run.last().map(|l| l.0) != Some(t) {
            run.push((t, to_f64(p, per)));
        }
    }
    runs.push(run);
    runs.retain(|r| !r.is_empty());
    runs
}

pub(super) fn bar_colour(used: i128, hard: Option<i128>) -> RGBColor {
    match hard {
        Some(h) if used > h => BAD,
        Some(h) if used * 5 >= h * 4 && h > 0 => WARN,
        _ => OK,
    }
}

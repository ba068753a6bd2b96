use super::*;
use quota::forecast::{forecast, Forecast, FORECAST_WINDOW_MS};

const GPU: &str = "requests.nvidia.com/gpu";
const CASH: &str = "cash/requests.nvidia.com/gpu";
/// 2026-11-21T00:00:00Z
const T0: i64 = 1_795_219_200_000;

fn q(s: &str) -> Quantity {
    s.parse().unwrap()
}

/// A month's report by day: every date stays inside the chart (the
/// last one was cut at the right edge at 1440 px), and the unit sits
/// on a row of its own, below the legend it overlapped.
#[test]
fn a_reports_dates_and_unit_fit_and_do_not_overlap_its_legend() {
    let days: Vec<String> = (1..=30).map(|d| format!("2026-11-{d:02}")).collect();
    let layers: Vec<(String, Vec<f64>)> = ["nlp", "cv", "speech", "platform", "product"]
        .iter()
        .map(|n| (n.to_string(), vec![120.0; 30]))
        .collect();
    for frame in [WIDE, NARROW] {
        let svg = report_chart("spent", &days, &layers, "card-hours", frame);
        let texts: Vec<(f64, f64, String, bool)> = svg
            .split("<text ")
            .skip(1)
            .map(|t| {
                let attr = |a: &str| -> f64 {
                    let from = t.find(&format!("{a}=\"")).unwrap() + a.len() + 2;
                    t[from..from + t[from..].find('"').unwrap()]
                        .parse()
                        .unwrap()
                };
                let text = t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()].to_string();
                (
                    attr("x"),
                    attr("y"),
                    text,
                    t.contains("text-anchor=\"middle\""),
                )
            })
            .collect();
        let w = frame.w as f64;
        for (x, _, text, middle) in texts.iter().filter(|t| t.2.starts_with("2026-")) {
            let tw = frame.text_w(text) as f64;
            let (a, b) = if *middle {
                (x - tw / 2.0, x + tw / 2.0)
            } else {
                (*x, x + tw)
            };
            assert!(
                a >= 0.0 && b <= w,
                "{text} at {a:.0}..{b:.0} outside 0..{w}"
            );
        }
        let legend_y = texts
            .iter()
            .filter(|t| layers.iter().any(|(n, _)| *n == t.2))
            .map(|t| t.1)
            .fold(0.0, f64::max);
        let unit = texts.iter().find(|t| t.2 == "card-hours").unwrap();
        assert!(
            unit.1 - frame.text_px * 0.8 >= legend_y + frame.text_px * 0.2,
            "the unit ({}) overlaps the legend's last row ({legend_y})",
            unit.1
        );
    }
}

fn list(items: &[(&str, Quantity)]) -> ResourceList {
    items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// A measured forecast as the one forecast the pages read (the chart
/// draws and words an `Outlook`; these tests measure burns from samples).
fn outlook_of(f: &Forecast) -> quota::forecast::Outlook {
    let runway = if f.as_of_ms.is_none() {
        quota::budget::Runway::Unknown
    } else {
        quota::forecast::runway(f, None)
    };
    quota::forecast::Outlook {
        key: f.key.clone(),
        now_ms: f.now_ms,
        left: f.remaining,
        carved: quota::Quantity::ZERO,
        burn_per_hour: f.burn_per_hour,
        runway,
    }
}

/// The burn-down of `samples` with the burn measured from them.
fn burn_down(s: &[Sample], key: &str, now: i64, cfg: &KeyConfig, frame: Frame) -> String {
    let o = outlook_of(&forecast(s, key, now, FORECAST_WINDOW_MS));
    burn_down_chart(s, &o, now, cfg, frame)
}

fn describe(f: &Forecast, cfg: &KeyConfig) -> String {
    describe_outlook(&outlook_of(f), cfg)
}

/// A cash sample: `budget` card-hours, `spent_nanos` spent.
fn cash(at_ms: i64, budget: i64, spent_nanos: i128) -> Sample {
    Sample {
        at_ms,
        hard: list(&[(CASH, Quantity::from_units(budget))]),
        used: list(&[(CASH, Quantity::from_nanos(spent_nanos))]),
        self_used: ResourceList::new(),
    }
}

/// Minute samples over `hours` of a steady burn of `rate` card-hours/h,
/// ending with `left` card-hours of the budget remaining.
fn steady_burn(hours: i64, rate: i64, left: i64) -> Vec<Sample> {
    let minutes = hours * 60;
    let budget = rate * hours + left;
    (0..=minutes)
        .map(|m| {
            // Per-minute spend is not a whole nano-unit: floor it, as a
            // meter would, and let first/last difference stay exact.
            let spent = m as i128 * rate as i128 * NANO / 60;
            cash(T0 + m * MS_PER_MIN, budget, spent)
        })
        .collect()
}

fn usage(at_ms: i64, used: &str, hard: Option<&str>) -> Sample {
    Sample {
        at_ms,
        hard: hard.map(|h| list(&[(GPU, q(h))])).unwrap_or_default(),
        used: list(&[(GPU, q(used))]),
        self_used: ResourceList::new(),
    }
}

#[test]
fn units_follow_the_resource() {
    assert_eq!(
        unit_of("requests.cpu", &KeyConfig::default()),
        (NANO, "cores")
    );
    assert_eq!(
        unit_of("limits.cpu.A4", &KeyConfig::default()),
        (NANO, "cores")
    );
    assert_eq!(
        unit_of("requests.memory", &KeyConfig::default()),
        ((1 << 30) * NANO, "GiB")
    );
    assert_eq!(
        unit_of("limits.ephemeral-storage", &KeyConfig::default()).1,
        "GiB"
    );
    assert_eq!(unit_of(GPU, &KeyConfig::default()), (NANO, "cards"));
    assert_eq!(
        unit_of("requests.nvidia.com/gpu.A100", &KeyConfig::default()).1,
        "cards"
    );
    assert_eq!(unit_of("pods", &KeyConfig::default()).1, "pods");
    assert_eq!(unit_of(CASH, &KeyConfig::default()), (NANO, "card-hours"));
    assert_eq!(
        unit_of("cash/requests.cpu", &KeyConfig::default()).1,
        "core-hours"
    );
    assert_eq!(
        unit_of("cash/requests.memory", &KeyConfig::default()).1,
        "GiB-hours"
    );
    assert_eq!(
        unit_of("requests.example.com/fpga", &KeyConfig::default()).1,
        "units"
    );
}

#[test]
fn steady_burn_of_ten_per_hour_with_a_hundred_left_lasts_ten_hours() {
    let now = T0 + 24 * MS_PER_HOUR;
    let f = forecast(&steady_burn(24, 10, 100), CASH, now, FORECAST_WINDOW_MS);
    assert_eq!(f.remaining, Quantity::from_units(100));
    assert_eq!(f.burn_per_hour, Quantity::from_units(10));
    assert_eq!(f.burned, Quantity::from_units(240));
    assert_eq!(f.burn_from_ms, Some(T0));
    assert_eq!(f.exhausted_at_ms, Some(now + 10 * MS_PER_HOUR));
    assert_eq!(f.days_left, Some(10.0 / 24.0));
    assert_eq!(
        describe(&f, &KeyConfig::default()),
        "GPU card-hours: 100 card-hours left · runs out in 10 hours (2026-11-22), burning 10 card-hours/h"
    );
}

#[test]
fn the_rate_comes_from_the_window_only() {
    // 5/h for the first two days, then 10/h for the last day.
    let mut s: Vec<Sample> = Vec::new();
    let mut spent = 0i128;
    for h in 0..=72 {
        s.push(cash(T0 + h * MS_PER_HOUR, 1000, spent));
        spent += if h < 48 { 5 } else { 10 } * NANO;
    }
    let now = T0 + 72 * MS_PER_HOUR;
    let f = forecast(&s, CASH, now, FORECAST_WINDOW_MS);
    assert_eq!(f.burn_per_hour, Quantity::from_units(10));
    // 1000 − (48·5 + 24·10) = 520 left at 10/h: 52 h.
    assert_eq!(f.exhausted_at_ms, Some(now + 52 * MS_PER_HOUR));
    assert_eq!(
        describe(&f, &KeyConfig::default()),
        // 52 h is 2.17 days: rounded down, never overstated.
        "GPU card-hours: 520 card-hours left · runs out in 2.1 days (2026-11-26), burning 10 card-hours/h"
    );
}

#[test]
fn no_burn_means_no_exhaustion_date() {
    let s: Vec<Sample> = (0..=24)
        .map(|h| cash(T0 + h * MS_PER_HOUR, 100, 40 * NANO))
        .collect();
    let f = forecast(&s, CASH, T0 + 24 * MS_PER_HOUR, FORECAST_WINDOW_MS);
    assert_eq!(f.remaining, Quantity::from_units(60));
    assert_eq!(f.burn_per_hour, Quantity::ZERO);
    assert_eq!((f.exhausted_at_ms, f.days_left), (None, None));
    assert_eq!(
        describe(&f, &KeyConfig::default()),
        "GPU card-hours: 60 card-hours left, not burning"
    );
}

/// At a parent (research: 42,000 of its 51,000 card-hours allocated
/// to its teams, which spent 18,096), "9,000 left, not burning" beside
/// "18,096 spent in its subtree" read as a contradiction: the words
/// say whose the figures are.
#[test]
fn a_parents_outlook_says_it_is_its_own_works() {
    let mut o = quota::forecast::Outlook {
        key: CASH.into(),
        now_ms: T0,
        left: Quantity::from_units(9_000),
        carved: Quantity::from_units(42_000),
        burn_per_hour: Quantity::ZERO,
        runway: quota::budget::Runway::NotBurning,
    };
    let cfg = KeyConfig::default();
    assert_eq!(
        describe_outlook(&o, &cfg),
        "GPU card-hours for its own work (42,000 card-hours allocated to children): \
         9,000 card-hours left, its own work not burning"
    );
    o.burn_per_hour = Quantity::from_units(10);
    o.runway = quota::budget::Runway::Until {
        at_ms: T0 + 900 * MS_PER_HOUR,
    };
    let words = describe_outlook(&o, &cfg);
    assert!(
        words.starts_with("GPU card-hours for its own work (42,000 card-hours allocated to children): 9,000 card-hours left · runs out in 37.5 days")
            && words.ends_with(", its own work burning 10 card-hours/h"),
        "{words}"
    );
    o.carved = Quantity::ZERO;
    assert_eq!(
        describe_outlook(&o, &cfg),
        format!(
            "GPU card-hours: 9,000 card-hours left · {}, burning 10 card-hours/h",
            o.words()
        )
    );
}

#[test]
fn big_amounts_read_with_thousands_separated() {
    let s: Vec<Sample> = (0..=24)
        .map(|h| cash(T0 + h * MS_PER_HOUR, 158_500, 143_500 * NANO))
        .collect();
    let f = forecast(&s, CASH, T0 + 24 * MS_PER_HOUR, FORECAST_WINDOW_MS);
    assert_eq!(
        describe(&f, &KeyConfig::default()),
        "GPU card-hours: 15,000 card-hours left, not burning"
    );
    let cfg = KeyConfig::default();
    let gib = Quantity::from_nanos(1_099_511_627_776 * NANO);
    assert_eq!(amount("requests.memory", gib, &cfg), "1,024 GiB");
    assert_eq!(
        amount(CASH, Quantity::from_nanos(-1_234_567_500_000_000), &cfg),
        "-1,234,567.5 card-hours"
    );
}

#[test]
fn a_spent_budget_is_exhausted_now() {
    let now = T0 + 2 * MS_PER_HOUR;
    let s = vec![
        cash(T0, 100, 90 * NANO),
        cash(T0 + MS_PER_HOUR, 100, 120 * NANO),
    ];
    let f = forecast(&s, CASH, now, FORECAST_WINDOW_MS);
    assert_eq!(f.remaining, Quantity::from_units(-20));
    assert_eq!((f.exhausted_at_ms, f.days_left), (Some(now), Some(0.0)));
    assert_eq!(
        describe(&f, &KeyConfig::default()),
        "GPU card-hours has run out: 20 card-hours over budget"
    );
    let exact = forecast(&[cash(T0, 100, 100 * NANO)], CASH, now, FORECAST_WINDOW_MS);
    assert_eq!(exact.exhausted_at_ms, Some(now));
}

#[test]
fn unmeasurable_burns_give_no_date() {
    let now = T0 + MS_PER_HOUR;
    assert_eq!(
        describe(
            &forecast(&[], CASH, now, FORECAST_WINDOW_MS),
            &KeyConfig::default()
        ),
        "GPU card-hours: 0 card-hours left, no burn measured yet"
    );
    // One sample: a level, not a rate.
    let one = forecast(&[cash(T0, 100, 5 * NANO)], CASH, now, FORECAST_WINDOW_MS);
    assert_eq!(one.exhausted_at_ms, None);
    // Nothing in the last day: the burn is unknown, not zero-or-old.
    let stale = vec![cash(T0, 100, 0), cash(T0 + MS_PER_HOUR, 100, 10 * NANO)];
    let f = forecast(&stale, CASH, T0 + 3 * MS_PER_DAY, FORECAST_WINDOW_MS);
    assert_eq!(
        (f.exhausted_at_ms, f.remaining),
        (None, Quantity::from_units(90))
    );
    // Samples after `now` are ignored.
    let f = forecast(&stale, CASH, T0 + MS_PER_MIN, FORECAST_WINDOW_MS);
    assert_eq!(f.remaining, Quantity::from_units(100));
}

#[test]
fn gaps_split_lines_but_tiers_do_not() {
    let m = MS_PER_MIN;
    // Minute samples with a two-hour outage.
    let mut t: Vec<i64> = (0..10).map(|i| i * m).collect();
    t.extend((0..10).map(|i| 2 * MS_PER_HOUR + i * m));
    assert_eq!(segments(&t), vec![0..10, 10..20]);
    // Hourly peaks giving way to minute samples: one line.
    let mut t: Vec<i64> = (0..10).map(|i| i * MS_PER_HOUR).collect();
    t.extend((1..=10).map(|i| 10 * MS_PER_HOUR + i * m));
    assert_eq!(segments(&t), vec![0..20]);
    // Daily → hourly → minute, with one missing hourly peak: one line.
    let mut t: Vec<i64> = (0..6).map(|i| i * MS_PER_DAY).collect();
    t.extend(
        (1..8)
            .filter(|&i| i != 4)
            .map(|i| 5 * MS_PER_DAY + i * MS_PER_HOUR),
    );
    t.extend((1..8).map(|i| 5 * MS_PER_DAY + 8 * MS_PER_HOUR + i * m));
    assert_eq!(segments(&t), vec![0..t.len()]);
    assert_eq!(segments(&[5]), vec![0..1]);
    assert!(segments(&[]).is_empty());
}

#[test]
fn hard_is_a_step_line_broken_where_unset() {
    let per = NANO;
    let runs = hard_steps(
        &[0, 10, 20, 30, 40, 50],
        &[
            Some(4 * per),
            Some(4 * per),
            Some(8 * per),
            None,
            Some(2 * per),
            Some(2 * per),
        ],
        per,
    );
    assert_eq!(
        runs,
        vec![
            vec![(0, 4.0), (20, 4.0), (20, 8.0), (30, 8.0)],
            vec![(40, 2.0), (50, 2.0)],
        ]
    );
}

#[test]
fn ticks_land_on_calendar_boundaries() {
    let (ticks, step) = time_ticks(T0 + 7 * MS_PER_MIN, T0 + 6 * MS_PER_HOUR, 8);
    assert_eq!(step, Step::Ms(MS_PER_HOUR));
    assert_eq!(ticks[0], T0 + MS_PER_HOUR);
    assert_eq!(tick_label(ticks[0], step), "01:00");
    let (ticks, step) = time_ticks(T0 - 3 * MS_PER_HOUR, T0 + 20 * MS_PER_HOUR, 8);
    assert_eq!(step, Step::Ms(3 * MS_PER_HOUR));
    assert_eq!(tick_label(ticks[1], step), "Nov 21");
    // Weeks start on Monday: 2026-11-23.
    let (ticks, step) = time_ticks(T0, T0 + 50 * MS_PER_DAY, 8);
    assert_eq!(step, Step::Ms(7 * MS_PER_DAY));
    assert_eq!(date(ticks[0]), "2026-11-23");
    assert_eq!(tick_label(ticks[0], step), "Nov 23");
    let (ticks, step) = time_ticks(T0, T0 + 400 * MS_PER_DAY, 8);
    assert_eq!(step, Step::Months(2));
    assert_eq!(tick_label(ticks[0], step), "Jan 2027");
    assert_eq!(date(ticks[1]), "2027-03-01");
}

#[test]
fn decimals_are_exact() {
    assert_eq!(decimal(12_500_000_000, NANO, 1), "12.5");
    assert_eq!(decimal(10 * NANO, NANO, 2), "10");
    assert_eq!(decimal(-1_250_000_000, NANO, 1), "-1.3");
    assert_eq!(decimal(3 * (1 << 29) * NANO, (1 << 30) * NANO, 2), "1.5");
    assert_eq!(decimal(1, NANO, 2), "0");
    assert_eq!(date(T0), "2026-11-21");
    assert_eq!(days_from_civil(2026, 11, 21) * MS_PER_DAY, T0);
}

fn week_of_gpu_usage() -> Vec<Sample> {
    (0..7 * 24)
        .map(|h| {
            let used = format!("{}", 2 + (h % 24) / 4);
            let hard = if h < 72 { "6" } else { "8" };
            usage(T0 + h * MS_PER_HOUR, &used, Some(hard))
        })
        .collect()
}

#[test]
fn usage_chart_is_labelled_and_inline() {
    let svg = usage_chart(&week_of_gpu_usage(), GPU, &KeyConfig::default(), WIDE);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart chart-usage\" viewBox=\"0 0 760 300\" width=\"100%\" role=\"img\" aria-label=\"GPUs: in use and hard\" data-x0=\""), "{}", &svg[..200]);
    assert!(!svg.contains("<?xml"));
    assert!(svg.ends_with("</svg>\n"));
    assert_eq!(svg.matches("<svg").count(), 1);
    for text in [
        "<title>GPUs: in use and hard</title>",
        ">\ncards\n</text>",
        ">\ndate (UTC)\n</text>",
        ">\nin use\n</text>",
        ">\nhard\n</text>",
        ">\nNov 23\n</text>",
    ] {
        assert!(svg.contains(text), "missing {text}");
    }
    // The hard line steps from 6 to 8 cards on day 4.
    assert!(svg.contains("stroke=\"#D92D20\""));
    assert!(svg.contains("<polygon"));
}

#[test]
fn usage_chart_handles_empty_single_and_gaps() {
    let empty = usage_chart(&[], GPU, &KeyConfig::default(), WIDE);
    assert!(empty.contains(">no data yet</text>"));
    assert!(empty.contains("viewBox=\"0 0 760 300\""));
    let one = usage_chart(
        &[usage(T0, "3", Some("8"))],
        GPU,
        &KeyConfig::default(),
        WIDE,
    );
    assert!(one.contains("<circle"), "a lone sample shows as a dot");
    assert!(
        one.contains(">\ntime (UTC), from 2026-11-20\n</text>")
            || one.contains(">\ntime (UTC), from 2026-11-21\n</text>")
    );
    let mut gappy: Vec<Sample> = (0..30)
        .map(|i| usage(T0 + i * MS_PER_MIN, "2", Some("4")))
        .collect();
    gappy.extend((0..30).map(|i| usage(T0 + 3 * MS_PER_HOUR + i * MS_PER_MIN, "3", None)));
    let svg = usage_chart(&gappy, GPU, &KeyConfig::default(), WIDE);
    assert_eq!(
        svg.matches("<polygon").count(),
        2,
        "one area per side of the gap"
    );
    // Memory is drawn in GiB.
    let mem = vec![Sample {
        at_ms: T0,
        hard: ResourceList::new(),
        used: list(&[("requests.memory", q("64Gi"))]),
        self_used: ResourceList::new(),
    }];
    assert!(
        usage_chart(&mem, "requests.memory", &KeyConfig::default(), WIDE)
            .contains(">\nGiB\n</text>")
    );
}

#[test]
fn burn_down_shows_the_forecast_date() {
    let now = T0 + 24 * MS_PER_HOUR;
    let svg = burn_down(
        &steady_burn(24, 10, 100),
        CASH,
        now,
        &KeyConfig::default(),
        WIDE,
    );
    for text in [
        "<title>GPU card-hours: remaining budget. ",
        ">\ncard-hours\n</text>",
        ">\nremaining\n</text>",
        ">\nforecast (what runs now)\n</text>",
        ">\nruns out 2026-11-22\n</text>",
        ">\nnow\n</text>",
        "runs out in 10 hours (2026-11-22), burning 10 card-hours/h",
    ] {
        assert!(svg.contains(text), "missing {text}");
    }
    let idle: Vec<Sample> = (0..=24)
        .map(|h| cash(T0 + h * MS_PER_HOUR, 100, 40 * NANO))
        .collect();
    assert!(burn_down(&idle, CASH, now, &KeyConfig::default(), WIDE)
        .contains(">\nnot burning\n</text>"));
    let spent = vec![cash(T0, 100, 150 * NANO)];
    assert!(
        burn_down(&spent, CASH, now, &KeyConfig::default(), WIDE).contains(">\nexhausted\n</text>")
    );
    // A date beyond the shown horizon is named at the edge.
    let slow = vec![cash(now - MS_PER_HOUR, 10_000, 0), cash(now, 10_000, NANO)];
    assert!(burn_down(&slow, CASH, now, &KeyConfig::default(), WIDE)
        .contains(">\nruns out 2028-01-12 →\n</text>"));
    // Beyond the horizon with little left there: the line leaves the
    // chart low, and its words sit at the top, not on the axis's dates.
    let low = burn_down(
        &steady_burn(24, 10, 280),
        CASH,
        now,
        &KeyConfig::default(),
        WIDE,
    );
    let y_of = |svg: &str, words: &str| -> f64 {
        let at = svg.find(&format!(">\n{words}\n</text>")).unwrap();
        let tag = &svg[svg[..at].rfind("<text").unwrap()..at];
        let y = &tag[tag.find(" y=\"").unwrap() + 4..];
        y[..y.find('"').unwrap()].parse().unwrap()
    };
    let words = "runs out 2026-11-23 →";
    assert!(
        y_of(&low, words) < y_of(&low, "now") + 40.0,
        "{words} under now at the top: {low}"
    );
    assert!(burn_down(&[], CASH, now, &KeyConfig::default(), WIDE).contains(">no data yet</text>"));
}

#[test]
fn model_breakdown_lists_models_and_the_rest() {
    let used = list(&[
        (GPU, q("14")),
        ("requests.nvidia.com/gpu.A100", q("7")),
        ("requests.nvidia.com/gpu.V100", q("3")),
        ("requests.nvidia.com/gpu.T4", q("1")),
        ("requests.cpu", q("40")),
    ]);
    let hard = list(&[
        (GPU, q("20")),
        ("requests.nvidia.com/gpu.A100", q("8")),
        ("requests.nvidia.com/gpu.V100", q("2")),
    ]);
    let svg = model_breakdown_chart(&used, &hard, GPU, &KeyConfig::default(), WIDE);
    for text in [
        "<title>GPUs by model: 14 of 20 cards in use</title>",
        ">\nA100\n</text>",
        ">\nV100\n</text>",
        ">\nT4\n</text>",
        ">\nother\n</text>",
        ">\n7 / 8\n</text>",
        ">\n3 / 2\n</text>",
        ">\n3\n</text>",
        ">\ncards\n</text>",
        ">\nin use\n</text>",
        ">\nhard\n</text>",
        ">\nover hard\n</text>",
    ] {
        assert!(svg.contains(text), "missing {text}");
    }
    assert!(svg.contains("fill=\"#D92D20\""), "V100 is over its hard");
    // A100 is at 7 of 8: the legend names that colour too, as drawn.
    assert!(svg.contains(">\n≥ 80 % of hard\n</text>"));
    assert!(!svg.contains(">requests.cpu"));
    let none = model_breakdown_chart(
        &ResourceList::new(),
        &ResourceList::new(),
        GPU,
        &KeyConfig::default(),
        WIDE,
    );
    assert!(none.contains(">no data yet</text>"));
}

/// Every `font-size` of an SVG, in viewBox units.
fn font_sizes(svg: &str) -> Vec<f64> {
    svg.split("font-size=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next()?.parse().ok())
        .collect()
}

#[test]
fn text_is_never_rendered_below_twelve_pixels() {
    // The narrowest each frame is shown at (style/bizrq.css): the wide
    // one from 767 px of chart, the narrow one from 300 px (320 px screens).
    let cfg = KeyConfig::default();
    let used = list(&[(GPU, q("14")), ("requests.nvidia.com/gpu.A100", q("7"))]);
    let hard = list(&[(GPU, q("20")), ("requests.nvidia.com/gpu.A100", q("8"))]);
    let now = T0 + 24 * MS_PER_HOUR;
    for (frame, shown_from) in [(WIDE, 767.0), (NARROW, 300.0)] {
        let scale = shown_from / frame.w as f64;
        for svg in [
            usage_chart(&week_of_gpu_usage(), GPU, &cfg, frame),
            burn_down(&steady_burn(24, 10, 100), CASH, now, &cfg, frame),
            model_breakdown_chart(&used, &hard, GPU, &cfg, frame),
            usage_chart(&[], GPU, &cfg, frame),
        ] {
            let sizes = font_sizes(&svg);
            assert!(!sizes.is_empty());
            for s in sizes {
                assert!(s * scale >= 12.0, "{s} × {scale} in {frame:?}");
            }
        }
    }
}

#[test]
fn the_by_model_caption_groups_thousands() {
    let cfg = KeyConfig::default();
    let list = |v: i64| -> ResourceList { [(GPU.to_string(), Quantity::from_units(v))].into() };
    assert_eq!(
        model_breakdown_title(&list(1400), &list(2000), GPU, &cfg),
        "GPUs by model: 1,400 of 2,000 cards in use"
    );
    assert_eq!(
        model_breakdown_title(&list(12_345), &ResourceList::new(), GPU, &cfg),
        "GPUs by model: 12,345 cards in use"
    );
}

#[test]
fn both_frames_are_drawn_and_marked() {
    let svg = both(|f| usage_chart(&week_of_gpu_usage(), GPU, &KeyConfig::default(), f));
    assert!(svg.contains("class=\"chart wide chart-usage\" viewBox=\"0 0 760 300\""));
    assert!(svg.contains("class=\"chart narrow chart-usage\" viewBox=\"0 0 360 280\""));
    // Where the time axis is: the plot's pixels and its time span.
    let t0 = format!("data-t0=\"{T0}\"");
    assert!(svg.contains(&t0), "the axis starts at the first sample");
}

#[test]
fn the_forecast_is_drawn_in_its_legend_colour() {
    let now = T0 + 24 * MS_PER_HOUR;
    let svg = burn_down(
        &steady_burn(24, 10, 100),
        CASH,
        now,
        &KeyConfig::default(),
        WIDE,
    );
    // The dashed forecast is drawn as one path from the last point to
    // (exhaustion, 0): its last point lies on the zero line's y, the
    // bottom of the plot, which is where the x axis is drawn.
    let x_axis_y: Vec<&str> = svg
        .lines()
        .filter(|l| l.contains("stroke=\"#F79009\"") && l.contains("stroke-width=\"2\""))
        .collect();
    assert!(!x_axis_y.is_empty(), "a forecast line is drawn");
    let legend_dashed = svg.matches("stroke=\"#F79009\"").count();
    assert!(legend_dashed >= 3, "legend and line share the colour");
}

#[test]
fn charts_are_deterministic() {
    let s = week_of_gpu_usage();
    assert_eq!(
        usage_chart(&s, GPU, &KeyConfig::default(), WIDE),
        usage_chart(&s, GPU, &KeyConfig::default(), WIDE)
    );
    let b = steady_burn(24, 10, 100);
    let now = T0 + 24 * MS_PER_HOUR;
    assert_eq!(
        burn_down(&b, CASH, now, &KeyConfig::default(), WIDE),
        burn_down(&b, CASH, now, &KeyConfig::default(), WIDE)
    );
}

/// A chart's text is escaped for XML, apostrophes too: a title or a
/// message cannot end the attribute or element it is written into.
#[test]
fn chart_text_is_escaped() {
    let svg = message_svg("chart-usage", "nlp's <GPU> & \"cards\"", "a'b", WIDE);
    assert!(
        svg.contains("aria-label=\"nlp&#39;s &lt;GPU&gt; &amp; &quot;cards&quot;: a&#39;b\""),
        "{svg}"
    );
    assert!(svg.contains(">a&#39;b</text>"), "{svg}");
    assert!(!svg.contains('\''), "{svg}");
}

/// The points of the longest line stroked in `colour` (a series, not
/// its legend's swatch), in pixels.
fn line_points(svg: &str, colour: RGBColor) -> Vec<(i32, i32)> {
    let stroke = format!(
        "stroke=\"#{:02X}{:02X}{:02X}\"",
        colour.0, colour.1, colour.2
    );
    svg.lines()
        .filter(|l| l.starts_with("<polyline") && l.contains(&stroke))
        .map(|l| {
            let from = l.find("points=\"").unwrap() + "points=\"".len();
            l[from..from + l[from..].find('"').unwrap()]
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect::<Vec<_>>()
        })
        .max_by_key(Vec::len)
        .unwrap_or_default()
}

/// A long series is drawn decimated: at most four points per pixel
/// column of the plot (`decimate`), every column of its span drawn,
/// each column's highest and lowest value kept, and the SVG a fraction
/// of what ten thousand points written out would take.
#[test]
fn ten_thousand_points_render_small_without_losing_a_peak() {
    // Every five consecutive minutes take each of 3..=7 once.
    let s: Vec<Sample> = (0..10_000)
        .map(|i| {
            usage(
                T0 + i * MS_PER_MIN,
                &format!("{}", 3 + (i * 7919) % 5),
                Some("8"),
            )
        })
        .collect();
    let svg = usage_chart(&s, GPU, &KeyConfig::default(), WIDE);
    let cash: Vec<Sample> = steady_burn(166, 10, 100);
    let burn = burn_down(
        &cash,
        CASH,
        T0 + 166 * MS_PER_HOUR,
        &KeyConfig::default(),
        WIDE,
    );
    for (name, svg, n) in [("usage", &svg, s.len()), ("burn-down", &burn, cash.len())] {
        let pts = line_points(svg, USED);
        let xs: Vec<i32> = pts.iter().map(|p| p.0).collect();
        assert!(xs.is_sorted(), "{name}: drawn left to right");
        let mut columns = xs.clone();
        columns.dedup();
        let span = (xs[xs.len() - 1] - xs[0] + 1) as usize;
        assert_eq!(
            columns.len(),
            span,
            "{name}: every column of the span drawn"
        );
        assert!(
            pts.len() <= 4 * span && pts.len() < n / 3,
            "{name}: {} points of {n} in {span} columns",
            pts.len()
        );
        // Written out, the points take at least `x,y ` (8 bytes) each,
        // once for the line and once for its area: over twice this.
        assert!(svg.len() < 64 * 1024, "{name}: {} bytes", svg.len());
    }
    // Each column of the usage line rises to 7 and falls to 3 (the
    // last column may hold fewer than five samples).
    let pts = line_points(&svg, USED);
    let top = pts.iter().map(|p| p.1).min().unwrap();
    let bottom = pts.iter().map(|p| p.1).max().unwrap();
    let mut by_x: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for (x, y) in &pts {
        by_x.entry(*x).or_default().push(*y);
    }
    let both = by_x
        .values()
        .filter(|ys| ys.contains(&top) && ys.contains(&bottom))
        .count();
    assert!(both + 1 >= by_x.len(), "{both} of {} columns", by_x.len());
}

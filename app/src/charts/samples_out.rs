/// `CHARTS_OUT=dir cargo test -p app write_sample_charts -- --ignored`
/// writes the test charts as files, to look at them in a browser.
#[test]
#[ignore]
fn write_sample_charts() {
    use super::*;
    let dir = std::env::var("CHARTS_OUT").unwrap_or_else(|_| "target/charts".into());
    std::fs::create_dir_all(&dir).unwrap();
    let t0: i64 = 1_795_219_200_000;
    let gpu = "requests.nvidia.com/gpu";
    let week: Vec<Sample> = (0..7 * 24 * 60)
        .map(|m| {
            let h = m / 60;
            let wave = ((m as f64 / 300.0).sin() * 2.5 + 4.0).round() as i64;
            let hard = if h < 72 { 6 } else { 8 };
            Sample {
                at_ms: t0 + m * MS_PER_MIN,
                hard: [(gpu.to_string(), Quantity::from_units(hard))].into(),
                used: [(gpu.to_string(), Quantity::from_units(wave))].into(),
                self_used: ResourceList::new(),
            }
        })
        .filter(|s| !(s.at_ms > t0 + 100 * MS_PER_HOUR && s.at_ms < t0 + 104 * MS_PER_HOUR))
        .collect();
    let cash = "cash/requests.nvidia.com/gpu";
    let burn: Vec<Sample> = (0..=5 * 24)
        .map(|h| Sample {
            at_ms: t0 + h * MS_PER_HOUR,
            hard: [(cash.to_string(), Quantity::from_units(2000))].into(),
            used: [(cash.to_string(), Quantity::from_units(h * 12 + (h % 7)))].into(),
            self_used: ResourceList::new(),
        })
        .collect();
    let used: ResourceList = [
        (gpu, "14"),
        ("requests.nvidia.com/gpu.A100", "7"),
        ("requests.nvidia.com/gpu.V100", "3"),
        ("requests.nvidia.com/gpu.T4", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
    .collect();
    let hard: ResourceList = [
        (gpu, "20"),
        ("requests.nvidia.com/gpu.A100", "8"),
        ("requests.nvidia.com/gpu.V100", "2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
    .collect();
    let now = t0 + 5 * MS_PER_DAY + 30 * MS_PER_MIN;
    let charts = [
        (
            "usage.svg",
            usage_chart(&week, gpu, &KeyConfig::default(), WIDE),
        ),
        ("burn-down.svg", {
            let f =
                quota::forecast::forecast(&burn, cash, now, quota::forecast::FORECAST_WINDOW_MS);
            let o = quota::forecast::Outlook {
                key: cash.to_string(),
                now_ms: now,
                left: f.remaining,
                carved: quota::Quantity::ZERO,
                burn_per_hour: f.burn_per_hour,
                runway: quota::forecast::runway(&f, None),
            };
            burn_down_chart(&burn, &o, now, &KeyConfig::default(), WIDE)
        }),
        (
            "models.svg",
            model_breakdown_chart(&used, &hard, gpu, &KeyConfig::default(), WIDE),
        ),
        (
            "empty.svg",
            usage_chart(&[], gpu, &KeyConfig::default(), WIDE),
        ),
        (
            "narrow.svg",
            usage_chart(&week, gpu, &KeyConfig::default(), NARROW),
        ),
    ];
    for (name, svg) in charts {
        println!("{name}: {} bytes", svg.len());
        std::fs::write(format!("{dir}/{name}"), svg).unwrap();
    }
}

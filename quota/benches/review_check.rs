//! What the webhook's string check costs per review (prints figures; not a
//! timed test):
//!
//!   cargo bench -p quota --bench review_check
//!   cargo test  -p quota --bench review_check -- --smoke     # small, for CI
//!
//! Beside it, what the webhook pays anyway: decoding the review
//! (`review::decode`) and reading its object through the adapter. Three
//! reviews of the test fixture's Deployment: as it is (kubectl's
//! last-applied annotation holds an escaped line break, so its object is
//! walked a second time), without that annotation (the raw JSON holds
//! nothing that can be hostile: no second walk), and with a NUL in its
//! username (refused at the envelope).

use quota::keys::KeyConfig;
use quota::workload::adapter_for_kind;
use std::hint::black_box;
use std::time::Instant;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../server/tests/fixtures/");

fn review(edit: impl Fn(&mut serde_json::Value)) -> Vec<u8> {
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(format!("{FIXTURES}{name}")).unwrap())
            .unwrap()
    };
    let mut r = read("deployment-create.json");
    r["request"]["object"] = read("deployment.json");
    edit(&mut r);
    serde_json::to_vec(&r).unwrap()
}

fn per_op(n: u32, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed().as_nanos() as f64 / n as f64 / 1000.0
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let n = if smoke { 200 } else { 50_000 };
    let cfg = KeyConfig::default();
    let cases = [
        ("fixture (last-applied holds \\n)", review(|_| {})),
        (
            "without last-applied",
            review(|r| {
                r["request"]["object"]["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("annotations");
            }),
        ),
        (
            "NUL in userInfo.username",
            review(|r| r["request"]["userInfo"]["username"] = "alice\u{0}".into()),
        ),
    ];
    println!("per review, {n} rounds ({} bytes each)", cases[0].1.len());
    println!(
        "{:<36} {:>10} {:>10} {:>10}",
        "review", "decode µs", "check µs", "adapter µs"
    );
    for (name, body) in &cases {
        let decode = per_op(n, || {
            black_box(quota::review::decode(black_box(body)).unwrap());
        });
        let req = quota::review::decode(body).unwrap();
        let check = per_op(n, || {
            black_box(black_box(&req).hostile_field());
        });
        let adapter = adapter_for_kind("apps", "Deployment").unwrap();
        let raw = req.object.as_deref().unwrap().get();
        let read = per_op(n, || {
            black_box(adapter.read(black_box(raw), &cfg).unwrap());
        });
        println!("{name:<36} {decode:>10.2} {check:>10.2} {read:>10.2}");
    }
}

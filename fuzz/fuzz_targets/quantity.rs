//! The quantity parser: any text either parses to an amount within
//! ±MAX_NANOS that prints and parses back to itself, or is refused. Never
//! a panic. The same through serde, as quantities arrive in JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quota::quantity::{Quantity, MAX_NANOS};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(q) = text.parse::<Quantity>() {
        assert!(q.nanos().abs() <= MAX_NANOS, "{text:?} → {}", q.nanos());
        let printed = q.to_string();
        let back: Quantity = printed
            .parse()
            .unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}, which fails: {e}"));
        assert_eq!(back, q, "{text:?} printed as {printed:?}");
        assert_eq!(back.to_string(), printed, "printing is stable");
    }
    // As a JSON value: a string, a number, or anything else.
    if let Ok(q) = serde_json::from_str::<Quantity>(text) {
        assert!(q.nanos().abs() <= MAX_NANOS);
        let json = serde_json::to_string(&q).unwrap();
        assert_eq!(serde_json::from_str::<Quantity>(&json).unwrap(), q);
    }
});

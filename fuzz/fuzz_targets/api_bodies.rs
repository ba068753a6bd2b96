//! The JSON API's bodies: a quota as POST/PUT /api/v1/quotas take it (the
//! spec's serde type and `tree::validate_spec`), and a workload as
//! POST /api/v1/check takes it (its type meta picks the adapter, which
//! reads it). Refused or accepted, never a panic; what is accepted holds
//! no negative amount and survives a round trip through JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quota::keys::KeyConfig;
use quota::object::{Quota, QuotaSpec};
use quota::workload::{adapter_for_kind, group_of};
use serde::Deserialize;

#[derive(Deserialize)]
struct QuotaBody {
    metadata: Meta,
    spec: QuotaSpec,
}

#[derive(Deserialize)]
struct Meta {
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
}

fuzz_target!(|data: &[u8]| {
    let cfg = KeyConfig::default();
    if let Ok(body) = serde_json::from_slice::<QuotaBody>(data) {
        let name = body.metadata.name;
        if quota::tree::validate_spec(&name, &body.spec, &cfg).is_ok() {
            let all = body.spec.hard.values().chain(body.spec.max.values());
            assert!(all.into_iter().all(|v| !v.is_negative()));
            let mut q = Quota::new(&name, body.spec);
            let spec = q.spec.clone();
            q.status.refresh(&spec);
            let json = serde_json::to_string(&q).unwrap();
            let back: Quota = serde_json::from_str(&json).unwrap();
            assert_eq!(back.spec, q.spec, "{json}");
        }
    }
    let Ok(tm) = serde_json::from_slice::<TypeMeta>(data) else {
        return;
    };
    let Some(adapter) = adapter_for_kind(group_of(&tm.api_version), &tm.kind) else {
        return;
    };
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(w) = adapter.read(text, &cfg) {
        assert!(w.usage().values().all(|v| !v.is_negative()));
        let wref = adapter.workload_ref(&w.meta.namespace, &w.meta.name);
        // A reference reads back as the namespace and name that made it.
        let back = quota::workload::WorkloadRef::parse(&wref).map(|r| (r.namespace, r.name));
        assert_eq!(
            back,
            Some((w.meta.namespace.as_str(), w.meta.name.as_str())),
            "{wref}"
        );
    }
});

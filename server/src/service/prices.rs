//! The price list in force (docs/budgets.md §3, §9): one document, read
//! from a file standalone (`--price-list`) or from the cluster's
//! `PriceList` object `default`. Accrual (both modes) and reservations read
//! it through `Service::price_list`; a document that does not compile is
//! refused and the list in force stays.
//!
//! Standalone, `watch_file` reads the file again when its size or mtime
//! changes (polled) or on SIGHUP; each change that takes effect is audited
//! (`prices.reload`, before and after). In cluster mode every replica
//! follows the object with a watch (`cluster::prices`): the webhook has
//! already refused a bad one, the API server's audit log has the write.

use crate::store::audit::{self, entry};
use crate::store::sql::SqlStore;
use quota::budget::price_list_doc::{PriceListObject, MAX_DOCUMENT_BYTES};
use quota::budget::PriceList;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

/// What is in force and where it came from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InForce {
    pub list: Arc<PriceList>,
    /// `file /etc/bizrq/prices.yaml`, `PriceList default (resourceVersion 12)`,
    /// or empty: none configured (every weight 1).
    pub source: String,
    /// When it took effect here (ms).
    pub loaded_ms: i64,
}

/// The price list every decision reads; swapped whole on a change.
#[derive(Default)]
pub struct PriceBook(RwLock<Arc<InForce>>);

impl PriceBook {
    pub fn current(&self) -> Arc<InForce> {
        self.0.read().unwrap().clone()
    }

    /// Puts `new` in force; returns what it replaced.
    pub fn set(&self, new: InForce) -> Arc<InForce> {
        std::mem::replace(&mut *self.0.write().unwrap(), Arc::new(new))
    }
}

/// A document (YAML, or JSON, which is YAML) → the list it means, every
/// rule checked. The error says what to fix.
pub fn parse(text: &[u8]) -> Result<PriceList, String> {
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(format!(
            "the price list is {} bytes; at most {MAX_DOCUMENT_BYTES}",
            text.len()
        ));
    }
    let text = std::str::from_utf8(text).map_err(|_| "the price list is not UTF-8".to_string())?;
    let value: serde_json::Value =
        serde_yaml_ng::from_str(text).map_err(|e| format!("not YAML or JSON: {e}"))?;
    let obj: PriceListObject = serde_json::from_value(value).map_err(|e| e.to_string())?;
    obj.compile().map_err(|e| e.to_string())
}

/// Reads and parses the file (its size bounded before reading all of it).
pub fn read_file(path: &Path) -> Result<PriceList, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() > MAX_DOCUMENT_BYTES as u64 {
        return Err(format!(
            "{}: {} bytes; a price list is at most {MAX_DOCUMENT_BYTES}",
            path.display(),
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// The audit log's copy of a list: the document, as written back.
pub fn list_json(l: &PriceList) -> serde_json::Value {
    serde_json::to_value(l.to_spec()).unwrap_or_default()
}

/// Follows the file: polls its size and mtime every `every`, and reads it
/// at once on SIGHUP. A change that compiles takes effect and is audited
/// (actor `bizrq`); one that does not is logged and the old list stays.
pub async fn watch_file(
    book: Arc<PriceBook>,
    sql: Arc<SqlStore>,
    path: PathBuf,
    every: Duration,
    clock: super::Clock,
) {
    let stamp = |p: &Path| -> Option<(u64, SystemTime)> {
        let m = std::fs::metadata(p).ok()?;
        Some((m.len(), m.modified().ok()?))
    };
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut seen = stamp(&path);
    // A change between the server's first read and this stamp would
    // otherwise wait for the next change: read it once more now (nothing
    // happens when it is the list in force).
    reload(&book, &sql, &path, clock()).await;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            _ = tick.tick() => false,
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
        };
        let now = stamp(&path);
        if !forced && now == seen {
            continue;
        }
        seen = now;
        reload(&book, &sql, &path, clock()).await;
    }
}

/// Reads the file once more: in force and audited if it compiles and
/// differs, else logged with why and the old list kept. Whether it changed.
pub async fn reload(book: &PriceBook, sql: &SqlStore, path: &Path, now_ms: i64) -> bool {
    let list = match read_file(path) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "price list not reloaded; the one in force stays");
            return false;
        }
    };
    let before = book.current();
    if *before.list == list {
        return false;
    }
    let source = format!("file {}", path.display());
    book.set(InForce {
        list: Arc::new(list.clone()),
        source: source.clone(),
        loaded_ms: now_ms,
    });
    tracing::info!(%source, versions = list.versions.len(), "price list reloaded");
    let e = entry(
        now_ms,
        crate::authz::SYSTEM_ACTOR,
        audit::action::PRICES_RELOAD,
        "prices",
        Some(list_json(&before.list)),
        Some(list_json(&list)),
        &source,
    );
    if let Err(err) = sql.append_audit(&e).await {
        tracing::error!(error = %err, "could not write the audit entry of a price list reload");
    }
    true
}

/// The list in force as people read it (the API and the /prices page).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PricesView {
    pub source: String,
    pub loaded_ms: i64,
    pub currency: Option<quota::budget::Currency>,
    /// QoS multipliers (`--price-*`), per mille.
    pub qos: quota::cash::QosMultipliers,
    /// Newest first.
    pub versions: Vec<VersionView>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionView {
    pub effective_ms: i64,
    /// In force at the time of the view.
    pub in_force: bool,
    /// `in force`, `announced` (later) or `replaced` (earlier).
    pub state: &'static str,
    pub default_weight: quota::budget::Weight,
    /// (resource, model or `*`, weight), by resource then model.
    pub weights: Vec<(String, String, quota::budget::Weight)>,
    /// `billing: ByQuality`'s weights (None: `ByRequest`).
    pub quality: Option<quota::budget::quality::QualityWeights>,
}

impl PricesView {
    pub fn of(f: &InForce, qos: quota::cash::QosMultipliers, now_ms: i64) -> PricesView {
        let current = f.list.version_at(now_ms).map(|v| v.effective_ms);
        let mut versions: Vec<VersionView> = f
            .list
            .versions
            .iter()
            .map(|v| VersionView {
                effective_ms: v.effective_ms,
                in_force: Some(v.effective_ms) == current,
                state: match current {
                    Some(c) if c == v.effective_ms => "in force",
                    Some(c) if v.effective_ms < c => "replaced",
                    _ => "announced",
                },
                default_weight: v.default_weight,
                quality: v.quality,
                weights: v
                    .weights
                    .iter()
                    .map(|(k, w)| {
                        let (r, m) = quota::budget::price_list::split_model(k);
                        let m = m.unwrap_or(quota::budget::price_list_doc::ANY_MODEL);
                        (r.to_string(), m.to_string(), *w)
                    })
                    .collect(),
            })
            .collect();
        versions.reverse();
        PricesView {
            source: f.source.clone(),
            loaded_ms: f.loaded_ms,
            currency: f.list.currency.clone(),
            qos,
            versions,
        }
    }

    /// What an hour of one card (or core) at `w` costs: `6.25 EUR`, or
    /// `2.5 h` of budget without a currency.
    pub fn per_hour(&self, w: quota::budget::Weight) -> String {
        let hours = quota::Quantity::from_nanos(w.per_mille() * 1_000_000);
        match &self.currency {
            Some(c) => c.format(hours),
            None => format!("{} h", quota::readable::grouped(hours)),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        let m = |pm: i128| quota::budget::Weight(pm).to_string();
        serde_json::json!({
            "source": (!self.source.is_empty()).then_some(&self.source),
            "loadedAt": (!self.source.is_empty()).then(|| quota::time::format_rfc3339(self.loaded_ms)),
            "currency": self.currency,
            "qosMultipliers": {
                "guaranteed": m(self.qos.guaranteed),
                "burstable": m(self.qos.burstable),
                "bestEffort": m(self.qos.best_effort),
            },
            "versions": self.versions.iter().map(|v| {
                let mut weights: std::collections::BTreeMap<&str, std::collections::BTreeMap<&str, String>> = Default::default();
                for (r, model, w) in &v.weights {
                    weights.entry(r).or_default().insert(model, w.to_string());
                }
                let mut out = serde_json::json!({
                    "effectiveFrom": quota::time::format_rfc3339(v.effective_ms),
                    "inForce": v.in_force,
                    "state": v.state,
                    "defaultWeight": v.default_weight.to_string(),
                    "weights": weights,
                    "billing": if v.quality.is_some() { "ByQuality" } else { "ByRequest" },
                });
                if let Some(q) = &v.quality {
                    out["qualityWeights"] = serde_json::json!(q);
                }
                out
            }).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_compiles() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples/prices.yaml");
        let l = read_file(&path).unwrap();
        assert_eq!(l.versions.len(), 2);
        assert_eq!(
            l.weight_at(l.versions[1].effective_ms, "nvidia.com/gpu", Some("H100")),
            quota::budget::Weight(2000)
        );
    }

    #[test]
    fn the_same_document_reads_as_yaml_or_json() {
        let yaml = br#"
apiVersion: bizrq.io/v1
kind: PriceList
metadata: {name: default}
spec:
  currency: {unit: EUR, perCardHour: 2.5}
  versions:
  - effectiveFrom: "2026-01-01T00:00:00Z"
    weights:
      requests.nvidia.com/gpu: {A100: 1.0, H100: 2.5, T4: 0.3}
"#;
        let l = parse(yaml).unwrap();
        let json = serde_json::to_vec(&serde_json::json!({
            "apiVersion": "bizrq.io/v1", "kind": "PriceList", "metadata": {"name": "default"},
            "spec": list_json(&l)
        }))
        .unwrap();
        assert_eq!(parse(&json).unwrap(), l);
        assert!(parse(b"spec: {versions: [{effectiveFrom: soon}]}")
            .unwrap_err()
            .contains("RFC 3339"));
        assert!(parse(&vec![b' '; MAX_DOCUMENT_BYTES + 1])
            .unwrap_err()
            .contains("at most"));
    }
}

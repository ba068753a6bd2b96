//! What admission reads of autoscaling objects beside workloads: a
//! Scale's desired replicas and a HorizontalPodAutoscaler's target and
//! `maxReplicas`.

use super::model::{
    check_count, check_len, check_names, check_target, group_of, version_of, AdapterError, MAX_KIND,
};
use super::read::{parse, Source};
use crate::usage::ObjectMeta;
use serde::Deserialize;

/// `autoscaling/v1` Scale: only the desired replicas matter.
pub fn read_scale_replicas(json: &str) -> Result<i64, AdapterError> {
    #[derive(Deserialize)]
    struct Scale {
        #[serde(default)]
        spec: ScaleSpec,
    }
    #[derive(Default, Deserialize)]
    struct ScaleSpec {
        #[serde(default)]
        replicas: i64,
    }
    let s: Scale = parse(json).map_err(|message| AdapterError::Parse {
        kind: "Scale".into(),
        message,
    })?;
    check_count("spec.replicas", s.spec.replicas)
        .map_err(|p| AdapterError::Invalid(format!("bizrq: Scale: {p}")))
}

/// What admission needs of a HorizontalPodAutoscaler (v1 or v2).
#[derive(Clone, Debug)]
pub struct Hpa {
    pub meta: ObjectMeta,
    pub target_group: String,
    /// The version of the target's `apiVersion` (`apps/v1` → `v1`).
    pub target_version: String,
    pub target_kind: String,
    pub target_name: String,
    pub max_replicas: i64,
}

pub fn read_hpa(json: &str) -> Result<Hpa, AdapterError> {
    hpa_from(Source::Text(json))
}

/// `read_hpa` of an object a watch has parsed already.
pub fn read_hpa_value(object: &serde_json::Value) -> Result<Hpa, AdapterError> {
    hpa_from(Source::Value(object))
}

fn hpa_from(src: Source<'_>) -> Result<Hpa, AdapterError> {
    #[derive(Deserialize)]
    struct H {
        #[serde(default)]
        metadata: ObjectMeta,
        spec: HSpec,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct HSpec {
        scale_target_ref: Target,
        max_replicas: i64,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Target {
        #[serde(default)]
        api_version: String,
        kind: String,
        name: String,
    }
    const KIND: &str = "HorizontalPodAutoscaler";
    let h: H = src.parse().map_err(|message| AdapterError::Parse {
        kind: KIND.into(),
        message,
    })?;
    let target = &h.spec.scale_target_ref;
    check_target(&h.metadata.namespace, &h.metadata.name)
        .and_then(|()| {
            check_names(
                "metadata.namespace",
                &h.metadata.namespace,
                "spec.scaleTargetRef.name",
                &target.name,
            )
        })
        .and_then(|()| check_len("spec.scaleTargetRef.kind", &target.kind, MAX_KIND))
        .and_then(|()| check_count("spec.maxReplicas", h.spec.max_replicas))
        .map_err(|p| AdapterError::Invalid(format!("bizrq: {KIND}: {p}")))?;
    Ok(Hpa {
        target_group: group_of(&h.spec.scale_target_ref.api_version).to_string(),
        target_version: version_of(&h.spec.scale_target_ref.api_version).to_string(),
        target_kind: h.spec.scale_target_ref.kind,
        target_name: h.spec.scale_target_ref.name,
        max_replicas: h.spec.max_replicas,
        meta: h.metadata,
    })
}

//! A watched object as the API server sent it: the parsed JSON, whole, for
//! the `quota` crate's readers (`read_pod_value`, `Adapter::read_value`,
//! `read_hpa_value`), so no object is printed and parsed again; its
//! metadata is also typed, for kube-runtime's watcher.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;
use kube::core::DynamicResourceScope;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;

/// An object of a kind known at run time (an `ApiResource`), like
/// `DynamicObject`, but kept as one JSON value.
#[derive(Clone, Debug)]
pub struct RawObject {
    pub metadata: ObjectMeta,
    pub json: serde_json::Value,
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawObject, D::Error> {
        let json = serde_json::Value::deserialize(d)?;
        let metadata = match json.get("metadata") {
            Some(m) => ObjectMeta::deserialize(m).map_err(D::Error::custom)?,
            None => ObjectMeta::default(),
        };
        Ok(RawObject { metadata, json })
    }
}

impl kube::Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    /// Changes the typed metadata only; the readers read `json`.
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

//! Queue mark keys kept in a Secret that bizrq makes itself
//! (`--queue-mark-key-secret`, docs/queueing.md §12, "Keys"): every
//! replica reads the same Secret in its namespace, and the first to find
//! none creates it with a fresh random key. Two replicas that start at
//! once both try; the API server lets one create win (409 to the other),
//! and the loser reads the winner's, so all sign and verify with one key.

use crate::service::queue_mark::MarkKeys;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use std::collections::BTreeMap;

/// The Secret's key holding the mark keys, as `--queue-mark-key-file`
/// holds them: one hex key a line, the first signing.
pub const DATA_KEY: &str = "keys";

/// Random bytes of a key this replica makes: the least a key may have.
const NEW_KEY_BYTES: usize = crate::service::queue_mark::MIN_KEY;

/// The keys of Secret `name` in `namespace`, creating it with one fresh
/// key when there is none.
pub async fn get_or_create(
    client: Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<MarkKeys> {
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let where_ = format!("Secret {namespace}/{name} (--queue-mark-key-secret)");
    for _ in 0..3 {
        if let Some(s) = api
            .get_opt(name)
            .await
            .map_err(|e| anyhow::anyhow!("cannot read {where_}: {e}"))?
        {
            return keys_of(&s).map_err(|e| anyhow::anyhow!("{where_}: {e}"));
        }
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/part-of".to_string(),
                    "bizrq".to_string(),
                )])),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                DATA_KEY.to_string(),
                ByteString(format!("{}\n", fresh_key()).into_bytes()),
            )])),
            type_: Some("Opaque".to_string()),
            ..Default::default()
        };
        match api.create(&PostParams::default(), &secret).await {
            Ok(s) => {
                tracing::info!(secret = %name, %namespace, "queue mark keys: created the Secret with a new key");
                return keys_of(&s).map_err(|e| anyhow::anyhow!("{where_}: {e}"));
            }
            // Another replica created it first: read theirs.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(anyhow::anyhow!("cannot create {where_}: {e}")),
        }
    }
    Err(anyhow::anyhow!(
        "{where_}: created by another replica but never readable"
    ))
}

/// The mark keys a Secret holds under `DATA_KEY`.
fn keys_of(s: &Secret) -> Result<MarkKeys, String> {
    let bytes = s
        .data
        .as_ref()
        .and_then(|d| d.get(DATA_KEY))
        .ok_or_else(|| format!("it holds no '{DATA_KEY}'"))?;
    let text = std::str::from_utf8(&bytes.0).map_err(|_| format!("'{DATA_KEY}' is not text"))?;
    MarkKeys::parse(text)
}

/// A new key: `NEW_KEY_BYTES` from the operating system's generator, hex.
fn fresh_key() -> String {
    crate::util::hex(&rand::random::<[u8; NEW_KEY_BYTES]>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_key_is_long_enough_and_differs_each_time() {
        let (a, b) = (fresh_key(), fresh_key());
        assert_eq!(a.len(), NEW_KEY_BYTES * 2);
        assert_ne!(a, b);
        assert!(MarkKeys::parse(&a).is_ok());
    }

    #[test]
    fn a_secret_without_keys_or_with_a_short_one_is_refused_in_words() {
        let mut s = Secret::default();
        assert_eq!(keys_of(&s).unwrap_err(), "it holds no 'keys'");
        s.data = Some(BTreeMap::from([(
            DATA_KEY.to_string(),
            ByteString(b"abcd\n".to_vec()),
        )]));
        assert!(keys_of(&s).unwrap_err().contains("at least"));
    }
}

//! What the service answers when it cannot do what was asked, and how
//! the store's, the tree's and the transfers' refusals become it.

use crate::store::{Refusal, StoreError};
use quota::admission::Denial;
use quota::transfer::TransferError;
use quota::tree::TreeError;

/// Compare-and-swap attempts before giving up (fail closed). Within one
/// process writers of a quota are queued by a lock, so conflicts only come
/// from other replicas.
pub const MAX_ATTEMPTS: u32 = 12;

#[derive(Clone, Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Denied(#[from] Denial),
    #[error(transparent)]
    Tree(TreeError),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    BadRequest(String),
    #[error(
        "bizrq {0}: too many concurrent changes, gave up after {MAX_ATTEMPTS} attempts; try again"
    )]
    Contention(String),
    /// The API server refused a write: an admission webhook's denial, or
    /// its own authorisation.
    #[error("{0}")]
    Refused(String),
    /// A dependency cannot answer now (the API server, or its call to an
    /// admission webhook); trying again later may succeed.
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

/// Seconds a client should wait before retrying after `Contention`: the
/// writers it lost to finish within milliseconds.
pub const CONTENTION_RETRY_SECS: u64 = 1;

impl ServiceError {
    /// Seconds to wait before trying again, for the errors that pass.
    pub fn retry_after(&self) -> Option<u64> {
        matches!(self, ServiceError::Contention(_)).then_some(CONTENTION_RETRY_SECS)
    }
}

impl From<TreeError> for ServiceError {
    fn from(e: TreeError) -> Self {
        match e {
            // Not a broken rule: the change must wait for a transfer.
            TreeError::Held { .. } => ServiceError::Conflict(e.to_string()),
            // A request over a limit: 400 naming it, as the API's other
            // bounds answer.
            TreeError::TooManyKeys { .. }
            | TreeError::TooWide { .. }
            | TreeError::TooDeep { .. } => ServiceError::BadRequest(e.to_string()),
            e => ServiceError::Tree(e),
        }
    }
}

impl From<TransferError> for ServiceError {
    fn from(e: TransferError) -> Self {
        match e {
            TransferError::NotFound(n) => ServiceError::NotFound(format!("bizrq {n} not found")),
            TransferError::DoesNotFit(short) => ServiceError::Denied(Denial::Short(short)),
            TransferError::Held { .. }
            | TransferError::InFlux { .. }
            | TransferError::Moved(_)
            | TransferError::NotHeld { .. } => ServiceError::Conflict(e.to_string()),
            TransferError::Invalid(_)
            | TransferError::MissingKey { .. }
            | TransferError::Insufficient { .. } => ServiceError::BadRequest(e.to_string()),
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(n) => ServiceError::NotFound(format!("bizrq {n} not found")),
            StoreError::AlreadyExists(n) => {
                ServiceError::AlreadyExists(format!("bizrq {n} already exists"))
            }
            StoreError::Conflict(n) => ServiceError::Conflict(format!(
                "bizrq {n} was changed by someone else; read it again"
            )),
            StoreError::Backend(m) => ServiceError::Internal(m),
            StoreError::Refused { kind, message } => match kind {
                Refusal::BadRequest => ServiceError::BadRequest(message),
                Refusal::NotFound => ServiceError::NotFound(message),
                Refusal::AlreadyExists => ServiceError::AlreadyExists(message),
                Refusal::Conflict => ServiceError::Conflict(message),
                Refusal::Forbidden => ServiceError::Refused(message),
                Refusal::Unavailable => ServiceError::Unavailable(message),
                Refusal::Internal => ServiceError::Internal(message),
            },
        }
    }
}

//! The shared pieces of error handling. Each service keeps its own error enum and maps it to
//! a `Status` in one place; these helpers keep the messages uniform: validation errors name
//! the field and the reason, internal errors are logged with their cause chain and answered
//! with a generic message.

use std::fmt::Display;

use tonic::Status;

/// What a store adapter reports; the domain decides what each means to the caller.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule was hit (e.g. a taken username).
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("not found")]
    NotFound,
    /// The store could not be reached or failed; the operation may be retried.
    #[error("store unavailable")]
    Unavailable(#[source] anyhow::Error),
}

#[cfg(feature = "sql")]
impl From<sea_orm::DbErr> for StoreError {
    fn from(err: sea_orm::DbErr) -> Self {
        match err.sql_err() {
            Some(sea_orm::SqlErr::UniqueConstraintViolation(what)) => Self::Conflict(what),
            _ => Self::Unavailable(err.into()),
        }
    }
}

#[cfg(feature = "redis")]
impl From<fred::error::Error> for StoreError {
    fn from(err: fred::error::Error) -> Self {
        Self::Unavailable(err.into())
    }
}

/// The trailer of a RESOURCE_EXHAUSTED or UNAVAILABLE answer saying how many milliseconds
/// to wait before retrying.
pub const RETRY_AFTER_HEADER: &str = "retry-after-ms";

/// `INVALID_ARGUMENT` naming the field at fault.
pub fn invalid(field: &str, reason: impl Display) -> Status {
    Status::invalid_argument(format!("{field}: {reason}"))
}

/// Logs `err` with its whole cause chain and answers with a message that leaks nothing.
pub fn internal(err: &(dyn std::error::Error + 'static)) -> Status {
    tracing::error!(error = %chain(err), "internal error");
    Status::internal("internal error; see the service's logs")
}

/// `UNAVAILABLE` for a store failure: logged, retryable by the caller.
pub fn unavailable(err: &(dyn std::error::Error + 'static)) -> Status {
    tracing::error!(error = %chain(err), "store unavailable");
    Status::unavailable("a store is unavailable; retry later")
}

/// `err: cause: cause…` on one line.
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

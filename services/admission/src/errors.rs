//! How admission answers what it cannot do: the error kinds its handlers
//! share.

use qm_service::api::{self, invalid};
use qm_wire::messages::{ApiError, ErrorCode};
use qm_wire::subjects;

/// A handler's result: the reply, or the error the caller is told.
pub(crate) type Result<T> = std::result::Result<T, ApiError>;

/// A failure of storage or NATS: the caller may try again.
pub(crate) fn transient(what: &str, e: impl std::fmt::Display) -> ApiError {
    api::error(ErrorCode::Transient, format!("{what}: {e}; try again"))
}

/// `value` as one subject token, or INVALID naming `field`.
pub(crate) fn token_field(field: &str, value: &str) -> Result<()> {
    subjects::token(value)
        .map(|_| ())
        .map_err(|e| invalid(format!("{field}: {e}"), Vec::new()))
}

/// The tenancy's refusal, as ACCESS_DENIED.
pub(crate) fn denied(e: qm_tenancy::Denied) -> ApiError {
    api::error(ErrorCode::AccessDenied, e.0)
}

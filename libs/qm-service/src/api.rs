//! Decoding requests and sending replies, the same way in every service.

use qm_wire::messages::{ApiError, ErrorCode, Problem, Reply};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub fn error(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError {
        code,
        message: message.into(),
        problems: Vec::new(),
    }
}

pub fn invalid(message: impl Into<String>, problems: Vec<Problem>) -> ApiError {
    ApiError {
        code: ErrorCode::Invalid,
        message: message.into(),
        problems,
    }
}

/// One problem of an invalid request: the field, and what is wrong.
pub fn problem(field: &str, message: impl Into<String>) -> Problem {
    Problem {
        field: field.to_string(),
        message: message.into(),
    }
}

/// Decodes a request body: size-checked, JSON, with the problem named.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, ApiError> {
    if payload.len() > qm_wire::MAX_REQUEST_BYTES {
        return Err(error(
            ErrorCode::Invalid,
            format!(
                "request is {} bytes; the limit is {} bytes",
                payload.len(),
                qm_wire::MAX_REQUEST_BYTES
            ),
        ));
    }
    serde_json::from_slice(payload)
        .map_err(|e| error(ErrorCode::Invalid, format!("malformed request body: {e}")))
}

/// The JSON of a reply.
pub fn encode<T: Serialize>(reply: &Result<T, ApiError>) -> bytes::Bytes {
    let body = match reply {
        Ok(v) => serde_json::to_vec(&Reply::Ok(v)),
        Err(e) => serde_json::to_vec(&Reply::<()>::Error(e.clone())),
    };
    body.unwrap_or_else(|_| {
        br#"{"error":{"code":"INTERNAL","message":"reply could not be encoded"}}"#.to_vec()
    })
    .into()
}

/// Answers `msg` if it asked for an answer.
pub async fn respond<T: Serialize>(
    client: &async_nats::Client,
    msg: &async_nats::Message,
    reply: &Result<T, ApiError>,
) {
    if let Some(to) = &msg.reply {
        if let Err(e) = client.publish(to.clone(), encode(reply)).await {
            tracing::warn!(error = %e, "could not send a reply");
        }
    }
}

/// Converts core problems to wire problems.
pub fn problems(list: &[qm_core::ConfigProblem]) -> Vec<Problem> {
    list.iter()
        .map(|p| Problem {
            field: p.field.clone(),
            message: p.message.clone(),
        })
        .collect()
}

//! The API client: one request, one typed reply or one typed error.

use std::time::Duration;

pub mod events;
pub mod ops;

use qm_wire::messages::{ApiError, ErrorCode, Reply};
use qm_wire::subjects::Operation;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::Instrument;

/// A failed call: the service's typed error, or no answer at all.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("{}{}", .0.message, problems(.0))]
    Api(ApiError),
    #[error("no reply on {subject} within {secs}s: is the {service} service running?")]
    NoReply {
        subject: String,
        service: &'static str,
        secs: u64,
    },
    /// The NATS server refused to carry the request (a permissions
    /// violation): this principal may not use that subject.
    #[error("NATS refused the request on {subject}: {detail}")]
    Refused { subject: String, detail: String },
    #[error("{0}")]
    Transport(String),
}

fn problems(e: &ApiError) -> String {
    if e.problems.is_empty() {
        return String::new();
    }
    let list: Vec<String> = e
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.message))
        .collect();
    format!(" ({})", list.join("; "))
}

impl CallError {
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            CallError::Api(e) => Some(e.code),
            _ => None,
        }
    }
}

#[derive(Clone)]
pub struct Client {
    pub nats: async_nats::Client,
    pub timeout: Duration,
    /// Who this client is: its requests go on `qm.v1.api.<principal>.*`.
    pub principal: String,
    /// The AWS Batch gateway's client: the principal whose signature it
    /// verified, sent in the `Qm-Caller` header (admission believes it
    /// only from a gateway principal; ADR 0012).
    pub acting_for: Option<String>,
}

impl Client {
    pub fn new(nats: async_nats::Client, principal: impl Into<String>) -> Client {
        Client {
            nats,
            timeout: Duration::from_secs(10),
            principal: principal.into(),
            acting_for: None,
        }
    }

    /// This client, its requests made for `principal` (the gateway's).
    pub fn acting_for(&self, principal: &str) -> Client {
        Client {
            acting_for: Some(principal.to_string()),
            ..self.clone()
        }
    }

    /// Sends raw bytes to `subject` and decodes the reply.
    pub async fn request_raw<R: DeserializeOwned>(
        &self,
        subject: String,
        body: bytes::Bytes,
        service: &'static str,
    ) -> Result<R, CallError> {
        let span = crate::trace::client_span(&crate::trace::template(&subject), &subject, true);
        let reply = self
            .request_in(subject, body, service)
            .instrument(span.clone())
            .await;
        if reply.is_err() {
            span.record("otel.status_code", "ERROR");
        }
        reply
    }

    async fn request_in<R: DeserializeOwned>(
        &self,
        subject: String,
        body: bytes::Bytes,
        service: &'static str,
    ) -> Result<R, CallError> {
        let started = std::time::Instant::now();
        let mut headers = crate::trace::headers();
        if let Some(who) = &self.acting_for {
            headers.insert(qm_wire::subjects::CALLER_HEADER, who.as_str());
        }
        let request = self
            .nats
            .request_with_headers(subject.clone(), headers, body);
        let msg = match tokio::time::timeout(self.timeout, request).await {
            Err(_) | Ok(Err(_)) if crate::violations::since(started).is_some() => {
                return Err(CallError::Refused {
                    subject,
                    detail: crate::violations::since(started).unwrap_or_default(),
                })
            }
            Err(_) => {
                return Err(CallError::NoReply {
                    subject,
                    service,
                    secs: self.timeout.as_secs(),
                })
            }
            Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                return Err(CallError::NoReply {
                    subject,
                    service,
                    secs: 0,
                })
            }
            Ok(Err(e)) => return Err(CallError::Transport(e.to_string())),
            Ok(Ok(msg)) => msg,
        };
        match serde_json::from_slice::<Reply<R>>(&msg.payload) {
            Ok(Reply::Ok(v)) => Ok(v),
            Ok(Reply::Error(e)) => Err(CallError::Api(e)),
            Err(e) => Err(CallError::Transport(format!(
                "unreadable reply on {subject}: {e}"
            ))),
        }
    }

    /// Calls an API operation.
    pub async fn call<Q: Serialize, R: DeserializeOwned>(
        &self,
        op: Operation,
        request: &Q,
    ) -> Result<R, CallError> {
        let body = serde_json::to_vec(request).map_err(|e| CallError::Transport(e.to_string()))?;
        let subject = op
            .subject(&self.principal)
            .map_err(|e| CallError::Transport(format!("principal {e}")))?;
        self.request_raw(subject, body.into(), "admission").await
    }
}

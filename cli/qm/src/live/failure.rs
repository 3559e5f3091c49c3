//! What a command fails with: one line for the user and the exit code.

use qm_service::client::CallError;

/// A failure: one line for the user and the exit code.
pub struct Failure(pub String, pub u8);

impl From<CallError> for Failure {
    fn from(e: CallError) -> Self {
        let code = match e {
            CallError::NoReply { .. } | CallError::Transport(_) | CallError::Refused { .. } => 3,
            CallError::Api(_) => 1,
        };
        Failure(e.to_string(), code)
    }
}

pub(super) fn usage(message: impl Into<String>) -> Failure {
    Failure(message.into(), 2)
}

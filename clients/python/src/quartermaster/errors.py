"""Errors: one exception class per API error code, plus the failures that
come before an answer (none came, or the NATS server refused the subject)."""

from __future__ import annotations

from typing import Optional


class QuartermasterError(Exception):
    """Anything the client could not do. `code` is the API's error code
    (INVALID, NOT_FOUND, CONFLICT, TRANSIENT, INTERNAL, ACCESS_DENIED), or
    None when no answer came."""

    code: Optional[str] = None
    retryable = False

    def __init__(self, message: str, problems: Optional[list] = None):
        super().__init__(message)
        self.message = message
        #: [{"field": ..., "message": ...}]: where an INVALID request is wrong.
        self.problems = problems or []

    def __str__(self) -> str:
        if not self.problems:
            return self.message
        listed = "; ".join(f"{p.get('field')}: {p.get('message')}" for p in self.problems)
        return f"{self.message} ({listed})"


class InvalidRequest(QuartermasterError):
    """The request is wrong (`problems` says where); do not retry it unchanged."""

    code = "INVALID"


class NotFound(QuartermasterError):
    code = "NOT_FOUND"


class Conflict(QuartermasterError):
    """The request conflicts with the current state."""

    code = "CONFLICT"


class TransientError(QuartermasterError):
    """Try again later (the service asked for it)."""

    code = "TRANSIENT"
    retryable = True


class InternalError(QuartermasterError):
    code = "INTERNAL"


class AccessDenied(QuartermasterError):
    """Authenticated, but this principal may not do this (the message names
    the principal, the operation and the share). Do not retry."""

    code = "ACCESS_DENIED"


class NoReply(QuartermasterError):
    """No answer came in time: is admission running? Safe to retry a submit
    that carries a client token."""

    retryable = True


class ConnectFailed(QuartermasterError):
    """No connection: the server refused the credentials or the TLS
    handshake, or could not be reached (after two tries of each server)."""


class Refused(QuartermasterError):
    """The NATS server refused the subject: this principal may not use it
    (a permissions violation)."""


BY_CODE = {
    cls.code: cls
    for cls in (InvalidRequest, NotFound, Conflict, TransientError, InternalError, AccessDenied)
}


def from_reply(error: dict) -> QuartermasterError:
    """The exception an API error reply ({code, message, problems}) stands for."""
    cls = BY_CODE.get(error.get("code"), QuartermasterError)
    e = cls(error.get("message", "error"), error.get("problems"))
    if cls is QuartermasterError:
        e.code = error.get("code")
    return e

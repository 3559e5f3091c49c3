//! What an executor shows an operator (see `docs/metrics.md`): attempts
//! here, how they ended, how long stops take, heartbeats, fencing.

use std::sync::LazyLock;

use prometheus::{HistogramVec, IntCounterVec, IntGauge};
use qm_service::observe::{counter, histogram, register, SLOW_SECONDS};
use qm_wire::system::{EndCause, Report};

pub struct Metrics {
    pub attempts: IntGauge,
    pub ended: IntCounterVec,
    pub stop: HistogramVec,
    pub heartbeats: IntCounterVec,
    pub fenced: IntGauge,
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    Metrics {
    attempts: register(IntGauge::new(
        "qm_executor_attempts",
        "Attempts this executor holds now (launching, running or stopping).",
    )),
    ended: counter(
        "qm_executor_attempts_ended_total",
        "Attempts that ended here, by result: succeeded (exit 0), failed (another exit), stopped (by a stop command or a signal), fenced, launch_failed, not_started.",
        &["result"],
    ),
    stop: histogram(
        "qm_executor_stop_duration_seconds",
        "Time from a stop (SIGTERM to the process group) to the process's exit; killed says whether the grace ran out (SIGKILL).",
        &["killed"],
        SLOW_SECONDS,
    ),
    heartbeats: counter(
        "qm_executor_heartbeats_total",
        "Heartbeats sent, by whether the scheduler acknowledged them in time (missed: no answer within 2 s).",
        &["result"],
    ),
    fenced: register(IntGauge::new(
        "qm_executor_fenced",
        "1 while this executor has fenced itself (no heartbeat acknowledged within fenceAfterSeconds), 0 otherwise.",
    )),
}
});

/// How an attempt's end report reads as a result label.
pub fn result(r: &Report) -> &'static str {
    match (&r.cause, &r.error, r.exit_code, r.signal) {
        (Some(EndCause::Fenced), ..) => "fenced",
        (Some(EndCause::NotStarted), ..) => "not_started",
        (_, Some(_), ..) => "launch_failed",
        (_, _, Some(0), _) => "succeeded",
        (_, _, _, Some(_)) => "stopped",
        _ => "failed",
    }
}

"""What a stored event holds, decoded: StoredEvent.job(), .preemption(),
.checkpoint(), and a one-line description."""

from __future__ import annotations

from typing import Optional

from ._api import CheckpointCommit, JobStateChange, PreemptionEvent, StoredEvent


def _job(self: StoredEvent) -> Optional[JobStateChange]:
    """The job state change, when the event is one."""
    return JobStateChange.from_dict(self.event) if self.kind == "JOB" else None


def _preemption(self: StoredEvent) -> Optional[PreemptionEvent]:
    """The preemption (started or completed), when the event is one."""
    return PreemptionEvent.from_dict(self.event) if self.kind == "PREEMPTION" else None


def _checkpoint(self: StoredEvent) -> Optional[CheckpointCommit]:
    """The committed checkpoint, when the event is one."""
    return CheckpointCommit.from_dict(self.event) if self.kind == "CHECKPOINT" else None


def _describe(self: StoredEvent) -> str:
    """One line: the job and what happened to it."""
    if (c := self.job()) is not None:
        why = f" ({c.status_reason})" if c.status_reason else ""
        return f"{self.job_id}: {c.from_} -> {c.to}{why}"
    if (p := self.preemption()) is not None:
        whom = f" for {p.for_job_id}" if p.for_job_id else ""
        return f"{self.job_id}: preemption {p.kind} {p.phase} (attempt {p.attempt}){whom}"
    if (k := self.checkpoint()) is not None:
        step = f" at step {k.step}" if k.step is not None else ""
        return f"{self.job_id}: checkpoint {k.seq} of attempt {k.attempt} committed{step}"
    return f"{self.job_id}: {self.kind}"


StoredEvent.job = _job
StoredEvent.preemption = _preemption
StoredEvent.checkpoint = _checkpoint
StoredEvent.describe = _describe

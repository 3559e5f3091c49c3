"""The client: connect as a principal, call operations, follow events."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, AsyncIterator, Optional

import nats
from nats.errors import Error as NatsError, NoRespondersError, TimeoutError as NatsTimeout

from . import errors
from ._api import OPERATIONS, EventPage, ListEvents, Model, Operations, StoredEvent, SubmitServiceJob
from ._api import SubmitServiceJobResponse

#: The header line naming the principal in a credentials file `qm auth` wrote.
KEY_HEADER = "# quartermaster principal: "
#: How long one ListEvents request waits for new events.
WAIT_SECONDS = 10
FINAL = ("SUCCEEDED", "FAILED")


def read_key_file(path: str | Path) -> tuple[Optional[str], str]:
    """The principal a `<principal>.nk` file names (or None) and its seed."""
    text = Path(path).read_text()
    principal, seed = None, None
    for line in (l.strip() for l in text.splitlines()):
        if line.startswith(KEY_HEADER):
            principal = line[len(KEY_HEADER):].strip()
        elif line.startswith("SU"):
            seed = line
    if seed is None:
        raise errors.QuartermasterError(f"{path} holds no user nkey seed (a line starting with SU)")
    try:
        import nkeys

        nkeys.from_seed(seed.encode())
    except Exception as e:
        raise errors.QuartermasterError(f"{path}: not a valid nkey seed ({type(e).__name__})") from None
    return principal, seed


async def connect(
    url: str = "nats://127.0.0.1:4222",
    *,
    nkey_file: Optional[str | Path] = None,
    creds_file: Optional[str | Path] = None,
    principal: Optional[str] = None,
    ca_file: Optional[str | Path] = None,
    cert_file: Optional[str | Path] = None,
    key_file: Optional[str | Path] = None,
    timeout: float = 10.0,
    name: str = "quartermaster-python",
) -> "Client":
    """Connects as a principal. `nkey_file` is the `<principal>.nk` file `qm
    auth` wrote (it names its principal); `creds_file` a JWT credentials
    file for servers in operator mode (give `principal` too). `ca_file`
    (and a client certificate) for TLS; a `tls://` URL requires TLS. Several
    servers of a cluster may be given, comma-separated."""
    # The first connection fails at once when refused (credentials, TLS)
    # and after two tries of each server when unreachable; once connected,
    # the connection is remade forever after an outage.
    options: dict[str, Any] = {"name": name, "connect_timeout": 5, "allow_reconnect": False,
                               "max_reconnect_attempts": 2, "reconnect_time_wait": 0.5}
    if nkey_file is not None:
        named, seed = read_key_file(nkey_file)
        principal = principal or named
        if principal is None:
            raise errors.QuartermasterError(f"{nkey_file} does not name its principal; pass principal=")
        options["nkeys_seed_str"] = seed
    elif creds_file is not None:
        if principal is None:
            raise errors.QuartermasterError("with creds_file, pass principal= (the principal the credentials belong to)")
        options["user_credentials"] = str(creds_file)
    if principal is None:
        raise errors.QuartermasterError("give nkey_file (the file `qm auth` wrote) or creds_file and principal")
    if ca_file is not None or url.startswith("tls://"):
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        if cert_file is not None:
            context.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
        options["tls"] = context
    refused: list[str] = []

    async def on_error(e: Exception) -> None:
        if "permissions violation" in str(e).lower():
            refused.append(str(e))

    options["error_cb"] = on_error
    servers = [s.strip() for s in url.split(",") if s.strip()]
    # Replies arrive under _INBOX_<principal>., the one inbox the server
    # lets this principal subscribe to.
    try:
        nc = await nats.connect(servers, inbox_prefix=f"_INBOX_{principal}", **options)
    except (OSError, NatsError, asyncio.TimeoutError) as e:
        raise errors.ConnectFailed(f"cannot connect to NATS at {url} as {principal}: {type(e).__name__}: {e}") from e
    nc.options.update(allow_reconnect=True, max_reconnect_attempts=-1, reconnect_time_wait=2)
    return Client(nc, principal, timeout=timeout, refused=refused)


class Client(Operations):
    """The API as one principal: one method per operation (generated from
    docs/asyncapi.yaml), `submit` that retries safely, and `events`/`watch`
    to follow the stored events from a cursor."""

    def __init__(self, nc, principal: str, *, timeout: float = 10.0, refused: Optional[list] = None):
        self.nats = nc
        self.principal = principal
        self.timeout = timeout
        self._refused = refused if refused is not None else []

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        await self.nats.drain()

    async def call(self, operation: str, body: dict, timeout: Optional[float] = None) -> dict:
        """Sends one request (a JSON object) and returns the result of its
        reply, raising the API's error as its exception."""
        if operation not in OPERATIONS:
            raise errors.InvalidRequest(f"no operation {operation!r} in API v1")
        subject = f"qm.v1.api.{self.principal}.{operation}"
        seen = len(self._refused)
        try:
            msg = await self.nats.request(subject, json.dumps(body).encode(), timeout=timeout or self.timeout)
        except NoRespondersError:
            raise errors.NoReply(f"no service answers {subject}: is admission running?") from None
        except NatsTimeout:
            await asyncio.sleep(0.05)
            if len(self._refused) > seen:
                raise errors.Refused(f"NATS refused the request on {subject}: {self._refused[-1]}") from None
            raise errors.NoReply(
                f"no reply on {subject} within {timeout or self.timeout:g}s: is admission running?"
            ) from None
        except NatsError as e:  # the connection closed, a full buffer while reconnecting, ...
            raise errors.NoReply(f"no reply on {subject}: the NATS connection failed ({type(e).__name__}: {e})") from None
        try:
            reply = json.loads(msg.data)
        except ValueError as e:
            raise errors.QuartermasterError(f"unreadable reply on {subject}: {e}") from None
        if "error" in reply:
            raise errors.from_reply(reply["error"])
        return reply.get("ok")

    async def _call(self, operation: str, request: Any, fields: dict) -> Any:
        request_type, reply_type = OPERATIONS[operation]
        if request is None:
            request = request_type.from_fields(fields) if request_type else dict(fields)
        elif fields:
            raise TypeError(f"{operation}: give the request or its fields, not both")
        body = request.to_dict() if isinstance(request, Model) else request
        ok = await self.call(operation, body)
        return reply_type.from_dict(ok) if reply_type and isinstance(ok, dict) else ok

    async def submit(self, request: Optional[SubmitServiceJob] = None, /, **fields: Any) -> SubmitServiceJobResponse:
        """Submits a job exactly once: it carries a client token (a new one
        unless it has its own), and the submit is retried while no answer
        comes or the service asks to try again, so a retry never makes a
        second job."""
        job = request if request is not None else SubmitServiceJob.from_fields(fields)
        if not job.client_token:
            job.client_token = f"py-{uuid.uuid4().hex}"
        pause = 0.2
        for attempt in range(9):
            try:
                return await self.submit_service_job(job)
            except (errors.NoReply, errors.TransientError):
                if attempt == 8:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
        raise AssertionError("unreachable")

    async def events(
        self,
        *,
        job_queue: Optional[str] = None,
        quota_share_name: Optional[str] = None,
        job_id: Optional[str] = None,
        after: Optional[str] = None,
        since: Optional[int] = None,
    ) -> AsyncIterator[StoredEvent]:
        """Every stored event the principal may read (job state changes,
        preemptions, committed checkpoints), oldest first, from the cursor
        `after` (an event's `cursor`), else from `since` (ms since the Unix
        epoch), else from the oldest kept; then each new one as it is
        stored, for as long as you iterate. NATS outages and admission
        restarts are waited out; access denied or an invalid request raise.

        Keep each event's `cursor` with what you did with it: started again
        from it, the iterator goes on with the next event, none missed and
        none twice."""
        async for page in self._pages(job_queue=job_queue, quota_share_name=quota_share_name,
                                      job_id=job_id, after=after, since=since):
            for event in page.events:
                yield event

    async def _pages(self, **selection: Any) -> AsyncIterator[EventPage]:
        """ListEvents page after page, each waiting for new events."""
        request = ListEvents(wait_seconds=WAIT_SECONDS, **selection)
        pause = 0.2
        while True:
            try:
                page: EventPage = EventPage.from_dict(
                    await self.call("ListEvents", request.to_dict(), timeout=self.timeout + WAIT_SECONDS)
                )
            except (errors.NoReply, errors.TransientError):
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
                continue
            pause = 0.2
            if page.gap:
                warnings.warn("events aged out of the stream before they were read (eventsRetentionDays)")
            yield page
            request.after = page.after
            request.since = None

    async def watch(self, job_id: str, *, since: Optional[int] = None) -> AsyncIterator[StoredEvent]:
        """A job's events until it has SUCCEEDED or FAILED, from `since` (ms
        since the Unix epoch; default: the last hour), e.g. a submit's
        `submitted_at`. A job that had ended before what is kept or read
        ends the iteration once the stored events are caught up with."""
        start = (since if since is not None else int(time.time() * 1000) - 3_600_000) - 5_000
        ended = False
        async for page in self._pages(job_id=job_id, since=max(start, 0)):
            for event in page.events:
                yield event
                change = event.job()
                if change is not None and change.to in FINAL and change.from_ != change.to:
                    return
            if ended:
                return  # its end was not among the events kept
            if page.caught_up:
                # Ended already? Then its end is stored within moments:
                # one more page, and no more.
                job = await self.describe_service_job(job_id=job_id)
                ended = job.status in FINAL

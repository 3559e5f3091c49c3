"""Quartermaster's API over NATS, for Python.

    import asyncio, quartermaster as qm

    async def main():
        async with await qm.connect("nats://127.0.0.1:4222", nkey_file="alice.nk") as client:
            job = await client.submit(job_name="fine-tune", job_queue="training", quota_share_name="QS1",
                                      instance_type="ml.g5.xlarge", command=["python3", "train.py"])
            async for event in client.watch(job.job_id, since=job.submitted_at):
                print(event.describe())

    asyncio.run(main())

Every operation of docs/asyncapi.yaml is a method named after it
(`describe_service_job`, `list_events`, ...), taking its request model or
the model's fields, returning its reply model; errors are exceptions
carrying the API's code (`quartermaster.errors`).
"""

from . import _events  # noqa: F401  (adds StoredEvent's helpers)
from ._api import *  # noqa: F401,F403
from ._api import MODELS, OPERATIONS
from .client import Client, connect, read_key_file
from .errors import (
    AccessDenied,
    Conflict,
    ConnectFailed,
    InternalError,
    InvalidRequest,
    NoReply,
    NotFound,
    QuartermasterError,
    Refused,
    TransientError,
)

__version__ = "0.1.0"

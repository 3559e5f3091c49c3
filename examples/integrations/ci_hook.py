#!/usr/bin/env python3
"""A CI hook: a push to the watched branch (a webhook, signed as GitHub
signs them) submits a training run of that commit, and the run's final
status is reported back to the CI system's status URL.

    ci_hook.py --nats nats://127.0.0.1:4222 --nkey vision-ci.nk \\
        --secret-file hook.secret --listen 127.0.0.1:8088 \\
        --queue training --share QS1 --instance-type ml.g5.xlarge \\
        --status-url 'http://ci.example/api/statuses/{commit}' \\
        -- python3 train.py --epochs 3

POST /hooks/push with a GitHub push event ({"ref": "refs/heads/main",
"after": "<commit>", "repository": {"full_name": ...}}) and the header
X-Hub-Signature-256: sha256=<HMAC-SHA256 of the body with the secret>.
Answers 202 {"jobId"} (a redelivered push names the same job: the commit
is the submit's client token), 401 for a missing or wrong signature, 413
for a body over 64 KiB, 400 for a body that is not a push event. The run
gets CI_COMMIT and CI_REPOSITORY in its environment and the commit in its
tags. When it ends, {"state": "success"|"failure", "commit", "jobId",
"description"} is POSTed to the status URL ({commit} filled in).
"""

import argparse
import asyncio
import hashlib
import hmac
import json
import re
import sys
import urllib.request

import quartermaster as qm

MAX_BODY = 64 * 1024
MAX_CONNECTIONS = 32
COMMIT = re.compile(r"[0-9a-f]{7,64}")


class Hook:
    def __init__(self, args, client):
        self.args = args
        self.client = client
        self.secret = open(args.secret_file, "rb").read().strip()
        if not self.secret:
            raise SystemExit(f"ci_hook: {args.secret_file} is empty: the hook would accept anyone")
        self.watching = {}
        self.connections = asyncio.Semaphore(MAX_CONNECTIONS)

    def signed(self, body, header):
        expected = ("sha256=" + hmac.new(self.secret, body, hashlib.sha256).hexdigest()).encode()
        return header is not None and hmac.compare_digest(expected, header.encode("latin-1"))

    async def push(self, event):
        """Submits the commit's run (once, whatever the redeliveries)."""
        ref, commit = event.get("ref"), event.get("after")
        repository = (event.get("repository") or {}).get("full_name", "")
        if not isinstance(ref, str) or not isinstance(commit, str) or not COMMIT.fullmatch(commit):
            return 400, {"error": "not a push event: ref and after (a commit id) are required"}
        if ref != f"refs/heads/{self.args.branch}":
            return 202, {"ignored": f"{ref} is not refs/heads/{self.args.branch}"}
        job = await self.client.submit(
            job_name=f"ci-{commit[:12]}",
            job_queue=self.args.queue,
            quota_share_name=self.args.share,
            instance_type=self.args.instance_type,
            command=self.args.command,
            environment={"CI_COMMIT": commit, "CI_REPOSITORY": repository},
            tags={"commit": commit, "repository": repository},
            # One run per commit: a redelivered push is the same run. A
            # SHA-256 commit id is longer than a token may be: its digest.
            client_token="ci-" + (commit if len(commit) <= 60 else hashlib.sha256(commit.encode()).hexdigest()[:60]),
        )
        if job.job_id not in self.watching:
            # Kept until it has reported (a task no one holds may vanish);
            # a hook started again reports a run when its push is
            # redelivered.
            task = asyncio.create_task(self.report(commit, job))
            self.watching[job.job_id] = task
            task.add_done_callback(lambda t, job_id=job.job_id: self.reported(job_id, t))
        print(f"ci_hook: {commit[:12]} -> {job.job_id}", flush=True)
        return 202, {"jobId": job.job_id}

    def reported(self, job_id, task):
        self.watching.pop(job_id, None)
        if not task.cancelled() and task.exception() is not None:
            print(f"ci_hook: following {job_id} failed: {task.exception()}", file=sys.stderr, flush=True)

    async def report(self, commit, job):
        """Waits for the run's end and reports it to the status URL."""
        final = None
        async for event in self.client.watch(job.job_id, since=job.submitted_at):
            change = event.job()
            if change is not None and change.to in ("SUCCEEDED", "FAILED"):
                final = change
        state = "success" if final.to == "SUCCEEDED" else "failure"
        status = {"state": state, "commit": commit, "jobId": job.job_id,
                  "description": f"training run {final.to.lower()}" + (f": {final.status_reason}" if final.status_reason else "")}
        url = self.args.status_url.replace("{commit}", commit)
        request = urllib.request.Request(url, data=json.dumps(status).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        for attempt in range(5):
            try:
                await asyncio.to_thread(urllib.request.urlopen, request, timeout=10)
                break
            except OSError as e:
                print(f"ci_hook: reporting {commit[:12]} failed ({e}); retrying", file=sys.stderr, flush=True)
                await asyncio.sleep(2 ** attempt)
        print(f"ci_hook: {commit[:12]} {state} ({job.job_id})", flush=True)

    async def serve(self, reader, writer):
        if self.connections.locked():
            status, body = 503, {"error": "too many connections; try again"}
        else:
            async with self.connections:
                status, body = await self.answer(reader)
        data = json.dumps(body).encode()
        reason = {202: "Accepted", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                  405: "Method Not Allowed", 413: "Payload Too Large", 500: "Internal Server Error",
                  502: "Bad Gateway", 503: "Service Unavailable"}.get(status, "")
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        try:
            await writer.drain()
        finally:
            writer.close()

    async def answer(self, reader):
        try:
            return await self.handle(reader)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                ValueError, UnicodeError, ConnectionError):
            return 400, {"error": "malformed, oversized or too slow a request"}
        except qm.QuartermasterError as e:  # the API's answer: say what it was
            return 502, {"error": f"Quartermaster: {e}"}
        except Exception as e:  # anything else: logged here, not shown
            print(f"ci_hook: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            return 500, {"error": "internal error"}

    async def handle(self, reader):
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        if len(head) > 16 * 1024:
            return 400, {"error": "headers too large"}
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        if path != "/hooks/push":
            return 404, {"error": f"no {path}"}
        if method != "POST":
            return 405, {"error": "POST only"}
        length = int(headers.get("content-length", "0"))
        if length > MAX_BODY:
            return 413, {"error": f"a push event is at most {MAX_BODY} bytes"}
        body = await asyncio.wait_for(reader.readexactly(length), timeout=10)
        if not self.signed(body, headers.get("x-hub-signature-256")):
            return 401, {"error": "missing or wrong X-Hub-Signature-256"}
        try:
            event = json.loads(body)
        except ValueError:
            return 400, {"error": "the body is not JSON"}
        if not isinstance(event, dict):
            return 400, {"error": "the body is not a JSON object"}
        return await self.push(event)


async def main(args):
    client = await qm.connect(args.nats, nkey_file=args.nkey, ca_file=args.ca_file)
    hook = Hook(args, client)
    host, port = args.listen.rsplit(":", 1)
    server = await asyncio.start_server(hook.serve, host, int(port))
    print(f"ci_hook: {client.principal} listening on {args.listen} for pushes to {args.branch}", flush=True)
    async with server:
        await server.serve_forever()


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nats", default="nats://127.0.0.1:4222")
    p.add_argument("--nkey", required=True, help="the credentials file `qm auth` wrote for the hook's principal")
    p.add_argument("--ca-file")
    p.add_argument("--secret-file", required=True, help="the webhook's shared secret")
    p.add_argument("--listen", default="127.0.0.1:8088")
    p.add_argument("--branch", default="main")
    p.add_argument("--queue", required=True)
    p.add_argument("--share", required=True)
    p.add_argument("--instance-type", required=True)
    p.add_argument("--status-url", required=True, help="where to POST the final status; {commit} is filled in")
    p.add_argument("command", nargs="+", help="the training run's argv")
    return p.parse_args(argv)


if __name__ == "__main__":
    try:
        asyncio.run(main(parse(sys.argv[1:])))
    except KeyboardInterrupt:
        pass

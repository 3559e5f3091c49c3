"""The Python client's own tests: its models are the document's, every
operation has a method, errors carry the API's codes, and the event
follower and submit behave as documented (against a scripted connection;
the end-to-end tests drive the real services)."""

import asyncio
import json
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import quartermaster as qm
from quartermaster import errors

ROOT = Path(__file__).resolve().parents[3]
#: A user nkey seed made for these tests only (it opens nothing).
SEED = "SUAKUQEWI3SXVLAMNK7EEPUWCGMMJXKOSYE2B2XB4DHBUQM4N6YP4IY2EA"
FIXTURES = ROOT / "libs" / "qm-wire" / "tests" / "fixtures"


def fixture(name):
    return json.loads((FIXTURES / name).read_text())


class Reply:
    def __init__(self, body):
        self.data = json.dumps(body).encode()


class ScriptedNats:
    """Answers requests from a script: each entry a reply body, or an
    exception to raise."""

    def __init__(self, script):
        self.script = list(script)
        self.sent = []

    async def request(self, subject, payload, timeout):
        self.sent.append((subject, json.loads(payload)))
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return Reply(step)

    async def drain(self):
        pass


def run(coro):
    return asyncio.run(coro)


class Generated(unittest.TestCase):
    def test_the_models_are_what_the_document_makes(self):
        out = subprocess.run(
            [sys.executable, str(ROOT / "clients/python/tools/generate.py"), "--check"],
            capture_output=True, text=True,
        )
        self.assertEqual(out.returncode, 0, out.stderr)

    def test_every_operation_has_a_method_named_after_it(self):
        document = (ROOT / "docs/asyncapi.yaml").read_text()
        listed = re.search(r"operation:\s*\n\s*enum: \[([^\]]*)\]", document).group(1)
        names = sorted(n.strip() for n in listed.split(","))
        self.assertEqual(sorted(qm.OPERATIONS), names)
        for name in names:
            method = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
            self.assertTrue(callable(getattr(qm.Client, method, None)), method)

    def test_fixtures_decode_and_encode_back(self):
        for name, model in [
            ("submit_service_job.json", qm.SubmitServiceJob),
            ("service_job.json", qm.ServiceJob),
            ("quota_share.json", qm.QuotaShare),
            ("job_state_change.json", qm.JobStateChange),
            ("preemption_event.json", qm.PreemptionEvent),
            ("list_audit_events_response.json", qm.ListAuditEventsResponse),
            ("caller.json", qm.Caller),
            ("list_events_response.json", qm.EventPage),
        ]:
            data = fixture(name)
            self.assertEqual(model.from_dict(data).to_dict(), data, name)

    def test_nested_models_and_keywords_are_pythonic(self):
        job = qm.ServiceJob.from_dict(fixture("service_job.json"))
        self.assertIsInstance(job.attempts[0], qm.AttemptDetail)
        change = qm.JobStateChange.from_dict(fixture("job_state_change.json"))
        self.assertEqual((change.from_, change.to), ("RUNNING", "RUNNABLE"))

    def test_a_field_the_request_does_not_have_is_named(self):
        with self.assertRaisesRegex(TypeError, "no field queue"):
            qm.SubmitServiceJob.from_fields({"job_name": "a", "queue": "training"})

    def test_stored_events_say_what_they_hold(self):
        page = qm.EventPage.from_dict(fixture("list_events_response.json"))
        kinds = [(e.kind, e.describe()) for e in page.events]
        self.assertEqual(kinds[0][0], "JOB")
        self.assertIn("RUNNING -> RUNNABLE", kinds[0][1])
        self.assertIn("preemption CROSS_SHARE started", kinds[1][1])
        self.assertIn("checkpoint 3 of attempt 1 committed at step 300", kinds[2][1])


class Errors(unittest.TestCase):
    def test_each_code_is_its_own_exception_with_the_problems(self):
        e = errors.from_reply(fixture("error_reply.json")["error"])
        self.assertIsInstance(e, qm.InvalidRequest)
        self.assertEqual(e.code, "INVALID")
        self.assertEqual(len(e.problems), 2)
        self.assertIn(e.problems[0]["field"], str(e))
        denied = errors.from_reply(fixture("error_reply_access_denied.json")["error"])
        self.assertIsInstance(denied, qm.AccessDenied)
        self.assertFalse(denied.retryable)
        later = errors.from_reply({"code": "SOMETHING_NEW", "message": "m"})
        self.assertEqual(later.code, "SOMETHING_NEW")

    def test_a_call_raises_the_replys_error(self):
        nc = ScriptedNats([{"error": {"code": "NOT_FOUND", "message": "no job j-1"}}])
        client = qm.Client(nc, "alice")
        with self.assertRaisesRegex(qm.NotFound, "no job j-1"):
            run(client.describe_service_job(job_id="j-1"))
        self.assertEqual(nc.sent, [("qm.v1.api.alice.DescribeServiceJob", {"jobId": "j-1"})])


class KeyFiles(unittest.TestCase):
    def test_the_principal_and_seed_are_read_from_the_file_qm_auth_writes(self):
        with tempfile.NamedTemporaryFile("w", suffix=".nk") as f:
            f.write(f"# quartermaster principal: alice\n# comment\n{SEED}\n")
            f.flush()
            self.assertEqual(qm.read_key_file(f.name), ("alice", SEED))
        with tempfile.NamedTemporaryFile("w", suffix=".nk") as f:
            f.write("# quartermaster principal: alice\nSUANOTASEED\n")
            f.flush()
            with self.assertRaisesRegex(qm.QuartermasterError, "not a valid nkey seed"):
                qm.read_key_file(f.name)
        with tempfile.NamedTemporaryFile("w", suffix=".nk") as f:
            f.write("# quartermaster principal: alice\n")
            f.flush()
            with self.assertRaisesRegex(qm.QuartermasterError, "no user nkey seed"):
                qm.read_key_file(f.name)


class Connecting(unittest.TestCase):
    def test_an_unreachable_server_fails_soon_and_says_where(self):
        with tempfile.NamedTemporaryFile("w", suffix=".nk") as f:
            f.write(f"# quartermaster principal: alice\n{SEED}\n")
            f.flush()
            with self.assertRaisesRegex(qm.ConnectFailed, "cannot connect to NATS at nats://127.0.0.1:1 as alice"):
                run(qm.connect("nats://127.0.0.1:1", nkey_file=f.name))


class Following(unittest.TestCase):
    def page(self, events, after, caught_up=True):
        return {"ok": {"events": events, "after": after, "caughtUp": caught_up}}

    def event(self, cursor, to):
        return {
            "cursor": cursor, "kind": "JOB", "subject": f"qm.v1.events.job.training.QS1.j-1.{to}",
            "jobQueue": "training", "quotaShareName": "QS1", "jobId": "j-1",
            "event": {"jobId": "j-1", "jobName": "a", "jobQueue": "training", "quotaShareName": "QS1",
                      "from": "RUNNABLE", "to": to, "at": 1},
        }

    def test_pages_follow_the_cursor_and_outages_are_waited_out(self):
        nc = ScriptedNats([
            self.page([self.event("3-1", "SCHEDULED")], "4-0"),
            qm.NoReply("down"),
            self.page([], "4-0"),
            self.page([self.event("5-1", "RUNNING")], "6-0"),
        ])
        client = qm.Client(nc, "alice")

        async def read(n):
            out = []
            async for e in client.events(after="1-0"):
                out.append(e.cursor)
                if len(out) == n:
                    return out

        self.assertEqual(run(read(2)), ["3-1", "5-1"])
        afters = [body.get("after") for _, body in nc.sent]
        self.assertEqual(afters, ["1-0", "4-0", "4-0", "4-0"])
        self.assertTrue(all(body["waitSeconds"] > 0 for _, body in nc.sent))

    def test_access_denied_ends_the_follower(self):
        nc = ScriptedNats([{"error": {"code": "ACCESS_DENIED", "message": "not yours"}}])
        client = qm.Client(nc, "bob")

        async def read():
            async for _ in client.events(job_queue="training", quota_share_name="QS1"):
                pass

        with self.assertRaises(qm.AccessDenied):
            run(read())

    def test_a_submit_is_retried_with_one_client_token(self):
        nc = ScriptedNats([
            qm.NoReply("no answer"),
            {"error": {"code": "TRANSIENT", "message": "try again"}},
            {"ok": {"jobId": "j-1", "jobName": "a", "submittedAt": 5}},
        ])
        client = qm.Client(nc, "alice")
        job = run(client.submit(job_name="a", job_queue="training", instance_type="ml.g5.xlarge",
                                command=["true"]))
        self.assertEqual((job.job_id, job.submitted_at), ("j-1", 5))
        tokens = {body["clientToken"] for _, body in nc.sent}
        self.assertEqual(len(nc.sent), 3)
        self.assertEqual(len(tokens), 1)


if __name__ == "__main__":
    unittest.main()

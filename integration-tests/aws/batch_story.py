"""The three-share story, told by boto3 to Quartermaster's AWS Batch gateway.

Run by integration-tests/tests/gateway.rs with the pinned clients
(requirements.txt), in phases:

  setup    platform (an admin) creates the service environment, the
           scheduling policy, the SAGEMAKER_TRAINING job queue and three
           quota shares, and reads them back;
  story    alice borrows, bob reclaims, alice raises a priority: jobs are
           preempted and requeued; states, snapshots, pages of
           list_service_jobs, tags and the errors of bad input are checked;
  attacks  requests a client would not make: a wrong secret, an unknown key,
           no signature, a malformed and an oversized body; each gets the
           AWS error shape and nothing changes.

Environment: QM_GW_ENDPOINT, QM_GW_REGION, QM_GW_KEYS (JSON: principal ->
[access key id, secret]), QM_GW_TRAINER (the trainer's path), QM_GW_BUCKET
(the checkpoint bucket), QM_GW_OUT (where the story writes its job ids).
Any failed check raises: the exit status is the verdict.
"""

import json
import os
import sys
import time

import boto3
import botocore.auth
import botocore.awsrequest
import botocore.credentials
import botocore.exceptions
import urllib3

# One run of the story: client tokens are unique to it.
RUN = os.environ.get("QM_GW_RUN", str(os.getpid()))

ENDPOINT = os.environ["QM_GW_ENDPOINT"]
REGION = os.environ["QM_GW_REGION"]
KEYS = json.loads(os.environ["QM_GW_KEYS"])
TRAINER = os.environ.get("QM_GW_TRAINER", "")
BUCKET = os.environ.get("QM_GW_BUCKET", "")
TYPE = "ml.g5.xlarge"
ARGS = ["--steps", "300", "--checkpoint-every", "10", "--step-delay-ms", "25"]


def batch(who, secret=None):
    key, real = KEYS[who]
    return boto3.client(
        "batch",
        endpoint_url=ENDPOINT,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=secret or real,
    )


def log(*what):
    print("story:", *what, flush=True)


def expect_error(code, call, *args, says=None, **kwargs):
    """Runs call, which must fail with ClientError `code` (and `says`)."""
    try:
        call(*args, **kwargs)
    except botocore.exceptions.ClientError as e:
        got = e.response["Error"]["Code"]
        message = e.response["Error"].get("Message", "")
        assert got == code, f"expected {code}, got {got}: {message}"
        if says:
            assert says in message, f"{says!r} not in {message!r}"
        log(f"refused as expected: {code}: {message}")
        return e
    raise AssertionError(f"{call.__name__} succeeded; expected {code}")


def payload(name, share, checkpoint=True, extra=None):
    request = {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/SageMakerRole",
        "AlgorithmSpecification": {
            "TrainingImage": "quartermaster/qm-trainer:local",
            "TrainingInputMode": "File",
            "ContainerEntrypoint": [TRAINER],
            "ContainerArguments": ARGS,
        },
        "ResourceConfig": {"InstanceType": TYPE, "InstanceCount": 1, "VolumeSizeInGB": 10},
        "OutputDataConfig": {"S3OutputPath": "s3://outputs/" + name},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "HyperParameters": {"learning-rate": "0.1", "epochs": "3"},
        "Environment": {"RUN_NAME": name},
    }
    if checkpoint:
        request["CheckpointConfig"] = {
            "S3Uri": f"s3://{BUCKET}/training/shares/{share}/{name}",
            "LocalPath": "/opt/ml/checkpoints",
        }
    request.update(extra or {})
    return json.dumps(request)


def submit(client, name, share, priority, **kwargs):
    # A clientToken per job: a retried submit (a lost answer) returns the
    # same job instead of making a second one.
    kwargs.setdefault("clientToken", f"{name}-{RUN}")
    r = client.submit_service_job(
        jobName=name,
        jobQueue="training",
        serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName=share,
        schedulingPriority=priority,
        serviceRequestPayload=payload(name, share),
        tags={"story": "three-shares"},
        **kwargs,
    )
    assert r["jobArn"].endswith(":service-job/" + r["jobId"]), r
    assert r["jobName"] == name, r
    log(f"submitted {name} to {share} (priority {priority}): {r['jobId']}")
    return r["jobId"]


def wait(client, job_id, what, ok, secs=90):
    deadline = time.time() + secs
    while True:
        j = client.describe_service_job(jobId=job_id)
        if ok(j):
            return j
        if time.time() > deadline:
            raise AssertionError(f"{job_id} never {what}: {json.dumps(j, default=str)}")
        time.sleep(0.3)


def reasons(j):
    return [a.get("statusReason") for a in j.get("attempts", [])]


def setup():
    admin = batch("platform")
    env = admin.create_service_environment(
        serviceEnvironmentName="fleet",
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"maxCapacity": 3, "capacityUnit": TYPE}],
        tags={"team": "platform"},
    )
    policy = admin.create_scheduling_policy(
        name="quota-fifo",
        quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"},
    )
    queue = admin.create_job_queue(
        jobQueueName="training",
        priority=1,
        schedulingPolicyArn=policy["arn"],
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": env["serviceEnvironmentArn"]}],
        jobQueueType="SAGEMAKER_TRAINING",
        tags={"cost-center": "ml"},
    )
    assert queue["jobQueueArn"].endswith(":job-queue/training"), queue
    shares = {
        "QS1": ({"strategy": "LEND_AND_BORROW", "borrowLimit": 200}, "ENABLED"),
        "QS2": ({"strategy": "LEND"}, "DISABLED"),
        "QS3": ({"strategy": "RESERVE"}, "DISABLED"),
    }
    for name, (sharing, preemption) in shares.items():
        r = admin.create_quota_share(
            quotaShareName=name,
            jobQueue=queue["jobQueueArn"],
            capacityLimits=[{"maxCapacity": 1, "capacityUnit": TYPE}],
            resourceSharingConfiguration=sharing,
            preemptionConfiguration={"inSharePreemption": preemption},
            tags={"share": name},
        )
        assert r["quotaShareArn"].endswith(f":job-queue/training/quota-share/{name}"), r
    log("created the service environment, the policy, the queue and QS1-QS3")

    # Read back as AWS shapes them.
    q = admin.describe_job_queues(jobQueues=["training"])["jobQueues"]
    assert len(q) == 1 and q[0]["priority"] == 1 and q[0]["state"] == "ENABLED", q
    assert q[0]["schedulingPolicyArn"] == policy["arn"], q
    assert q[0]["serviceEnvironmentOrder"][0]["serviceEnvironment"] == env["serviceEnvironmentArn"], q
    assert q[0]["tags"] == {"cost-center": "ml"}, q
    envs = admin.describe_service_environments()["serviceEnvironments"]
    assert [e["serviceEnvironmentName"] for e in envs] == ["fleet"], envs
    assert envs[0]["capacityLimits"] == [{"maxCapacity": 3, "capacityUnit": TYPE}], envs
    pols = admin.describe_scheduling_policies(arns=[policy["arn"]])["schedulingPolicies"]
    assert pols[0]["quotaSharePolicy"]["idleResourceAssignmentStrategy"] == "FIFO", pols
    pages = admin.get_paginator("list_quota_shares").paginate(
        jobQueue="training", PaginationConfig={"PageSize": 2}
    )
    listed = [s["quotaShareName"] for p in pages for s in p["quotaShares"]]
    assert listed == ["QS1", "QS2", "QS3"], listed
    qs1_arn = f"arn:aws:batch:{REGION}:000000000000:job-queue/training/quota-share/QS1"
    qs1 = admin.describe_quota_share(quotaShareArn=qs1_arn)
    assert qs1["resourceSharingConfiguration"] == {"strategy": "LEND_AND_BORROW", "borrowLimit": 200}, qs1
    assert qs1["tags"] == {"share": "QS1"} and qs1["status"] == "VALID", qs1
    admin.update_quota_share(
        quotaShareArn=qs1_arn,
        resourceSharingConfiguration={"strategy": "LEND_AND_BORROW", "borrowLimit": 100},
    )
    qs1 = admin.describe_quota_share(quotaShareArn=qs1_arn)
    assert qs1["resourceSharingConfiguration"]["borrowLimit"] == 100, qs1
    admin.update_scheduling_policy(
        arn=policy["arn"], quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"}
    )

    listed = admin.list_scheduling_policies()["schedulingPolicies"]
    assert [p["arn"] for p in listed] == [policy["arn"]], listed
    expect_error("ClientException", admin.delete_scheduling_policy, arn=policy["arn"], says="uses")
    admin.create_service_environment(
        serviceEnvironmentName="spare",
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"maxCapacity": 1, "capacityUnit": TYPE}],
    )
    expect_error("ClientException", admin.delete_service_environment, serviceEnvironment="spare", says="is ENABLED")
    # A queue's environment is fixed once made; its priority is not.
    expect_error(
        "ClientException",
        admin.update_job_queue,
        jobQueue="training",
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": "spare"}],
        says="cannot change",
    )
    admin.update_job_queue(jobQueue="training", priority=1, serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": "fleet"}])
    admin.update_service_environment(serviceEnvironment="spare", state="DISABLED")
    admin.delete_service_environment(serviceEnvironment="spare")
    expect_error("ClientException", admin.delete_service_environment, serviceEnvironment=env["serviceEnvironmentArn"])

    # Only admins configure; a team user is refused.
    alice = batch("alice")
    expect_error(
        "AccessDeniedException",
        alice.create_quota_share,
        quotaShareName="QS9",
        jobQueue="training",
        capacityLimits=[{"maxCapacity": 1, "capacityUnit": TYPE}],
        resourceSharingConfiguration={"strategy": "RESERVE"},
        preemptionConfiguration={"inSharePreemption": "DISABLED"},
        says="may not change the configuration of job queue training",
    )
    expect_error(
        "AccessDeniedException",
        alice.create_service_environment,
        serviceEnvironmentName="mine",
        serviceEnvironmentType="SAGEMAKER_TRAINING",
        capacityLimits=[{"maxCapacity": 9, "capacityUnit": TYPE}],
    )
    expect_error(
        "ClientException",
        admin.create_job_queue,
        jobQueueName="training",
        priority=1,
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": "fleet"}],
        says="already exists",
    )
    expect_error(
        "ClientException",
        admin.create_scheduling_policy,
        name="fair",
        fairsharePolicy={"shareDecaySeconds": 60},
        says="fairsharePolicy",
    )


def story(out):
    alice, bob, admin = batch("alice"), batch("bob"), batch("platform")
    running = lambda j: j["status"] == "RUNNING"

    # QS1 runs p3 on its own instance and p2 on QS2's idle one; p1 waits.
    p3 = submit(alice, "p3", "QS1", 3)
    wait(alice, p3, "RUNNING", running)
    p2 = submit(alice, "p2", "QS1", 2, clientToken="p2-once")
    again = alice.submit_service_job(
        jobName="p2",
        jobQueue="training",
        serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName="QS1",
        schedulingPriority=2,
        serviceRequestPayload=payload("p2", "QS1"),
        clientToken="p2-once",
    )
    assert again["jobId"] == p2, "a retried submit with the same clientToken is the same job"
    wait(alice, p2, "RUNNING", running)
    p1 = submit(alice, "p1", "QS1", 1)
    j = wait(alice, p1, "waiting", lambda j: j["status"] == "RUNNABLE" and not j["statusReason"].startswith("QUEUED"))
    assert not j.get("attempts"), j
    log(f"p1 waits: {j['statusReason']}")

    # The snapshot: p1 first in line, everything in use.
    snap = alice.get_job_queue_snapshot(jobQueue="training")
    front = snap["frontOfQueue"]["jobs"]
    assert front and front[0]["jobArn"].endswith("/" + p1), snap
    assert front[0]["earliestTimeAtPosition"] > 0, snap
    assert snap["frontOfQuotaShares"]["quotaShares"]["QS1"][0]["jobArn"].endswith("/" + p1), snap
    total = {u["capacityUnit"]: u["quantity"] for u in snap["queueUtilization"]["totalCapacityUsage"]}
    assert total == {TYPE: 2.0}, snap
    by_share = {
        s["quotaShareName"]: s["capacityUsage"][0]["quantity"]
        for s in snap["queueUtilization"]["quotaShareUtilization"]["topCapacityUtilization"]
    }
    assert by_share["QS1"] == 2.0, snap

    # QS2 needs its instance back: p2 is preempted and requeued.
    q2 = submit(bob, "qs2_job", "QS2", 1)
    wait(bob, q2, "RUNNING", running)
    j = wait(alice, p2, "preempted", lambda j: reasons(j)[:1] == ["PREEMPTED_CROSS_SHARE"])
    assert j["preemptionSummary"]["preemptedAttemptCount"] == 1, j
    arn = j["preemptionSummary"]["recentPreemptedAttempts"][0]["serviceResourceId"]
    assert arn["name"] == "TrainingJobArn" and arn["value"].endswith(f"training-job/{p2}-1"), j
    log("p2 preempted across shares, requeued")

    # p1 raised above p3: in-share preemption.
    r = alice.update_service_job(jobId=p1, schedulingPriority=4)
    assert r["jobId"] == p1 and r["jobName"] == "p1", r
    wait(alice, p3, "preempted in share", lambda j: reasons(j)[:1] == ["PREEMPTED_IN_SHARE"])
    wait(alice, p1, "RUNNING", running)
    log("p3 preempted in its share for p1")

    # Another team may neither read nor change alice's jobs.
    expect_error("AccessDeniedException", bob.describe_service_job, jobId=p1)
    expect_error("AccessDeniedException", bob.terminate_service_job, jobId=p1, reason="mine now")
    expect_error("AccessDeniedException", bob.tag_resource,
                 resourceArn=f"arn:aws:batch:{REGION}:000000000000:service-job/{p1}", tags={"x": "y"})

    # How long a signed round trip through the gateway takes (printed, not
    # asserted: a shared machine's speed is no verdict).
    took = []
    for _ in range(30):
        t = time.perf_counter()
        alice.describe_service_job(jobId=p1)
        took.append((time.perf_counter() - t) * 1000)
    took.sort()
    log(f"describe_service_job through the gateway: p50 {took[15]:.1f} ms, max {took[-1]:.1f} ms (30 calls)")

    # RUNNING only by default; a paginator walks every page.
    default = alice.list_service_jobs(jobQueue="training")["jobSummaryList"]
    assert default and all(s["status"] == "RUNNING" for s in default), default
    pages = admin.get_paginator("list_service_jobs").paginate(
        jobQueue="training",
        filters=[{"name": "JOB_NAME", "values": ["P*"]}],
        PaginationConfig={"PageSize": 1},
    )
    names = sorted(s["jobName"] for page in pages for s in page["jobSummaryList"])
    assert names == ["p1", "p2", "p3"], names
    mine = alice.list_service_jobs(
        jobQueue="training", filters=[{"name": "QUOTA_SHARE_NAME", "values": ["QS1"]}], jobStatus="RUNNING"
    )["jobSummaryList"]
    assert {s["quotaShareName"] for s in mine} == {"QS1"}, mine

    # Tags, set at submit and changed after.
    job_arn = f"arn:aws:batch:{REGION}:000000000000:service-job/{p1}"
    assert alice.list_tags_for_resource(resourceArn=job_arn)["tags"] == {"story": "three-shares"}
    alice.tag_resource(resourceArn=job_arn, tags={"owner": "alice"})
    alice.untag_resource(resourceArn=job_arn, tagKeys=["story"])
    assert alice.describe_service_job(jobId=p1)["tags"] == {"owner": "alice"}
    queue_arn = f"arn:aws:batch:{REGION}:000000000000:job-queue/training"
    assert alice.list_tags_for_resource(resourceArn=queue_arn)["tags"] == {"cost-center": "ml"}
    expect_error("AccessDeniedException", alice.tag_resource, resourceArn=queue_arn, tags={"x": "y"})

    # Bad input: ClientException naming what is wrong, nothing submitted.
    expect_error(
        "ClientException",
        alice.submit_service_job,
        jobName="bad",
        jobQueue="training",
        serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName="QS1",
        serviceRequestPayload=payload("bad", "QS1", extra={"InputDataConfig": [{"ChannelName": "train"}]}),
        says="serviceRequestPayload.InputDataConfig",
    )
    # (a team is refused a queue it has no share in before anything is
    # looked up; an admin learns that it does not exist)
    expect_error(
        "AccessDeniedException",
        alice.submit_service_job,
        jobName="bad",
        jobQueue="no-such-queue",
        serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName="QS1",
        serviceRequestPayload=payload("bad", "QS1"),
    )
    expect_error(
        "ClientException",
        admin.submit_service_job,
        jobName="bad",
        jobQueue="no-such-queue",
        serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName="QS1",
        serviceRequestPayload=payload("bad", "QS1"),
        says="no-such-queue",
    )
    expect_error("ClientException", alice.describe_service_job, jobId="j-doesnotexist")
    expect_error(
        "ClientException",
        alice.list_service_jobs,
        jobQueue="training",
        filters=[{"name": "JOB_NAME", "values": ["a"]}, {"name": "AFTER_CREATED_AT", "values": ["0"]}],
        says="only one filter",
    )
    expect_error("ClientException", alice.update_service_job, jobId=p1, schedulingPriority=10000)

    # Everything finishes; the resumed jobs resumed from their checkpoints.
    for name, job in [("p1", p1), ("p2", p2), ("p3", p3), ("qs2_job", q2)]:
        reader = bob if name == "qs2_job" else alice
        j = wait(reader, job, "finished", lambda j: j["status"] in ("SUCCEEDED", "FAILED"), secs=240)
        assert j["status"] == "SUCCEEDED", j
        assert j["stoppedAt"] >= j["startedAt"] > 0, j
        assert j["capacityUsage"] == [{"capacityUnit": TYPE, "quantity": 1.0}], j
        assert json.loads(j["serviceRequestPayload"])["TrainingJobName"] == name, j
        log(f"{name} SUCCEEDED after {reasons(j)}")
    assert reasons(alice.describe_service_job(jobId=p2)) == ["PREEMPTED_CROSS_SHARE", "SUCCEEDED"]
    assert reasons(alice.describe_service_job(jobId=p3)) == ["PREEMPTED_IN_SHARE", "SUCCEEDED"]
    done = admin.list_service_jobs(jobQueue="training", jobStatus="SUCCEEDED")["jobSummaryList"]
    assert {s["jobId"] for s in done} >= {p1, p2, p3, q2}, done

    # Terminating in bulk: each job answered on its own.
    doomed = submit(alice, "doomed", "QS1", 1)
    r = alice.terminate_service_jobs(jobs=[doomed, "j-nosuchjob"], reason="changed my mind")
    assert r["successful"] == [doomed], r
    assert [(e["job"], e["code"]) for e in r["errors"]] == [("j-nosuchjob", "ClientException")], r
    j = wait(alice, doomed, "terminated", lambda j: j["status"] == "FAILED")
    assert j["isTerminated"] is True, j

    # A share is deleted only once disabled.
    qs3 = f"arn:aws:batch:{REGION}:000000000000:job-queue/training/quota-share/QS3"
    expect_error("ClientException", admin.delete_quota_share, quotaShareArn=qs3)
    admin.update_quota_share(quotaShareArn=qs3, state="DISABLED")
    admin.delete_quota_share(quotaShareArn=qs3)
    left = [s["quotaShareName"] for s in admin.list_quota_shares(jobQueue="training")["quotaShares"]]
    assert left == ["QS1", "QS2"], left

    # A queue is deleted only once DISABLED and drained; its jobs stay
    # readable. (No executor serves "scratch": its job waits.)
    admin.create_job_queue(jobQueueName="scratch", priority=5, tags={"temp": "yes"})
    admin.create_quota_share(
        quotaShareName="tmp",
        jobQueue="scratch",
        capacityLimits=[{"maxCapacity": 1, "capacityUnit": TYPE}],
        resourceSharingConfiguration={"strategy": "RESERVE"},
        preemptionConfiguration={"inSharePreemption": "DISABLED"},
    )
    waiting = admin.submit_service_job(
        jobName="waits",
        jobQueue="scratch",
        serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName="tmp",
        serviceRequestPayload=payload("waits", "tmp", checkpoint=False),
    )["jobId"]
    expect_error("ClientException", admin.delete_job_queue, jobQueue="scratch", says="is ENABLED")
    expect_error("AccessDeniedException", alice.delete_job_queue, jobQueue="training")
    admin.update_job_queue(jobQueue="scratch", state="DISABLED")
    expect_error(
        "ClientException",
        admin.submit_service_job,
        jobName="late",
        jobQueue="scratch",
        serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName="tmp",
        serviceRequestPayload=payload("late", "tmp", checkpoint=False),
        says="DISABLED",
    )
    expect_error("ClientException", admin.delete_job_queue, jobQueue="scratch", says=waiting)
    admin.terminate_service_job(jobId=waiting, reason="retiring the queue")
    wait(admin, waiting, "failed", lambda j: j["status"] == "FAILED")
    admin.delete_job_queue(jobQueue=f"arn:aws:batch:{REGION}:000000000000:job-queue/scratch")
    assert admin.describe_job_queues(jobQueues=["scratch"])["jobQueues"] == [], "deleted"
    assert admin.describe_service_job(jobId=waiting)["jobQueue"].endswith("scratch"), "archived"
    expect_error("ClientException", admin.delete_job_queue, jobQueue="scratch", says="no job queue")
    # Made anew, it keeps nothing of the old one (tags, priority).
    admin.create_job_queue(jobQueueName="scratch", priority=7)
    q = admin.describe_job_queues(jobQueues=["scratch"])["jobQueues"][0]
    assert (q["priority"], q["tags"], q["state"]) == (7, {}, "ENABLED"), q
    admin.update_job_queue(jobQueue="scratch", state="DISABLED")
    admin.delete_job_queue(jobQueue="scratch")
    log("a queue disabled, drained and deleted; its job still described")

    with open(out, "w") as f:
        json.dump({"p1": p1, "p2": p2, "p3": p3, "qs2_job": q2}, f)


def raw(method, path, body, who="alice", secret=None, sign=True, headers=None):
    """A request as no AWS client would make it, signed with botocore."""
    request = botocore.awsrequest.AWSRequest(
        method=method, url=ENDPOINT + path, data=body, headers=headers or {"Content-Type": "application/json"}
    )
    if sign:
        key, real = KEYS.get(who, [who, "x" * 40])
        creds = botocore.credentials.Credentials(key, secret or real)
        botocore.auth.SigV4Auth(creds, "batch", REGION).add_auth(request)
    prepared = request.prepare()
    http = urllib3.PoolManager()
    r = http.request(method, prepared.url, body=prepared.body, headers=dict(prepared.headers), retries=False)
    return r.status, r.headers.get("x-amzn-ErrorType"), json.loads(r.data or b"{}")


def attacks():
    admin = batch("platform")
    before = admin.list_service_jobs(
        jobQueue="training", filters=[{"name": "AFTER_CREATED_AT", "values": ["0"]}]
    )["jobSummaryList"]
    job = {
        "jobName": "intruder",
        "jobQueue": "training",
        "serviceJobType": "SAGEMAKER_TRAINING",
        "quotaShareName": "QS1",
        "serviceRequestPayload": payload("intruder", "QS1"),
    }
    body = json.dumps(job)

    expect_error(
        "InvalidSignatureException", batch("alice", secret="W" * 40).submit_service_job, **job,
        says="signature we calculated does not match",
    )
    # An access key nobody was given.
    KEYS["mallory"] = ["AKIAMALLORY00000001", "M" * 40]
    expect_error("UnrecognizedClientException", batch("mallory").submit_service_job, **job)
    # Bob's key exists in the keys file but the tenancy maps it to no one.
    expect_error("UnrecognizedClientException", batch("unmapped").submit_service_job, **job)

    status, code, shape = raw("POST", "/v1/submitservicejob", body, sign=False)
    assert (status, code) == (403, "MissingAuthenticationTokenException"), (status, code, shape)
    assert shape["__type"] == code and shape["message"], shape

    status, code, shape = raw("POST", "/v1/submitservicejob", b"{not json")
    assert (status, code) == (400, "ClientException"), (status, code, shape)
    assert "not valid for this operation" in shape["message"], shape

    status, code, shape = raw("POST", "/v1/submitservicejob", b"x" * (2 << 20))
    assert (status, code) == (413, "ClientException"), (status, code, shape)
    assert "larger than" in shape["message"], shape

    # A signed body changed on the way.
    request = botocore.awsrequest.AWSRequest(
        method="POST", url=ENDPOINT + "/v1/submitservicejob", data=body, headers={"Content-Type": "application/json"}
    )
    botocore.auth.SigV4Auth(
        botocore.credentials.Credentials(*KEYS["alice"]), "batch", REGION
    ).add_auth(request)
    prepared = request.prepare()
    tampered = body.replace("QS1", "QS2")
    r = urllib3.PoolManager().request(
        "POST", prepared.url, body=tampered, headers=dict(prepared.headers), retries=False
    )
    assert r.status == 403 and r.headers.get("x-amzn-ErrorType") == "InvalidSignatureException", r.data

    status, code, shape = raw("POST", "/v1/createcomputeenvironment", b"{}")
    assert (status, code) == (404, "UnknownOperationException"), (status, code, shape)
    # A team user cannot end a queue, whatever the body says.
    arn = f"arn:aws:batch:{REGION}:000000000000:job-queue/training"
    for queue in ["training", arn]:
        status, code, shape = raw("POST", "/v1/deletejobqueue", json.dumps({"jobQueue": queue}).encode())
        assert (status, code) == (403, "AccessDeniedException"), (status, code, shape)

    after = admin.list_service_jobs(
        jobQueue="training", filters=[{"name": "AFTER_CREATED_AT", "values": ["0"]}]
    )["jobSummaryList"]
    assert sorted(j["jobId"] for j in after) == sorted(j["jobId"] for j in before), (before, after)
    log(f"every attack refused; still {len(after)} jobs")


if __name__ == "__main__":
    phase = sys.argv[1]
    if phase == "setup":
        setup()
    elif phase == "story":
        story(os.environ["QM_GW_OUT"])
    elif phase == "attacks":
        attacks()
    else:
        raise SystemExit(f"unknown phase {phase!r}")
    log(phase, "passed")

"""A SageMaker training image on two instances, driven by boto3 through
Quartermaster's AWS Batch gateway (integration-tests/tests/gateway.rs runs
it, in phases, and checks S3 and the scheduler between them):

  submit NAME USER SHARE STEPS   submits a CreateTrainingJob payload that
                                 names the image (no ContainerEntrypoint:
                                 the image's own, with `train`) on 2
                                 instances, with hyperparameters, a
                                 checkpoint and an output location; prints
                                 the job id
  verify JOB [PREEMPTED]         describe_service_job: SUCCEEDED, and (with
                                 PREEMPTED) an attempt preempted by the
                                 reclaim before the one that succeeded

Environment: QM_GW_ENDPOINT, QM_GW_REGION, QM_GW_KEYS (principal -> [key
id, secret]), QM_GW_IMAGE, QM_GW_BUCKET. Any failed check raises.
"""

import json
import os
import sys

import boto3

ENDPOINT = os.environ["QM_GW_ENDPOINT"]
REGION = os.environ["QM_GW_REGION"]
KEYS = json.loads(os.environ["QM_GW_KEYS"])
IMAGE = os.environ["QM_GW_IMAGE"]
BUCKET = os.environ["QM_GW_BUCKET"]


def batch(who):
    key, secret = KEYS[who]
    return boto3.client(
        "batch",
        endpoint_url=ENDPOINT,
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
    )


def submit(name, who, share, steps):
    payload = {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/training",
        "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 10},
        "HyperParameters": {
            "steps": steps,
            "checkpoint_every": "10",
            "step_seconds": "0.1",
            "seed": "11",
            "lr": "0.05",
        },
        "CheckpointConfig": {
            "S3Uri": "s3://%s/training/shares/%s/checkpoints/%s" % (BUCKET, share, name),
            "LocalPath": "/opt/ml/checkpoints",
        },
        "OutputDataConfig": {"S3OutputPath": "s3://%s/training/shares/%s/models" % (BUCKET, share)},
        "StoppingCondition": {"MaxRuntimeInSeconds": 1800},
    }
    r = batch(who).submit_service_job(
        jobName=name,
        jobQueue="training",
        serviceJobType="SAGEMAKER_TRAINING",
        quotaShareName=share,
        serviceRequestPayload=json.dumps(payload),
        # A retried submit returns this job instead of making another.
        clientToken="%s-%d" % (name, os.getpid()),
    )
    print(r["jobId"])


def verify(job, preempted):
    d = batch("platform").describe_service_job(jobId=job)
    assert d["status"] == "SUCCEEDED", d
    reasons = [a.get("statusReason", "") for a in d.get("attempts", [])]
    if preempted:
        assert any("PREEMPTED" in r for r in reasons), reasons
        assert d["preemptionSummary"]["preemptedAttemptCount"] >= 1, d
    payload = json.loads(d["serviceRequestPayload"])
    assert payload["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    print("verified", job, reasons)


if __name__ == "__main__":
    phase = sys.argv[1]
    if phase == "submit":
        submit(*sys.argv[2:6])
    elif phase == "verify":
        verify(sys.argv[2], len(sys.argv) > 3)
    else:
        raise SystemExit("unknown phase %r" % phase)

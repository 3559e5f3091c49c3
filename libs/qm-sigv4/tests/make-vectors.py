"""Writes botocore-vectors.json: requests signed by botocore's SigV4 signer
(the one boto3 and the AWS CLI use), for tests/botocore.rs.

    python3 -m venv /tmp/v && /tmp/v/bin/pip install botocore==1.44.8
    /tmp/v/bin/python make-vectors.py > botocore-vectors.json

The requests are signed now: update SIGNED_AT in botocore.rs to the
X-Amz-Date the file holds.
"""
import json

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
ARN = "arn%3Aaws%3Abatch%3Aus-east-1%3A123456789012%3Ajob-queue%2Ftraining"
cases = [
    ("POST", "http://127.0.0.1:8080/v1/submitservicejob",
     b'{"jobName":"p3","jobQueue":"training","serviceJobType":"SAGEMAKER_TRAINING"}',
     {"Content-Type": "application/json"}),
    ("GET", f"http://127.0.0.1:8080/v1/tags/{ARN}", b"", {}),
    ("DELETE", f"http://127.0.0.1:8080/v1/tags/{ARN}?tagKeys=team&tagKeys=cost%20centre", b"", {}),
    ("POST", "http://localhost/v1/describeservicejob", b'{"jobId":"a b"}',
     {"Content-Type": "application/json", "X-Amz-Target": "  spaced   value  "}),
]
out = []
for method, url, body, headers in cases:
    req = AWSRequest(method=method, url=url, data=body, headers=headers)
    SigV4Auth(creds, "batch", "us-east-1").add_auth(req)
    p = req.prepare()
    out.append({"method": method, "url": p.url, "headers": dict(p.headers), "body": body.decode()})
print(json.dumps(out, indent=1))

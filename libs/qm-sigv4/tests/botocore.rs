//! Requests signed by botocore 1.44.8 (boto3's and the AWS CLI's signer;
//! `tests/botocore-vectors.json`, made with `SigV4Auth(creds, "batch",
//! "us-east-1")` on `AWSRequest`s) verify, and every change an attacker
//! could make to one of them does not.

use qm_sigv4::{verify, Request, Scope, SigError, MAX_SKEW_SECS};

const KEY: &str = "AKIDEXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
/// When the vectors were signed (20261204T173812Z).
const SIGNED_AT: i64 = 1_796_405_892;

struct Vector {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Vector {
    fn request(&self) -> Request<'_> {
        Request {
            method: &self.method,
            path: &self.path,
            query: &self.query,
            headers: &self.headers,
            body: &self.body,
        }
    }
}

fn vectors() -> Vec<Vector> {
    let all: serde_json::Value =
        serde_json::from_str(include_str!("botocore-vectors.json")).expect("vectors");
    all.as_array()
        .expect("a list")
        .iter()
        .map(|v| {
            let url = v["url"].as_str().expect("url");
            let rest = url.split_once("://").expect("scheme").1;
            let (host, path_query) = rest.split_at(rest.find('/').expect("path"));
            let (path, query) = path_query.split_once('?').unwrap_or((path_query, ""));
            let mut headers: Vec<(String, String)> = v["headers"]
                .as_object()
                .expect("headers")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().expect("text").to_string()))
                .collect();
            // The Host header the HTTP client sends.
            headers.push(("Host".into(), host.into()));
            Vector {
                method: v["method"].as_str().expect("method").into(),
                path: path.into(),
                query: query.into(),
                headers,
                body: v["body"].as_str().expect("body").as_bytes().to_vec(),
            }
        })
        .collect()
}

fn scope() -> Scope {
    Scope {
        region: "us-east-1".into(),
        service: "batch".into(),
    }
}

fn check(req: &Request<'_>, now: i64) -> Result<String, SigError> {
    verify(
        req,
        &scope(),
        |k| (k == KEY).then(|| SECRET.to_string()),
        now,
    )
}

#[test]
fn botocore_signed_requests_verify() {
    let vs = vectors();
    assert_eq!(vs.len(), 4);
    for v in &vs {
        assert_eq!(
            check(&v.request(), SIGNED_AT),
            Ok(KEY.to_string()),
            "{} {}?{}",
            v.method,
            v.path,
            v.query
        );
        // Within the allowed skew either way.
        for now in [SIGNED_AT - MAX_SKEW_SECS, SIGNED_AT + MAX_SKEW_SECS] {
            assert_eq!(check(&v.request(), now), Ok(KEY.to_string()));
        }
    }
}

#[test]
fn a_changed_request_or_a_wrong_secret_does_not_verify() {
    for v in vectors() {
        let base = v.request();
        // A wrong secret.
        assert_eq!(
            verify(
                &base,
                &scope(),
                |_| Some("not-the-secret".into()),
                SIGNED_AT
            ),
            Err(SigError::Mismatch)
        );
        // An unknown key.
        assert_eq!(
            verify(&base, &scope(), |_| None, SIGNED_AT),
            Err(SigError::UnknownKey)
        );
        // Another body, method, path or query.
        let mut body = v.body.clone();
        body.push(b' ');
        let changed = [
            Request {
                body: &body,
                ..base
            },
            Request {
                method: "PUT",
                ..base
            },
            Request {
                path: "/v1/deletequotashare",
                ..base
            },
            Request {
                query: "tagKeys=other",
                ..base
            },
        ];
        for r in changed {
            assert_eq!(check(&r, SIGNED_AT), Err(SigError::Mismatch), "{r:?}");
        }
        // Another value of a signed header (the host).
        let headers: Vec<(String, String)> = v
            .headers
            .iter()
            .map(|(k, val)| {
                if k == "Host" {
                    (k.clone(), "evil.example:443".into())
                } else {
                    (k.clone(), val.clone())
                }
            })
            .collect();
        let r = Request {
            headers: &headers,
            ..base
        };
        assert_eq!(check(&r, SIGNED_AT), Err(SigError::Mismatch));
        // Replayed later, or signed in the future.
        for (now, says) in [
            (SIGNED_AT + MAX_SKEW_SECS + 1, "Signature expired"),
            (SIGNED_AT - MAX_SKEW_SECS - 1, "Signature not yet current"),
        ] {
            let e = check(&base, now).expect_err("out of the window");
            assert!(matches!(e, SigError::Expired(_)), "{e:?}");
            assert!(e.to_string().starts_with(says), "{e}");
            assert_eq!(e.code(), "InvalidSignatureException");
        }
        // Signed for another region or service.
        for scope in [
            Scope {
                region: "eu-west-1".into(),
                service: "batch".into(),
            },
            Scope {
                region: "us-east-1".into(),
                service: "sagemaker".into(),
            },
        ] {
            let e = verify(&base, &scope, |_| Some(SECRET.into()), SIGNED_AT).expect_err("scope");
            assert!(matches!(e, SigError::WrongScope(_)), "{e:?}");
        }
    }
}

#[test]
fn unsigned_malformed_and_presigned_requests_get_aws_errors() {
    let v = &vectors()[0];
    let without = |name: &str| -> Vec<(String, String)> {
        v.headers
            .iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case(name))
            .cloned()
            .collect()
    };
    let with_auth = |auth: &str| -> Vec<(String, String)> {
        let mut h = without("authorization");
        h.push(("Authorization".into(), auth.into()));
        h
    };
    let base = v.request();
    let no_auth = without("authorization");
    let e = check(
        &Request {
            headers: &no_auth,
            ..base
        },
        SIGNED_AT,
    )
    .expect_err("unsigned");
    assert_eq!(
        (e.code(), e.status()),
        ("MissingAuthenticationTokenException", 403)
    );
    let no_date = without("x-amz-date");
    let e = check(
        &Request {
            headers: &no_date,
            ..base
        },
        SIGNED_AT,
    )
    .expect_err("no date");
    assert_eq!(
        (e.code(), e.status()),
        ("IncompleteSignatureException", 400)
    );
    let good = v
        .headers
        .iter()
        .find(|(k, _)| k == "Authorization")
        .map(|(_, a)| a.clone())
        .expect("signed");
    for (bad, says) in [
        ("Basic dXNlcjpwYXNz", "AWS4-HMAC-SHA256"),
        ("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261204/us-east-1/batch/aws4_request, Signature=00", "SignedHeaders"),
        (&good.replace("SignedHeaders=content-type;host;x-amz-date", "SignedHeaders=content-type;x-amz-date"), "host"),
        (&good.replace("SignedHeaders=content-type;host;x-amz-date", "SignedHeaders=host;content-type;x-amz-date"), "in order"),
        (&good.replace("/aws4_request", "/aws4"), "aws4_request"),
        (&good.replace("Signature=", "Signature=zz"), "hexadecimal"),
    ] {
        let h = with_auth(bad);
        let e = check(&Request { headers: &h, ..base }, SIGNED_AT).expect_err(bad);
        assert!(e.to_string().contains(says), "{bad}: {e}");
    }
    // Signed for another day than it says it was signed on.
    let h = with_auth(&good.replace("/20261204/", "/20261203/"));
    let e = check(
        &Request {
            headers: &h,
            ..base
        },
        SIGNED_AT,
    )
    .expect_err("day");
    assert!(matches!(e, SigError::WrongScope(_)), "{e:?}");
    // A body hash that is not the body's.
    let mut h = v.headers.clone();
    h.push(("X-Amz-Content-SHA256".into(), "UNSIGNED-PAYLOAD".into()));
    assert_eq!(
        check(
            &Request {
                headers: &h,
                ..base
            },
            SIGNED_AT
        ),
        Err(SigError::Mismatch)
    );
    // Presigned URLs are not accepted.
    let e = check(
        &Request {
            query: "X-Amz-Signature=abc",
            ..base
        },
        SIGNED_AT,
    )
    .expect_err("presigned");
    assert!(matches!(e, SigError::Missing(_)), "{e:?}");
}

#[test]
fn what_fails_before_the_body_is_refused_before_the_body_is_read() {
    use qm_sigv4::{verify_before_body, BeforeBody};
    let before = |req: &Request<'_>| {
        verify_before_body(
            &Request { body: b"", ..*req },
            &scope(),
            |k| (k == KEY).then(|| SECRET.to_string()),
            SIGNED_AT,
        )
    };
    for v in &vectors() {
        // botocore declares no body hash for Batch: the key is known, the
        // signature is checked once the body is read.
        assert_eq!(
            before(&v.request()),
            Ok(BeforeBody::KeyKnown { key: KEY.into() })
        );
    }
    let v = &vectors()[0];
    let no_auth: Vec<(String, String)> = v
        .headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("authorization"))
        .cloned()
        .collect();
    assert!(before(&Request {
        headers: &no_auth,
        ..v.request()
    })
    .is_err());
    let other_key: Vec<(String, String)> = v
        .headers
        .iter()
        .map(|(k, val)| (k.clone(), val.replace(KEY, "AKIDUNKNOWN")))
        .collect();
    assert_eq!(
        before(&Request {
            headers: &other_key,
            ..v.request()
        }),
        Err(SigError::UnknownKey)
    );
    // A declared body hash that is signed is checked before the body: a
    // request whose signature does not cover it is refused at once.
    let mut declared = v.headers.clone();
    declared.push((
        "X-Amz-Content-SHA256".into(),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
    ));
    for (k, val) in declared.iter_mut() {
        if k == "Authorization" {
            *val = val.replace(
                "SignedHeaders=content-type;host;x-amz-date",
                "SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date",
            );
        }
    }
    assert_eq!(
        before(&Request {
            headers: &declared,
            ..v.request()
        }),
        Err(SigError::Mismatch)
    );
}

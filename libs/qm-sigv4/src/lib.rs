//! AWS Signature Version 4, from the verifying side: is this HTTP request
//! signed, now, for this region and service, by the holder of a key we
//! know? The AWS Batch-compatible gateway asks it of every request before
//! anything else; boto3, the AWS CLI and the AWS SDKs sign exactly this way.
//!
//! What is checked, in order (the first failure is the answer):
//! 1. an `Authorization` header of the `AWS4-HMAC-SHA256` algorithm with a
//!    credential, the signed headers and a signature (query-string
//!    signatures, as in presigned URLs, are refused);
//! 2. the credential's scope: `<key>/<date>/<region>/<service>/aws4_request`
//!    with our region and service, and its date that of `X-Amz-Date`;
//! 3. `X-Amz-Date` within [`MAX_SKEW`] of now (a captured request cannot be
//!    replayed later);
//! 4. `host` and `x-amz-date` among the signed headers;
//! 5. the access key is one we know;
//! 6. the signature, recomputed over the canonical request (method, path,
//!    query, the signed headers, the SHA-256 of the body), matches, compared
//!    in constant time. An `X-Amz-Content-SHA256` header must be the body's
//!    hash (an unsigned payload is refused).
//!
//! The canonical request follows the specification for every service but
//! S3: the path as it arrived is percent-encoded once more (so `%3A` is
//! signed as `%253A`), query parameters are decoded, re-encoded (RFC 3986
//! unreserved characters kept) and sorted, header values are trimmed with
//! inner runs of spaces collapsed to one.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// How far a request's `X-Amz-Date` may be from now, either way (AWS's).
pub const MAX_SKEW_SECS: i64 = 5 * 60;

/// A request as it arrived.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The path exactly as on the wire (percent-encoded), without the query.
    pub path: &'a str,
    /// The query string as on the wire, without the `?` (may be empty).
    pub query: &'a str,
    /// Every header, names in any case, in arrival order.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// Why a request is refused, with the error AWS answers it with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SigError {
    /// No `Authorization` header (or a presigned URL).
    Missing(String),
    /// The `Authorization` header or the signed date cannot be read.
    Malformed(String),
    /// Signed for another region, service or day.
    WrongScope(String),
    /// `X-Amz-Date` too far from now, either way (the message says which).
    Expired(String),
    /// No such access key.
    UnknownKey,
    /// The signature does not match (a wrong secret, or the request was
    /// changed on the way).
    Mismatch,
}

impl SigError {
    /// The error code AWS returns (`x-amzn-ErrorType`), all with HTTP 403
    /// but a malformed header (400).
    pub fn code(&self) -> &'static str {
        match self {
            SigError::Missing(_) => "MissingAuthenticationTokenException",
            SigError::Malformed(_) => "IncompleteSignatureException",
            SigError::WrongScope(_) | SigError::Mismatch | SigError::Expired(_) => {
                "InvalidSignatureException"
            }
            SigError::UnknownKey => "UnrecognizedClientException",
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            SigError::Malformed(_) => 400,
            _ => 403,
        }
    }
}

impl fmt::Display for SigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SigError::Missing(why) => write!(f, "Missing Authentication Token: {why}"),
            SigError::Malformed(why) => write!(f, "{why}"),
            SigError::WrongScope(why) => write!(f, "Credential should be scoped {why}"),
            SigError::Expired(why) => write!(f, "{why}"),
            SigError::UnknownKey => {
                write!(f, "The security token included in the request is invalid.")
            }
            SigError::Mismatch => write!(
                f,
                "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."
            ),
        }
    }
}

impl std::error::Error for SigError {}

/// What a request must be signed for.
#[derive(Clone, Debug)]
pub struct Scope {
    pub region: String,
    pub service: String,
}

/// What [`verify_before_body`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BeforeBody {
    /// Signed over its `x-amz-content-sha256` header, and that signature
    /// holds: the caller is who it says; the body must still hash to what
    /// it declared ([`verify`] checks both once it is read).
    Signed { key: String },
    /// The signature covers the body, whose hash is not declared: all the
    /// rest holds (the header reads, the scope, the date, a known key), and
    /// only [`verify`], once the body is read, can tell the signature.
    KeyKnown { key: String },
}

/// Checks what can be checked of `req` before its body is read (pass an
/// empty body): a server reads no body of a request that fails here, so an
/// unsigned client, or one with an unknown key or a stale date, costs it
/// no memory. When the request declares its body's hash in a signed
/// `x-amz-content-sha256`, the whole signature is verified here.
pub fn verify_before_body(
    req: &Request<'_>,
    scope: &Scope,
    secret_of: impl Fn(&str) -> Option<String>,
    now: i64,
) -> Result<BeforeBody, SigError> {
    let checked = check_header(req, scope, secret_of, now)?;
    let declared = header(req.headers, "x-amz-content-sha256")
        .filter(|h| is_hex_sha256(h))
        .filter(|_| {
            checked
                .auth
                .signed_headers
                .iter()
                .any(|h| h == "x-amz-content-sha256")
        });
    match declared {
        Some(hash) => {
            signature_matches(req, &checked, &hash)?;
            Ok(BeforeBody::Signed {
                key: checked.key_id,
            })
        }
        None => Ok(BeforeBody::KeyKnown {
            key: checked.key_id,
        }),
    }
}

fn is_hex_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Verifies `req`, signed at most [`MAX_SKEW_SECS`] from `now` (seconds
/// since the Unix epoch) for `scope`, with a secret `secret_of` knows.
/// Returns the access key id it was signed with.
pub fn verify(
    req: &Request<'_>,
    scope: &Scope,
    secret_of: impl Fn(&str) -> Option<String>,
    now: i64,
) -> Result<String, SigError> {
    let checked = check_header(req, scope, secret_of, now)?;
    let body_hash = hex::encode(Sha256::digest(req.body));
    if let Some(claimed) = header(req.headers, "x-amz-content-sha256") {
        if claimed != body_hash {
            return Err(SigError::Mismatch);
        }
    }
    signature_matches(req, &checked, &body_hash)?;
    Ok(checked.key_id)
}

/// A request whose `Authorization` header reads, for the right scope and
/// time, with a known key.
struct Checked {
    auth: Authorization,
    amz_date: String,
    date: String,
    region: String,
    service: String,
    key_id: String,
    secret: String,
}

fn check_header(
    req: &Request<'_>,
    scope: &Scope,
    secret_of: impl Fn(&str) -> Option<String>,
    now: i64,
) -> Result<Checked, SigError> {
    if query_params(req.query).any(|(k, _)| k.eq_ignore_ascii_case("X-Amz-Signature")) {
        return Err(SigError::Missing(
            "signatures in the query string (presigned URLs) are not accepted".into(),
        ));
    }
    let authorization = header(req.headers, "authorization")
        .ok_or_else(|| SigError::Missing("no Authorization header".into()))?;
    let auth = Authorization::parse(&authorization)?;
    let amz_date = header(req.headers, "x-amz-date").ok_or_else(|| {
        SigError::Malformed(
            "Authorization header requires existence of an X-Amz-Date header".into(),
        )
    })?;
    let signed_at = parse_amz_date(&amz_date)?;
    let cred: Vec<&str> = auth.credential.split('/').collect();
    let [key_id, date, region, service, terminator] = cred[..] else {
        return Err(SigError::Malformed(format!(
            "Credential {:?} must be <access key>/<date>/<region>/<service>/aws4_request",
            auth.credential
        )));
    };
    if terminator != "aws4_request" {
        return Err(SigError::Malformed(format!(
            "Credential ends with {terminator:?}, not aws4_request"
        )));
    }
    if region != scope.region || service != scope.service {
        return Err(SigError::WrongScope(format!(
            "to region {:?} and service {:?}, not {region:?} and {service:?}",
            scope.region, scope.service
        )));
    }
    if date != &amz_date[..8] {
        return Err(SigError::WrongScope(format!(
            "to the date of X-Amz-Date ({}), not {date:?}",
            &amz_date[..8]
        )));
    }
    if now - signed_at > MAX_SKEW_SECS {
        return Err(SigError::Expired(format!(
            "Signature expired: {amz_date} is more than {} minutes ago",
            MAX_SKEW_SECS / 60
        )));
    }
    if signed_at - now > MAX_SKEW_SECS {
        return Err(SigError::Expired(format!(
            "Signature not yet current: {amz_date} is more than {} minutes from now",
            MAX_SKEW_SECS / 60
        )));
    }
    for needed in ["host", "x-amz-date"] {
        if !auth.signed_headers.iter().any(|h| h == needed) {
            return Err(SigError::Malformed(format!(
                "SignedHeaders must include {needed}"
            )));
        }
    }
    let secret = secret_of(key_id).ok_or(SigError::UnknownKey)?;
    let (key_id, date, region, service) = (
        key_id.to_string(),
        date.to_string(),
        region.to_string(),
        service.to_string(),
    );
    Ok(Checked {
        auth,
        amz_date,
        date,
        region,
        service,
        key_id,
        secret,
    })
}

/// Whether the signature is the one `checked`'s secret makes of `req` with
/// a body hashing to `body_hash`.
fn signature_matches(req: &Request<'_>, c: &Checked, body_hash: &str) -> Result<(), SigError> {
    let canonical = canonical_request(req, &c.auth.signed_headers, body_hash)?;
    let scope_text = format!("{}/{}/{}/aws4_request", c.date, c.region, c.service);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope_text}\n{}",
        c.amz_date,
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let k_date = hmac(format!("AWS4{}", c.secret).as_bytes(), c.date.as_bytes());
    let k_region = hmac(&k_date, c.region.as_bytes());
    let k_service = hmac(&k_region, c.service.as_bytes());
    let k_signing = hmac(&k_service, b"aws4_request");
    let expected = hex::encode(hmac(&k_signing, to_sign.as_bytes()));
    if !equal_in_constant_time(expected.as_bytes(), c.auth.signature.as_bytes()) {
        return Err(SigError::Mismatch);
    }
    Ok(())
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 ...` header.
struct Authorization {
    credential: String,
    signed_headers: Vec<String>,
    signature: String,
}

impl Authorization {
    fn parse(value: &str) -> Result<Authorization, SigError> {
        let rest = value
            .trim()
            .strip_prefix("AWS4-HMAC-SHA256")
            .filter(|r| r.starts_with(' '))
            .ok_or_else(|| {
                SigError::Malformed(
                    "Authorization header must use the AWS4-HMAC-SHA256 algorithm".into(),
                )
            })?;
        let (mut credential, mut signed, mut signature) = (None, None, None);
        for part in rest.split(',') {
            let (k, v) = part.trim().split_once('=').ok_or_else(|| {
                SigError::Malformed(format!(
                    "Authorization header part {:?} is not key=value",
                    part.trim()
                ))
            })?;
            match k {
                "Credential" => credential = Some(v.to_string()),
                "SignedHeaders" => signed = Some(v.to_string()),
                "Signature" => signature = Some(v.to_string()),
                _ => {}
            }
        }
        let missing = |what: &str| {
            SigError::Malformed(format!("Authorization header requires '{what}' parameter"))
        };
        let signed = signed.ok_or_else(|| missing("SignedHeaders"))?;
        let signed_headers: Vec<String> = signed.split(';').map(str::to_string).collect();
        let mut sorted = signed_headers.clone();
        sorted.sort();
        sorted.dedup();
        if sorted != signed_headers
            || signed_headers
                .iter()
                .any(|h| h.is_empty() || *h != h.to_ascii_lowercase())
        {
            return Err(SigError::Malformed(
                "SignedHeaders must be distinct lowercase names in order".into(),
            ));
        }
        let signature = signature.ok_or_else(|| missing("Signature"))?;
        if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(SigError::Malformed(
                "Signature must be 64 hexadecimal digits".into(),
            ));
        }
        Ok(Authorization {
            credential: credential.ok_or_else(|| missing("Credential"))?,
            signed_headers,
            signature: signature.to_ascii_lowercase(),
        })
    }
}

/// The value of header `name` (case-insensitive); several are joined with
/// commas, as the specification says.
fn header(headers: &[(String, String)], name: &str) -> Option<String> {
    let values: Vec<&str> = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// `YYYYMMDD'T'HHMMSS'Z'` as seconds since the Unix epoch.
fn parse_amz_date(text: &str) -> Result<i64, SigError> {
    let bad = || SigError::Malformed(format!("X-Amz-Date {text:?} is not YYYYMMDDTHHMMSSZ"));
    let b = text.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<u32, SigError> {
        let s = &text[r];
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    let month = time::Month::try_from(num(4..6)? as u8).map_err(|_| bad())?;
    let date = time::Date::from_calendar_date(num(0..4)? as i32, month, num(6..8)? as u8)
        .map_err(|_| bad())?;
    let at = date
        .with_hms(num(9..11)? as u8, num(11..13)? as u8, num(13..15)? as u8)
        .map_err(|_| bad())?;
    Ok(at.assume_utc().unix_timestamp())
}

fn canonical_request(
    req: &Request<'_>,
    signed: &[String],
    body_hash: &str,
) -> Result<String, SigError> {
    let path = if req.path.is_empty() { "/" } else { req.path };
    let mut params: Vec<(String, String)> = query_params(req.query)
        .map(|(k, v)| (encode(&decode(k), false), encode(&decode(v), false)))
        .collect();
    params.sort();
    let query = params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut headers = String::new();
    for name in signed {
        let value = header(req.headers, name).ok_or_else(|| {
            SigError::Malformed(format!("signed header {name:?} is not in the request"))
        })?;
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        headers.push_str(&format!("{name}:{value}\n"));
    }
    Ok(format!(
        "{}\n{}\n{query}\n{headers}\n{}\n{body_hash}",
        req.method,
        encode(path, true),
        signed.join(";")
    ))
}

fn query_params(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
}

/// What SigV4 leaves unencoded: RFC 3986's unreserved characters.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// In a path, `/` as well.
const UNRESERVED_PATH: &AsciiSet = &UNRESERVED.remove(b'/');

/// Percent-encodes all but RFC 3986's unreserved characters (and `/` in a
/// path), upper-case hex.
fn encode(text: &str, path: bool) -> String {
    let set = if path { UNRESERVED_PATH } else { UNRESERVED };
    utf8_percent_encode(text, set).to_string()
}

/// Decodes `%XX` escapes (and `+` as itself); invalid escapes stay as they are.
fn decode(text: &str) -> String {
    percent_decode_str(text).decode_utf8_lossy().into_owned()
}

/// Decodes `%XX` escapes (`+` is itself), as a path or query value a
/// signed request carries; None when an escape is malformed or the result
/// is not UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    if !escapes_well_formed(text) {
        return None;
    }
    percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(|s| s.into_owned())
}

/// Whether every `%` starts an escape of two hex digits (the decoder keeps
/// malformed ones as they are; a signed path must not have any).
fn escapes_well_formed(text: &str) -> bool {
    let b = text.as_bytes();
    b.iter().enumerate().all(|(i, &c)| {
        c != b'%'
            || (b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// Compares in time that does not depend on where the two differ
/// (`subtle`): a signature check must not tell how much of a guess was
/// right.
fn equal_in_constant_time(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_parse_or_are_refused_with_the_reason() {
        assert_eq!(parse_amz_date("19700101T000000Z"), Ok(0));
        assert_eq!(parse_amz_date("20261204T173754Z"), Ok(1_796_405_874));
        for bad in [
            "2026-12-04T17:37:54Z",
            "20261304T173754Z",
            "20261204T173754",
            "2026120AT173754Z",
            "",
        ] {
            let e = parse_amz_date(bad).expect_err(bad);
            assert!(e.to_string().contains("X-Amz-Date"), "{e}");
        }
    }

    #[test]
    fn strict_decoding_refuses_malformed_escapes_lenient_keeps_them() {
        assert_eq!(
            percent_decode("arn%3Aaws%3Abatch%2Fq+x").as_deref(),
            Some("arn:aws:batch/q+x")
        );
        for bad in ["%ZZ", "%4", "a%", "%FF"] {
            assert_eq!(percent_decode(bad), None, "{bad}");
        }
        assert_eq!(decode("a%ZZb%4"), "a%ZZb%4");
    }

    #[test]
    fn escapes_decode_and_encode_as_the_specification_says() {
        assert_eq!(decode("cost%20centre"), "cost centre");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz%41"), "%zzA");
        assert_eq!(encode("a b/c~d", false), "a%20b%2Fc~d");
        assert_eq!(encode("/v1/tags/arn%3Aaws", true), "/v1/tags/arn%253Aaws");
    }
}

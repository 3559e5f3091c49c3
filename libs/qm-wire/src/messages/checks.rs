//! Checks of a job's fields that the wire can make alone: S3 URIs, local
//! paths, image references and input channel names.

/// A parsed `s3://bucket/prefix` URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Uri {
    pub bucket: String,
    /// Not empty, without a trailing `/`.
    pub prefix: String,
}

/// Parses `s3://bucket/prefix`, naming what is wrong: the bucket must be
/// a valid S3 bucket name (3-63 lowercase letters, digits, `.` and `-`,
/// starting and ending with a letter or digit); the prefix (a trailing `/`
/// allowed) must be a [`safe_relative_path`](crate::paths::safe_relative_path).
pub fn parse_s3_uri(uri: &str) -> Result<S3Uri, String> {
    let rest = uri
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{uri:?} must start with s3://"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-';
    let ok_end = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !(3..=63).contains(&bucket.len())
        || !bucket.chars().all(ok_char)
        || !ok_end(bucket.chars().next())
        || !ok_end(bucket.chars().last())
    {
        return Err(format!(
            "bucket {bucket:?} is not a valid S3 bucket name (3-63 lowercase letters, digits, '.' and '-')"
        ));
    }
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        return Err(format!(
            "{uri:?} needs a prefix after the bucket (s3://{bucket}/some/prefix), so checkpoints do not mix with the bucket's other objects"
        ));
    }
    if !crate::paths::safe_relative_path(prefix) {
        return Err(format!(
            "prefix {prefix:?} must be '/'-separated names, none empty, '.' or '..'"
        ));
    }
    Ok(S3Uri {
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
    })
}

/// Checks a `localPath` (a trailing `/` allowed): it must stay inside the
/// attempt's directory ([`safe_relative_path`](crate::paths::safe_relative_path)).
pub fn check_local_path(path: &str) -> Result<(), String> {
    if !crate::paths::safe_relative_path(path.trim_end_matches('/')) {
        return Err(format!(
            "{path:?} must be a relative path inside the attempt's directory (no '..', not absolute)"
        ));
    }
    Ok(())
}

/// Checks an image reference as the container engine reads one:
/// `[host[:port]/]path[:tag][@sha256:<64 hex>]`, path components of
/// lowercase letters, digits and `.`, `_`, `-` separators, a tag of at most
/// 128 word characters, `.` and `-`, 255 characters in all.
pub fn check_image_reference(image: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{image:?} is not an image reference: {why}"));
    if image.is_empty() || image.len() > 255 {
        return bad("it must be 1-255 characters");
    }
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        let hex = d.strip_prefix("sha256:").unwrap_or("");
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return bad("a digest is sha256: and 64 lowercase hex digits");
        }
    }
    // A tag follows the last ':' after the last '/' (a ':' before it is a
    // registry's port).
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (path, tag) = match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
        None => (name, None),
    };
    if let Some(tag) = tag {
        let ok = !tag.is_empty()
            && tag.len() <= 128
            && !tag.starts_with(['.', '-'])
            && tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !ok {
            return bad(
                "a tag is 1-128 letters, digits, '_', '.' and '-', not starting with '.' or '-'",
            );
        }
    }
    let mut parts: Vec<&str> = path.split('/').collect();
    // The first component is a registry host when it has a '.' or ':' or
    // is localhost; it may hold uppercase letters and a port.
    if parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost") {
        let host = parts.remove(0);
        let (h, port) = match host.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host, None),
        };
        let host_ok = !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'));
        let port_ok = port.is_none_or(|p| {
            p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok_and(|n| n > 0)
        });
        if !host_ok || !port_ok {
            return bad("the registry is a host name with an optional :port");
        }
    }
    for part in &parts {
        let ok = !part.is_empty()
            && part.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !ok {
            return bad(
                "each path component is lowercase letters and digits, separated by '.', '_' or '-'",
            );
        }
    }
    Ok(())
}

/// Checks a channel name: 1-64 letters, digits, `.`, `_` and `-`, not `.`
/// or `..` (it becomes a folder and a variable's name).
pub fn check_channel_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} must be 1-64 letters, digits, '.', '_' and '-'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_are_checked_as_the_engine_reads_them() {
        for ok in [
            "ubuntu",
            "quartermaster/pytorch-trainer:local",
            "registry.local:5000/team-a/trainer:1.2-rc_3",
            "localhost/x",
            "Registry.Example.com/a/b",
        ] {
            assert!(
                check_image_reference(ok).is_ok(),
                "{ok}: {:?}",
                check_image_reference(ok)
            );
        }
        let digest = format!("team/trainer@sha256:{}", "0123456789abcdef".repeat(4));
        assert!(check_image_reference(&digest).is_ok());
        for (bad, says) in [
            ("", "1-255"),
            ("Team/X", "lowercase"),
            ("team/x:", "a tag"),
            ("team/x:-1", "a tag"),
            ("team/x@sha256:abc", "digest"),
            ("team//x", "lowercase"),
            ("team/x y", "lowercase"),
            ("host:99999/x", "registry"),
        ] {
            let e = check_image_reference(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn s3_uris_are_parsed_or_refused_with_the_reason() {
        assert_eq!(
            parse_s3_uri("s3://team-a.ckpt/runs/llm-7b/").expect("valid"),
            S3Uri {
                bucket: "team-a.ckpt".into(),
                prefix: "runs/llm-7b".into()
            }
        );
        let refused = |uri: &str, says: &str| {
            let e = parse_s3_uri(uri).expect_err(uri);
            assert!(e.contains(says), "{uri}: {e}");
        };
        refused("https://bucket/x", "must start with s3://");
        refused("s3://Bucket/x", "not a valid S3 bucket name");
        refused("s3://ab/x", "not a valid S3 bucket name");
        refused("s3://-bucket/x", "not a valid S3 bucket name");
        refused("s3://bucket", "needs a prefix");
        refused("s3://bucket/", "needs a prefix");
        refused("s3://bucket/a//b", "none empty");
        refused("s3://bucket/a/../b", "none empty");
    }

    #[test]
    fn local_paths_stay_inside_the_attempt_directory() {
        assert!(check_local_path("checkpoint").is_ok());
        assert!(check_local_path("out/ckpt/").is_ok());
        for bad in ["", "/opt/ml/checkpoints", "../x", "a/../../x", "a//b", "."] {
            assert!(check_local_path(bad).is_err(), "{bad:?}");
        }
    }
}

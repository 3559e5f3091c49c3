//! Where a share's jobs may reach: checkpoint and input URIs under the
//! share's prefixes, images under its image prefixes.

/// May a job of `queue/share` keep its checkpoints (or outputs) at
/// `s3_uri`? Under one of the share's `checkpointS3Prefixes` when it has
/// them; else under `s3://<default bucket>/<queue>/shares/<share>/` (when
/// the default bucket is not known, only the path is checked; the
/// checkpoint service, which knows it, checks the bucket too).
pub fn checkpoint_uri_allowed(
    s3_uri: &str,
    allowed: Option<&[String]>,
    default_bucket: Option<&str>,
    queue: &str,
    share: &str,
) -> Result<(), String> {
    let place = SharePlace {
        queue,
        share,
        key: "checkpointS3Prefixes",
        doing: "keep checkpoints",
    };
    place.allows(s3_uri, allowed, default_bucket)
}

/// May a job of `queue/share` read an input channel at `s3_uri`? Under one
/// of the share's `inputS3Prefixes` when it has them; else, as for
/// checkpoints, under `s3://<default bucket>/<queue>/shares/<share>/`.
pub fn input_uri_allowed(
    s3_uri: &str,
    allowed: Option<&[String]>,
    default_bucket: Option<&str>,
    queue: &str,
    share: &str,
) -> Result<(), String> {
    let place = SharePlace {
        queue,
        share,
        key: "inputS3Prefixes",
        doing: "read inputs",
    };
    place.allows(s3_uri, allowed, default_bucket)
}

/// One share's S3 places of one kind: the rule both checks share, with the
/// setting's name and what the share does there for the refusals.
struct SharePlace<'a> {
    queue: &'a str,
    share: &'a str,
    key: &'a str,
    doing: &'a str,
}

impl SharePlace<'_> {
    /// Under one of `allowed` (a `/` boundary), else under the share's own
    /// area of the default bucket.
    fn allows(
        &self,
        s3_uri: &str,
        allowed: Option<&[String]>,
        default_bucket: Option<&str>,
    ) -> Result<(), String> {
        let (queue, share, key, doing) = (self.queue, self.share, self.key, self.doing);
        let uri = qm_wire::messages::parse_s3_uri(s3_uri)?;
        let under = |bucket: Option<&str>, prefix: &str| {
            bucket.is_none_or(|b| b == uri.bucket)
                && (uri.prefix == prefix || uri.prefix.starts_with(&format!("{prefix}/")))
        };
        match allowed {
            Some(list) => {
                for entry in list {
                    let e = qm_wire::messages::parse_s3_uri(entry)
                        .map_err(|err| format!("{key} entry {entry:?}: {err}"))?;
                    if under(Some(&e.bucket), &e.prefix) {
                        return Ok(());
                    }
                }
                Err(format!(
                    "{s3_uri:?} is outside the {key} share {queue}/{share} allows ({})",
                    list.join(", ")
                ))
            }
            None => {
                let prefix = format!("{queue}/shares/{share}");
                if under(default_bucket, &prefix) {
                    Ok(())
                } else {
                    let bucket = default_bucket.unwrap_or("<checkpoint bucket>");
                    Err(format!(
                        "{s3_uri:?} is outside s3://{bucket}/{prefix}/, the only place share {queue}/{share} may {doing} (an admin can allow more with the share's {key})"
                    ))
                }
            }
        }
    }
}

/// May a job of `queue/share` run `image`? Only when one of the share's
/// `imagePrefixes` covers it: an entry ending in `/` covers every image
/// under it; any other entry is a repository and covers that repository
/// with any tag or digest (`team/trainer` covers `team/trainer:1` and
/// `team/trainer@sha256:...`, not `team/trainer-2`).
pub fn image_allowed(
    image: &str,
    allowed: Option<&[String]>,
    queue: &str,
    share: &str,
) -> Result<(), String> {
    let list = allowed.unwrap_or_default();
    let covers = |entry: &str| {
        if entry.is_empty() {
            return false;
        }
        if entry.ends_with('/') {
            return image.starts_with(entry);
        }
        match image.strip_prefix(entry) {
            Some("") => true,
            // A tag (no '/': `ubuntu:5000/x` is registry `ubuntu`'s image)
            // or a digest.
            Some(rest) => (rest.starts_with(':') && !rest.contains('/')) || rest.starts_with('@'),
            None => false,
        }
    };
    if list.iter().any(|e| covers(e)) {
        return Ok(());
    }
    if list.is_empty() {
        return Err(format!(
            "share {queue}/{share} may not run images (an admin allows them with the share's imagePrefixes)"
        ));
    }
    Err(format!(
        "{image:?} is not an image share {queue}/{share} may run (its imagePrefixes: {})",
        list.join(", ")
    ))
}

/// Checks an `imagePrefixes` entry: a repository or a prefix ending in
/// `/`, as an image reference's name part.
pub fn check_image_prefix(entry: &str) -> Result<(), String> {
    let name = entry.trim_end_matches('/');
    if name.is_empty() {
        return Err("an entry must name a registry or repository".into());
    }
    if name.contains(['@', ' '])
        || name
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains(':') && entry.ends_with('/'))
    {
        return Err(format!(
            "{entry:?} must be a repository or a prefix ending in '/', without a tag or digest"
        ));
    }
    qm_wire::messages::check_image_reference(name).map_err(|e| format!("{entry:?}: {e}"))
}

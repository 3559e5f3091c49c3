//! The tenancy as it is stored and changed while everything runs (ADR
//! 0020): each change is a revision in the `qm_tenancy` KV bucket, written
//! only by admission, watched by admission, the gateway, the console and
//! `qm tenancy sync-nats`. These are the stored record and the API's
//! requests and answers (`ApplyTenancy`, `DescribeTenancy`,
//! `ListTenancyRevisions`).

use serde::{Deserialize, Serialize};

use crate::Tenancy;

/// Revisions `qm tenancy history` can show (the bucket's history); every
/// change stays in the audit log for its retention.
pub const HISTORY: i64 = 64;

/// File texts remembered as applied.
pub const FILE_DIGESTS: usize = 256;

/// One revision of the tenancy, as stored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenancyRevision {
    /// The bucket's revision number (set when read; 0 in a request).
    #[serde(default)]
    pub revision: u64,
    /// Milliseconds since the Unix epoch.
    pub at: u64,
    /// Who made it (an admin, or admission itself for its tenancy file).
    pub principal: String,
    /// How it was made: `qm tenancy apply`, or `tenancy file <path>`.
    pub source: String,
    /// The SHA-256 of every tenancy file text admission has applied
    /// (carried along by later revisions, oldest first, the last
    /// [`FILE_DIGESTS`]): a file is applied only if its text never was, so
    /// a restart, or a replica with an older file, undoes nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_digests: Vec<String>,
    /// Who gains and loses what against the revision before.
    #[serde(default)]
    pub changes: Vec<String>,
    pub tenancy: Tenancy,
}

/// `ApplyTenancy` (admins only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplyTenancy {
    pub tenancy: Tenancy,
    /// Check it and say what would change; store nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Apply only if this is still the revision in effect (so two admins'
    /// changes cannot silently overwrite each other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_revision: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplyTenancyResponse {
    /// The new revision (a dry run, or no change: the one in effect).
    pub revision: u64,
    /// The revision it replaced (0: none).
    pub previous_revision: u64,
    /// Stored (false: a dry run, or nothing changed).
    pub applied: bool,
    pub changes: Vec<String>,
}

/// `DescribeTenancy` (admins and readers): the revision in effect, or an
/// earlier one still in the history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DescribeTenancy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
}

/// `ListTenancyRevisions` (admins and readers): no fields.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTenancyRevisions {}

/// One line of `ListTenancyRevisions` (admins and readers), newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionSummary {
    pub revision: u64,
    pub at: u64,
    pub principal: String,
    pub source: String,
    pub changes: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListTenancyRevisionsResponse {
    pub revisions: Vec<RevisionSummary>,
}

impl From<&TenancyRevision> for RevisionSummary {
    fn from(r: &TenancyRevision) -> Self {
        RevisionSummary {
            revision: r.revision,
            at: r.at,
            principal: r.principal.clone(),
            source: r.source.clone(),
            changes: r.changes.clone(),
        }
    }
}

/// A stored revision read back: its record, validated whole (a record
/// that does not validate is never put in effect).
pub fn read_revision(bytes: &[u8], revision: u64) -> Result<TenancyRevision, String> {
    let mut r: TenancyRevision = serde_json::from_slice(bytes)
        .map_err(|e| format!("tenancy revision {revision} is unreadable: {e}"))?;
    let problems = r.tenancy.problems();
    if !problems.is_empty() {
        return Err(format!(
            "tenancy revision {revision} is invalid: {}",
            problems.join("; ")
        ));
    }
    r.revision = revision;
    Ok(r)
}

/// The SHA-256 of a tenancy file's text, in hex.
pub fn file_digest(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

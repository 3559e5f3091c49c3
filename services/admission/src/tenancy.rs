//! The tenancy, live (ADR 0020): `ApplyTenancy`, `DescribeTenancy` and
//! `ListTenancyRevisions`, the `qm_tenancy` bucket they keep, and the
//! tenancy file admission applies at start when its text changed.
//!
//! Admins change the tenancy; admins and readers read it (it names every
//! principal and public key, never a secret). A revision is checked whole
//! before it is stored: every problem is named, every principal needs a
//! NATS key (a principal the request gives no keys keeps the ones it had),
//! and an admin cannot remove the last admin (no one could change it
//! again). Each stored revision is also an audit record (`qm audit`).

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use futures::StreamExt;
use qm_service::api;
use qm_tenancy::live::{
    self, ApplyTenancy, ApplyTenancyResponse, DescribeTenancy, ListTenancyRevisionsResponse,
    RevisionSummary, TenancyRevision,
};
use qm_tenancy::Tenancy;
use qm_wire::messages::{AuditEvent, Caller, ErrorCode, Problem};
use qm_wire::subjects;

use crate::{transient, Admission, Result};

/// Creates (or opens) the tenancy bucket. None: it cannot be made (the
/// NATS authorization predates it: rerun `qm auth` and reload the
/// servers); admission then serves its tenancy file, as before.
pub async fn bucket(client: &async_nats::Client, replicas: usize) -> Option<kv::Store> {
    let js = jetstream::new(client.clone());
    let made = qm_service::nats::bucket(
        &js,
        kv::Config {
            bucket: subjects::TENANCY_BUCKET.into(),
            description: "the tenancy in effect, one revision per change (qm tenancy apply)".into(),
            history: live::HISTORY,
            storage: stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        },
    )
    .await;
    match made {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::warn!(error = %e, "no tenancy bucket: the tenancy file stays in effect and `qm tenancy apply` is refused (rerun `qm auth` and reload the NATS servers)");
            None
        }
    }
}

/// The revision in effect, if one is stored.
async fn current(bucket: &kv::Store) -> Result<Option<TenancyRevision>> {
    let entry = bucket
        .entry(subjects::TENANCY_KEY)
        .await
        .map_err(|e| transient("the stored tenancy is unavailable", e))?;
    match entry {
        Some(e) if e.operation == kv::Operation::Put => live::read_revision(&e.value, e.revision)
            .map(Some)
            .map_err(|m| api::error(ErrorCode::Internal, m)),
        _ => Ok(None),
    }
}

/// Stores `next` as the revision after `expected` (0: none yet). Err
/// CONFLICT when another change came first.
async fn store(bucket: &kv::Store, next: &TenancyRevision, expected: u64) -> Result<u64> {
    let body = serde_json::to_vec(next)
        .map_err(|e| api::error(ErrorCode::Internal, format!("cannot encode: {e}")))?;
    let stored = if expected == 0 {
        bucket
            .create(subjects::TENANCY_KEY, body.into())
            .await
            .map_err(|e| e.to_string())
    } else {
        bucket
            .update(subjects::TENANCY_KEY, body.into(), expected)
            .await
            .map_err(|e| e.to_string())
    };
    stored.map_err(|e| {
        if e.contains("wrong last sequence") || e.contains("key already exists") {
            api::error(
                ErrorCode::Conflict,
                format!("the tenancy changed while this change was made (revision {expected} is no longer in effect); look again and retry"),
            )
        } else {
            transient("the tenancy could not be stored", e)
        }
    })
}

/// Applies the tenancy file at start when its text differs from the last
/// file applied (so restarting with an unchanged file undoes no `qm
/// tenancy apply`), and waits until the revision in effect is known.
pub async fn apply_file(
    bucket: &kv::Store,
    path: &str,
    text: &str,
    file: Tenancy,
    principal: &str,
) {
    let digest = live::file_digest(text);
    for _ in 0..10 {
        let before = match current(bucket).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e.message, "cannot read the stored tenancy; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        if before.as_ref().and_then(|b| b.file_sha256.as_deref()) == Some(digest.as_str()) {
            return; // this file's text is already applied
        }
        let mut tenancy = file.clone();
        let previous = before.as_ref().map_or(0, |b| b.revision);
        let empty = Tenancy::default();
        let old = before.as_ref().map_or(&empty, |b| &b.tenancy);
        tenancy.keep_keys_from(old);
        let next = TenancyRevision {
            revision: 0,
            at: qm_service::now_ms(),
            principal: principal.to_string(),
            source: format!("tenancy file {path}"),
            file_sha256: Some(digest.clone()),
            changes: qm_tenancy::changes(old, &tenancy),
            tenancy,
        };
        match store(bucket, &next, previous).await {
            Ok(revision) => {
                tracing::info!(
                    revision,
                    file = path,
                    changes = next.changes.len(),
                    "the tenancy file changed: applied as a new revision"
                );
                return;
            }
            Err(e) if e.code == ErrorCode::Conflict => continue,
            Err(e) => {
                tracing::warn!(error = %e.message, "cannot store the tenancy file's revision; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

fn problems(messages: Vec<String>) -> Vec<Problem> {
    messages
        .into_iter()
        .map(|m| {
            let (field, message) = m
                .split_once(": ")
                .map_or(("tenancy".to_string(), m.clone()), |(f, r)| {
                    (f.to_string(), r.to_string())
                });
            Problem { field, message }
        })
        .collect()
}

fn sees_tenancy(caller: &Caller) -> Result<()> {
    if qm_tenancy::sees_all(caller) {
        Ok(())
    } else {
        Err(api::error(
            ErrorCode::AccessDenied,
            format!(
                "principal {:?} may not read the tenancy (admins and readers may)",
                caller.principal
            ),
        ))
    }
}

impl Admission {
    fn tenancy_bucket(&self) -> Result<&kv::Store> {
        self.tenancy_bucket.as_ref().ok_or_else(|| {
            api::error(
                ErrorCode::Conflict,
                "this Quartermaster keeps no tenancy revisions: its NATS authorization predates them (rerun `qm auth` and reload the NATS servers, then restart admission)",
            )
        })
    }

    /// `ApplyTenancy`: admins only.
    pub(crate) async fn apply_tenancy(
        &self,
        caller: &Caller,
        req: ApplyTenancy,
    ) -> Result<ApplyTenancyResponse> {
        if caller.role != "ADMIN" {
            return Err(api::error(
                ErrorCode::AccessDenied,
                format!(
                    "principal {:?} may not change the tenancy (only admins may)",
                    caller.principal
                ),
            ));
        }
        let bucket = self.tenancy_bucket()?;
        let before = current(bucket).await?;
        let previous = before.as_ref().map_or(0, |b| b.revision);
        if let Some(expected) = req.expected_revision {
            if expected != previous {
                return Err(api::error(
                    ErrorCode::Conflict,
                    format!("revision {previous} is in effect, not {expected}: look again (`qm tenancy diff`) and retry"),
                ));
            }
        }
        let empty = Tenancy::default();
        let old = before.as_ref().map_or(&empty, |b| &b.tenancy);
        let mut tenancy = req.tenancy;
        // Checked as sent (keys of principals it does not declare are
        // named, not dropped), then given the keys it does not change.
        let mut found = tenancy.problems();
        tenancy.keep_keys_from(old);
        let missing = tenancy.missing_keys();
        if !missing.is_empty() {
            found.push(format!(
                "nkeys: no NATS key for {} (`qm tenancy apply --keys DIR` makes and fills them in, or list them under nkeys)",
                missing.join(", ")
            ));
        }
        if tenancy.admins.is_empty() {
            found.push(
                "admins: name at least one admin (no one could change the tenancy again)".into(),
            );
        }
        if !found.is_empty() {
            return Err(api::invalid(
                format!(
                    "the tenancy is invalid ({} problem{}); nothing was changed",
                    found.len(),
                    if found.len() == 1 { "" } else { "s" }
                ),
                problems(found),
            ));
        }
        let changes = qm_tenancy::changes(old, &tenancy);
        if req.dry_run || (changes.is_empty() && before.is_some() && *old == tenancy) {
            return Ok(ApplyTenancyResponse {
                revision: previous,
                previous_revision: previous,
                applied: false,
                changes,
            });
        }
        let next = TenancyRevision {
            revision: 0,
            at: qm_service::now_ms(),
            principal: caller.principal.clone(),
            source: "qm tenancy apply".into(),
            file_sha256: before.as_ref().and_then(|b| b.file_sha256.clone()),
            changes: changes.clone(),
            tenancy,
        };
        let revision = store(bucket, &next, previous).await?;
        self.audit_tenancy(revision, &next).await;
        // Read your writes: the caller's next request meets the new revision.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while self.tenancy.revision() < revision && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tracing::info!(revision, by = %caller.principal, changes = changes.len(), "tenancy applied");
        Ok(ApplyTenancyResponse {
            revision,
            previous_revision: previous,
            applied: true,
            changes,
        })
    }

    /// The audit record of a tenancy change (admins and readers see it).
    async fn audit_tenancy(&self, revision: u64, r: &TenancyRevision) {
        let record = AuditEvent {
            at: r.at,
            principal: r.principal.clone(),
            operation: "ApplyTenancy".into(),
            job_queue: String::new(),
            quota_share_name: None,
            job_id: None,
            detail: format!(
                "tenancy revision {revision}: {}",
                if r.changes.is_empty() {
                    "no one's rights changed".to_string()
                } else {
                    r.changes.join("; ")
                }
            ),
            sequence: revision,
        };
        let Ok(body) = serde_json::to_vec(&record) else {
            return;
        };
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("tenancy-{revision}").as_str());
        let subject = format!("{}._tenancy", subjects::AUDIT_PREFIX);
        let stored = async {
            self.js
                .publish_with_headers(subject, headers, body.into())
                .await?
                .await?;
            Ok::<_, async_nats::Error>(())
        };
        if let Err(e) = stored.await {
            tracing::error!(revision, error = %e, "the tenancy change is stored but its audit record is not");
        }
    }

    /// `DescribeTenancy`: admins and readers.
    pub(crate) async fn describe_tenancy(
        &self,
        caller: &Caller,
        req: DescribeTenancy,
    ) -> Result<TenancyRevision> {
        sees_tenancy(caller)?;
        let bucket = self.tenancy_bucket()?;
        let found = match req.revision {
            None => current(bucket).await?,
            Some(n) => {
                let entry = bucket
                    .entry_for_revision(subjects::TENANCY_KEY, n)
                    .await
                    .map_err(|e| transient("the stored tenancy is unavailable", e))?;
                match entry {
                    Some(e) => Some(
                        live::read_revision(&e.value, e.revision)
                            .map_err(|m| api::error(ErrorCode::Internal, m))?,
                    ),
                    None => None,
                }
            }
        };
        found.ok_or_else(|| {
            api::error(
                ErrorCode::NotFound,
                match req.revision {
                    Some(n) => format!("no tenancy revision {n} (the last {} are kept; `qm tenancy history` lists them)", live::HISTORY),
                    None => "no tenancy revision is stored yet".into(),
                },
            )
        })
    }

    /// `ListTenancyRevisions`: admins and readers; newest first.
    pub(crate) async fn list_tenancy_revisions(
        &self,
        caller: &Caller,
    ) -> Result<ListTenancyRevisionsResponse> {
        sees_tenancy(caller)?;
        let bucket = self.tenancy_bucket()?;
        let mut out = ListTenancyRevisionsResponse::default();
        let history = bucket.history(subjects::TENANCY_KEY).await;
        let mut history = match history {
            Ok(h) => h,
            Err(e) if e.to_string().contains("not found") => return Ok(out),
            Err(e) => return Err(transient("the stored tenancy is unavailable", e)),
        };
        while let Some(entry) = history.next().await {
            let entry = entry.map_err(|e| transient("the stored tenancy is unavailable", e))?;
            if let Ok(r) = live::read_revision(&entry.value, entry.revision) {
                out.revisions.push(RevisionSummary::from(&r));
            }
        }
        out.revisions.reverse();
        Ok(out)
    }
}

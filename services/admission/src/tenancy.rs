//! The tenancy, live (ADR 0020): `ApplyTenancy`, `DescribeTenancy` and
//! `ListTenancyRevisions`, the `qm_tenancy` bucket they keep, and the
//! tenancy file admission applies at start when its text is new.
//!
//! Admins change the tenancy, over their own NATS connection only (never
//! through the gateway or the console); admins and readers read it (it
//! names every principal and public key, never a secret). A revision is
//! checked whole before it is stored ([`checked`]), stored with a
//! compare-and-set on the revision it replaces, and recorded in the audit
//! stream (`qm audit`).

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

use crate::errors::{transient, Result};
use crate::Admission;

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

/// The bucket's last revision number (what a change must replace: 0 for
/// none) and the revision in effect: the last one, or, if it does not
/// validate, the newest one before it that does.
async fn state(bucket: &kv::Store) -> Result<(u64, Option<TenancyRevision>)> {
    let entry = bucket
        .entry(subjects::TENANCY_KEY)
        .await
        .map_err(|e| transient("the stored tenancy is unavailable", e))?;
    let Some(entry) = entry else {
        return Ok((0, None));
    };
    if entry.operation == kv::Operation::Put {
        if let Ok(r) = live::read_revision(&entry.value, entry.revision) {
            return Ok((entry.revision, Some(r)));
        }
    }
    let valid = qm_service::tenancy::newest_valid(bucket, "admission").await;
    Ok((entry.revision, valid))
}

/// Everything that keeps a revision from being stored, with the keys of
/// `before` merged in: the tenancy as sent (every problem named), again
/// after the merge (a key the merge would leave with two principals), at
/// least one admin, and nothing that would lock the running services out:
/// `running_as` (this admission's principal) stays an admission identity,
/// and where `before` had `natsAuth` principals one stays. With
/// `every_key`, every principal must have a NATS key.
fn checked(
    sent: Tenancy,
    before: &Tenancy,
    running_as: &str,
    every_key: bool,
) -> std::result::Result<Tenancy, Vec<String>> {
    let mut found = sent.problems();
    let mut merged = sent;
    merged.keep_keys_from(before);
    if found.is_empty() {
        found = merged.problems();
    }
    if merged.admins.is_empty() {
        found
            .push("admins: name at least one admin (no one could change the tenancy again)".into());
    }
    if !before.principals().is_empty()
        && merged.role(running_as) != Some(qm_tenancy::Role::Admission)
    {
        found.push(format!(
            "services.admission: {running_as:?}, the identity this admission runs as, would be removed (its connection closed, and no one could undo it): add the new identity first, move the services to it, then remove the old"
        ));
    }
    if !before.services.nats_auth.is_empty() && merged.services.nats_auth.is_empty() {
        found.push("services.natsAuth: the last principal of `qm tenancy sync-nats` would be removed (NATS would stop following the tenancy)".into());
    }
    if every_key {
        let missing = merged.missing_keys();
        if !missing.is_empty() {
            found.push(format!(
                "nkeys: no NATS key for {} (`qm tenancy apply --keys DIR` makes and fills them in, or list them under nkeys)",
                missing.join(", ")
            ));
        }
    }
    if found.is_empty() {
        Ok(merged)
    } else {
        Err(found)
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
            .map_err(|e| {
                (
                    e.kind() == kv::CreateErrorKind::AlreadyExists,
                    e.to_string(),
                )
            })
    } else {
        bucket
            .update(subjects::TENANCY_KEY, body.into(), expected)
            .await
            .map_err(|e| {
                (
                    e.kind() == kv::UpdateErrorKind::WrongLastRevision,
                    e.to_string(),
                )
            })
    };
    stored.map_err(|(conflict, e)| {
        if conflict {
            api::error(
                ErrorCode::Conflict,
                format!("the tenancy changed while this change was made (revision {expected} is no longer the last); look again and retry"),
            )
        } else {
            transient("the tenancy could not be stored", e)
        }
    })
}

/// The audit record of a tenancy change (admins and readers see it).
async fn audit(js: &jetstream::Context, revision: u64, r: &TenancyRevision) {
    let record = AuditEvent {
        at: r.at,
        principal: r.principal.clone(),
        operation: "ApplyTenancy".into(),
        job_queue: String::new(),
        quota_share_name: None,
        job_id: None,
        detail: format!(
            "tenancy revision {revision} ({}): {}",
            r.source,
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
        js.publish_with_headers(subject, headers, body.into())
            .await?
            .await?;
        Ok::<_, async_nats::Error>(())
    };
    if let Err(e) = stored.await {
        tracing::error!(revision, error = %e, "the tenancy change is stored but its audit record is not");
    }
}

/// Applies the tenancy file at start if its text was never applied (a
/// restart with the same file, or a replica with an older one, undoes no
/// `qm tenancy apply`). It is checked as `ApplyTenancy` checks, except
/// that new principals may lack a NATS key (they cannot connect until
/// `qm tenancy apply --keys DIR` gives them one); a file that fails a
/// check is not applied, and the stored revision stays.
pub async fn apply_file(
    js: &jetstream::Context,
    bucket: &kv::Store,
    path: &str,
    text: &str,
    file: Tenancy,
    principal: &str,
) {
    let digest = live::file_digest(text);
    for _ in 0..10 {
        let (previous, before) = match state(bucket).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e.message, "cannot read the stored tenancy; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let mut digests = before
            .as_ref()
            .map(|b| b.file_digests.clone())
            .unwrap_or_default();
        if digests.contains(&digest) {
            return;
        }
        let empty = Tenancy::default();
        let old = before.as_ref().map_or(&empty, |b| &b.tenancy);
        let tenancy = match checked(file.clone(), old, principal, false) {
            Ok(t) => t,
            Err(problems) => {
                tracing::error!(file = path, problems = %problems.join("; "), "the tenancy file was not applied; the stored revision stays in effect");
                return;
            }
        };
        digests.push(digest.clone());
        let excess = digests.len().saturating_sub(live::FILE_DIGESTS);
        digests.drain(..excess);
        let next = TenancyRevision {
            revision: 0,
            at: qm_service::now_ms(),
            principal: principal.to_string(),
            source: format!("tenancy file {path}"),
            file_digests: digests,
            changes: qm_tenancy::changes(old, &tenancy),
            tenancy,
        };
        match store(bucket, &next, previous).await {
            Ok(revision) => {
                tracing::info!(
                    revision,
                    file = path,
                    changes = next.changes.len(),
                    "the tenancy file is new: applied as a revision"
                );
                let without = next.tenancy.missing_keys();
                if !without.is_empty() {
                    tracing::warn!(revision, principals = %without.join(", "), "principals without a NATS key in the stored tenancy: NATS lets them in only by a `qm auth` authorization until `qm tenancy apply --keys DIR` gives them one");
                }
                audit(js, revision, &next).await;
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

    /// `ApplyTenancy`: admins only, on their own connection (`relayed`:
    /// the request came through the gateway or the console).
    pub(crate) async fn apply_tenancy(
        &self,
        caller: &Caller,
        relayed: bool,
        req: ApplyTenancy,
    ) -> Result<ApplyTenancyResponse> {
        if relayed {
            return Err(api::error(
                ErrorCode::AccessDenied,
                format!(
                    "the tenancy changes only over an admin's own NATS connection, not through the gateway or the console (asked for {:?})",
                    caller.principal
                ),
            ));
        }
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
        let (previous, before) = state(bucket).await?;
        if let Some(expected) = req.expected_revision {
            if expected != previous {
                return Err(api::error(
                    ErrorCode::Conflict,
                    format!("revision {previous} is the last, not {expected}: look again (`qm tenancy diff`) and retry"),
                ));
            }
        }
        let empty = Tenancy::default();
        let old = before.as_ref().map_or(&empty, |b| &b.tenancy);
        let tenancy = match checked(req.tenancy, old, &self.principal, true) {
            Ok(t) => t,
            Err(found) => {
                return Err(api::invalid(
                    format!(
                        "the tenancy is invalid ({} problem{}); nothing was changed",
                        found.len(),
                        if found.len() == 1 { "" } else { "s" }
                    ),
                    problems(found),
                ))
            }
        };
        let changes = qm_tenancy::changes(old, &tenancy);
        let in_effect = before.as_ref().map_or(0, |b| b.revision);
        if req.dry_run || (before.is_some() && *old == tenancy && in_effect == previous) {
            return Ok(ApplyTenancyResponse {
                revision: in_effect,
                previous_revision: in_effect,
                applied: false,
                changes,
            });
        }
        let next = TenancyRevision {
            revision: 0,
            at: qm_service::now_ms(),
            principal: caller.principal.clone(),
            source: "qm tenancy apply".into(),
            file_digests: before
                .as_ref()
                .map(|b| b.file_digests.clone())
                .unwrap_or_default(),
            changes: changes.clone(),
            tenancy,
        };
        let revision = store(bucket, &next, previous).await?;
        audit(&self.js, revision, &next).await;
        // Read your writes: the caller's next request meets the new revision.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while self.tenancy.revision() < revision && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tracing::info!(revision, by = %caller.principal, changes = changes.len(), "tenancy applied");
        Ok(ApplyTenancyResponse {
            revision,
            previous_revision: in_effect,
            applied: true,
            changes,
        })
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
            None => state(bucket).await?.1,
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

    /// `ListTenancyRevisions`: admins and readers; newest first. A stored
    /// revision that does not validate is listed as such (never in effect).
    pub(crate) async fn list_tenancy_revisions(
        &self,
        caller: &Caller,
    ) -> Result<ListTenancyRevisionsResponse> {
        sees_tenancy(caller)?;
        let bucket = self.tenancy_bucket()?;
        let mut out = ListTenancyRevisionsResponse::default();
        if state(bucket).await?.0 == 0 {
            return Ok(out);
        }
        let mut history = bucket
            .history(subjects::TENANCY_KEY)
            .await
            .map_err(|e| transient("the stored tenancy is unavailable", e))?;
        while let Some(entry) = history.next().await {
            let entry = entry.map_err(|e| transient("the stored tenancy is unavailable", e))?;
            match live::read_revision(&entry.value, entry.revision) {
                Ok(r) => out.revisions.push(RevisionSummary::from(&r)),
                Err(e) => out.revisions.push(RevisionSummary {
                    revision: entry.revision,
                    source: "(never in effect: it does not validate)".into(),
                    changes: vec![e],
                    ..Default::default()
                }),
            }
        }
        out.revisions.reverse();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "teams:\n  vision: {shares: [training/QS1], users: [alice]}\nadmins: [platform]\nservices: {admission: [admission], scheduler: [scheduler], natsAuth: [sync]}\n";

    fn t(text: &str) -> Tenancy {
        Tenancy::parse(text).expect("valid")
    }

    fn keyed(text: &str) -> Tenancy {
        let mut t = t(text);
        for p in t.principals() {
            t.nkeys
                .insert(p, vec![nkeys::KeyPair::new_user().public_key()]);
        }
        t
    }

    #[test]
    fn a_revision_that_would_lock_the_services_out_is_refused() {
        let before = keyed(BASE);
        let no_admission = t(&BASE.replace("admission: [admission]", "admission: [admission-2]"));
        let e = checked(no_admission, &before, "admission", false).expect_err("locked out");
        assert!(
            e.iter()
                .any(|p| p.contains("the identity this admission runs as")),
            "{e:?}"
        );
        let no_sync = t(&BASE.replace(", natsAuth: [sync]", ""));
        let e = checked(no_sync, &before, "admission", false).expect_err("no sync left");
        assert!(
            e.iter().any(|p| p.starts_with("services.natsAuth")),
            "{e:?}"
        );
        // The very first revision names whoever it likes.
        assert!(checked(t(BASE), &Tenancy::default(), "someone-else", false).is_ok());
    }

    #[test]
    fn keys_merged_in_are_checked_again_and_every_key_is_asked_for_only_when_told() {
        let before = keyed(BASE);
        let alice = before.nkeys["alice"].clone();
        // bob takes alice's key; alice lists none, so she would keep hers.
        let mut sent = t(&BASE.replace("users: [alice]", "users: [alice, bob]"));
        sent.nkeys.insert("bob".into(), alice);
        let e = checked(sent, &before, "admission", true).expect_err("a shared key");
        assert!(e.iter().any(|p| p.contains("the key is also")), "{e:?}");
        let carol = t(&BASE.replace("users: [alice]", "users: [alice, carol]"));
        let e = checked(carol.clone(), &before, "admission", true).expect_err("carol has no key");
        assert!(
            e.iter().any(|p| p.contains("no NATS key for carol")),
            "{e:?}"
        );
        let merged = checked(carol, &before, "admission", false).expect("a file may lack keys");
        assert_eq!(
            merged.nkeys["alice"], before.nkeys["alice"],
            "alice keeps hers"
        );
    }
}

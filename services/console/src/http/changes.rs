//! The forms that change something (a job's priority, a termination) and
//! the what-if page with the changes it foresees.

use super::*;

impl Console {
    pub(super) async fn change_priority(
        &self,
        cx: &Cx<'_>,
        id: &str,
        form: &BTreeMap<String, String>,
    ) -> Answer {
        let Some(priority) = form
            .get("priority")
            .and_then(|p| p.trim().parse::<u32>().ok())
        else {
            return self.framed(
                cx,
                StatusCode::BAD_REQUEST,
                "Refused",
                Nav::Job,
                None,
                pages::problem("Refused", "priority: give a whole number from 0 to 9999"),
            );
        };
        let u = wire::UpdateServiceJob {
            job_id: id.to_string(),
            scheduling_priority: priority,
        };
        match self
            .api(cx)
            .call::<_, serde_json::Value>(Operation::UpdateServiceJob, &u)
            .await
        {
            Ok(_) => redirect(&format!("/jobs/{}", pages::enc(id)), None),
            Err(e) => self.failed(cx, None, &e),
        }
    }

    pub(super) async fn terminate(
        &self,
        cx: &Cx<'_>,
        id: &str,
        form: &BTreeMap<String, String>,
    ) -> Answer {
        let reason = form
            .get("reason")
            .map(|r| r.trim().to_string())
            .unwrap_or_default();
        let t = wire::TerminateServiceJob {
            job_id: id.to_string(),
            reason: if reason.is_empty() {
                format!("terminated in the console by {}", cx.viewer.principal)
            } else {
                reason
            },
        };
        match self
            .api(cx)
            .call::<_, serde_json::Value>(Operation::TerminateServiceJob, &t)
            .await
        {
            Ok(_) => redirect(&format!("/jobs/{}", pages::enc(id)), None),
            Err(e) => self.failed(cx, None, &e),
        }
    }

    pub(super) async fn what_if_page(
        &self,
        cx: &Cx<'_>,
        q: &str,
        form: Option<&BTreeMap<String, String>>,
    ) -> Answer {
        let api = self.api(cx);
        let doc = match api
            .call::<_, qm_wire::system::QueueDocument>(
                Operation::DescribeJobQueue,
                &wire::QueueRef {
                    job_queue: q.to_string(),
                },
            )
            .await
        {
            Ok(d) => d,
            Err(e) => return self.failed(cx, None, &e),
        };
        let shares: Vec<String> = doc
            .quota_shares
            .iter()
            .map(|s| s.quota_share_name.clone())
            .filter(|s| {
                qm_tenancy::authorize(
                    &cx.caller,
                    qm_tenancy::Action::Submit { queue: q, share: s },
                )
                .is_ok()
            })
            .collect();
        let mut types: Vec<String> = doc
            .quota_shares
            .iter()
            .flat_map(|s| {
                s.capacity_limits
                    .iter()
                    .flatten()
                    .map(|c| c.capacity_unit.clone())
            })
            .collect();
        types.sort();
        types.dedup();
        let get = |k: &str| {
            form.and_then(|f| f.get(k))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let values = pages::WhatIf {
            share: get("share"),
            instance_type: get("instanceType"),
            count: get("count"),
            priority: get("priority"),
            estimated_runtime: get("estimatedRuntime"),
        };
        let limit_form = form.is_some_and(|f| f.contains_key("maxCapacity"));
        let result = match form {
            Some(_) if !limit_form => Some(self.foresee(&api, q, &values).await),
            _ => None,
        };
        let admin =
            qm_tenancy::authorize(&cx.caller, qm_tenancy::Action::ChangeConfig { queue: q })
                .is_ok();
        let limit = pages::LimitChange {
            share: get("share"),
            instance_type: get("instanceType"),
            max_capacity: get("maxCapacity"),
        };
        let limit_result = if limit_form && admin {
            Some(self.foresee_limit(&api, &doc, &limit).await)
        } else {
            None
        };
        let submit = if shares.is_empty() {
            pages::problem(
                "What if",
                "You may submit to no share of this queue, so there is nothing to foresee.",
            )
        } else {
            pages::what_if(
                q,
                &shares,
                &types,
                &values,
                result.as_ref().map(|r| r.as_ref().map_err(String::as_str)),
                &cx.viewer.csrf,
            )
        };
        let all_shares: Vec<String> = doc
            .quota_shares
            .iter()
            .map(|s| s.quota_share_name.clone())
            .collect();
        let body = maud::html! {
            (submit)
            @if admin {
                (pages::limit_what_if(
                    q,
                    &all_shares,
                    &types,
                    &limit,
                    limit_result.as_ref().map(|r| r.as_ref().map_err(String::as_str)),
                    &cx.viewer.csrf,
                ))
            }
        };
        self.framed(
            cx,
            StatusCode::OK,
            &format!("What if, in {q}"),
            Nav::WhatIf,
            Some(q),
            body,
        )
    }

    pub(super) async fn foresee(
        &self,
        api: &qm_service::client::Client,
        q: &str,
        v: &pages::WhatIf,
    ) -> Result<wire::JobOutlook, String> {
        let number = |field: &str, text: &str| -> Result<Option<u64>, String> {
            if text.is_empty() {
                return Ok(None);
            }
            text.parse::<u64>()
                .map(Some)
                .map_err(|_| format!("{field}: {text:?} is not a whole number"))
        };
        let count = number("instances", &v.count)?.unwrap_or(1);
        let job = wire::SubmitServiceJob {
            job_name: "what-if".into(),
            job_queue: q.to_string(),
            quota_share_name: Some(v.share.clone()),
            instance_type: v.instance_type.clone(),
            instance_count: Some(
                u32::try_from(count).map_err(|_| "instances: too many".to_string())?,
            ),
            scheduling_priority: number("priority", &v.priority)?
                .map(|p| u32::try_from(p).unwrap_or(u32::MAX)),
            estimated_runtime_seconds: number("estimated runtime", &v.estimated_runtime)?,
            command: vec!["what-if".into()],
            ..Default::default()
        };
        api.call::<_, wire::JobOutlook>(Operation::DryRunServiceJob, &job)
            .await
            .map_err(|e| e.to_string())
    }

    /// A share's limit for one type changed (its other types kept), foreseen.
    pub(super) async fn foresee_limit(
        &self,
        api: &qm_service::client::Client,
        doc: &qm_wire::system::QueueDocument,
        change: &pages::LimitChange,
    ) -> Result<wire::QueueChangeOutlook, String> {
        let max: i64 = change.max_capacity.parse().map_err(|_| {
            format!(
                "maxCapacity: {:?} is not a whole number",
                change.max_capacity
            )
        })?;
        let share = doc
            .quota_shares
            .iter()
            .find(|s| s.quota_share_name == change.share)
            .ok_or_else(|| format!("no quota share {:?}", change.share))?;
        let mut limits = share.capacity_limits.clone().unwrap_or_default();
        match limits
            .iter_mut()
            .find(|l| l.capacity_unit == change.instance_type)
        {
            Some(l) => l.max_capacity = max,
            None => limits.push(wire::CapacityLimit {
                capacity_unit: change.instance_type.clone(),
                max_capacity: max,
            }),
        }
        let update = wire::QuotaShare {
            job_queue: doc.job_queue.job_queue_name.clone(),
            quota_share_name: change.share.clone(),
            capacity_limits: Some(limits),
            ..Default::default()
        };
        api.call::<_, wire::QueueChangeOutlook>(Operation::DryRunUpdateQuotaShare, &update)
            .await
            .map_err(|e| e.to_string())
    }
}

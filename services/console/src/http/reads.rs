//! The pages people read: sign-in and out, queues, a queue, a share, flows,
//! a job, the audit log, and the live view's long poll.

use super::*;

impl Console {
    pub(super) fn sign_in(&self, peer: Option<IpAddr>, form: &BTreeMap<String, String>) -> Answer {
        if self.sessions_off() {
            return html(
                StatusCode::FORBIDDEN,
                pages::sign_in(Some("Sign-in with access keys is off here."), true),
            );
        }
        let key = form
            .get("accessKeyId")
            .map(|s| s.trim())
            .unwrap_or_default();
        let secret = form.get("secret").map(String::as_str).unwrap_or_default();
        let from = peer.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        let tenancy = self.tenancy.get();
        let principal_of = |k: &str| {
            let p = tenancy.access_key_principal(k)?;
            tenancy.console_speaks_for(p).ok().map(|_| p.to_string())
        };
        match self.sessions.sign_in(from, key, secret, principal_of) {
            Ok((id, viewer)) => {
                tracing::info!(principal = %viewer.principal, "signed in");
                let cookie = session::set_cookie(self.cookie_name(), &id, self.sessions.ttl());
                redirect("/queues", Some(cookie))
            }
            Err(SignInError::Refused) => html(
                StatusCode::UNAUTHORIZED,
                pages::sign_in(
                    Some("That access key and secret do not sign anyone in."),
                    false,
                ),
            ),
            Err(SignInError::TooMany) => html(
                StatusCode::TOO_MANY_REQUESTS,
                pages::sign_in(
                    Some("Too many failed sign-ins from your address: wait five minutes."),
                    false,
                ),
            ),
        }
    }

    pub(super) fn sign_out(&self, viewer: &Viewer) -> Answer {
        if let Some(id) = &viewer.session {
            self.sessions.sign_out(id);
        }
        redirect("/sign-in", Some(session::clear_cookie(self.cookie_name())))
    }

    /// The API client acting for the viewer.
    pub(super) fn api(&self, cx: &Cx<'_>) -> qm_service::client::Client {
        self.client.acting_for(&cx.viewer.principal)
    }

    pub(super) fn framed(
        &self,
        cx: &Cx<'_>,
        status: StatusCode,
        title: &str,
        nav: Nav,
        queue: Option<&str>,
        body: Markup,
    ) -> Answer {
        let frame = Frame {
            principal: &cx.viewer.principal,
            role: &cx.role,
            csrf: &cx.viewer.csrf,
            live_since: cx.live_since,
            nav,
            queue,
        };
        html(status, pages::page(&frame, title, body))
    }

    pub(super) fn failed(&self, cx: &Cx<'_>, queue: Option<&str>, e: &CallError) -> Answer {
        let (status, message) = failure(e);
        let title = match status {
            StatusCode::FORBIDDEN => "Not yours to see",
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::BAD_REQUEST => "Refused",
            _ => "Quartermaster did not answer",
        };
        self.framed(
            cx,
            status,
            title,
            Nav::Queues,
            queue,
            pages::problem(title, &message),
        )
    }

    pub(super) async fn queues_page(&self, cx: &Cx<'_>) -> Answer {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Names {
            job_queues: Vec<String>,
        }
        match self
            .api(cx)
            .call::<_, Names>(Operation::ListJobQueues, &serde_json::json!({}))
            .await
        {
            Ok(n) => self.framed(
                cx,
                StatusCode::OK,
                "Queues",
                Nav::Queues,
                None,
                pages::queues(&n.job_queues),
            ),
            Err(e) => self.failed(cx, None, &e),
        }
    }

    pub(super) async fn queue_page(&self, cx: &Cx<'_>, q: &str) -> Answer {
        let api = self.api(cx);
        let r = wire::QueueRef {
            job_queue: q.to_string(),
        };
        let (snap, doc) = tokio::join!(
            api.call::<_, wire::JobQueueSnapshot>(Operation::GetJobQueueSnapshot, &r),
            api.call::<_, qm_wire::system::QueueDocument>(Operation::DescribeJobQueue, &r),
        );
        match snap {
            Ok(s) => self.framed(
                cx,
                StatusCode::OK,
                &format!("Queue {q}"),
                Nav::Queue,
                Some(q),
                pages::queue(q, &s, doc.ok().as_ref()),
            ),
            Err(e) => self.failed(cx, None, &e),
        }
    }

    pub(super) async fn share_page(
        &self,
        cx: &Cx<'_>,
        q: &str,
        s: &str,
        query: &BTreeMap<String, String>,
    ) -> Answer {
        let api = self.api(cx);
        let status = query.get("status").filter(|v| !v.is_empty()).cloned();
        let list = wire::ListServiceJobs {
            job_queue: q.to_string(),
            job_status: status.clone(),
            quota_share_name: Some(s.to_string()),
            max_results: Some(self.settings.page_size),
            next_token: query.get("next").cloned(),
        };
        let exposure = wire::GetReclaimExposure {
            job_queue: q.to_string(),
            quota_share_name: s.to_string(),
        };
        let (jobs, exposure) = tokio::join!(
            api.call::<_, wire::ListServiceJobsResponse>(Operation::ListServiceJobs, &list),
            api.call::<_, wire::ReclaimExposure>(Operation::GetReclaimExposure, &exposure),
        );
        match (jobs, exposure) {
            (Ok(jobs), Ok(exposure)) => self.framed(
                cx,
                StatusCode::OK,
                &format!("Share {s}"),
                Nav::Queue,
                Some(q),
                pages::share(q, s, &jobs, status.as_deref(), &exposure),
            ),
            (Err(e), _) | (_, Err(e)) => self.failed(cx, Some(q), &e),
        }
    }

    pub(super) async fn flows_page(&self, cx: &Cx<'_>, q: &str) -> Answer {
        let g = wire::GetUsage {
            job_queue: q.to_string(),
            ..Default::default()
        };
        match self
            .api(cx)
            .call::<_, wire::UsageReport>(Operation::GetUsage, &g)
            .await
        {
            Ok(r) => self.framed(
                cx,
                StatusCode::OK,
                &format!("Flows in {q}"),
                Nav::Flows,
                Some(q),
                pages::flows(q, &r),
            ),
            Err(e) => self.failed(cx, Some(q), &e),
        }
    }

    pub(super) async fn job_page(&self, cx: &Cx<'_>, id: &str) -> Answer {
        let api = self.api(cx);
        let r = wire::JobRef {
            job_id: id.to_string(),
        };
        let logs_request = wire::GetServiceJobLogs {
            job_id: id.to_string(),
            attempt: None,
            tail_bytes: Some(4096),
        };
        // All three at once: a job that is not waiting is explained as
        // NOT_WAITING without the scheduler copying anything, and one that
        // has not started has no output (both refusals are ignored).
        let (job, outlook, logs) = tokio::join!(
            api.call::<_, wire::ServiceJob>(Operation::DescribeServiceJob, &r),
            api.call::<_, wire::JobOutlook>(Operation::ExplainServiceJob, &r),
            api.call::<_, qm_wire::system::LogsResponse>(
                Operation::GetServiceJobLogs,
                &logs_request
            ),
        );
        let job = match job {
            Ok(j) => j,
            // Another team's job answers as an unknown one: its share
            // (and that it exists) is none of the viewer's business.
            Err(e)
                if matches!(
                    e.code(),
                    Some(ErrorCode::AccessDenied | ErrorCode::NotFound)
                ) =>
            {
                return self.framed(
                    cx,
                    StatusCode::NOT_FOUND,
                    "Not found",
                    Nav::Job,
                    None,
                    pages::problem(
                        "Not found",
                        &format!("There is no job {id} that you may read."),
                    ),
                )
            }
            Err(e) => return self.failed(cx, None, &e),
        };
        let outlook = outlook.ok().filter(|o| o.outcome != "NOT_WAITING");
        let logs = logs.ok().filter(|_| !job.attempts.is_empty()).map(|l| {
            if l.stderr.is_empty() {
                l.stdout
            } else {
                format!("{}\n--- stderr ---\n{}", l.stdout, l.stderr)
            }
        });
        let may_change = qm_tenancy::authorize(
            &cx.caller,
            qm_tenancy::Action::ChangeJob {
                queue: &job.job_queue,
                share: &job.quota_share_name,
            },
        )
        .is_ok();
        let q = job.job_queue.clone();
        self.framed(
            cx,
            StatusCode::OK,
            &format!("Job {}", job.job_name),
            Nav::Job,
            Some(&q),
            pages::job(
                &job,
                outlook.as_ref(),
                logs.as_deref(),
                may_change,
                &cx.viewer.csrf,
            ),
        )
    }

    pub(super) async fn audit_page(&self, cx: &Cx<'_>, query: &BTreeMap<String, String>) -> Answer {
        let get = |k: &str| {
            query
                .get(k)
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let filter = pages::AuditFilter {
            queue: get("queue"),
            share: get("share"),
            principal: get("principal"),
        };
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let l = wire::ListAuditEvents {
            job_queue: some(&filter.queue),
            quota_share_name: some(&filter.share),
            principal: some(&filter.principal),
            max_results: Some(self.settings.page_size),
            next_token: some(&get("next")),
            ..Default::default()
        };
        match self
            .api(cx)
            .call::<_, wire::ListAuditEventsResponse>(Operation::ListAuditEvents, &l)
            .await
        {
            Ok(r) => self.framed(
                cx,
                StatusCode::OK,
                "Audit",
                Nav::Audit,
                None,
                pages::audit(&filter, &r.audit_events, r.next_token.as_deref()),
            ),
            Err(e) => self.failed(cx, None, &e),
        }
    }

    pub(super) async fn live_poll(&self, cx: &Cx<'_>, query: &BTreeMap<String, String>) -> Answer {
        let since = query
            .get("since")
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        let caller = &cx.caller;
        let may_read = |queue: &str, share: &str| {
            qm_tenancy::authorize(caller, qm_tenancy::Action::ReadJob { queue, share }).is_ok()
        };
        // A change of the tenancy ends the wait at once: the next poll
        // checks the viewer again (and is refused if their session ended).
        let mut tenancy = self.tenancy.changes();
        let tenancy_changed = async move {
            if tenancy.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let (seen, changes) = tokio::select! {
            r = self.live.wait(since, LIVE_WAIT, &may_read) => r,
            () = tenancy_changed => (since, Vec::new()),
        };
        let body = serde_json::json!({ "seq": seen, "changes": changes });
        respond(StatusCode::OK, "application/json", body.to_string())
    }
}

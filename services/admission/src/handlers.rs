//! The request dispatch: who asked (the principal in the subject), whether
//! they may, and which handler answers each operation.

use qm_service::api::{self, decode, invalid, respond};
use qm_tenancy::live::ListTenancyRevisions;
use qm_wire::messages::{Caller, ErrorCode};
use qm_wire::subjects::{self, Operation};
use tracing::Instrument;

use crate::errors::{denied, Result};
use crate::{audit, events, Admission};

impl Admission {
    /// Answers one request inside its span (a child of the caller's trace
    /// when the request carries one), counted and timed per operation.
    pub(crate) async fn handle(&self, msg: async_nats::Message) {
        let span =
            qm_service::trace::process_span(&qm_service::trace::template(&msg.subject), &msg);
        let op = Operation::from_subject(&msg.subject).map_or("unknown", |(_, op)| op.name());
        let started = std::time::Instant::now();
        self.dispatch(msg).instrument(span).await;
        self.metrics.requests.with_label_values(&[op]).inc();
        self.metrics
            .duration
            .with_label_values(&[op])
            .observe(started.elapsed().as_secs_f64());
    }

    /// Who asked: the principal of the subject, or, on an AWS Batch
    /// gateway's subject only, the principal whose signature the gateway
    /// verified (its `Qm-Caller` header), if the tenancy lets the gateway
    /// speak for it (ADR 0012). A `Qm-Caller` header anywhere else is
    /// ignored: the subject is what the NATS server vouches for.
    fn caller(&self, principal: &str, msg: &async_nats::Message) -> Result<Caller> {
        let tenancy = self.tenancy.get();
        let relay = tenancy.role(principal);
        if matches!(
            relay,
            Some(qm_tenancy::Role::Gateway | qm_tenancy::Role::Console)
        ) {
            let named = msg
                .headers
                .as_ref()
                .and_then(|h| h.get(subjects::CALLER_HEADER))
                .map(|v| v.as_str().to_string());
            let Some(named) = named else {
                return Err(api::error(
                    ErrorCode::AccessDenied,
                    format!(
                        "{} {principal:?} sent a request without the {} header naming whom it acts for",
                        relay.as_ref().map_or_else(String::new, qm_tenancy::Role::label),
                        subjects::CALLER_HEADER
                    ),
                ));
            };
            return if relay == Some(qm_tenancy::Role::Console) {
                tenancy.console_speaks_for(&named).map_err(denied)
            } else {
                tenancy.spoken_for(&named).map_err(denied)
            };
        }
        tenancy.caller(principal).ok_or_else(|| {
            api::error(
                ErrorCode::AccessDenied,
                format!(
                    "principal {principal:?} is not in the tenancy file; ask an admin to add it"
                ),
            )
        })
    }

    /// One line per operation: the handler that answers it, in the module
    /// it belongs to (`queue_ops.rs`, `jobs.rs`, `relays.rs`, ...).
    async fn dispatch(&self, msg: async_nats::Message) {
        let Some((principal, op)) = Operation::from_subject(&msg.subject) else {
            let reply: Result<()> = Err(invalid(
                format!("unknown operation subject {:?}", msg.subject.as_str()),
                Vec::new(),
            ));
            return respond(&self.client, &msg, &reply).await;
        };
        let caller = match self.caller(&principal, &msg) {
            Ok(caller) => caller,
            Err(e) => return respond::<()>(&self.client, &msg, &Err(e)).await,
        };
        let (me, m, caller) = (self, &msg, &caller);
        use Operation as O;
        match op {
            O::WhoAmI => me.answer(m, Ok(caller.clone())).await,
            O::SubmitServiceJob => me.serve(m, |job| me.submit(caller, job)).await,
            O::ApplyJobQueue => me.serve(m, |doc| me.apply_queue(caller, doc)).await,
            O::CreateJobQueue => me.serve(m, |q| me.create_queue(caller, q)).await,
            O::UpdateJobQueue => me.serve(m, |patch| me.update_queue(caller, patch)).await,
            O::DescribeJobQueue => me.serve(m, |q| me.describe_queue(caller, q)).await,
            O::ListJobQueues => me.answer(m, me.queue_names(caller).await).await,
            O::DeleteJobQueue => me.serve(m, |q| me.delete_queue_op(caller, q)).await,
            O::CreateQuotaShare => me.serve(m, |s| me.put_share(caller, true, s)).await,
            O::UpdateQuotaShare => me.serve(m, |s| me.put_share(caller, false, s)).await,
            O::DeleteQuotaShare => me.serve(m, |s| me.delete_share(caller, s)).await,
            O::DescribeQuotaShare => me.serve(m, |s| me.describe_share(caller, s)).await,
            O::ListQuotaShares => me.serve(m, |q| me.list_shares(caller, q)).await,
            O::RegisterExecutor => me.serve(m, |r| me.register(&caller.principal, r)).await,
            O::GetServiceJobLogs => me.serve(m, |r| me.logs(caller, r)).await,
            O::ApplyTenancy => {
                let relayed = caller.principal != principal;
                me.serve(m, |r| me.apply_tenancy(caller, relayed, r)).await
            }
            O::DescribeTenancy => me.serve(m, |r| me.describe_tenancy(caller, r)).await,
            O::ListTenancyRevisions => {
                me.serve(m, |_: ListTenancyRevisions| {
                    me.list_tenancy_revisions(caller)
                })
                .await
            }
            O::ListEvents => {
                me.serve(m, |r| events::list(&me.events, &me.event_reads, caller, r))
                    .await
            }
            O::ListAuditEvents => {
                me.serve(m, |r| audit::list(&me.log, &me.audit, caller, r))
                    .await
            }
            O::StartResumeDrill => me.serve(m, |r| me.start_drill(caller, r)).await,
            O::ListServiceJobs => me.relay_list_jobs(caller, m).await,
            O::GetJobQueueSnapshot => me.relay_snapshot(caller, m).await,
            O::ListResumeDrills | O::GetPolicyStabilityRecord | O::GetUsage => {
                me.relay_share_read(caller, op, m).await
            }
            O::GetReclaimExposure => me.relay_exposure(caller, m).await,
            O::DryRunServiceJob => me.relay_dry_run_job(caller, m).await,
            O::DryRunUpdateQuotaShare => me.relay_dry_run_share(caller, m).await,
            O::DescribeServiceJob
            | O::ExplainServiceJob
            | O::UpdateServiceJob
            | O::TerminateServiceJob => me.relay_reply(caller, op, m).await,
        }
    }

    /// Answers a request that carries nothing to decode.
    async fn answer<Resp: serde::Serialize>(&self, msg: &async_nats::Message, reply: Result<Resp>) {
        respond(&self.client, msg, &reply).await;
    }

    /// Decodes the request, runs `handler` on it and answers its result
    /// (or the decoding error).
    async fn serve<'a, Req, Resp, Fut>(
        &'a self,
        msg: &'a async_nats::Message,
        handler: impl FnOnce(Req) -> Fut,
    ) where
        Req: serde::de::DeserializeOwned,
        Resp: serde::Serialize,
        Fut: std::future::Future<Output = Result<Resp>> + 'a,
    {
        let reply = match decode::<Req>(&msg.payload) {
            Ok(request) => handler(request).await,
            Err(e) => Err(e),
        };
        respond(&self.client, msg, &reply).await;
    }
}

//! The operations the scheduler answers: admission checks what it can
//! from the request (the queue and share it names), then relays it; the
//! scheduler checks the caller again against its state.

use qm_service::api::{decode, respond};
use qm_tenancy::{authorize, authorize_read, Action};
use qm_wire::messages::{
    Caller, GetReclaimExposure, ListResumeDrills, ListServiceJobs, QueueRef, SubmitServiceJob,
};
use qm_wire::subjects::Operation;
use qm_wire::updates::SharePatch;

use crate::errors::{denied, Result};
use crate::Admission;

impl Admission {
    /// Relays `msg` if `check` passed; answers its error otherwise.
    async fn relay_if(
        &self,
        caller: &Caller,
        op: Operation,
        msg: &async_nats::Message,
        check: Result<()>,
    ) {
        match check {
            Ok(()) => self.relay_reply(caller, op, msg).await,
            Err(e) => respond::<()>(&self.client, msg, &Err(e)).await,
        }
    }

    /// `ListServiceJobs`: the caller may read the queue (or the share).
    pub(crate) async fn relay_list_jobs(&self, caller: &Caller, msg: &async_nats::Message) {
        let check = decode::<ListServiceJobs>(&msg.payload).and_then(|l| {
            authorize_read(caller, &l.job_queue, l.quota_share_name.as_deref()).map_err(denied)
        });
        self.relay_if(caller, Operation::ListServiceJobs, msg, check)
            .await;
    }

    /// `GetJobQueueSnapshot`: the caller may read the queue.
    pub(crate) async fn relay_snapshot(&self, caller: &Caller, msg: &async_nats::Message) {
        let check = decode::<QueueRef>(&msg.payload).and_then(|q| {
            authorize(
                caller,
                Action::ReadQueue {
                    queue: &q.job_queue,
                },
            )
            .map_err(denied)
        });
        self.relay_if(caller, Operation::GetJobQueueSnapshot, msg, check)
            .await;
    }

    /// `ListResumeDrills`, `GetPolicyStabilityRecord`, `GetUsage`: each
    /// names a queue and perhaps a share the caller must be able to read
    /// (the scheduler checks again, share by share).
    pub(crate) async fn relay_share_read(
        &self,
        caller: &Caller,
        op: Operation,
        msg: &async_nats::Message,
    ) {
        let check = decode::<ListResumeDrills>(&msg.payload).and_then(|l| {
            authorize_read(caller, &l.job_queue, l.quota_share_name.as_deref()).map_err(denied)
        });
        self.relay_if(caller, op, msg, check).await;
    }

    /// `GetReclaimExposure`: the caller may read the share.
    pub(crate) async fn relay_exposure(&self, caller: &Caller, msg: &async_nats::Message) {
        let check = decode::<GetReclaimExposure>(&msg.payload).and_then(|g| {
            authorize_read(caller, &g.job_queue, Some(&g.quota_share_name)).map_err(denied)
        });
        self.relay_if(caller, Operation::GetReclaimExposure, msg, check)
            .await;
    }

    /// `DryRunServiceJob`: checked as a submit is, then foreseen by the
    /// scheduler (which checks the caller again); nothing is stored.
    pub(crate) async fn relay_dry_run_job(&self, caller: &Caller, msg: &async_nats::Message) {
        let check = match decode::<SubmitServiceJob>(&msg.payload) {
            Ok(job) => self.validate_submit(caller, &job).await,
            Err(e) => Err(e),
        };
        self.relay_if(caller, Operation::DryRunServiceJob, msg, check)
            .await;
    }

    /// `DryRunUpdateQuotaShare`: the update merged and checked as
    /// `UpdateQuotaShare` would be, then foreseen by the scheduler.
    pub(crate) async fn relay_dry_run_share(&self, caller: &Caller, msg: &async_nats::Message) {
        let r = match decode::<SharePatch>(&msg.payload) {
            Ok(s) => self.foresee_share_update(caller, &s).await,
            Err(e) => Err(e),
        };
        match r {
            Ok(raw) => {
                if let Some(to) = &msg.reply {
                    let _ = self.client.publish(to.clone(), raw).await;
                }
            }
            Err(e) => respond::<()>(&self.client, msg, &Err(e)).await,
        }
    }
}

//! One typed method per API operation: the request and reply types of
//! `qm_wire` (the shapes `docs/asyncapi.yaml` describes), the method named
//! as the operation in snake case.

use qm_tenancy::live::{
    ApplyTenancy, ApplyTenancyResponse, DescribeTenancy, ListTenancyRevisions,
    ListTenancyRevisionsResponse, TenancyRevision,
};
use qm_wire::messages::{
    Caller, Empty, EventPage, GetPolicyStabilityRecord, GetReclaimExposure, GetServiceJobLogs,
    GetUsage, JobOutlook, JobQueue, JobQueueNames, JobQueueSnapshot, JobRef, ListAuditEvents,
    ListAuditEventsResponse, ListEvents, ListResumeDrills, ListResumeDrillsResponse,
    ListServiceJobs, ListServiceJobsResponse, PolicyStabilityRecord, QueueChangeOutlook, QueueRef,
    QuotaShare, QuotaShareList, ReclaimExposure, RegisterExecutor, ServiceJob, ShareRef,
    StartResumeDrill, StartResumeDrillResponse, SubmitServiceJob, SubmitServiceJobResponse,
    TerminateServiceJob, UpdateServiceJob, UsageReport,
};
use qm_wire::subjects::Operation;
use qm_wire::system::{LogsResponse, QueueDocument};

use crate::{CallError, Client};

/// `UpdateJobQueue`'s request: `jobQueueName` and the fields to change,
/// as AWS's (a field given as null is cleared; the others stay).
pub type JobQueuePatch = serde_json::Map<String, serde_json::Value>;

macro_rules! operations {
    ($($(#[$doc:meta])* $method:ident: $op:ident($req:ty) -> $resp:ty;)*) => {
        impl Client {
            $(
                $(#[$doc])*
                pub async fn $method(&self, request: &$req) -> Result<$resp, CallError> {
                    self.call(Operation::$op, request).await
                }
            )*
        }

        /// Every operation this client has a method for, with the
        /// method's name.
        pub const METHODS: &[(Operation, &str)] = &[$((Operation::$op, stringify!($method))),*];

        /// Every operation with the JSON Schemas of its request and of
        /// its reply's result, the types' schemas put in `generator`'s
        /// definitions (what `docs/asyncapi.yaml` says of them).
        pub fn operation_schemas(
            generator: &mut schemars::SchemaGenerator,
        ) -> Vec<(Operation, schemars::Schema, schemars::Schema)> {
            vec![$((
                Operation::$op,
                generator.subschema_for::<$req>(),
                generator.subschema_for::<$resp>(),
            )),*]
        }
    };
}

operations! {
    /// Submits a job once: see [`Client::submit`], which retries safely.
    submit_service_job: SubmitServiceJob(SubmitServiceJob) -> SubmitServiceJobResponse;
    describe_service_job: DescribeServiceJob(JobRef) -> ServiceJob;
    list_service_jobs: ListServiceJobs(ListServiceJobs) -> ListServiceJobsResponse;
    /// Changes a job's scheduling priority; answers the job.
    update_service_job: UpdateServiceJob(UpdateServiceJob) -> ServiceJob;
    /// Terminates a job (a job already over stays as it is); answers the
    /// job.
    terminate_service_job: TerminateServiceJob(TerminateServiceJob) -> ServiceJob;
    create_job_queue: CreateJobQueue(JobQueue) -> JobQueue;
    update_job_queue: UpdateJobQueue(JobQueuePatch) -> JobQueue;
    /// Creates or replaces a queue with its shares, validated whole.
    apply_job_queue: ApplyJobQueue(QueueDocument) -> QueueDocument;
    describe_job_queue: DescribeJobQueue(QueueRef) -> QueueDocument;
    list_job_queues: ListJobQueues(Empty) -> JobQueueNames;
    delete_job_queue: DeleteJobQueue(QueueRef) -> Empty;
    create_quota_share: CreateQuotaShare(QuotaShare) -> QuotaShare;
    /// A merge patch of the share: the fields given change.
    update_quota_share: UpdateQuotaShare(QuotaShare) -> QuotaShare;
    describe_quota_share: DescribeQuotaShare(ShareRef) -> QuotaShare;
    list_quota_shares: ListQuotaShares(QueueRef) -> QuotaShareList;
    delete_quota_share: DeleteQuotaShare(ShareRef) -> Empty;
    get_job_queue_snapshot: GetJobQueueSnapshot(QueueRef) -> JobQueueSnapshot;
    register_executor: RegisterExecutor(RegisterExecutor) -> Empty;
    get_service_job_logs: GetServiceJobLogs(GetServiceJobLogs) -> LogsResponse;
    list_audit_events: ListAuditEvents(ListAuditEvents) -> ListAuditEventsResponse;
    who_am_i: WhoAmI(Empty) -> Caller;
    dry_run_service_job: DryRunServiceJob(SubmitServiceJob) -> JobOutlook;
    explain_service_job: ExplainServiceJob(JobRef) -> JobOutlook;
    start_resume_drill: StartResumeDrill(StartResumeDrill) -> StartResumeDrillResponse;
    list_resume_drills: ListResumeDrills(ListResumeDrills) -> ListResumeDrillsResponse;
    get_policy_stability_record: GetPolicyStabilityRecord(GetPolicyStabilityRecord) -> PolicyStabilityRecord;
    get_usage: GetUsage(GetUsage) -> UsageReport;
    get_reclaim_exposure: GetReclaimExposure(GetReclaimExposure) -> ReclaimExposure;
    dry_run_update_quota_share: DryRunUpdateQuotaShare(QuotaShare) -> QueueChangeOutlook;
    apply_tenancy: ApplyTenancy(ApplyTenancy) -> ApplyTenancyResponse;
    describe_tenancy: DescribeTenancy(DescribeTenancy) -> TenancyRevision;
    list_tenancy_revisions: ListTenancyRevisions(ListTenancyRevisions) -> ListTenancyRevisionsResponse;
    /// One page of the stored events: see [`Client::events`] to follow
    /// them.
    list_events: ListEvents(ListEvents) -> EventPage;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_a_method_named_after_it() {
        for op in Operation::ALL {
            let method = METHODS
                .iter()
                .find(|(o, _)| *o == op)
                .map(|(_, m)| *m)
                .unwrap_or_else(|| panic!("no method for {}", op.name()));
            let snake: String = op
                .name()
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let sep = (i > 0 && c.is_ascii_uppercase()).then_some('_');
                    sep.into_iter()
                        .chain(std::iter::once(c.to_ascii_lowercase()))
                })
                .collect();
            assert_eq!(method, snake);
        }
        assert_eq!(METHODS.len(), Operation::ALL.len());
    }
}

//! The one table of the API's operations: each with the client method
//! named after it, its request type and its reply's result type.
//!
//! [`for_each_operation!`](crate::for_each_operation) hands the table to a
//! macro of the caller's: `qm_wire::subjects` makes the [`Operation`] enum,
//! its `ALL` and its names from it; `qm-client` makes its typed methods
//! and the schemas `docs/asyncapi.yaml` shows. An operation is added here,
//! once; the compiler then asks every `match` on [`Operation`] (admission's
//! dispatch, the scheduler's) for its handler.
//!
//! The request and reply types are paths from where the table is used: the
//! wire's own as `$crate::…`, the tenancy's as `::qm_tenancy::live::…`
//! (only a user that expands the types needs that crate).
//!
//! [`Operation`]: crate::subjects::Operation

/// Calls `$m! { … }` with every operation, in the API's order, as
/// `$(#[doc])* method: Operation(Request) -> Reply;`.
#[macro_export]
macro_rules! for_each_operation {
    ($m:ident) => {
        $m! {
            /// Submits a job once: see `Client::submit`, which retries safely.
            submit_service_job: SubmitServiceJob($crate::messages::SubmitServiceJob) -> $crate::messages::SubmitServiceJobResponse;
            describe_service_job: DescribeServiceJob($crate::messages::JobRef) -> $crate::messages::ServiceJob;
            list_service_jobs: ListServiceJobs($crate::messages::ListServiceJobs) -> $crate::messages::ListServiceJobsResponse;
            /// Changes a job's scheduling priority; answers the job.
            update_service_job: UpdateServiceJob($crate::messages::UpdateServiceJob) -> $crate::messages::ServiceJob;
            /// Terminates a job (a job already over stays as it is); answers the
            /// job.
            terminate_service_job: TerminateServiceJob($crate::messages::TerminateServiceJob) -> $crate::messages::ServiceJob;
            create_job_queue: CreateJobQueue($crate::messages::JobQueue) -> $crate::messages::JobQueue;
            /// `jobQueueName` and the fields to change, as AWS's (a field
            /// given as null is cleared; the others stay).
            update_job_queue: UpdateJobQueue($crate::operations::JobQueuePatch) -> $crate::messages::JobQueue;
            create_quota_share: CreateQuotaShare($crate::messages::QuotaShare) -> $crate::messages::QuotaShare;
            /// A merge patch of the share: the fields given change
            /// (`qm_wire::updates`).
            update_quota_share: UpdateQuotaShare($crate::messages::QuotaShare) -> $crate::messages::QuotaShare;
            describe_quota_share: DescribeQuotaShare($crate::messages::ShareRef) -> $crate::messages::QuotaShare;
            list_quota_shares: ListQuotaShares($crate::messages::QueueRef) -> $crate::messages::QuotaShareList;
            delete_quota_share: DeleteQuotaShare($crate::messages::ShareRef) -> $crate::messages::Empty;
            get_job_queue_snapshot: GetJobQueueSnapshot($crate::messages::QueueRef) -> $crate::messages::JobQueueSnapshot;
            register_executor: RegisterExecutor($crate::messages::RegisterExecutor) -> $crate::messages::Empty;
            /// Creates or replaces a queue with its shares, validated whole.
            apply_job_queue: ApplyJobQueue($crate::system::QueueDocument) -> $crate::system::QueueDocument;
            describe_job_queue: DescribeJobQueue($crate::messages::QueueRef) -> $crate::system::QueueDocument;
            list_job_queues: ListJobQueues($crate::messages::Empty) -> $crate::messages::JobQueueNames;
            get_service_job_logs: GetServiceJobLogs($crate::messages::GetServiceJobLogs) -> $crate::system::LogsResponse;
            list_audit_events: ListAuditEvents($crate::messages::ListAuditEvents) -> $crate::messages::ListAuditEventsResponse;
            who_am_i: WhoAmI($crate::messages::Empty) -> $crate::messages::Caller;
            dry_run_service_job: DryRunServiceJob($crate::messages::SubmitServiceJob) -> $crate::messages::JobOutlook;
            explain_service_job: ExplainServiceJob($crate::messages::JobRef) -> $crate::messages::JobOutlook;
            start_resume_drill: StartResumeDrill($crate::messages::StartResumeDrill) -> $crate::messages::StartResumeDrillResponse;
            list_resume_drills: ListResumeDrills($crate::messages::ListResumeDrills) -> $crate::messages::ListResumeDrillsResponse;
            get_policy_stability_record: GetPolicyStabilityRecord($crate::messages::GetPolicyStabilityRecord) -> $crate::messages::PolicyStabilityRecord;
            get_usage: GetUsage($crate::messages::GetUsage) -> $crate::messages::UsageReport;
            get_reclaim_exposure: GetReclaimExposure($crate::messages::GetReclaimExposure) -> $crate::messages::ReclaimExposure;
            dry_run_update_quota_share: DryRunUpdateQuotaShare($crate::messages::QuotaShare) -> $crate::messages::QueueChangeOutlook;
            apply_tenancy: ApplyTenancy(::qm_tenancy::live::ApplyTenancy) -> ::qm_tenancy::live::ApplyTenancyResponse;
            describe_tenancy: DescribeTenancy(::qm_tenancy::live::DescribeTenancy) -> ::qm_tenancy::live::TenancyRevision;
            list_tenancy_revisions: ListTenancyRevisions(::qm_tenancy::live::ListTenancyRevisions) -> ::qm_tenancy::live::ListTenancyRevisionsResponse;
            delete_job_queue: DeleteJobQueue($crate::messages::QueueRef) -> $crate::messages::Empty;
            /// One page of the stored events: see `Client::events` to follow
            /// them.
            list_events: ListEvents($crate::messages::ListEvents) -> $crate::messages::EventPage;
        }
    };
}

/// `UpdateJobQueue`'s request: `jobQueueName` and the fields to change,
/// as AWS's (a field given as null is cleared; the others stay).
pub type JobQueuePatch = serde_json::Map<String, serde_json::Value>;

/// Makes the [`Operation`](crate::subjects::Operation) enum, `ALL` and
/// `name()` from the table (the types are not named here).
macro_rules! operation_enum {
    ($($(#[$doc:meta])* $method:ident: $op:ident($req:ty) -> $resp:ty;)*) => {
        /// The request/reply operations of API v1 (`qm_wire::operations`
        /// lists them with their types).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        pub enum Operation {
            $($op,)*
        }

        impl Operation {
            /// Every operation, in the table's order.
            pub const ALL: [Operation; [$(stringify!($op)),*].len()] = [$(Operation::$op,)*];

            /// The operation's name, as subjects and the API spell it.
            pub fn name(self) -> &'static str {
                match self {
                    $(Operation::$op => stringify!($op),)*
                }
            }
        }
    };
}

pub(crate) use operation_enum;

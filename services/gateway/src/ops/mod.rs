//! Each AWS Batch operation, translated onto the NATS API (made as the
//! signer, so admission and the scheduler authorize it) and its answer
//! translated back into the service model's shape.

use qm_service::client::Client;
use qm_wire::messages::{self as wire, Caller};
use qm_wire::subjects::Operation;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::api::{AwsError, Op};
use crate::arn::Resource;
use crate::store;
use crate::Gateway;

mod environments;
mod jobs;
mod policies;
mod queues;
mod requests;
mod shares;
mod tags;

pub use requests::Call;
use requests::{
    api_failed, input, page, page_size, refuse_own_fields, store_failed, Answer, EnvIn, PolicyIn,
    QueueIn, ShareIn, TerminateIn, OWN_QUEUE_FIELDS, OWN_SHARE_FIELDS,
};

impl Gateway {
    fn api(&self, caller: &Caller) -> Client {
        self.client.acting_for(&caller.principal)
    }

    async fn call<Q: serde::Serialize, R: DeserializeOwned>(
        &self,
        caller: &Caller,
        op: Operation,
        req: &Q,
    ) -> Result<R, AwsError> {
        self.api(caller).call(op, req).await.map_err(api_failed)
    }

    fn bad(&self, e: String) -> AwsError {
        AwsError::client(e)
    }

    /// Runs one operation.
    pub async fn run(&self, op: Op, c: Call<'_>) -> Answer {
        match op {
            Op::SubmitServiceJob => self.submit(c.caller, input(c.body)?).await,
            Op::DescribeServiceJob => self.describe_job(c.caller, input(c.body)?).await,
            Op::ListServiceJobs => self.list_jobs(c.caller, input(c.body)?).await,
            Op::UpdateServiceJob => self.update_job(c.caller, input(c.body)?).await,
            Op::TerminateServiceJob => {
                let t: TerminateIn = input(c.body)?;
                let _: Value = self
                    .call(
                        c.caller,
                        Operation::TerminateServiceJob,
                        &wire::TerminateServiceJob {
                            job_id: t.job_id,
                            reason: t.reason,
                        },
                    )
                    .await?;
                Ok(json!({}))
            }
            Op::TerminateServiceJobs => self.terminate_jobs(c.caller, input(c.body)?).await,
            Op::ListSchedulingPolicies => {
                let q: QueueIn = input(c.body)?;
                let names = self
                    .store
                    .config
                    .names(store::POLICY_PREFIX)
                    .await
                    .map_err(store_failed)?;
                let (names, next) =
                    page(&names, page_size(q.max_results)?, q.next_token.as_deref())?;
                let mut v = json!({
                    "schedulingPolicies": names.iter().map(|n| json!({"arn": self.arns.of(&Resource::SchedulingPolicy(n.clone()))})).collect::<Vec<_>>(),
                });
                if let Some(n) = next {
                    v["nextToken"] = json!(n);
                }
                Ok(v)
            }
            Op::DeleteSchedulingPolicy => {
                let p: PolicyIn = input(c.body)?;
                self.delete_named(c.caller, p.arn.as_deref().unwrap_or_default(), true)
                    .await
            }
            Op::DeleteServiceEnvironment => {
                let e: EnvIn = input(c.body)?;
                self.delete_named(
                    c.caller,
                    e.service_environment.as_deref().unwrap_or_default(),
                    false,
                )
                .await
            }
            Op::CreateQuotaShare | Op::UpdateQuotaShare => {
                refuse_own_fields(c.body, &OWN_SHARE_FIELDS)?;
                self.put_share(c.caller, input(c.body)?, op == Op::CreateQuotaShare)
                    .await
            }
            Op::DescribeQuotaShare => self.describe_share(c.caller, input(c.body)?).await,
            Op::ListQuotaShares => self.list_shares(c.caller, input(c.body)?).await,
            Op::DeleteQuotaShare => {
                let s: ShareIn = input(c.body)?;
                let (queue, share) = self
                    .arns
                    .share_of(
                        "quotaShareArn",
                        s.quota_share_arn.as_deref().unwrap_or_default(),
                    )
                    .map_err(|e| self.bad(e))?;
                let _: Value = self
                    .call(
                        c.caller,
                        Operation::DeleteQuotaShare,
                        &wire::ShareRef {
                            job_queue: queue.clone(),
                            quota_share_name: share.clone(),
                        },
                    )
                    .await?;
                self.store
                    .config
                    .delete(&store::share_key(&queue, &share))
                    .await
                    .map_err(store_failed)?;
                Ok(json!({}))
            }
            Op::GetJobQueueSnapshot => self.snapshot(c.caller, input(c.body)?).await,
            Op::CreateSchedulingPolicy | Op::UpdateSchedulingPolicy => {
                self.put_policy(c.caller, input(c.body)?, op == Op::CreateSchedulingPolicy)
                    .await
            }
            Op::DescribeSchedulingPolicies => self.describe_policies(input(c.body)?).await,
            Op::CreateJobQueue | Op::UpdateJobQueue => {
                refuse_own_fields(c.body, &OWN_QUEUE_FIELDS)?;
                self.put_queue(c.caller, input(c.body)?, op == Op::CreateJobQueue)
                    .await
            }
            Op::DescribeJobQueues => self.describe_queues(c.caller, input(c.body)?).await,
            Op::DeleteJobQueue => self.delete_queue(c.caller, input(c.body)?).await,
            Op::CreateServiceEnvironment | Op::UpdateServiceEnvironment => {
                self.put_environment(c.caller, input(c.body)?, op == Op::CreateServiceEnvironment)
                    .await
            }
            Op::DescribeServiceEnvironments => self.describe_environments(input(c.body)?).await,
            Op::TagResource | Op::UntagResource | Op::ListTagsForResource => self.tags(op, c).await,
        }
    }
}

//! Resume drills: `StartResumeDrill` is checked as a submit is (the
//! caller's right to submit to the share, the job against the queue's
//! configuration) plus what a drill needs, then stored in the log as one
//! `Drill` entry naming both of its jobs before the reply.

use qm_service::api::{self, invalid};
use qm_wire::messages::{Caller, ErrorCode, Problem, StartResumeDrill, StartResumeDrillResponse};
use qm_wire::subjects;
use qm_wire::system::LogEntry;

use crate::{new_job_id, transient, Admission, Result};

impl Admission {
    pub(crate) async fn start_drill(
        &self,
        caller: &Caller,
        request: StartResumeDrill,
    ) -> Result<StartResumeDrillResponse> {
        let mut job = request.job;
        // Drills are not retried by token: each is its own evidence.
        job.client_token = None;
        self.validate_submit(caller, &job).await?;
        let mut problems = Vec::new();
        if job.checkpoint_config.is_none() {
            problems.push(Problem {
                field: "job.checkpointConfig".into(),
                message: "is required: a drill stops the job after a committed checkpoint and resumes it from there".into(),
            });
        }
        if job
            .checkpoint_config
            .as_ref()
            .is_some_and(|c| c.s3_uri.is_some())
        {
            problems.push(Problem {
                field: "job.checkpointConfig.s3Uri".into(),
                message: "must be left out: a drill's two copies keep their checkpoints apart, each under its own job id".into(),
            });
        }
        let (doc, _) = self.existing(&job.job_queue).await?;
        let share = job.quota_share_name.clone().unwrap_or_default();
        let declares_classes = doc
            .quota_shares
            .iter()
            .find(|s| s.quota_share_name == share)
            .and_then(|s| s.workload_classes.as_ref())
            .is_some_and(|c| !c.is_empty());
        if !declares_classes {
            problems.push(Problem {
                field: "job.quotaShareName".into(),
                message: format!(
                    "quota share {share:?} declares no workload classes: a drill proves a class's resume path"
                ),
            });
        }
        if !problems.is_empty() {
            return Err(invalid("invalid resume drill", problems));
        }
        let seed = request.seed.unwrap_or_else(|| {
            let id = qm_service::random_id();
            u64::from_str_radix(&id[..16], 16).unwrap_or_default()
        });
        let response = StartResumeDrillResponse {
            drill_id: format!("d-{}", qm_service::random_id()),
            resumed_job_id: new_job_id(),
            uninterrupted_job_id: new_job_id(),
        };
        let entry = LogEntry::Drill {
            drill_id: response.drill_id.clone(),
            resumed_job_id: response.resumed_job_id.clone(),
            uninterrupted_job_id: response.uninterrupted_job_id.clone(),
            job: job.clone(),
            seed,
            principal: Some(caller.principal.clone()),
        };
        let subject = subjects::log_submit(&job.job_queue)
            .map_err(|e| invalid(format!("jobQueue: {e}"), Vec::new()))?;
        let body = serde_json::to_vec(&entry)
            .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
        let mut h = qm_service::trace::headers();
        h.insert(
            async_nats::header::NATS_MESSAGE_ID,
            response.drill_id.as_str(),
        );
        let ack = self
            .js
            .publish_with_headers(subject, h, body.into())
            .await
            .map_err(|e| transient("job log unavailable", e))?;
        ack.await
            .map_err(|e| transient("job log did not store the drill", e))?;
        tracing::info!(drill = %response.drill_id, queue = %job.job_queue, %share, principal = %caller.principal, "resume drill started");
        Ok(response)
    }
}

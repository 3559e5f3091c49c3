//! Resume drills: `StartResumeDrill` is checked as the core checks a drill
//! (a submit's rights and rules, plus a checkpointing job in a share that
//! declares classes), then stored in the log as one `Drill` entry naming
//! both of its jobs before the reply.

use qm_service::api::invalid;
use qm_wire::messages::{Caller, Problem, StartResumeDrill, StartResumeDrillResponse};
use qm_wire::system::LogEntry;

use crate::errors::Result;
use crate::ids::new_job_id;
use crate::Admission;

impl Admission {
    pub(crate) async fn start_drill(
        &self,
        caller: &Caller,
        request: StartResumeDrill,
    ) -> Result<StartResumeDrillResponse> {
        let mut job = request.job;
        // Drills are not retried by token: each is its own evidence.
        job.client_token = None;
        // Two copies sharing one explicit location would restore each
        // other's checkpoints (a wire field: the core never sees it).
        if job
            .checkpoint_config
            .as_ref()
            .is_some_and(|c| c.s3_uri.is_some())
        {
            return Err(invalid(
                "invalid resume drill",
                vec![Problem {
                    field: "job.checkpointConfig.s3Uri".into(),
                    message: "must be left out: a drill's two copies keep their checkpoints apart, each under its own job id".into(),
                }],
            ));
        }
        let seed = request.seed.unwrap_or_else(|| {
            let id = qm_service::random_id();
            u64::from_str_radix(&id[..16], 16).unwrap_or_default()
        });
        self.validate(caller, &job, Some(seed)).await?;
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
        self.append_submit(&job.job_queue, &entry, &response.drill_id)
            .await?;
        tracing::info!(drill = %response.drill_id, queue = %job.job_queue, principal = %caller.principal, "resume drill started");
        Ok(response)
    }
}

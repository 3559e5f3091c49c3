//! `qm queue`: a queue's and a share's state, and their deletion (the
//! end of a queue's life: DISABLED, drained, deleted).

use std::time::{Duration, Instant};

use qm_service::client::{CallError, Client};
use qm_wire::messages::{ErrorCode, QueueRef, QuotaShare, ShareRef};

use super::failure::Failure;
use super::output::print_json;

#[derive(clap::Subcommand, Debug)]
pub enum QueueCommand {
    /// Let a job queue (or one quota share of it) take new jobs again.
    #[command(
        after_help = "Examples:\n  qm queue enable training\n  qm queue enable training --share QS3"
    )]
    Enable {
        /// The job queue.
        queue: String,
        /// Only this quota share of it.
        #[arg(long)]
        share: Option<String>,
    },
    /// Stop a job queue (or one quota share of it) taking new jobs. Jobs
    /// already in it go on: waiting ones still start, running ones run to
    /// their end. A queue is deleted only once DISABLED and drained; a
    /// share only once DISABLED.
    #[command(
        after_help = "Examples:\n  qm queue disable training\n  qm queue disable training --share QS3"
    )]
    Disable {
        queue: String,
        #[arg(long)]
        share: Option<String>,
    },
    /// Delete a DISABLED job queue whose jobs have all finished (its
    /// finished jobs are archived first: `qm describe` still finds them
    /// for the archive's retention), or a DISABLED quota share (its
    /// waiting jobs fail with SHARE_DELETED, its running ones are stopped).
    /// Waits while a large queue's finished jobs are archived.
    #[command(
        after_help = "Examples:\n  qm queue disable training && qm queue delete training\n  qm queue delete training --share QS3\n\nRefused, naming the jobs, while any job of the queue has not finished:\nwait for them, or `qm terminate` them."
    )]
    Delete {
        queue: String,
        #[arg(long)]
        share: Option<String>,
        /// How long to wait for a large queue's finished jobs to be
        /// archived before giving up (the archiving goes on).
        #[arg(long, default_value_t = 600, value_name = "SECONDS")]
        wait: u64,
    },
}

pub async fn queue(c: &Client, command: QueueCommand, json: bool) -> Result<(), Failure> {
    match command {
        QueueCommand::Enable { queue, share } => set_state(c, &queue, share, "ENABLED", json).await,
        QueueCommand::Disable { queue, share } => {
            set_state(c, &queue, share, "DISABLED", json).await
        }
        QueueCommand::Delete {
            queue,
            share: Some(share),
            ..
        } => {
            let r = c
                .delete_quota_share(&ShareRef {
                    job_queue: queue.clone(),
                    quota_share_name: share.clone(),
                })
                .await?;
            if json {
                print_json(&r);
            } else {
                println!("quota share {share} of job queue {queue} deleted");
            }
            Ok(())
        }
        QueueCommand::Delete {
            queue,
            share: None,
            wait,
        } => delete_queue(c, &queue, Duration::from_secs(wait), json).await,
    }
}

async fn set_state(
    c: &Client,
    queue: &str,
    share: Option<String>,
    state: &str,
    json: bool,
) -> Result<(), Failure> {
    let r: serde_json::Value = match &share {
        Some(share) => {
            let update = QuotaShare {
                job_queue: queue.into(),
                quota_share_name: share.clone(),
                state: Some(state.into()),
                ..QuotaShare::default()
            };
            serde_json::to_value(c.update_quota_share(&update).await?).unwrap_or_default()
        }
        None => {
            // Only the state: the queue's other fields stay as stored when
            // the change lands.
            let mut patch = qm_client::JobQueuePatch::new();
            patch.insert("jobQueueName".into(), queue.into());
            patch.insert("state".into(), state.into());
            serde_json::to_value(c.update_job_queue(&patch).await?).unwrap_or_default()
        }
    };
    if json {
        print_json(&r);
    } else {
        let what = match &share {
            Some(s) => format!("quota share {s} of job queue {queue}"),
            None => format!("job queue {queue}"),
        };
        let effect = if state == "DISABLED" {
            "takes no new job; its jobs go on"
        } else {
            "takes new jobs"
        };
        println!("{what} is {state}: it {effect}");
    }
    Ok(())
}

/// Asks until the queue is deleted, saying so while its finished jobs are
/// archived (the scheduler answers "ask again" for a large queue).
async fn delete_queue(c: &Client, queue: &str, wait: Duration, json: bool) -> Result<(), Failure> {
    let started = Instant::now();
    let request = QueueRef {
        job_queue: queue.into(),
    };
    loop {
        match c.delete_job_queue(&request).await {
            Ok(r) => {
                if json {
                    print_json(&r);
                } else {
                    println!("job queue {queue} deleted (its finished jobs are in the archive)");
                }
                return Ok(());
            }
            Err(CallError::Api(e))
                if e.code == ErrorCode::Transient && started.elapsed() < wait =>
            {
                eprintln!("qm: {}", e.message);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

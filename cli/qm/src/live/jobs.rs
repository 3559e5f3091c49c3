//! One job: `qm describe`, `list`, `update`, `terminate` and `logs`.

use qm_service::client::Client;
use qm_wire::messages::{
    GetServiceJobLogs, JobRef, ListServiceJobs, ListServiceJobsResponse, ServiceJob,
    TerminateServiceJob, UpdateServiceJob,
};
use qm_wire::system::LogsResponse;

use super::failure::Failure;
use super::output::{human_bytes, print_json, rfc3339, table};

pub async fn describe(c: &Client, job_id: &str, json: bool) -> Result<(), Failure> {
    let j: ServiceJob = c
        .describe_service_job(&JobRef {
            job_id: job_id.into(),
        })
        .await?;
    if json {
        print_json(&j);
        return Ok(());
    }
    println!("job        {} ({})", j.job_id, j.job_name);
    match &j.workload_class {
        Some(class) => println!(
            "queue      {} / share {} / class {class}",
            j.job_queue, j.quota_share_name
        ),
        None => println!("queue      {} / share {}", j.job_queue, j.quota_share_name),
    }
    println!("status     {}", j.status);
    println!("reason     {}", j.status_reason);
    if let Some(image) = &j.container_image {
        println!("image      {image}");
    }
    println!(
        "asks for   {} x {}, priority {}{}",
        j.instance_count,
        j.instance_type,
        j.scheduling_priority,
        if j.on_borrowed_capacity {
            ", on borrowed capacity"
        } else {
            ""
        }
    );
    if !j.attempts.is_empty() {
        let mut t = table(
            &[
                "ATTEMPT",
                "EXECUTOR",
                "OUTCOME",
                "EXIT",
                "RESTORED",
                "LAST CKPT",
                "RECOMPUTED",
                "FOR",
            ],
            &[0, 3, 4, 5, 6],
        );
        for a in &j.attempts {
            let step = |s: Option<u64>| s.map_or("-".to_string(), |s| format!("step {s}"));
            t.add_row(vec![
                a.attempt.to_string(),
                a.executor_id.clone().unwrap_or_else(|| "-".into()),
                a.outcome.clone().unwrap_or_else(|| "(running)".into()),
                a.exit_code.map_or("-".into(), |c| c.to_string()),
                match (a.restored_checkpoint_step, a.restored_bytes) {
                    (Some(s), Some(b)) => format!("step {s} ({})", human_bytes(b)),
                    (s, _) => step(s),
                },
                step(a.last_checkpoint_step),
                a.recomputed_ms
                    .map_or("-".into(), |ms| format!("{:.1} s", ms as f64 / 1000.0)),
                match (&a.preempted_for_job_id, &a.preempted_for_share) {
                    (Some(j), Some(s)) => format!("{j} ({s})"),
                    (Some(j), None) => j.clone(),
                    _ => "-".into(),
                },
            ]);
        }
        println!("\n{}", t.trim_fmt());
        // A restore that fell back says so: the newer checkpoints it
        // skipped were damaged or incomplete.
        for a in j.attempts.iter().filter(|a| !a.restore_skipped.is_empty()) {
            println!(
                "attempt {} restored an older checkpoint; skipped: {}",
                a.attempt,
                a.restore_skipped.join("; ")
            );
        }
        // Why an attempt failed, in the job's words (or the runtime's),
        // and what a starting attempt is doing (pulling, downloading).
        for a in &j.attempts {
            if let Some(why) = &a.status_reason {
                println!("attempt {}: {why}", a.attempt);
            }
            if let (Some(doing), None) = (&a.progress, &a.outcome) {
                println!("attempt {}: {doing}", a.attempt);
            }
        }
        // Checkpoints written but not uploaded: what a preemption now
        // would lose grows until the next commit.
        for a in &j.attempts {
            if let Some(since) = a.checkpoint_upload_failing_since {
                println!(
                    "attempt {}: checkpoints not uploaded since {} ({:.0} s ago): {}",
                    a.attempt,
                    rfc3339(since),
                    qm_service::now_ms().saturating_sub(since) as f64 / 1000.0,
                    a.checkpoint_upload_error
                        .as_deref()
                        .unwrap_or("unknown error")
                );
            }
        }
    }
    Ok(())
}

pub async fn list(
    c: &Client,
    queue: &str,
    status: Option<String>,
    share: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let mut all = Vec::new();
    let mut token = None;
    loop {
        let r: ListServiceJobsResponse = c
            .list_service_jobs(&ListServiceJobs {
                job_queue: queue.into(),
                job_status: status.clone(),
                quota_share_name: share.clone(),
                max_results: Some(1000),
                next_token: token,
            })
            .await?;
        all.extend(r.job_summary_list);
        token = r.next_token;
        if token.is_none() {
            break;
        }
    }
    if json {
        print_json(&all);
        return Ok(());
    }
    let mut t = table(
        &[
            "JOB", "NAME", "SHARE", "STATUS", "PRIO", "ATTEMPTS", "REASON",
        ],
        &[4, 5],
    );
    for j in &all {
        t.add_row(vec![
            j.job_id.clone(),
            j.job_name.clone(),
            j.quota_share_name.clone(),
            j.status.clone(),
            j.scheduling_priority.to_string(),
            j.attempts.len().to_string(),
            j.status_reason.clone(),
        ]);
    }
    println!("{}", t.trim_fmt());
    Ok(())
}

pub async fn update(c: &Client, job_id: &str, priority: u32, json: bool) -> Result<(), Failure> {
    let j: ServiceJob = c
        .update_service_job(&UpdateServiceJob {
            job_id: job_id.into(),
            scheduling_priority: priority,
        })
        .await?;
    if json {
        print_json(&j);
    } else {
        println!(
            "{} priority {} ({})",
            j.job_id, j.scheduling_priority, j.status
        );
    }
    Ok(())
}

pub async fn terminate(c: &Client, job_id: &str, reason: &str, json: bool) -> Result<(), Failure> {
    let r = c
        .terminate_service_job(&TerminateServiceJob {
            job_id: job_id.into(),
            reason: reason.into(),
        })
        .await?;
    if json {
        print_json(&r);
    } else {
        println!("{job_id} terminating");
    }
    Ok(())
}

pub async fn logs(
    c: &Client,
    job_id: &str,
    attempt: Option<u32>,
    stderr: bool,
) -> Result<(), Failure> {
    let r: LogsResponse = c
        .get_service_job_logs(&GetServiceJobLogs {
            job_id: job_id.into(),
            attempt,
            tail_bytes: None,
        })
        .await?;
    if r.truncated {
        eprintln!("qm: (showing the end of the output)");
    }
    print!("{}", if stderr { r.stderr } else { r.stdout });
    Ok(())
}

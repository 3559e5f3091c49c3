//! `qm drill` and `qm drills`: resume drills, started and followed.

use std::time::{Duration, Instant};

use qm_service::client::Client;
use qm_wire::messages::{
    ListResumeDrills, ListResumeDrillsResponse, ResumeDrill, StartResumeDrill,
    StartResumeDrillResponse,
};

use super::failure::Failure;
use super::output::print_json;
use super::submit::{submit_request, SubmitArgs};

/// `qm drill`'s flags: the job, as `qm submit` takes it, and the drill's.
#[derive(Debug, Default, clap::Args)]
pub struct DrillArgs {
    #[command(flatten)]
    pub job: SubmitArgs,
    /// Draws the point at which the resumed copy is stopped (default:
    /// random); the same seed stops it at the same point.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the drill's id and its jobs' ids, and do not wait for its outcome.
    #[arg(long)]
    pub no_wait: bool,
    /// Give up waiting after this many seconds (the drill goes on).
    #[arg(long, default_value_t = 3600, value_name = "SECONDS")]
    pub wait_seconds: u64,
}

/// Builds the request (bad usage is reported before anything is contacted).
pub fn drill_request(a: &DrillArgs) -> Result<StartResumeDrill, Failure> {
    if a.job.dry_run {
        return Err(Failure("qm drill: --dry-run is for qm submit".into(), 2));
    }
    Ok(StartResumeDrill {
        job: submit_request(&a.job)?,
        seed: a.seed,
    })
}

/// `qm drill`: starts a drill and, unless `--no-wait`, follows it to its
/// outcome (exit 0 when it passes, 1 when it fails).
pub async fn drill(
    c: &Client,
    request: &StartResumeDrill,
    args: &DrillArgs,
    json: bool,
) -> Result<(), Failure> {
    let r: StartResumeDrillResponse = c.start_resume_drill(request).await?;
    if args.no_wait {
        if json {
            print_json(&r);
        } else {
            println!(
                "{} (resumed {}, uninterrupted {})",
                r.drill_id, r.resumed_job_id, r.uninterrupted_job_id
            );
        }
        return Ok(());
    }
    if !json {
        eprintln!(
            "drill {}: running {} (stopped after its first checkpoint, then resumed) beside {} (uninterrupted)",
            r.drill_id, r.resumed_job_id, r.uninterrupted_job_id
        );
    }
    let list = ListResumeDrills {
        job_queue: request.job.job_queue.clone(),
        quota_share_name: request.job.quota_share_name.clone(),
    };
    let deadline = Instant::now() + Duration::from_secs(args.wait_seconds);
    let mut said_stopped = false;
    loop {
        let drills: ListResumeDrillsResponse = c.list_resume_drills(&list).await?;
        if let Some(d) = drills.drills.into_iter().find(|d| d.drill_id == r.drill_id) {
            if d.stopped_at.is_some() && !said_stopped && !json {
                eprintln!(
                    "drill {}: the resumed copy was stopped; it resumes from its checkpoint",
                    d.drill_id
                );
                said_stopped = true;
            }
            if d.status != "RUNNING" {
                print_drill(&d, json);
                return match d.status.as_str() {
                    "PASSED" => Ok(()),
                    _ => Err(Failure(
                        format!("drill {} failed: {}", d.drill_id, d.status_reason),
                        1,
                    )),
                };
            }
        }
        if Instant::now() >= deadline {
            return Err(Failure(
                format!(
                    "drill {} still running after {} s (qm drills --queue {} shows it)",
                    r.drill_id, args.wait_seconds, list.job_queue
                ),
                3,
            ));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn print_drill(d: &ResumeDrill, json: bool) {
    if json {
        print_json(d);
        return;
    }
    println!("drill      {} ({})", d.drill_id, d.status);
    println!(
        "class      {} / share {} / queue {}",
        d.workload_class, d.quota_share_name, d.job_queue
    );
    println!("artifact   {}", d.artifact);
    if !d.status_reason.is_empty() {
        println!("reason     {}", d.status_reason);
    }
    let ms =
        |v: Option<u64>| v.map_or("-".to_string(), |ms| format!("{:.1} s", ms as f64 / 1000.0));
    println!(
        "resume     restored step {}, restore {}, work recomputed {}",
        d.restored_step.map_or("-".to_string(), |s| s.to_string()),
        ms(d.restore_ms),
        ms(d.recomputed_ms)
    );
    println!(
        "jobs       {} (resumed), {} (uninterrupted)",
        d.resumed_job_id, d.uninterrupted_job_id
    );
}

/// `qm drills --queue Q [--share S]`.
pub async fn drills(
    c: &Client,
    queue: &str,
    share: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let r: ListResumeDrillsResponse = c
        .list_resume_drills(&ListResumeDrills {
            job_queue: queue.into(),
            quota_share_name: share,
        })
        .await?;
    if json {
        print_json(&r);
        return Ok(());
    }
    if r.drills.is_empty() {
        println!("no resume drills in {queue} (qm drill starts one)");
        return Ok(());
    }
    let mut t = super::output::table(&["DRILL", "SHARE", "CLASS", "STATUS", "REASON"], &[]);
    for d in &r.drills {
        t.add_row(vec![
            d.drill_id.to_string(),
            d.quota_share_name.to_string(),
            d.workload_class.to_string(),
            d.status.to_string(),
            d.status_reason.to_string(),
        ]);
    }
    println!("{}", t.trim_fmt());
    Ok(())
}

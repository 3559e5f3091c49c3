//! What a test asks of the running system, and what it waits for.

use super::*;

impl Stack {
    pub async fn apply(&self, doc_yaml: &str) -> QueueDocument {
        let doc: QueueDocument = serde_yaml_ng::from_str(doc_yaml).expect("queue document");
        self.retry(|c| {
            let doc = doc.clone();
            async move {
                c.call::<_, QueueDocument>(Operation::ApplyJobQueue, &doc)
                    .await
            }
        })
        .await
    }

    pub async fn submit(&self, job: &SubmitServiceJob) -> String {
        self.submit_as(&self.client, job).await
    }

    /// Submits as `client`'s principal (e.g. a team's user).
    pub async fn submit_as(&self, client: &Client, job: &SubmitServiceJob) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match client
                .call::<_, SubmitServiceJobResponse>(Operation::SubmitServiceJob, job)
                .await
            {
                Ok(r) => return r.job_id,
                Err(e)
                    if Instant::now() < deadline
                        && e.code()
                            .is_none_or(|c| c == qm_wire::messages::ErrorCode::Transient) =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("submit as {} failed: {e}", client.principal),
            }
        }
    }

    /// Submits as the stack's admin, expecting a refusal: its text (or the
    /// job id, if it was accepted).
    pub async fn try_submit(&self, job: &SubmitServiceJob) -> Result<String, String> {
        self.client
            .call::<_, SubmitServiceJobResponse>(Operation::SubmitServiceJob, job)
            .await
            .map(|r| r.job_id)
            .map_err(|e| e.to_string())
    }

    /// Sets the job's scheduling priority as `client`'s principal.
    pub async fn update_priority_as(&self, client: &Client, job_id: &str, priority: u32) {
        let _: ServiceJob = client
            .call(
                Operation::UpdateServiceJob,
                &qm_wire::messages::UpdateServiceJob {
                    job_id: job_id.into(),
                    scheduling_priority: priority,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("priority of {job_id} not updated: {e}"));
    }

    pub async fn describe(&self, job_id: &str) -> Option<ServiceJob> {
        self.client
            .call(
                Operation::DescribeServiceJob,
                &JobRef {
                    job_id: job_id.into(),
                },
            )
            .await
            .ok()
    }

    /// Retries a call while services are starting (no reply / transient).
    async fn retry<T, F, Fut>(&self, f: F) -> T
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, qm_service::client::CallError>>,
    {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match f(self.client.clone()).await {
                Ok(v) => return v,
                Err(e)
                    if Instant::now() < deadline
                        && e.code()
                            .is_none_or(|c| c == qm_wire::messages::ErrorCode::Transient) =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("call failed: {e}\n{}", self.logs()),
            }
        }
    }

    /// Polls the job until `done` holds (or panics after `secs`, with the
    /// job and the service logs).
    pub async fn wait_for(
        &self,
        job_id: &str,
        secs: u64,
        what: &str,
        done: impl Fn(&ServiceJob) -> bool,
    ) -> ServiceJob {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(j) = self.describe(job_id).await {
                if done(&j) {
                    return j;
                }
                last = Some(j);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "job {job_id} did not reach {what} in {secs}s; last seen: {last:#?}\n{}",
            self.logs()
        );
    }

    /// Waits until scheduler `name` leads (its log says so): reads and
    /// updates answer TRANSIENT until some scheduler does, and a test must
    /// not race the services' start-up.
    pub async fn wait_leader(&self, name: &str) {
        self.wait_log(name, "became the scheduler leader").await;
    }

    /// Waits until scheduler `name` stands by, following the log.
    pub async fn wait_standing_by(&self, name: &str) {
        self.wait_log(name, "standing by: following the log").await;
    }

    /// Waits (60 s at most) until `name`'s log holds `text`.
    async fn wait_log(&self, name: &str, text: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !self.log_of(name).contains(text) {
            assert!(
                std::time::Instant::now() < deadline,
                "{name} did not log {text:?} within 60 s\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the job's final status (SUCCEEDED or FAILED).
    pub async fn wait_final(&self, job_id: &str, secs: u64) -> ServiceJob {
        self.wait_for(job_id, secs, "a final status", |j| {
            j.status == "SUCCEEDED" || j.status == "FAILED"
        })
        .await
    }

    pub fn logs(&self) -> String {
        let mut out = String::new();
        for name in self.procs.keys() {
            let log = self.log_of(name);
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            out.push_str(&format!("--- {name} (last lines)\n"));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// The output of an attempt's process, read from the executor's directory.
    pub fn attempt_stdout(&self, executor: &str, job_id: &str, attempt: u32) -> String {
        std::fs::read_to_string(
            self.dir
                .join(executor)
                .join(job_id)
                .join(format!("attempt-{attempt}"))
                .join("stdout.log"),
        )
        .unwrap_or_default()
    }

    /// When the attempt's process was launched and seen to end (the
    /// executor's `attempt-<N>.run.json` beside the attempt's directory), in
    /// milliseconds since the Unix epoch.
    /// What the attempt's watcher (its supervisor) recorded in
    /// `attempt-<N>.exit.json`: when its process was launched and, if the
    /// supervisor saw it, when it ended (a supervisor killed with its
    /// executor records no end: the process died with it).
    pub fn attempt_watch(
        &self,
        executor: &str,
        job_id: &str,
        attempt: u32,
    ) -> Option<(u64, Option<u64>)> {
        let text = std::fs::read_to_string(
            self.dir
                .join(executor)
                .join(job_id)
                .join(format!("attempt-{attempt}.exit.json")),
        )
        .ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        Some((v["launchedAtMs"].as_u64()?, v["endedAtMs"].as_u64()))
    }

    pub fn attempt_run(&self, executor: &str, job_id: &str, attempt: u32) -> Option<(u64, u64)> {
        let text = std::fs::read_to_string(
            self.dir
                .join(executor)
                .join(job_id)
                .join(format!("attempt-{attempt}.run.json")),
        )
        .ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        Some((v["launchedAtMs"].as_u64()?, v["endedAtMs"].as_u64()?))
    }

    /// The job's status changes as stored in the QM_EVENTS stream (read as
    /// the scheduler, which reads that stream after a failover): in frames,
    /// or one a message as stored before frames. Ordered by their position
    /// and with duplicates (the same position) dropped: (from, to) pairs.
    pub async fn stored_transitions(&self, job_id: &str) -> Vec<(String, String)> {
        use futures::StreamExt;
        let scheduler = self.auth.client(&self.nats_url, "scheduler").await;
        let js = async_nats::jetstream::new(scheduler.nats.clone());
        let stream = js.get_stream("QM_EVENTS").await.expect("events stream");
        let consumer = stream
            .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
                filter_subjects: vec![
                    "qm.v1.events.job.>".into(),
                    qm_wire::subjects::EVENT_FRAMES.into(),
                ],
                ..Default::default()
            })
            .await
            .expect("consumer");
        let pending = consumer.cached_info().num_pending;
        let mut messages = consumer.messages().await.expect("messages");
        let mut seen = std::collections::BTreeMap::new();
        let parse = |p: &str| -> Vec<u64> { p.split('.').filter_map(|n| n.parse().ok()).collect() };
        for _ in 0..pending {
            let Ok(Some(Ok(m))) =
                tokio::time::timeout(Duration::from_secs(5), messages.next()).await
            else {
                break;
            };
            let events: Vec<(String, Vec<u64>, serde_json::Value)> =
                if m.subject.as_str() == qm_wire::subjects::EVENT_FRAMES {
                    let frame: qm_wire::messages::EventFrame =
                        serde_json::from_slice(&m.payload).expect("a frame decodes");
                    frame
                        .events
                        .into_iter()
                        .map(|e| (e.subject, parse(&e.position), e.event))
                        .collect()
                } else {
                    let position = m
                        .headers
                        .as_ref()
                        .and_then(|h| h.get("Qm-Position"))
                        .map(|p| parse(p.as_str()))
                        .unwrap_or_default();
                    let v = serde_json::from_slice(&m.payload).unwrap_or_default();
                    vec![(m.subject.to_string(), position, v)]
                };
            for (subject, position, v) in events {
                if !subject.starts_with("qm.v1.events.job.") || v["jobId"] != job_id {
                    continue;
                }
                let from = v["from"].as_str().unwrap_or("").to_string();
                let to = v["to"].as_str().unwrap_or("").to_string();
                seen.insert(position, (from, to));
            }
        }
        seen.into_values().collect()
    }

    /// The log entries stored on `subject` (read as the scheduler), in
    /// order; unreadable ones are left out.
    pub async fn log_entries(&self, subject: &str) -> Vec<qm_wire::system::LogEntry> {
        use futures::StreamExt;
        let scheduler = self.auth.client(&self.nats_url, "scheduler").await;
        let js = async_nats::jetstream::new(scheduler.nats.clone());
        let stream = js.get_stream("QM_LOG").await.expect("the log");
        let consumer = stream
            .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
                filter_subject: subject.into(),
                ..Default::default()
            })
            .await
            .expect("consumer");
        let pending = consumer.cached_info().num_pending;
        let mut messages = consumer.messages().await.expect("messages");
        let mut out = Vec::new();
        for _ in 0..pending {
            let Ok(Some(Ok(m))) =
                tokio::time::timeout(Duration::from_secs(5), messages.next()).await
            else {
                break;
            };
            if let Ok(e) = serde_json::from_slice(&m.payload) {
                out.push(e);
            }
        }
        out
    }

    /// Waits until the job's first attempt has committed a checkpoint at
    /// `step` or later.
    pub async fn wait_committed(&self, job_id: &str, step: u64) {
        self.wait_for(job_id, 60, "a committed checkpoint", |j| {
            j.attempts
                .first()
                .and_then(|a| a.last_checkpoint_step)
                .unwrap_or(0)
                >= step
        })
        .await;
    }

    /// Asserts that the events stream holds the job's transitions in order,
    /// each starting where the one before ended, the last one to `last`;
    /// returns them.
    pub async fn assert_stored_events(&self, job_id: &str, last: &str) -> Vec<(String, String)> {
        let stored = self.stored_transitions(job_id).await;
        for pair in stored.windows(2) {
            assert_eq!(
                pair[0].1, pair[1].0,
                "a gap in {job_id}'s stored events: {stored:?}"
            );
        }
        assert_eq!(
            stored.last().map(|(_, to)| to.as_str()),
            Some(last),
            "{job_id}: {stored:?}"
        );
        stored
    }

    /// The usage ledger's held instance-seconds (own plus borrowed) of
    /// `queue` over yesterday and today (UTC), and what the attempts of
    /// `jobs` record they held: (stopped - scheduled) x instances. Every
    /// job of the queue must be in `jobs` and finished.
    pub async fn usage_against_attempts(&self, queue: &str, jobs: &[String]) -> (f64, f64) {
        use qm_wire::messages::{GetUsage, UsageReport};
        let today = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        let report: UsageReport = self
            .client
            .call(
                Operation::GetUsage,
                &GetUsage {
                    job_queue: queue.into(),
                    from: Some(qm_wire::dates::utc_date(today - 86_400_000)),
                    to: Some(qm_wire::dates::utc_date(today)),
                    ..Default::default()
                },
            )
            .await
            .expect("the usage report");
        let ledger: f64 = report
            .rows
            .iter()
            .map(|r| r.own_instance_seconds + r.borrowed_instance_seconds)
            .sum();
        let mut held_ms = 0u64;
        for id in jobs {
            let j = self.describe(id).await.expect("the job");
            for a in &j.attempts {
                let (Some(from), Some(to)) = (a.scheduled_at, a.stopped_at) else {
                    panic!("{id} attempt {} has not ended: {j:#?}", a.attempt);
                };
                held_ms += (to - from) * u64::from(j.instance_count);
            }
        }
        assert!(held_ms > 0, "the jobs held no instance: nothing to compare");
        (ledger, held_ms as f64 / 1000.0)
    }

    /// How many attempt directories the executor made for the job.
    pub fn attempt_dirs(&self, executor: &str, job_id: &str) -> usize {
        std::fs::read_dir(self.dir.join(executor).join(job_id)).map_or(0, |d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .count()
        })
    }

    /// Whether every service process started is still running.
    pub fn all_running(&mut self) -> bool {
        let containers = self.containers.clone();
        self.procs.iter_mut().all(|(name, p)| match p {
            Proc::Process(c) => matches!(c.try_wait(), Ok(None)),
            Proc::Container => containers.as_ref().is_some_and(|c| c.running(name)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

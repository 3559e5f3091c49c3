//! The scheduler state's tests: replay, lost executors, gangs.
use super::*;
use qm_core::Time;
use qm_wire::messages::ExecutorInstances;
use qm_wire::system::{Report, ReportPhase};

fn doc() -> QueueDocument {
    serde_yaml_ng::from_str(include_str!(
        "../../../../examples/queues/three-shares.yaml"
    ))
    .expect("queue document")
}

/// The training queue's configuration, as admission stores it.
fn config() -> LogEntry {
    config_of(doc())
}

fn config_of(queue: QueueDocument) -> LogEntry {
    LogEntry::Config {
        queue,
        revision: 1,
        principal: None,
        operation: None,
    }
}

/// The same three shares with fairness over time
/// (`examples/queues/fairness.yaml`: FAIR_SHARE, a department), QS1's
/// budget cut to 18 instance-seconds so that it runs out within a test.
fn fairness_config() -> LogEntry {
    let text = include_str!("../../../../examples/queues/fairness.yaml")
        .replace("instanceHours: 24", "instanceHours: 0.005");
    config_of(serde_yaml_ng::from_str(&text).expect("queue document"))
}

fn submit(name: &str, share: &str, priority: u32) -> SubmitServiceJob {
    SubmitServiceJob {
        job_name: name.into(),
        job_queue: "training".into(),
        quota_share_name: Some(share.into()),
        instance_type: "ml.g5.xlarge".into(),
        scheduling_priority: Some(priority),
        checkpoint_config: Some(Default::default()),
        command: vec!["train".into()],
        ..Default::default()
    }
}

fn report(job: &str, attempt: u32, phase: ReportPhase, exit: Option<i32>) -> LogEntry {
    LogEntry::Report(Report {
        exit_code: exit,
        ..Report::new("node-1", job, attempt, phase)
    })
}

/// What users can observe of a state.
fn observable(s: &State) -> Vec<String> {
    let mut out = Vec::new();
    for (q, qs) in &s.queues {
        for j in qs.cluster.jobs() {
            let attempts: Vec<String> = j
                .attempts
                .iter()
                .map(|a| {
                    format!(
                        "{}:{:?}:{:?}:{:?}",
                        a.number, a.outcome, a.placement, a.ranks
                    )
                })
                .collect();
            out.push(format!(
                "{q} {} {} prio={} {attempts:?} stopping={:?}",
                qs.meta[&j.id].public_id, j.status, j.spec.priority, j.stopping
            ));
        }
    }
    for (q, qs) in &s.queues {
        out.push(format!("{q} placed {:?}", qs.cluster.placed_jobs()));
        // The usage ledger, counted up to a fixed moment.
        out.push(format!(
            "{q} usage {:?}",
            qs.cluster.usage_report(0, u32::MAX - 1, Time(1_000_000))
        ));
    }
    out.push(format!("{:?}", s.stopping));
    out
}

/// What a leader did live: its state, the log it stored, and the events
/// it published with their positions (numbered as the runner does).
struct Live {
    state: State,
    log: Vec<Logged>,
    events: Vec<(Position, Effect)>,
}

/// Runs a leader live over `inputs` (passing after each).
fn live(inputs: Vec<LogEntry>) -> Live {
    let mut l = Live {
        state: State::default(),
        log: Vec::new(),
        events: Vec::new(),
    };
    let mut t = 1_000;
    let mut seq = 0;
    let mut positions = Positions::default();
    // Numbers the events of `fx` as the runner publishes them.
    let mut publish = |positions: &mut Positions, fx: Effects| {
        for e in fx.into_iter().filter(Effect::is_event) {
            l.events.push((positions.next_event(), e));
        }
    };
    for entry in inputs {
        t += 1_000;
        seq += 1;
        let input = seq;
        positions.input(input);
        publish(&mut positions, l.state.apply(entry.clone(), t));
        l.log.push(Logged {
            seq,
            after: None,
            entry,
            at: t,
        });
        for q in l.state.pass_order() {
            if let Some((record, plan)) = l.state.plan(&q, t) {
                let decided = !record.decides_nothing();
                if decided {
                    seq += 1;
                    l.log.push(Logged {
                        seq,
                        after: Some(input),
                        entry: LogEntry::Pass(record.clone()),
                        // Stored a moment after it was decided and applied.
                        at: t + 7,
                    });
                    positions.decision(input, seq);
                    publish(&mut positions, l.state.apply_planned(&record, plan));
                } else {
                    publish(&mut positions, l.state.apply_reasons(&q, &plan));
                }
            }
        }
    }
    l
}

/// node-1 registering three ml.g5.xlarge of the training queue.
fn node_1_with_three() -> LogEntry {
    LogEntry::Register(RegisterExecutor {
        executor_id: "node-1".into(),
        job_queue: "training".into(),
        instances: vec![ExecutorInstances {
            instance_type: "ml.g5.xlarge".into(),
            count: 3,
            gpus: vec![],
        }],
        incarnation: "a".into(),
        checkpoint_node: None,
        address: None,
        fence_after_seconds: None,
        runtimes: Vec::new(),
        service_environment: None,
    })
}

#[test]
fn replaying_the_log_rebuilds_what_the_leader_saw() {
    let register = node_1_with_three();
    let sub = |id: &str, name: &str, share: &str, p: u32| LogEntry::Submit {
        job_id: id.into(),
        job: submit(name, share, p),
        principal: None,
    };
    let inputs = vec![
        config(),
        register,
        sub("j3", "p3", "QS1", 3),
        sub("j2", "p2", "QS1", 2),
        sub("j1", "p1", "QS1", 1),
        report("j3", 1, ReportPhase::Running, None),
        report("j2", 1, ReportPhase::Running, None),
        sub("jq", "qs2", "QS2", 1),
        // p2 was preempted for the QS2 job: its process exits.
        report("j2", 1, ReportPhase::Ended, Some(0)),
        LogEntry::Priority {
            job_id: "j1".into(),
            scheduling_priority: 4,
            at: 0,
            principal: None,
            job_queue: None,
            quota_share_name: None,
        },
        report("j3", 1, ReportPhase::Ended, Some(0)),
        sub("j3", "p3-again", "QS1", 9), // a retried append: ignored
    ];
    let Live {
        state: leader,
        log,
        events,
    } = live(inputs);
    // The story happened: p2 reclaimed, p3 preempted in-share, p1 placed.
    let p2 = leader.describe("j2", 100_000).expect("p2");
    assert_eq!(
        p2.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_CROSS_SHARE")
    );
    let p3 = leader.describe("j3", 100_000).expect("p3");
    assert_eq!(
        p3.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_IN_SHARE")
    );
    assert_eq!(p3.job_name, "p3");
    let p1 = leader.describe("j1", 100_000).expect("p1");
    assert_eq!(p1.status, "SCHEDULED");
    // A new leader replays the log and ends in the same state.
    let mut replayed = State::default();
    assert!(replayed.replay(log.clone(), None).is_empty());
    assert_eq!(observable(&replayed), observable(&leader));
    assert_eq!(replayed.unstarted().len(), leader.unstarted().len());
    // A leader that crashed after storing entries but before publishing
    // their events: the next one republishes exactly the missing ones,
    // whatever the last published event was. Waiting-reason updates
    // (RUNNABLE -> RUNNABLE) are not in the log (they come last among an
    // entry's events); a new leader's first pass derives them afresh, so
    // they are not republished, but a cut may fall on one.
    let waiting =
        |e: &Effect| matches!(e, Effect::Job(c, _) if c.from == "RUNNABLE" && c.to == "RUNNABLE");
    let logged: Vec<(Position, Effect)> = events
        .iter()
        .filter(|(_, e)| !waiting(e))
        .cloned()
        .collect();
    assert!(events.iter().any(|(_, e)| waiting(e)));
    assert!(logged.len() > 10, "the story produced events");
    for (cut, (published, _)) in events.iter().enumerate() {
        let mut again = State::default();
        let expected: Vec<(Position, Effect)> = logged
            .iter()
            .filter(|(p, _)| p > published)
            .cloned()
            .collect();
        assert_eq!(
            again.replay(log.clone(), Some(*published)),
            expected,
            "cut after event {cut} at {published:?}"
        );
    }
    let mut again = State::default();
    assert_eq!(again.replay(log, Some((0, 0, 0))), logged);
}

#[test]
fn a_lost_or_restarted_executor_ends_its_attempts_host_lost() {
    let reg = |inc: &str| {
        LogEntry::Register(RegisterExecutor {
            executor_id: "node-1".into(),
            job_queue: "training".into(),
            instances: vec![ExecutorInstances {
                instance_type: "ml.g5.xlarge".into(),
                count: 1,
                gpus: vec![],
            }],
            incarnation: inc.into(),
            checkpoint_node: None,
            address: None,
            fence_after_seconds: None,
            runtimes: Vec::new(),
            service_environment: None,
        })
    };
    let Live { state: mut s, .. } = live(vec![
        config(),
        reg("a"),
        LogEntry::Submit {
            job_id: "j".into(),
            job: submit("j", "QS1", 1),
            principal: None,
        },
        report("j", 1, ReportPhase::Running, None),
    ]);
    s.apply(reg("b"), 50_000);
    let j = s.describe("j", 50_000).expect("job");
    assert_eq!(j.attempts[0].outcome.as_deref(), Some("HOST_LOST"));
    assert_eq!(j.status, "RUNNABLE");
    // A report from the old incarnation's attempt changes nothing.
    s.apply(report("j", 1, ReportPhase::Ended, Some(0)), 51_000);
    assert_eq!(s.describe("j", 51_000).expect("job").status, "RUNNABLE");
    s.apply(
        LogEntry::ExecutorLost {
            executor_id: "node-1".into(),
            incarnation: "b".into(),
            at: 0,
        },
        52_000,
    );
    assert!(!s.executors["node-1"].live);
    let qs = &s.queues["training"];
    let t = qs.cluster.type_idx("ml.g5.xlarge").expect("type");
    assert_eq!(
        qs.cluster.fleet_of(t),
        0,
        "a lost executor's instances leave the fleet"
    );
}

/// The executors `fx` sends stop commands to.
fn stopped(fx: &Effects) -> Vec<&str> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Command(executor, c) if matches!(**c, ExecCommand::Stop { .. }) => {
                Some(executor.as_str())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_job_spread_over_executors_runs_as_one_gang() {
    let node = |id: &str| {
        LogEntry::Register(RegisterExecutor {
            executor_id: id.into(),
            job_queue: "training".into(),
            instances: vec![ExecutorInstances {
                instance_type: "ml.g5.xlarge".into(),
                count: 1,
                gpus: vec![],
            }],
            incarnation: "a".into(),
            checkpoint_node: None,
            address: Some(format!("{id}.cluster.local")),
            fence_after_seconds: None,
            runtimes: Vec::new(),
            service_environment: None,
        })
    };
    let rank = |executor: &str, phase: ReportPhase, exit: Option<i32>| {
        LogEntry::Report(Report {
            exit_code: exit,
            ..Report::new(executor, "g", 1, phase)
        })
    };
    let mut job = submit("gang", "QS1", 1);
    job.instance_count = Some(2);
    let Live {
        state: mut s,
        events,
        ..
    } = live(vec![
        config(),
        node("node-1"),
        node("node-2"),
        LogEntry::Submit {
            job_id: "g".into(),
            job,
            principal: None,
        },
    ]);
    // One start command per executor, with its rank and every address.
    let starts: Vec<(String, u32, Vec<String>)> = events
        .iter()
        .map(|(_, e)| e.clone())
        .chain(s.unstarted())
        .filter_map(|e| match e {
            Effect::Command(executor, c) => match *c {
                ExecCommand::Start { rank, hosts, .. } => Some((executor, rank, hosts)),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let hosts = vec![
        "node-1.cluster.local".to_string(),
        "node-2.cluster.local".to_string(),
    ];
    assert_eq!(
        starts,
        vec![
            ("node-1".to_string(), 0, hosts.clone()),
            ("node-2".to_string(), 1, hosts.clone()),
        ]
    );
    let status = |s: &State| s.describe("g", 100_000).expect("g").status;
    s.apply(rank("node-1", ReportPhase::Starting, None), 10_000);
    s.apply(rank("node-1", ReportPhase::Running, None), 10_001);
    assert_eq!(status(&s), "STARTING", "RUNNING only once every rank runs");
    assert_eq!(s.unstarted().len(), 1, "rank 1's start is resent");
    s.apply(rank("node-2", ReportPhase::Starting, None), 10_002);
    s.apply(rank("node-2", ReportPhase::Running, None), 10_003);
    assert_eq!(status(&s), "RUNNING");
    // Rank 1 fails: rank 0 is stopped, and the attempt ends with rank 1's
    // exit code once rank 0 has exited too.
    let fx = s.apply(rank("node-2", ReportPhase::Ended, Some(3)), 10_004);
    assert_eq!(stopped(&fx), vec!["node-1"]);
    assert_eq!(status(&s), "RUNNING");
    assert_eq!(s.stops().len(), 1, "the stop is resent until rank 0 ends");
    s.apply(rank("node-1", ReportPhase::Ended, None), 10_005);
    let g = s.describe("g", 100_000).expect("g");
    assert_eq!(g.status, "FAILED");
    assert_eq!(g.attempts[0].exit_code, Some(3));
    assert!(
        s.queues["training"].cluster.placed_jobs().is_empty(),
        "both instances are free again"
    );
    // A stale report from a rank of the ended attempt changes nothing.
    s.apply(rank("node-2", ReportPhase::Running, None), 10_006);
    assert_eq!(s.describe("g", 100_000).expect("g").status, "FAILED");

    // A second gang loses one of its executors: the whole attempt ends
    // HOST_LOST and the rank on the surviving executor is stopped.
    let mut job = submit("gang-2", "QS1", 1);
    job.instance_count = Some(2);
    s.apply(
        LogEntry::Submit {
            job_id: "g2".into(),
            job,
            principal: None,
        },
        20_000,
    );
    let (record, plan) = s.plan("training", 20_001).expect("a pass");
    assert_eq!(record.starts.len(), 1, "{record:?}");
    s.apply_planned(&record, plan);
    let fx = s.apply(
        LogEntry::ExecutorLost {
            executor_id: "node-2".into(),
            incarnation: "a".into(),
            at: 0,
        },
        20_002,
    );
    assert_eq!(stopped(&fx), vec!["node-1"]);
    let g2 = s.describe("g2", 100_000).expect("g2");
    assert_eq!(
        g2.attempts[0].outcome.as_deref(),
        Some("HOST_LOST"),
        "{g2:#?}"
    );
    assert!(s.queues["training"].cluster.placed_jobs().is_empty());
}

/// The quota shares of the sim-equals-live workload, in the flow style both
/// a scenario's `queue` and a queue document accept.
const SHARES: &str = "[
    {quotaShareName: A, capacityLimits: [{capacityUnit: gpu, maxCapacity: 10}],
     resourceSharingConfiguration: {strategy: LEND_AND_BORROW}, preemptionConfiguration: {inSharePreemption: ENABLED}},
    {quotaShareName: B, capacityLimits: [{capacityUnit: gpu, maxCapacity: 8}],
     resourceSharingConfiguration: {strategy: LEND_AND_BORROW, borrowLimit: 50}, preemptionConfiguration: {inSharePreemption: ENABLED}},
    {quotaShareName: C, capacityLimits: [{capacityUnit: gpu, maxCapacity: 6}],
     resourceSharingConfiguration: {strategy: LEND}, preemptionConfiguration: {inSharePreemption: DISABLED}}]";

/// The live scheduler's log entry for one input the simulator fed its core.
fn entry_of(r: &qm_sim::trace::Recorded, s: &State) -> (u64, LogEntry) {
    use qm_sim::trace::{RankPhase, Recorded};
    use qm_wire::messages::{
        CheckpointConfig, JobPreemptionConfiguration, RetryStrategy, TimeoutConfig,
    };
    use qm_wire::system::CheckpointCommit;
    // Stored by the checkpoint service of the attempt's rank 0 (the
    // subject's node; no node registers another checkpoint node here).
    let commit = |job: &str, attempt: u32, at: Time, step: u64| CheckpointCommit {
        job_queue: "training".into(),
        job_id: job.into(),
        attempt,
        seq: 0,
        step: Some(step),
        created_at: at.as_millis(),
        node: s.locate(job).and_then(|(q, id)| {
            let cluster = &s.queues[&q].cluster;
            let a = cluster
                .job(id)?
                .attempts
                .iter()
                .find(|a| a.number == attempt)?;
            Some(cluster.node(a.placement.first()?.node).name.clone())
        }),
    };
    match r {
        Recorded::Node {
            at,
            name,
            incarnation,
            offers,
        } => (
            at.as_millis(),
            LogEntry::Register(RegisterExecutor {
                executor_id: name.clone(),
                job_queue: "training".into(),
                instances: offers
                    .iter()
                    .map(|(t, n)| ExecutorInstances {
                        instance_type: t.clone(),
                        count: *n,
                        gpus: vec![],
                    })
                    .collect(),
                incarnation: incarnation.clone(),
                checkpoint_node: None,
                address: None,
                fence_after_seconds: None,
                runtimes: Vec::new(),
                service_environment: None,
            }),
        ),
        Recorded::NodeLost { at, name } => (
            at.as_millis(),
            LogEntry::ExecutorLost {
                executor_id: name.clone(),
                incarnation: s.executors[name].registration.incarnation.clone(),
                at: at.as_millis(),
            },
        ),
        Recorded::Submit { at, job } => (
            at.as_millis(),
            LogEntry::Submit {
                job_id: job.name.clone(),
                job: SubmitServiceJob {
                    job_name: job.name.clone(),
                    job_queue: "training".into(),
                    quota_share_name: Some(job.share.clone()),
                    instance_type: job.instance_type.clone(),
                    instance_count: Some(job.count),
                    scheduling_priority: Some(job.priority),
                    preemption_configuration: Some(JobPreemptionConfiguration {
                        preemption_retries_before_termination: job.preemption_retries,
                    }),
                    retry_strategy: Some(RetryStrategy {
                        attempts: Some(job.retry_attempts),
                        evaluate_on_exit: vec![],
                    }),
                    timeout_config: job.timeout_seconds.map(|secs| TimeoutConfig {
                        attempt_duration_seconds: secs,
                    }),
                    termination_grace_period_seconds: Some(job.grace_seconds),
                    checkpoint_config: job.checkpoints.then(CheckpointConfig::default),
                    command: vec!["train".into()],
                    ..Default::default()
                },
                principal: None,
            },
        ),
        Recorded::Rank {
            at,
            job,
            attempt,
            node,
            phase,
        } => {
            let (phase, exit_code, restored) = match phase {
                RankPhase::Starting(restored) => (
                    ReportPhase::Starting,
                    None,
                    restored.map(|(t, step)| commit(job, *attempt, t, step)),
                ),
                RankPhase::Running => (ReportPhase::Running, None, None),
                RankPhase::Ended(code) => (ReportPhase::Ended, *code, None),
            };
            (
                at.as_millis(),
                LogEntry::Report(Report {
                    exit_code,
                    restored,
                    ..Report::new(node, job, *attempt, phase)
                }),
            )
        }
        Recorded::Checkpoint {
            at,
            job,
            attempt,
            step,
        } => (
            at.as_millis(),
            LogEntry::Checkpoint(commit(job, *attempt, *at, *step)),
        ),
        Recorded::Priority { at, job, priority } => (
            at.as_millis(),
            LogEntry::Priority {
                job_id: job.clone(),
                scheduling_priority: *priority,
                at: at.as_millis(),
                principal: None,
                job_queue: None,
                quota_share_name: None,
            },
        ),
        Recorded::Terminate { at, job } => (
            at.as_millis(),
            LogEntry::Terminate {
                job_id: job.clone(),
                reason: "cancelled by the scenario".into(),
                at: at.as_millis(),
                principal: None,
                job_queue: None,
                quota_share_name: None,
            },
        ),
        Recorded::Config { .. } | Recorded::Pass { .. } => {
            unreachable!("not an input the test replays")
        }
    }
}

/// The live pass record's decisions in the simulator's terms.
fn decisions_of(record: &qm_wire::system::PassRecord) -> qm_sim::trace::Decisions {
    use qm_sim::trace::{NodeSlots, Preempted, Started};
    qm_sim::trace::Decisions {
        starts: record
            .starts
            .iter()
            .map(|s| Started {
                job: s.job_id.clone(),
                attempt: s.attempt,
                placement: s
                    .placement
                    .iter()
                    .map(|p| NodeSlots {
                        node: p.executor_id.clone(),
                        slots: p.slots.clone(),
                    })
                    .collect(),
            })
            .collect(),
        preemptions: record
            .preemptions
            .iter()
            .map(|p| Preempted {
                job: p.job_id.clone(),
                kind: p.kind.clone(),
                for_job: p.for_job_id.clone(),
            })
            .collect(),
        timeouts: record.timeouts.clone(),
    }
}

/// What a replay on the live scheduler saw.
struct Replayed {
    /// Passes that decided something.
    decided: usize,
    /// Starts spread over several nodes.
    spread: usize,
    /// The kinds of preemption decided.
    kinds: std::collections::BTreeSet<String>,
}

/// Runs `scenario` (queue `training`, whose shares are `shares`) on the
/// simulator, which records every input it feeds its core and every pass;
/// drives the live scheduler's state with the same inputs as log entries,
/// and asserts that each of its passes decides exactly what the
/// simulator's did (same starts on the same executors and slots, same
/// victims, same timeouts).
fn replay_on_the_live_scheduler(
    scenario: &str,
    shares: &str,
) -> (qm_sim::report::Report, State, Replayed) {
    let options = qm_sim::Options {
        check_invariants: true,
        ..qm_sim::Options::default()
    };
    let (report, trace) = qm_sim::simulate_recorded(scenario, options).expect("the scenario runs");
    let doc: QueueDocument = serde_yaml_ng::from_str(&format!(
        "jobQueue: {{jobQueueName: training}}\nquotaShares: {shares}"
    ))
    .expect("queue document");
    let mut live = State::default();
    live.apply(
        LogEntry::Config {
            queue: doc,
            revision: 1,
            principal: None,
            operation: None,
        },
        0,
    );
    let (mut passes, mut decided, mut spread) = (0, 0, 0);
    let mut kinds = std::collections::BTreeSet::new();
    for r in &trace {
        match r {
            qm_sim::trace::Recorded::Pass { at, decided: sim } => {
                let (record, plan) = live.plan("training", at.as_millis()).expect("queue");
                assert_eq!(
                    decisions_of(&record),
                    *sim,
                    "pass {passes} at t={:.3}s decides differently",
                    at.as_secs_f64()
                );
                passes += 1;
                if sim.is_empty() {
                    live.apply_reasons("training", &plan);
                } else {
                    decided += 1;
                    spread += sim.starts.iter().filter(|s| s.placement.len() > 1).count();
                    kinds.extend(sim.preemptions.iter().map(|p| p.kind.clone()));
                    live.apply_planned(&record, plan);
                }
            }
            qm_sim::trace::Recorded::Config { .. } => panic!("no configuration changes here"),
            input => {
                let (at, entry) = entry_of(input, &live);
                live.apply(entry, at);
            }
        }
    }
    (
        report,
        live,
        Replayed {
            decided,
            spread,
            kinds,
        },
    )
}

#[test]
fn the_simulator_and_the_live_scheduler_decide_the_same() {
    // One workload with every kind of decision: reclaim, in-share
    // preemption on owned and borrowed places, gangs packed and spread over
    // nodes of two sizes, failures, timeouts, priority changes, a
    // cancellation, a lost node and one that comes back. The simulator
    // records every input it feeds its core and every pass; the live
    // scheduler's state is driven with the same inputs as log entries, and
    // each of its passes must decide exactly what the simulator's did (same
    // starts on the same executors and slots, same victims, same timeouts).
    let scenario = format!(
        "
nodes:
  - {{count: 2, instanceType: gpu, instances: 8, name: big}}
  - {{count: 3, instanceType: gpu, instances: 4, name: small}}
queue:
  jobQueueName: training
  quotaShares: {SHARES}
defaults: {{startupSeconds: 3, stopSeconds: 6, checkpointIntervalSeconds: 60}}
generate: {{jobs: 150, seed: 2, meanInterarrivalSeconds: 25, minDurationSeconds: 30, maxDurationSeconds: 900,
           instanceCounts: [1, 1, 2, 4, 6, 10], maxPriority: 9, checkpointingFraction: 0.8, checkpointIntervalSeconds: 90}}
actions:
  # flaky starts at priority 8: at 0, under the victim order decided in
  # issue 29, it was preempted before its scripted failure, and the
  # workload no longer had a FAILED attempt.
  - {{at: 40, submit: {{jobName: flaky, quotaShareName: A, instanceType: gpu, instanceCount: 2, durationSeconds: 300, schedulingPriority: 8,
      retryStrategy: {{attempts: 2}}, failures: [{{attempt: 1, afterSeconds: 30, exitCode: 3}}]}}}}
  - {{at: 60, submit: {{jobName: slow, quotaShareName: B, instanceType: gpu, durationSeconds: 5000,
      schedulingPriority: 9, timeoutConfig: {{attemptDurationSeconds: 200}}}}}}
  - {{at: 70, submit: {{jobName: cancelled, quotaShareName: C, instanceType: gpu, durationSeconds: 5000,
      schedulingPriority: 9}}}}
  - {{at: 300, updateServiceJob: {{jobName: flaky, schedulingPriority: 9}}}}
  - {{at: 500, terminateServiceJob: {{jobName: cancelled}}}}
  - {{at: 700, loseNode: big-2}}
  - {{at: 1200, addNodes: {{count: 1, instanceType: gpu, instances: 8, name: big}}}}
"
    );
    let (
        report,
        live,
        Replayed {
            decided,
            spread,
            kinds,
        },
    ) = replay_on_the_live_scheduler(&scenario, SHARES);
    // The workload exercised what it is meant to.
    assert!(decided > 100, "{decided} passes decided something");
    assert!(spread > 0, "some gangs were spread over several nodes");
    assert!(
        kinds.contains("CROSS_SHARE") && kinds.contains("IN_SHARE"),
        "{kinds:?}"
    );
    assert!(report
        .jobs
        .iter()
        .any(|j| j.attempt_outcomes.contains(&"HOST_LOST".to_string())));
    assert!(report
        .jobs
        .iter()
        .any(|j| j.attempt_outcomes.contains(&"TIMED_OUT".to_string())));
    assert!(report
        .jobs
        .iter()
        .any(|j| j.attempt_outcomes.contains(&"CANCELLED".to_string())));
    assert!(report
        .jobs
        .iter()
        .any(|j| j.attempt_outcomes.contains(&"FAILED".to_string())));
    // And both ended in the same state, job by job.
    for j in &report.jobs {
        let described = live
            .describe(&j.job_name, 0)
            .expect("the live state knows the job");
        assert_eq!(described.status, j.status, "{}", j.job_name);
        let outcomes: Vec<String> = described
            .attempts
            .iter()
            .filter_map(|a| a.outcome.clone())
            .collect();
        assert_eq!(outcomes, j.attempt_outcomes, "{}", j.job_name);
    }
}

#[test]
fn the_live_scheduler_serves_the_room_a_preemption_frees_as_the_simulator_does() {
    // The contract points of issue 29 (examples/scenarios/freed-room.yaml
    // on one 4-instance executor): j1 takes lo's place, 2 instances for 1;
    // the second goes to OWNER's within-quota job, not to LAB's j2, which
    // would borrow it (OWNER cannot reclaim b: it is protected); j2 takes
    // lo3's place instead; only the beneficiaries wait for the reclaim.
    let shares = "[
    {quotaShareName: LAB, capacityLimits: [{capacityUnit: gpu, maxCapacity: 3}],
     resourceSharingConfiguration: {strategy: LEND_AND_BORROW}, preemptionConfiguration: {inSharePreemption: ENABLED},
     protections: {minRuntimeBeforePreemptionSeconds: 600}},
    {quotaShareName: OWNER, capacityLimits: [{capacityUnit: gpu, maxCapacity: 1}],
     resourceSharingConfiguration: {strategy: LEND}}]";
    let scenario = format!(
        "
nodes:
  - {{count: 1, instanceType: gpu, instances: 4, name: n}}
queue:
  jobQueueName: training
  quotaShares: {shares}
defaults: {{startupSeconds: 3, stopSeconds: 6}}
actions:
  - {{at: 0, submit: {{jobName: lo3, quotaShareName: LAB, instanceType: gpu, durationSeconds: 5000}}}}
  - {{at: 1, submit: {{jobName: lo, quotaShareName: LAB, instanceType: gpu, instanceCount: 2, durationSeconds: 5000}}}}
  - {{at: 700, submit: {{jobName: b, quotaShareName: LAB, instanceType: gpu, durationSeconds: 5000}}}}
  - {{at: 800, submit: {{jobName: j1, quotaShareName: LAB, instanceType: gpu, schedulingPriority: 5, durationSeconds: 600}}}}
  - {{at: 800, submit: {{jobName: j2, quotaShareName: LAB, instanceType: gpu, schedulingPriority: 5, durationSeconds: 600}}}}
  - {{at: 800, submit: {{jobName: own, quotaShareName: OWNER, instanceType: gpu, durationSeconds: 600}}}}
"
    );
    let (report, live, replayed) = replay_on_the_live_scheduler(&scenario, shares);
    assert!(replayed.kinds.contains("IN_SHARE"), "{:?}", replayed.kinds);
    let victims: Vec<(&str, &str)> = report
        .preemptions
        .iter()
        .map(|p| (p.job_name.as_str(), p.for_job_name.as_str()))
        .collect();
    assert_eq!(victims, vec![("lo", "j1"), ("lo3", "j2")]);
    let started = |name: &str| {
        report
            .jobs
            .iter()
            .find(|j| j.job_name == name)
            .and_then(|j| j.first_started_at)
    };
    assert_eq!(started("own"), started("j1"), "own starts as lo stops");
    assert!(
        started("own").expect("own ran") < 1300.0,
        "before b's protection ends"
    );
    for name in ["j1", "j2", "own"] {
        assert_eq!(live.describe(name, 0).expect(name).status, "SUCCEEDED");
    }
}

/// On node-1's three instances: j1 ran and succeeded, j2 is placed.
fn j1_done_j2_placed() -> Live {
    let sub = |id: &str| LogEntry::Submit {
        job_id: id.into(),
        job: submit(id, "QS1", 1),
        principal: None,
    };
    live(vec![
        config(),
        node_1_with_three(),
        sub("j1"),
        sub("j2"),
        report("j1", 1, ReportPhase::Running, None),
        report("j1", 1, ReportPhase::Ended, Some(0)),
    ])
}

#[test]
fn after_a_replay_only_jobs_that_have_not_ended_keep_their_place_in_a_trace() {
    let Live { state, log, .. } = j1_done_j2_placed();
    assert_eq!(
        state.describe("j1", 100_000).expect("j1").status,
        "SUCCEEDED"
    );
    // Every submit in the log carried a trace context.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        qm_service::trace::TRACEPARENT,
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    );
    let mut traces = crate::observe::Traces::default();
    // Noted as a follower notes them: before the replay applied the submit.
    let before = State::default();
    for l in &log {
        traces.keep(
            crate::observe::Traces::submitted(&l.entry, Some(&headers)),
            &before,
        );
    }
    assert_eq!(traces.len(), 2);
    traces.retain_live(&state);
    assert!(traces.of("j1").is_none(), "a finished job is forgotten");
    assert!(traces.of("j2").is_some(), "a live job keeps its trace");
    assert_eq!(traces.len(), 1);
    assert!(
        traces.holds_the_states_id("j2", &state),
        "kept under the state's copy of the id (held once)"
    );
}

/// A leader that lags behind the log, as a real one does: inputs are
/// stored before it applies them, so its decisions are stored after
/// inputs it had not seen (their `after` is older than the inputs before
/// them). Driven by `ops`; returns its log and every cut it passed
/// through (where a snapshot of its state could have been taken).
fn lagging_leader(ops: &[(u8, u8)]) -> (Vec<Logged>, Vec<Cut>) {
    let mut state = State::default();
    let mut log: Vec<Logged> = Vec::new();
    let mut waiting: std::collections::VecDeque<Logged> = Default::default();
    let mut cuts = Vec::new();
    let (mut seq, mut t, mut after, mut sched) = (0u64, 1_000u64, 0u64, 0u64);
    let store = |log: &mut Vec<Logged>, seq: &mut u64, after: Option<u64>, entry, t| {
        *seq += 1;
        let l = Logged {
            seq: *seq,
            after,
            entry,
            at: t,
        };
        log.push(l.clone());
        l
    };
    // Half the histories run the queue with a budget, FAIR_SHARE and a
    // group: their counts must survive snapshots and replays too.
    let queue = if ops.first().is_some_and(|(op, _)| op % 2 == 1) {
        fairness_config()
    } else {
        config()
    };
    let setup = [queue, node_1_with_three()];
    for entry in setup {
        let l = store(&mut log, &mut seq, None, entry, t);
        waiting.push_back(l);
    }
    let mut jobs = 0u32;
    let mut incarnation = 0u32;
    for &(op, arg) in ops {
        t += 700;
        let known: Vec<String> = {
            let mut ids: Vec<String> = state
                .queues
                .values()
                .flat_map(|qs| qs.ids.keys().map(|id| id.to_string()))
                .collect();
            ids.sort();
            ids
        };
        let pick = || known.get(usize::from(arg) % known.len().max(1)).cloned();
        let attempt_of = |id: &str| {
            state
                .locate(id)
                .and_then(|(q, j)| state.queues[&q].cluster.job(j))
                .map_or(1, |j| j.attempts.len().max(1) as u32)
        };
        let input = match op % 9 {
            0 | 1 => {
                jobs += 1;
                let share = ["QS1", "QS2", "QS3"][usize::from(arg) % 3];
                Some(LogEntry::Submit {
                    job_id: format!("j{jobs}"),
                    job: submit(&format!("p{jobs}"), share, u32::from(arg % 5)),
                    principal: None,
                })
            }
            2 => pick().map(|id| {
                let a = attempt_of(&id);
                report(&id, a, ReportPhase::Running, None)
            }),
            3 => pick().map(|id| {
                let a = attempt_of(&id);
                report(&id, a, ReportPhase::Ended, Some(i32::from(arg % 2)))
            }),
            4 => pick().map(|job_id| LogEntry::Priority {
                job_id,
                scheduling_priority: u32::from(arg % 7),
                at: t,
                principal: None,
                job_queue: None,
                quota_share_name: None,
            }),
            5 => {
                incarnation += 1;
                let LogEntry::Register(mut r) = node_1_with_three() else {
                    unreachable!()
                };
                r.incarnation = format!("i{incarnation}");
                Some(LogEntry::Register(r))
            }
            _ => None,
        };
        if let Some(entry) = input {
            let l = store(&mut log, &mut seq, None, entry, t);
            waiting.push_back(l);
            continue;
        }
        // The leader catches up on some inputs, then decides.
        for _ in 0..=(arg % 3) {
            let Some(l) = waiting.pop_front() else { break };
            after = l.seq;
            state.apply(l.entry, l.at);
            cuts.push(Cut { after, sched });
        }
        let mut decide = |state: &mut State, entry: LogEntry, log: &mut Vec<Logged>| {
            let l = store(log, &mut seq, Some(after), entry, t);
            sched = l.seq;
            state.apply(l.entry, t);
            cuts.push(Cut { after, sched });
        };
        match op % 9 {
            6 => {
                let queues: Vec<String> = state.queues.keys().cloned().collect();
                for q in queues {
                    if let Some((record, _)) = state.plan(&q, t) {
                        if !record.decides_nothing() {
                            decide(&mut state, LogEntry::Pass(record), &mut log);
                        }
                    }
                }
            }
            7 => {
                let job_ids: Vec<String> = state
                    .due_for_archive(t, 1 + usize::from(arg % 4))
                    .into_iter()
                    .map(|j| j.job_id)
                    .collect();
                if !job_ids.is_empty() {
                    decide(&mut state, LogEntry::Archive { job_ids, at: t }, &mut log);
                }
            }
            _ => {
                if let Some(e) = state.executors.get("node-1").filter(|e| e.live) {
                    let entry = LogEntry::ExecutorLost {
                        executor_id: "node-1".into(),
                        incarnation: e.registration.incarnation.clone(),
                        at: t,
                    };
                    decide(&mut state, entry, &mut log);
                }
            }
        }
    }
    (log, cuts)
}

/// The state a replay of the entries a snapshot at `cut` holds rebuilds,
/// and the position of the last event those entries produced.
fn state_at(log: &[Logged], cut: Cut) -> (State, Position) {
    let held: Vec<Logged> = log
        .iter()
        .filter(|l| match l.after {
            None => l.seq <= cut.after,
            Some(_) => l.seq <= cut.sched,
        })
        .cloned()
        .collect();
    let mut state = State::default();
    let events = state.replay(held, Some((0, 0, 0)));
    let last = events.last().map_or((0, 0, 0), |(p, _)| *p);
    (state, last)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// A snapshot at any cut a leader passed through, written and read
    /// back, plus the log after it, rebuilds exactly the state a replay of
    /// the whole log does, and republishes the same events.
    #[test]
    fn a_snapshot_plus_the_log_after_it_is_the_whole_log(
        ops in proptest::collection::vec((0u8..=255, 0u8..=255), 1..70)
    ) {
        let (log, cuts) = lagging_leader(&ops);
        let mut whole = State::default();
        let all_events = whole.replay(log.clone(), Some((0, 0, 0)));
        for cut in cuts {
            let (at_cut, published) = state_at(&log, cut);
            let image = crate::snapshot::Image { state: at_cut, traces: Default::default() };
            let bytes = crate::snapshot::encode(&image, cut, Positions::default(), 0, "test");
            let (header, image) = crate::snapshot::decode(&bytes).expect("reads back");
            let mut state = image.state;
            let mut replay = Replay::new(header.cut, header.positions, Some(published));
            for l in log.iter().filter(|l| l.seq >= crate::snapshot::needs_from(cut)) {
                replay.push(&mut state, l.clone());
            }
            let (republish, _) = replay.finish(&mut state);
            proptest::prop_assert!(state == whole, "state differs after a snapshot at {:?}", cut);
            let expected: Vec<_> = all_events.iter().filter(|(p, _)| *p > published).cloned().collect();
            proptest::prop_assert_eq!(&republish, &expected, "events after a snapshot at {:?}", cut);

            // A hot standby from the same snapshot keeps every event and
            // drops those stored as the stored events grow (here: the
            // leader had stored events up to one in the middle of the
            // tail, and the standby prunes every fifth entry at what was
            // stored by then): it ends with the same state as a cold
            // replay and exactly the events after the last stored one.
            let after_cut: Vec<Position> = all_events.iter().map(|(p, _)| *p).filter(|p| *p > published).collect();
            let stored_to = after_cut.get(after_cut.len() / 2).copied().unwrap_or(published);
            let stored: Vec<Position> = after_cut.iter().copied().filter(|p| *p <= stored_to).collect();
            let mut following = image_state(&bytes);
            let mut replay = Replay::new(header.cut, header.positions, Some((0, 0, 0)));
            let tail: Vec<_> = log.iter().filter(|l| l.seq >= crate::snapshot::needs_from(cut)).collect();
            for (i, l) in tail.iter().enumerate() {
                replay.push(&mut following, (*l).clone());
                if i % 5 == 4 && !stored.is_empty() {
                    replay.prune(Some(stored[(i * stored.len() / tail.len()).min(stored.len() - 1)]));
                }
            }
            let (again, _) = replay.finish_after(&mut following, Some(stored_to));
            proptest::prop_assert!(following == whole, "a follower's state differs after a snapshot at {:?}", cut);
            let expected: Vec<_> = all_events.iter().filter(|(p, _)| *p > stored_to).cloned().collect();
            proptest::prop_assert_eq!(again, expected, "a follower's events after a snapshot at {:?}", cut);
        }
    }
}

fn image_state(bytes: &[u8]) -> State {
    crate::snapshot::decode(bytes).expect("reads back").1.state
}

#[test]
fn archived_jobs_leave_the_state_and_only_finished_ones_go() {
    let Live { mut state, .. } = j1_done_j2_placed();
    let finished_at = state.describe("j1", 0).expect("j1").attempts[0]
        .stopped_at
        .expect("ended");
    assert!(
        state.due_for_archive(finished_at - 1, 10).is_empty(),
        "not yet"
    );
    let due = state.due_for_archive(finished_at, 10);
    assert_eq!(due.len(), 1);
    assert_eq!(
        (due[0].job_id.as_str(), due[0].status.as_str()),
        ("j1", "SUCCEEDED")
    );
    assert_eq!(due[0].attempts.len(), 1, "the record has its attempts");
    state.apply(
        LogEntry::Archive {
            job_ids: vec!["j1".into(), "j2".into(), "nope".into()],
            at: finished_at,
        },
        finished_at,
    );
    assert!(
        state.describe("j1", 0).is_none(),
        "archived: gone from the state"
    );
    assert_eq!(
        state.describe("j2", 0).expect("j2 stays").status,
        "SCHEDULED",
        "a job that has not finished is not let go"
    );
    assert!(!state.knows("j1"));
    assert!(state.queues["training"]
        .meta
        .values()
        .all(|m| &*m.public_id != "j1"));
}

#[test]
fn a_deleted_queue_leaves_the_state_for_good_until_it_is_made_anew() {
    let Live { mut state, .. } = j1_done_j2_placed();
    // Its finished jobs are archived first, whatever their age.
    let finished: Vec<String> = state
        .finished_of("training", 10_000, 100)
        .into_iter()
        .map(|j| j.job_id)
        .collect();
    assert_eq!(finished, vec!["j1".to_string()]);
    assert!(state.finished_of("no-such-queue", 10_000, 100).is_empty());
    state.apply(
        LogEntry::QueueDeleted {
            job_queue: "training".into(),
            revision: 1,
            at: 20_000,
            principal: Some("platform".into()),
        },
        20_000,
    );
    assert!(!state.queues.contains_key("training"));
    assert!(state.stopping.iter().all(|qj| qj.queue != "training"));
    assert_eq!(state.deleted_queues.get("training"), Some(&1));
    // A configuration appended again from before the deletion is not.
    state.apply(config(), 21_000);
    assert!(
        !state.queues.contains_key("training"),
        "an old revision never makes a deleted queue again"
    );
    state.apply(
        LogEntry::Submit {
            job_id: "late".into(),
            job: submit("late", "QS1", 1),
            principal: None,
        },
        22_000,
    );
    assert!(
        state.describe("late", 22_000).expect("reported").status == "FAILED",
        "a job of a deleted queue is refused"
    );
    // The tombstone is in a snapshot.
    let mut bytes = Vec::new();
    ciborium::into_writer(&state, &mut bytes).expect("serializes");
    let back: State = ciborium::from_reader(bytes.as_slice()).expect("reads back");
    assert_eq!(back.deleted_queues, state.deleted_queues);
    // A newer revision makes it anew: empty, with the executors that
    // stayed registered.
    let LogEntry::Config { queue, .. } = config() else {
        unreachable!()
    };
    state.apply(
        LogEntry::Config {
            queue,
            revision: 9,
            principal: None,
            operation: None,
        },
        23_000,
    );
    let qs = &state.queues["training"];
    assert_eq!(qs.config_revision, 9);
    assert_eq!(qs.cluster.jobs().count(), 0);
    assert!(
        !qs.cluster.queue_config().shares.is_empty(),
        "made anew from the new revision"
    );
    let node = qs
        .cluster
        .node_id("node-1")
        .expect("node-1 serves it again");
    assert!(qs.cluster.node(node).live, "its executor stayed registered");
}

/// Each job's public id is one allocation, shared by the queue's id index
/// and the job's record, live and as a snapshot reads back; the snapshot
/// still names each job's queue for schedulers that read `job_queue`.
#[test]
fn a_jobs_public_id_is_held_once_live_and_after_a_snapshot() {
    let mut state = State::default();
    state.apply(config(), 1);
    for i in 0..3 {
        state.apply(
            LogEntry::Submit {
                job_id: format!("j{i}"),
                job: submit(&format!("p{i}"), "QS1", 1),
                principal: None,
            },
            2 + i,
        );
    }
    let shared = |s: &State| {
        let qs = &s.queues["training"];
        qs.ids.len() == 3
            && qs.ids.iter().all(|(public, id)| {
                qs.meta
                    .get(id)
                    .is_some_and(|m| std::sync::Arc::ptr_eq(public, &m.public_id))
            })
    };
    assert!(shared(&state), "live: one copy of each id");
    // As a snapshot encodes it (CBOR).
    let mut bytes = Vec::new();
    ciborium::into_writer(&state, &mut bytes).expect("serializes");
    let tree: ciborium::Value = ciborium::from_reader(bytes.as_slice()).expect("cbor");
    let field = |v: &ciborium::Value, name: &str| {
        v.as_map()
            .and_then(|m| m.iter().find(|(k, _)| k.as_text() == Some(name)))
            .map(|(_, v)| v.clone())
    };
    let job_queue = field(&tree, "job_queue").expect("job_queue is written");
    let named: Vec<(String, String)> = job_queue
        .as_map()
        .expect("a map")
        .iter()
        .map(|(k, v)| {
            let text = |x: &ciborium::Value| x.as_text().unwrap_or_default().to_string();
            (text(k), text(v))
        })
        .collect();
    assert_eq!(named.len(), 3);
    assert!(named.iter().all(|(_, q)| q == "training"), "{named:?}");
    let back: State = ciborium::from_reader(bytes.as_slice()).expect("reads back");
    assert_eq!(back, state);
    assert!(shared(&back), "read back: one copy of each id");
    assert_eq!(back.locate("j2"), state.locate("j2"));
}

#[test]
fn a_jobs_place_in_its_trace_survives_a_snapshot() {
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(qm_service::trace::TRACEPARENT, parent);
    let mut traces = crate::observe::Traces::default();
    let entry = LogEntry::Submit {
        job_id: "j1".into(),
        job: submit("p1", "QS1", 1),
        principal: None,
    };
    let mut state = State::default();
    state.apply(config(), 1);
    let submitted = crate::observe::Traces::submitted(&entry, Some(&headers));
    state.apply(entry, 2);
    traces.keep(submitted, &state);
    assert!(
        traces.holds_the_states_id("j1", &state),
        "the job's id is held once, by the state"
    );
    let exported = traces.export();
    assert_eq!(exported.get("j1").map(String::as_str), Some(parent));
    let mut again = crate::observe::Traces::default();
    again.import(&exported, &state);
    assert!(again.of("j1").is_some());
    assert_eq!(again.of("j1"), traces.of("j1"));
    assert!(again.holds_the_states_id("j1", &state));
    // A place that does not read is left out, not guessed.
    let mut bad = std::collections::BTreeMap::new();
    bad.insert("j2".to_string(), "not a traceparent".to_string());
    again.import(&bad, &state);
    assert!(again.of("j2").is_none());
}

/// Runs the passes the leader would after an input at `t`; the effects.
fn pass_at(s: &mut State, t: u64) -> (Effects, Vec<qm_wire::system::PassRecord>) {
    let mut fx = Vec::new();
    let mut records = Vec::new();
    let queues: Vec<String> = s.queues.keys().cloned().collect();
    for q in queues {
        if let Some((record, plan)) = s.plan(&q, t) {
            if record.decides_nothing() {
                fx.extend(s.apply_reasons(&q, &plan));
            } else {
                fx.extend(s.apply_planned(&record, plan));
                records.push(record);
            }
        }
    }
    (fx, records)
}

/// The (executor, signal) of the checkpoint commands in `fx`.
fn asked(fx: &Effects) -> Vec<(&str, &str)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Command(executor, c) => match &**c {
                ExecCommand::Checkpoint { signal, .. } => {
                    Some((executor.as_str(), signal.as_str()))
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

#[test]
fn checkpoint_then_preempt_asks_first_and_stops_after_the_commit_or_the_window() {
    // QS1 runs "own" on its instance and a victim on QS2's (QS3 keeps its
    // own); QS2's owner comes back and reclaims it, twice.
    let victim = |name: &str, window: u64| {
        let mut j = submit(name, "QS1", 1);
        j.checkpoint_config = Some(qm_wire::messages::CheckpointConfig {
            checkpoint_before_preempt_seconds: Some(window),
            checkpoint_signal: Some("SIGUSR2".into()),
            ..Default::default()
        });
        j
    };
    let sub = |id: &str, job: SubmitServiceJob| LogEntry::Submit {
        job_id: id.into(),
        job,
        principal: None,
    };
    let Live {
        state: mut s, log, ..
    } = live(vec![
        config(),
        node_1_with_three(),
        sub("own", submit("own", "QS1", 5)),
        sub("ckpt", victim("ckpt", 30)),
        sub("deaf", victim("deaf", 30)),
        report("own", 1, ReportPhase::Running, None),
        report("ckpt", 1, ReportPhase::Running, None),
    ]);
    // Everything the leader stores from here on, to replay it after.
    let mut stored: Vec<(LogEntry, u64)> = log.into_iter().map(|l| (l.entry, l.at)).collect();
    let mut step = |s: &mut State, e: Option<LogEntry>, t: u64| {
        let mut fx = Vec::new();
        if let Some(e) = e {
            stored.push((e.clone(), t));
            fx.extend(s.apply(e, t));
        }
        let (more, records) = pass_at(s, t);
        fx.extend(more);
        stored.extend(records.iter().cloned().map(|r| (LogEntry::Pass(r), t)));
        (fx, records)
    };
    let mut t = 100_000;
    let (fx, _) = step(&mut s, Some(sub("owner", submit("owner", "QS2", 1))), t);
    assert_eq!(
        asked(&fx),
        [("node-1", "SIGUSR2")],
        "the victim is asked to checkpoint, not stopped: {fx:?}"
    );
    assert!(stopped(&fx).is_empty(), "{fx:?}");
    let commit = |job: &str, at: u64| {
        LogEntry::Checkpoint(qm_wire::system::CheckpointCommit {
            job_queue: "training".into(),
            job_id: job.into(),
            attempt: 1,
            seq: 1,
            step: Some(7),
            created_at: at,
            node: Some("node-1".into()),
        })
    };
    // A checkpoint committed before the request does not count...
    let (fx, _) = step(&mut s, Some(commit("ckpt", t - 1)), t + 1_000);
    assert!(stopped(&fx).is_empty(), "{fx:?}");
    // One stored by another node's checkpoint identity is refused: it is
    // not the attempt's (issue 28).
    let forged = match commit("ckpt", t + 1_500) {
        LogEntry::Checkpoint(c) => LogEntry::Checkpoint(qm_wire::system::CheckpointCommit {
            node: Some("node-2".into()),
            ..c
        }),
        _ => unreachable!(),
    };
    let (fx, _) = step(&mut s, Some(forged), t + 1_500);
    assert!(stopped(&fx).is_empty(), "a forged commit counted: {fx:?}");
    // ...one committed after it lets the stop go ahead at once.
    let (fx, _) = step(&mut s, Some(commit("ckpt", t + 2_000)), t + 2_000);
    assert_eq!(stopped(&fx), ["node-1"], "{fx:?}");
    // The owner runs and ends; "deaf" borrows the instance next.
    t += 3_000;
    step(&mut s, Some(report("ckpt", 1, ReportPhase::Ended, None)), t);
    step(
        &mut s,
        Some(report("owner", 1, ReportPhase::Running, None)),
        t,
    );
    step(
        &mut s,
        Some(report("owner", 1, ReportPhase::Ended, Some(0))),
        t,
    );
    step(
        &mut s,
        Some(report("deaf", 1, ReportPhase::Running, None)),
        t,
    );
    assert_eq!(s.describe("deaf", t).expect("job").status, "RUNNING");
    let (fx, _) = step(&mut s, Some(sub("owner2", submit("owner2", "QS2", 1))), t);
    assert_eq!(asked(&fx), [("node-1", "SIGUSR2")], "{fx:?}");
    // It does not answer: stopped when its window ends, by a pass the log
    // records (so a replay stops it too).
    let (fx, records) = step(&mut s, None, t + 29_000);
    assert!(stopped(&fx).is_empty() && records.is_empty(), "{fx:?}");
    let (fx, records) = step(&mut s, None, t + 30_000);
    assert_eq!(stopped(&fx), ["node-1"], "{fx:?}");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].checkpoint_deadlines, ["deaf"]);
    let qs = &s.queues["training"];
    assert_eq!(qs.cluster.checkpoint_first(qs.ids["deaf"]), None);
    // Replaying what was stored rebuilds the same state.
    let mut replayed = State::default();
    for (e, at) in stored {
        replayed.apply(e, at);
    }
    assert_eq!(observable(&replayed), observable(&s));
}

#[test]
fn a_starting_attempts_progress_and_a_failed_ones_reason_reach_describe() {
    let sub = LogEntry::Submit {
        job_id: "j1".into(),
        job: submit("j1", "QS1", 1),
        principal: None,
    };
    let step = |text: &str| {
        let LogEntry::Report(mut r) = report("j1", 1, ReportPhase::Starting, None) else {
            unreachable!("a report")
        };
        r.progress = Some(text.into());
        LogEntry::Report(r)
    };
    let mut ended = report("j1", 1, ReportPhase::Ended, Some(1));
    if let LogEntry::Report(r) = &mut ended {
        r.reason = Some("diverged at step 3".into());
    }
    let Live { state, .. } = live(vec![
        config(),
        node_1_with_three(),
        sub.clone(),
        report("j1", 1, ReportPhase::Starting, None),
        step("pulling image team/trainer:1"),
        step("downloading input channel train"),
    ]);
    let j = state.describe("j1", 100_000).expect("j1");
    assert_eq!(j.status, "STARTING");
    assert_eq!(
        j.attempts[0].progress.as_deref(),
        Some("downloading input channel train"),
        "the last step"
    );
    let Live { state, .. } = live(vec![
        config(),
        node_1_with_three(),
        sub,
        report("j1", 1, ReportPhase::Starting, None),
        step("pulling image team/trainer:1"),
        report("j1", 1, ReportPhase::Running, None),
        ended,
    ]);
    let j = state.describe("j1", 100_000).expect("j1");
    assert_eq!(j.status, "FAILED");
    assert_eq!(j.attempts[0].progress, None, "shown only while it starts");
    assert_eq!(
        j.attempts[0].status_reason.as_deref(),
        Some("diverged at step 3")
    );
}

/// (subject, from, to) of each job event, in order.
fn transitions(events: &[(Position, Effect)]) -> Vec<(String, String, String)> {
    events
        .iter()
        .filter_map(|(_, e)| match e {
            Effect::Job(e, subject) => Some((subject.clone(), e.from.clone(), e.to.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_batch_of_reports_is_each_report_in_turn() {
    let start = |extra: Vec<LogEntry>| {
        let mut inputs = vec![
            config(),
            node_1_with_three(),
            LogEntry::Submit {
                job_id: "j1".into(),
                job: submit("j1", "QS1", 1),
                principal: None,
            },
            LogEntry::Submit {
                job_id: "j2".into(),
                job: submit("j2", "QS1", 1),
                principal: None,
            },
        ];
        inputs.extend(extra);
        live(inputs)
    };
    let each = vec![
        report("j1", 1, ReportPhase::Starting, None),
        report("j1", 1, ReportPhase::Running, None),
        report("j2", 1, ReportPhase::Starting, None),
        report("j2", 1, ReportPhase::Running, None),
        report("j1", 1, ReportPhase::Ended, Some(0)),
    ];
    let batched = LogEntry::Reports {
        reports: each
            .iter()
            .map(|e| match e {
                LogEntry::Report(r) => r.clone(),
                _ => unreachable!(),
            })
            .collect(),
    };
    let one_by_one = start(each);
    let together = start(vec![batched]);
    let (a, b) = (
        transitions(&one_by_one.events),
        transitions(&together.events),
    );
    assert_eq!(a, b, "the same events, in the same order");
    let to: Vec<&str> = b
        .iter()
        .filter(|(s, _, _)| s.contains(".j1."))
        .map(|(_, _, to)| to.as_str())
        .collect();
    assert_eq!(
        to,
        ["RUNNABLE", "SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"]
    );
    // The batch's events share its position's input, numbered in turn.
    let batch_seq = together.log.last().expect("entries").seq;
    let numbered: Vec<u64> = together
        .events
        .iter()
        .filter(|(p, _)| p.0 == batch_seq && p.1 == 0)
        .map(|(p, _)| p.2)
        .collect();
    assert_eq!(numbered, (0..numbered.len() as u64).collect::<Vec<_>>());
    assert!(numbered.len() >= 5, "{numbered:?}");
    // A replay of the batched log rebuilds the same state.
    let mut replayed = State::default();
    let mut replay = Replay::new(Cut::default(), Positions::default(), None);
    for l in together.log.clone() {
        replay.push(&mut replayed, l);
    }
    replay.finish(&mut replayed);
    assert_eq!(observable(&replayed), observable(&together.state));
}

/// Revision `revision` of queue `name` in environment `env` at `priority`,
/// with one RESERVE share S of two ml.g5.xlarge.
fn env_queue(name: &str, env: &str, priority: u32, revision: u64) -> LogEntry {
    let text = format!(
        "jobQueue: {{jobQueueName: {name}, serviceEnvironment: {env}, priority: {priority}}}\n\
         quotaShares:\n  - quotaShareName: S\n    capacityLimits: [{{capacityUnit: ml.g5.xlarge, maxCapacity: 2}}]\n    resourceSharingConfiguration: {{strategy: RESERVE}}\n"
    );
    LogEntry::Config {
        queue: serde_yaml_ng::from_str(&text).expect("queue document"),
        revision,
        principal: None,
        operation: None,
    }
}

/// Two queues attached to the gpu-fleet environment (one RESERVE share
/// each), `hi` at priority 10, and node-1 joining it with two instances.
fn environment_inputs() -> Vec<LogEntry> {
    let queue = |name: &str, priority: u32| env_queue(name, "gpu-fleet", priority, 1);
    let join = LogEntry::Register(RegisterExecutor {
        executor_id: "node-1".into(),
        service_environment: Some("gpu-fleet".into()),
        instances: vec![ExecutorInstances {
            instance_type: "ml.g5.xlarge".into(),
            count: 2,
            gpus: vec![],
        }],
        incarnation: "a".into(),
        ..Default::default()
    });
    let sub = |id: &str, queue: &str| LogEntry::Submit {
        job_id: id.into(),
        job: SubmitServiceJob {
            job_queue: queue.into(),
            ..submit(id, "S", 1)
        },
        principal: None,
    };
    vec![
        // The executor joins before either queue exists.
        join,
        queue("lo", 0),
        queue("hi", 10),
        sub("l1", "lo"),
        sub("l2", "lo"),
        report("l1", 1, ReportPhase::Running, None),
        report("l2", 1, ReportPhase::Running, None),
        // hi's jobs wait: no queue preempts another's.
        sub("h1", "hi"),
        sub("l3", "lo"),
        // An instance frees: hi, served first, takes it, not lo's l3.
        report("l1", 1, ReportPhase::Ended, Some(0)),
        report("h1", 1, ReportPhase::Running, None),
    ]
}

#[test]
fn queues_of_one_environment_share_its_executors_by_priority() {
    let inputs = environment_inputs();
    let Live {
        state: leader, log, ..
    } = live(inputs[..9].to_vec());
    assert_eq!(leader.pass_order(), ["hi", "lo"]);
    assert_eq!(
        leader.describe("l1", 100_000).expect("l1").status,
        "RUNNING"
    );
    assert_eq!(
        leader.describe("l2", 100_000).expect("l2").status,
        "RUNNING"
    );
    let h1 = leader.describe("h1", 100_000).expect("h1");
    assert_eq!(h1.status, "RUNNABLE");
    assert!(
        h1.status_reason.starts_with(
            "WAITING_FOR_ENVIRONMENT_CAPACITY: other queues of its service environment hold 2"
        ),
        "{}",
        h1.status_reason
    );
    assert_eq!(
        leader.holders("hi", "ml.g5.xlarge"),
        ("gpu-fleet".to_string(), vec![("lo".to_string(), 0, 2)])
    );
    // describe names the holding queue to a reader who may read it, and
    // only the count to one who may not; other jobs get no tail.
    assert_eq!(
        leader.holders_of("h1", &|_| true).as_deref(),
        Some("in service environment gpu-fleet, queue lo (priority 0) holds 2")
    );
    assert_eq!(leader.holders_of("h1", &|q| q != "lo"), None);
    assert_eq!(leader.holders_of("l1", &|_| true), None);
    assert!(leader.stopping.is_empty(), "nothing was preempted");
    // Both queues hold node-1; its attempts are listed across them.
    assert_eq!(leader.expected_on("node-1").len(), 2);
    let mut replayed = State::default();
    assert!(replayed.replay(log, None).is_empty());
    assert_eq!(observable(&replayed), observable(&leader));

    let Live {
        state: leader, log, ..
    } = live(inputs.clone());
    assert_eq!(
        leader.describe("h1", 100_000).expect("h1").status,
        "RUNNING"
    );
    assert_eq!(
        leader.describe("l3", 100_000).expect("l3").status,
        "RUNNABLE"
    );
    let placed = |q: &str| leader.queues[q].cluster.placed_jobs();
    let (hi, lo) = (placed("hi"), placed("lo"));
    assert_eq!(hi.len() + lo.len(), 2, "{hi:?} {lo:?}");
    let mut replayed = State::default();
    assert!(replayed.replay(log, None).is_empty());
    assert_eq!(observable(&replayed), observable(&leader));
    // A snapshot keeps what each queue may use.
    let mut bytes = Vec::new();
    ciborium::into_writer(&leader, &mut bytes).expect("serialized");
    let mut loaded: State = ciborium::from_reader(&bytes[..]).expect("read");
    loaded.reconsider();
    assert_eq!(loaded, {
        let mut l = leader.clone();
        l.reconsider();
        l
    });

    // The executor is lost: both queues' attempts on it end HOST_LOST.
    let mut state = leader;
    state.apply(
        LogEntry::ExecutorLost {
            executor_id: "node-1".into(),
            incarnation: "a".into(),
            at: 90_000,
        },
        90_000,
    );
    for job in ["h1", "l2"] {
        let d = state.describe(job, 100_000).expect("job");
        assert_eq!(d.attempts[0].outcome.as_deref(), Some("HOST_LOST"), "{job}");
    }
}

#[test]
fn a_queues_environment_does_not_change_and_its_other_settings_keep_its_jobs_running() {
    let mut inputs = environment_inputs()[..7].to_vec();
    // A configuration naming another environment (admission refuses it;
    // one in the log anyway is not applied).
    inputs.push(env_queue("lo", "other", 0, 2));
    // Its priority changes; what runs goes on.
    inputs.push(env_queue("lo", "gpu-fleet", 500, 3));
    // A queue attached later sees at once what the others hold.
    inputs.push(env_queue("late", "gpu-fleet", 0, 1));
    let Live { state, log, .. } = live(inputs);
    assert_eq!(state.environment_of("lo").as_deref(), Some("gpu-fleet"));
    assert_eq!(
        state.pass_order(),
        ["lo", "hi", "late"],
        "lo's priority is 500 now"
    );
    for job in ["l1", "l2"] {
        let d = state.describe(job, 100_000).expect("job");
        assert_eq!(
            (d.status.as_str(), d.attempts.len()),
            ("RUNNING", 1),
            "{job}"
        );
    }
    let t = state.queues["hi"]
        .cluster
        .type_idx("ml.g5.xlarge")
        .expect("type");
    assert_eq!(state.queues["hi"].cluster.effective_fleet(t), 0);
    let late = &state.queues["late"].cluster;
    let t = late.type_idx("ml.g5.xlarge").expect("type");
    assert_eq!((late.effective_fleet(t), late.withheld_of(t)), (0, 2));
    let mut replayed = State::default();
    assert!(replayed.replay(log, None).is_empty());
    assert_eq!(observable(&replayed), observable(&state));
}

#[test]
fn an_executor_registered_for_a_queue_by_name_serves_it_whatever_its_environment() {
    let mut inputs = environment_inputs()[..3].to_vec();
    // node-2 was started for hi by name (as before environments existed).
    inputs.push(LogEntry::Register(RegisterExecutor {
        executor_id: "node-2".into(),
        job_queue: "hi".into(),
        instances: vec![ExecutorInstances {
            instance_type: "ml.g5.xlarge".into(),
            count: 1,
            gpus: vec![],
        }],
        incarnation: "a".into(),
        ..Default::default()
    }));
    let Live { state, .. } = live(inputs);
    let nodes = |q: &str| -> Vec<String> {
        state.queues[q]
            .cluster
            .nodes()
            .filter(|(_, n)| n.live)
            .map(|(_, n)| n.name.clone())
            .collect()
    };
    assert_eq!(nodes("hi"), ["node-1", "node-2"]);
    assert_eq!(nodes("lo"), ["node-1"]);
    let t = state.queues["hi"]
        .cluster
        .type_idx("ml.g5.xlarge")
        .expect("type");
    assert_eq!(state.queues["hi"].cluster.effective_fleet(t), 3);
}

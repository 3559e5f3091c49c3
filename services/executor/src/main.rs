//! `qm-executor`: one per node (or pool). Registers the node's instances and
//! GPUs, heartbeats, launches each attempt's process (argv, no shell) in its
//! own directory with `QM_JOB_ID`, `QM_ATTEMPT`, `QM_CHECKPOINT_DIR` and
//! `CUDA_VISIBLE_DEVICES`, captures its output, stops it (SIGTERM, grace,
//! SIGKILL) when told, and reports every transition durably.
//!
//! Before a launch the node's checkpoint service restores the job's latest
//! checkpoint into the attempt's directory; after the process exits it
//! flushes, and only then is the attempt reported ended.
//!
//! | file | what |
//! |---|---|
//! | `main.rs` | start-up: settings, connection, the command loop |
//! | `settings.rs` | settings and their checks |
//! | `node/` | the `Executor`: registration, heartbeats, lease epoch, reports, drain; its attempts (`attempts.rs`: start and stop commands, running an attempt, logs) and launches (`launch.rs`) |
//! | `runtime.rs` | what the two runtimes share: the launched attempt, signals, the container's environment |
//! | `process.rs` | the `process` runtime: spawning and signalling a process |
//! | `container/` | the `container` runtime: images through the Docker Engine API, guards, reconciling |
//! | `sagemaker.rs` | the `/opt/ml` contract and what ranks need to find each other |
//! | `gpus.rs` | GPU discovery and assignment |
//! | `outbox.rs` | reports (and ends) kept until the log stores them |
//!
//! The fence deadline every attempt's watcher enforces is `qm-fence`
//! (`fence` here); a host process's parent and watchdog is the small
//! `qm-supervise` binary (`services/supervise`). Layers: `tests/layers.rs`
//! (services/README.md).

mod container;
mod error;
mod gpus;
mod node;
mod observe;
mod outbox;
mod process;
mod record;
mod runtime;
mod sagemaker;
mod settings;
mod sweep;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use qm_service::nats;
use qm_wire::subjects;
use qm_wire::system::{ExecCommand, LogsRequest};
use tokio::sync::mpsc;
use tracing::Instrument;

use qm_fence as fence;

use node::{reporter, Executor};
use settings::{Settings, SPEC};

fn main() -> std::process::ExitCode {
    // `qm-executor guard ...`: a container's guard (container/guard.rs), started by
    // the executor itself; it needs no settings and no NATS.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("guard") {
        return container::guard(&args[2..]);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(rt) => rt.block_on(qm_service::main::<Settings, _, _>(&SPEC, run)),
        Err(e) => {
            eprintln!("qm-executor: cannot start the async runtime: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

async fn run(
    mut settings: Settings,
    nats_settings: qm_service::settings::NatsSettings,
    observe_settings: qm_service::settings::ObserveSettings,
) -> std::process::ExitCode {
    fill_defaults(&mut settings);
    let gpus = match gpus::assign(&settings.instances, settings.gpus.clone()) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("qm-executor: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&settings.work_dir) {
        eprintln!(
            "qm-executor: cannot create workDir {}: {e}",
            settings.work_dir
        );
        return std::process::ExitCode::from(2);
    }
    let (client, principal) = match qm_service::connect(&nats_settings, "executor").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let js = async_nats::jetstream::new(client.clone());
    let leader = nats::open_bucket(&js, subjects::LEADER_BUCKET).await;
    let (tx, rx) = mpsc::unbounded_channel();
    let report_subject = match subjects::log_executor(&settings.executor_id) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("qm-executor: executorId: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // Reports a previous run on this work directory could not deliver go
    // first, before registering ends that run's attempts HOST_LOST.
    let outbox = Arc::new(outbox::Outbox::new(
        &settings.work_dir,
        &settings.executor_id,
    ));
    let kept = outbox.load();
    if !kept.is_empty() {
        tracing::info!(reports = kept.len(), path = %outbox.path().display(), "delivering reports kept from the last shutdown");
        nats::append_batch_durably(
            &js,
            node::appends(&report_subject, kept, settings.batch_reports),
        )
        .await;
        outbox.clear_saved();
    }
    let supervisor = match open_supervisor(&settings).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let incarnation = qm_service::random_id();
    let engine = match open_engine(&settings, &incarnation).await {
        Ok(e) => e,
        Err(code) => return code,
    };
    // The deadline every attempt's watcher enforces starts as the
    // executor's own watchdog's does: fenceAfterSeconds from now.
    let fence = fence::Fence::new(&settings.work_dir, settings.fence_after_seconds);
    if let Err(e) = fence.renew(fence::boot_now_ns()) {
        eprintln!(
            "qm-executor: cannot write the fence deadline {}: {e}",
            fence.path().display()
        );
        return std::process::ExitCode::from(2);
    }
    let reporter = tokio::spawn(reporter(
        js,
        report_subject,
        rx,
        Arc::clone(&outbox),
        settings.batch_reports,
    ));
    let executor = Arc::new(Executor {
        incarnation,
        supervisor,
        engine,
        gpus,
        client: client.clone(),
        principal,
        attempts: Mutex::new(HashMap::new()),
        finished: Mutex::new(record::Ended::new(
            Duration::from_secs(settings.finished_retention_seconds),
            record::MOST,
        )),
        leader,
        epoch: Mutex::new(None),
        reports: tx,
        outbox: Arc::clone(&outbox),
        draining: std::sync::atomic::AtomicBool::new(false),
        contact: Mutex::new(tokio::time::Instant::now()),
        fenced: std::sync::atomic::AtomicBool::new(false),
        fence,
        settings,
    });
    let (Ok(mut commands), Ok(mut logs)) = (
        client
            .subscribe(
                subjects::executor_command(&executor.settings.executor_id).unwrap_or_default(),
            )
            .await,
        client
            .subscribe(subjects::executor_logs(&executor.settings.executor_id).unwrap_or_default())
            .await,
    ) else {
        eprintln!("qm-executor: cannot subscribe");
        return std::process::ExitCode::from(1);
    };
    let endpoint = endpoint(&executor, &client);
    std::sync::LazyLock::force(&observe::METRICS);
    if let Err(code) = qm_service::serve_metrics(&observe_settings, "executor", endpoint).await {
        return code;
    }
    executor.register(false).await;
    let beats = tokio::spawn(Arc::clone(&executor).heartbeats());
    let fence = tokio::spawn(Arc::clone(&executor).fence_watch());
    let sweeper = tokio::spawn(Arc::clone(&executor).sweep_attempt_dirs());
    tracing::info!(executor = %executor.settings.executor_id, incarnation = %executor.incarnation, "executor ready");
    let shutdown = nats::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            cmd = commands.next() => {
                let Some(cmd) = cmd else { break };
                // Handled in the span of the scheduler's trace it continues.
                let span = qm_service::trace::process_span("qm.v1.exec.{executor}.command", &cmd);
                async {
                    match serde_json::from_slice::<ExecCommand>(&cmd.payload) {
                        Ok(c) => executor.command(c).await,
                        Err(e) => tracing::warn!(error = %e, "unreadable command ignored"),
                    }
                }
                .instrument(span)
                .await;
            }
            req = logs.next() => {
                let Some(req) = req else { break };
                let r = qm_service::api::decode::<LogsRequest>(&req.payload)
                    .and_then(|l| executor.logs(&l).map_err(|e| qm_service::api::error(qm_wire::messages::ErrorCode::NotFound, e)));
                qm_service::api::respond(&client, &req, &r).await;
            }
        }
    }
    tracing::info!("shutting down: stopping attempts and withdrawing instances");
    executor.drain().await;
    executor.register(true).await;
    beats.abort();
    fence.abort();
    sweeper.abort();
    drop(executor);
    deliver_or_keep(&outbox, reporter).await;
    qm_service::within("NATS flush", Duration::from_secs(2), client.flush()).await;
    tracing::info!("executor stopped");
    std::process::ExitCode::SUCCESS
}

/// Settings left empty that default to the host's: the work folder, the
/// advertised address and the checkpoint service's node.
fn fill_defaults(settings: &mut Settings) {
    if settings.work_dir.is_empty() {
        settings.work_dir = qm_wire::paths::default_node_work_dir(&settings.executor_id);
    }
    if settings.advertise_address.is_empty() {
        settings.advertise_address = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| settings.executor_id.clone());
    }
    if settings.checkpoint_node.is_empty() {
        settings.checkpoint_node = settings.executor_id.clone();
    }
}

/// The process supervisor, where the executor offers the process runtime.
async fn open_supervisor(
    settings: &Settings,
) -> Result<Option<process::Supervisor>, std::process::ExitCode> {
    if !settings.offers(qm_core::Runtime::Process) {
        return Ok(None);
    }
    match process::Supervisor::open(&settings.supervisor).await {
        Ok(s) => Ok(Some(s)),
        Err(e) => {
            eprintln!("qm-executor: runtimes lists process, but {e}");
            Err(std::process::ExitCode::from(2))
        }
    }
}

/// The container engine, where the executor offers the container runtime,
/// with what an earlier run left behind removed.
async fn open_engine(
    settings: &Settings,
    incarnation: &str,
) -> Result<Option<Arc<container::Engine>>, std::process::ExitCode> {
    if !settings.offers(qm_core::Runtime::Container) {
        return Ok(None);
    }
    match container::Engine::connect(
        &settings.container,
        &settings.executor_id,
        incarnation,
        &settings.work_dir,
    )
    .await
    {
        Ok(engine) => {
            // What an earlier incarnation left running: its attempts
            // are ended HOST_LOST when this one registers.
            let removed = engine.reconcile(&|| Some(Default::default())).await;
            if removed > 0 {
                tracing::warn!(
                    removed,
                    "containers of an earlier run of this executor stopped and removed"
                );
            }
            Ok(Some(Arc::new(engine)))
        }
        Err(e) => {
            eprintln!("qm-executor: runtimes lists container, but {e}");
            Err(std::process::ExitCode::from(2))
        }
    }
}

/// The metrics endpoint: ready unless fenced, with the attempts gauges.
fn endpoint(
    executor: &Arc<Executor>,
    client: &async_nats::Client,
) -> qm_service::observe::Endpoint {
    let me = Arc::clone(executor);
    let ready = Box::new(move || {
        if me.fenced.load(std::sync::atomic::Ordering::SeqCst) {
            Err("fenced: no heartbeat acknowledged".to_string())
        } else {
            Ok(())
        }
    });
    let me = Arc::clone(executor);
    let gauges = Box::new(move || {
        let m = &*observe::METRICS;
        m.attempts
            .set(me.attempts.lock().map_or(0, |a| a.len() as i64));
        m.fenced.set(i64::from(
            me.fenced.load(std::sync::atomic::Ordering::SeqCst),
        ));
    });
    qm_service::observe::Endpoint::for_service("executor", client, ready).refresh(gauges)
}

/// Lets the reporter deliver what is queued; whatever NATS does not take
/// within 10 s is kept on disk for the next start.
async fn deliver_or_keep(outbox: &outbox::Outbox, reporter: tokio::task::JoinHandle<()>) {
    let delivered = async {
        while !outbox.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    qm_service::within("delivering reports", Duration::from_secs(10), delivered).await;
    reporter.abort();
    if !outbox.is_empty() {
        match outbox.persist() {
            Ok(n) => {
                tracing::warn!(reports = n, path = %outbox.path().display(), "NATS unreachable: reports kept on disk; they are delivered when this executor next starts")
            }
            Err(e) => {
                tracing::error!(path = %outbox.path().display(), error = %e, "reports could not be delivered nor saved")
            }
        }
    }
}

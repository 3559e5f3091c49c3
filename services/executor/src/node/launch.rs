//! The executor's side of launching an attempt: the fence terms its
//! watcher enforces, and the launch in the runtime the job needs
//! (`crate::runtime` holds what the two runtimes share).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::container::ContainerSpec;
use crate::error::LaunchError;
use crate::process::{self, Launch};
use crate::runtime::{container_environment, hand_over, resolve_hosts, Launched};
use crate::sagemaker::{self, ConfigFiles, Layout};

use super::Executor;

impl Executor {
    /// What the attempt's watcher enforces: the fence deadline now in
    /// force, the attempt's grace, where it records the end.
    pub(crate) fn fence_terms(&self, launch: &Launch, dir: &Path) -> qm_fence::Terms {
        qm_fence::Terms {
            deadline_file: self.fence.path().to_path_buf(),
            floor_ns: self.fence.deadline(),
            grace_seconds: launch.grace_seconds,
            record: qm_fence::exit_record(dir.parent().unwrap_or(dir), launch.attempt),
        }
    }

    /// Launches the attempt in its runtime: `dir` is its directory,
    /// `ckpt_dir` its (restored) checkpoint directory.
    pub(crate) async fn launch(
        &self,
        launch: &Launch,
        dir: &Path,
        ckpt_dir: &Path,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Result<Launched, LaunchError> {
        let Some(image) = &launch.image else {
            let Some(supervisor) = &self.supervisor else {
                return Err(LaunchError::NoRuntime("process"));
            };
            return process::spawn(
                supervisor,
                launch,
                dir,
                ckpt_dir,
                &self.fence_terms(launch, dir),
            )
            .await
            .map(Launched::Process);
        };
        let Some(engine) = &self.engine else {
            return Err(LaunchError::NoRuntime("container"));
        };
        engine.ensure_image(image, progress).await?;
        let layout = Layout::new(dir);
        let config = ConfigFiles::new(
            launch.environment.get("SM_HPS").map(String::as_str),
            launch.rank,
            launch.hosts.len(),
            &self.settings.container.network_interface_name,
            &launch.input_channels,
        )?;
        layout.prepare(&config)?;
        // Before the container starts, and before RUNNING: a download is
        // never counted as lost work.
        self.download_inputs(launch, &layout.data(), progress)
            .await?;
        let inside_checkpoints = match &launch.local_path {
            Some(p) => format!("/{}", p.trim_start_matches('/').trim_end_matches('/')),
            None => sagemaker::CONTAINER_CHECKPOINTS.to_string(),
        };
        let nodes = launch.hosts.len().max(1);
        let hosts = resolve_hosts(&launch.hosts).await?;
        let environment = container_environment(launch, nodes, &inside_checkpoints);
        let spec = self
            .settings
            .instances
            .iter()
            .find(|i| i.instance_type == launch.instance_type);
        let instances = f64::from(launch.instances.max(1));
        let cpus = spec.and_then(|s| s.cpus).map(|c| c * instances);
        let memory_mib = spec
            .and_then(|s| s.memory_mib)
            .map(|m| m * u64::from(launch.instances.max(1)));
        let spec = ContainerSpec {
            fence: self.fence_terms(launch, dir),
            job_id: launch.job_id.clone(),
            attempt: launch.attempt,
            image: image.clone(),
            command: launch.command.clone(),
            environment,
            mounts: vec![
                (layout.input.clone(), "/opt/ml/input".into(), false),
                (layout.model.clone(), "/opt/ml/model".into(), true),
                (layout.output.clone(), "/opt/ml/output".into(), true),
                (ckpt_dir.to_path_buf(), inside_checkpoints, true),
            ],
            hosts,
            gpus: launch.gpus.clone(),
            cpus,
            memory_mib,
            user: None,
            // The share's policy: never root (the executor's runAsUser, or
            // nobody, when the image would run as root).
            non_root: launch.run_as_non_root.then(|| {
                let (uid, gid) = self
                    .settings
                    .run_as_user
                    .zip(self.settings.run_as_group)
                    .unwrap_or((65_534, 65_534));
                format!("{uid}:{gid}")
            }),
        };
        let writable: Vec<PathBuf> = vec![
            layout.model.clone(),
            layout.output.clone(),
            layout.output.join("data"),
            ckpt_dir.to_path_buf(),
        ];
        // Creating and starting the container is never cut short: a stop
        // that arrives meanwhile is obeyed once it runs (by wait_or_stop),
        // and should the attempt be dropped anyway, dropping its Running
        // removes the container.
        let (engine, dir) = (Arc::clone(engine), dir.to_path_buf());
        let running = tokio::spawn(async move {
            let hand_over = Arc::new(move |ids: Option<(u32, u32)>| hand_over(&writable, ids));
            engine.launch(spec, &dir, hand_over).await
        })
        .await
        .map_err(|e| LaunchError::Container(format!("the launch ended early: {e}")))??;
        Ok(Launched::Container {
            running,
            layout,
            memory_mib,
        })
    }
}

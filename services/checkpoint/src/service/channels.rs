//! A container attempt's data channels: its inputs downloaded before it
//! starts, its outputs uploaded when it succeeds.

use qm_service::api;
use qm_wire::messages::ApiError;
use qm_wire::system::{CheckpointReply, CheckpointRequest};

use crate::{failed, Service};

impl Service {
    /// Downloads an input channel into `dir` (the attempt's empty
    /// `ml/input/data/<channel>`): every object under `s3Uri`, or this
    /// node's part of it (`shard`), where the share may read
    /// (`qm_checkpoint::input`).
    pub(crate) async fn input(&self, req: CheckpointRequest) -> Result<CheckpointReply, ApiError> {
        let Some(uri) = req.s3_uri.clone() else {
            return Err(api::invalid(
                "s3Uri: the channel's S3 URI is required",
                vec![],
            ));
        };
        let target = self.target_for(&req, true).await?;
        // The channel is the folder the URI names: every key under
        // `<prefix>/`, the very prefix the share's rule was checked
        // against (a listing of the raw path would also match a sibling
        // `<prefix>-other/` the share may not read).
        let prefix = qm_wire::messages::parse_s3_uri(&uri)
            .map(|u| qm_checkpoint::input::channel_folder(&u.prefix))
            .map_err(|e| api::invalid(format!("s3Uri: {e}"), vec![]))?;
        let (sharded, rank, nodes) = match req.shard {
            Some(s) => (true, s.rank, s.nodes.max(1)),
            None => (false, 0, 1),
        };
        let progress = qm_checkpoint::Progress::default();
        let started = std::time::Instant::now();
        let got = qm_checkpoint::input::download(
            &target.store,
            &prefix,
            &target.dir,
            sharded,
            rank,
            nodes,
            &progress,
        )
        .await
        .map_err(|e| failed("input download failed", e))?;
        tracing::info!(job = %req.job_id, attempt = req.attempt, channel = %target.dir.display(), files = got.files, bytes = got.bytes, seconds = started.elapsed().as_secs_f64(), "input channel downloaded");
        Ok(CheckpointReply {
            progress: Some(qm_wire::system::TransferProgress {
                bytes_moved: got.bytes,
                bytes_total: got.bytes,
            }),
            ..Default::default()
        })
    }

    /// Uploads a succeeded container attempt's outputs: `dir` is its `ml`
    /// folder, `s3Uri` its `outputDataConfig.s3OutputPath` (where the
    /// share may write, as checkpoints): `model/` becomes
    /// `<prefix>/<jobId>/output/model.tar.gz`, `output/data/`
    /// `output.tar.gz` (`qm_checkpoint::output`).
    pub(crate) async fn output(&self, req: CheckpointRequest) -> Result<CheckpointReply, ApiError> {
        if req.s3_uri.is_none() {
            return Err(api::invalid("s3Uri: the output path is required", vec![]));
        }
        let target = self.target(&req).await?;
        let mut folders = Vec::new();
        for (folder, object) in [("model", "model.tar.gz"), ("output/data", "output.tar.gz")] {
            let path = target.dir.join(folder);
            // The job wrote these folders: one swapped for a link is not
            // followed out of the attempt's directory.
            if let Ok(meta) = std::fs::symlink_metadata(&path) {
                if !meta.is_dir() {
                    return Err(api::invalid(
                        format!("{folder}: is not a directory (a link is never followed)"),
                        vec![],
                    ));
                }
            }
            folders.push((path, object));
        }
        let scratch = target.dir.parent().unwrap_or(&target.dir).to_path_buf();
        let started = std::time::Instant::now();
        let uploaded = qm_checkpoint::output::upload(
            &target.store,
            &target.prefix,
            &req.job_id,
            &folders,
            &scratch,
        )
        .await
        .map_err(|e| failed("output upload failed", e))?;
        for (key, bytes) in &uploaded {
            tracing::info!(job = %req.job_id, attempt = req.attempt, key, bytes, seconds = started.elapsed().as_secs_f64(), "output uploaded");
        }
        Ok(CheckpointReply::default())
    }
}

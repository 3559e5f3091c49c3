//! A training job's outputs, as SageMaker delivers them: `/opt/ml/model` as
//! `<S3OutputPath>/<job>/output/model.tar.gz` and `/opt/ml/output/data` as
//! `<S3OutputPath>/<job>/output/output.tar.gz`.
//!
//! Each folder is written as a gzip-compressed tar file to a scratch file
//! beside it (streamed: memory stays bounded whatever the model's size),
//! then uploaded with [`ObjectStore::put_file`] (multipart above the
//! store's threshold) and removed. Links are archived as links, never
//! followed, and every file is opened without following a link, so a job
//! cannot make the uploader read a file of the node; only regular files,
//! folders and links are archived.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::store::ObjectStore;
use crate::sync::SyncError;

/// What was uploaded: (object key, bytes) per archive.
pub type Uploaded = Vec<(String, u64)>;

fn local(path: &Path) -> impl Fn(std::io::Error) -> SyncError + '_ {
    move |error| SyncError::Local {
        path: path.to_path_buf(),
        error,
    }
}

/// Writes `dir`'s contents as a `.tar.gz` to `dest`; returns its size.
pub fn archive(dir: &Path, dest: &Path) -> Result<u64, SyncError> {
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)
        .map_err(local(dest))?;
    let gz =
        flate2::write::GzEncoder::new(std::io::BufWriter::new(file), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    tar.follow_symlinks(false);
    tar.mode(tar::HeaderMode::Deterministic);
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        let here = dir.join(&relative);
        let mut entries: Vec<fs::DirEntry> = fs::read_dir(&here)
            .map_err(local(&here))?
            .collect::<Result<_, _>>()
            .map_err(local(&here))?;
        entries.sort_by_key(fs::DirEntry::file_name);
        for entry in entries {
            let name = relative.join(entry.file_name());
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).map_err(local(&path))?;
            let kind = meta.file_type();
            if kind.is_dir() {
                tar.append_dir(&name, &path).map_err(local(&path))?;
                stack.push(name);
            } else if kind.is_symlink() {
                let target = fs::read_link(&path).map_err(local(&path))?;
                let mut header = tar::Header::new_gnu();
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                header.set_mode(0o777);
                tar.append_link(&mut header, &name, &target)
                    .map_err(local(&path))?;
            } else if kind.is_file() {
                // O_NOFOLLOW: a file swapped for a link since it was listed
                // is refused, not followed.
                let mut f = fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(local(&path))?;
                let opened = f.metadata().map_err(local(&path))?;
                if !opened.is_file() {
                    continue;
                }
                let mut header = tar::Header::new_gnu();
                header.set_metadata_in_mode(&opened, tar::HeaderMode::Deterministic);
                tar.append_data(&mut header, &name, &mut f)
                    .map_err(local(&path))?;
            }
        }
    }
    let gz = tar.into_inner().map_err(local(dest))?;
    let mut out = gz.finish().map_err(local(dest))?;
    out.flush().map_err(local(dest))?;
    drop(out);
    Ok(fs::metadata(dest).map_err(local(dest))?.len())
}

/// Archives each `(folder, object name)` under `ml_dir` and uploads it to
/// `<prefix>/<job_id>/output/<object name>`, through a scratch file in
/// `scratch`. A folder that does not exist is archived empty (SageMaker
/// always delivers `model.tar.gz`).
pub async fn upload<S: ObjectStore>(
    store: &S,
    prefix: &str,
    job_id: &str,
    folders: &[(PathBuf, &str)],
    scratch: &Path,
) -> Result<Uploaded, SyncError> {
    let mut uploaded = Vec::new();
    for (folder, object) in folders {
        let key = format!(
            "{}{job_id}/output/{object}",
            if prefix.is_empty() {
                String::new()
            } else {
                format!("{}/", prefix.trim_end_matches('/'))
            }
        );
        // Its own name: a second request for the same job (a retry while
        // the first still runs) never writes into this one's file.
        let unique = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let file = scratch.join(format!(".qm-output-{job_id}-{object}-{unique}"));
        let (dir, dest) = (folder.clone(), file.clone());
        let size = tokio::task::spawn_blocking(move || {
            if !dir.exists() {
                fs::create_dir_all(&dir).map_err(local(&dir))?;
            }
            archive(&dir, &dest)
        })
        .await
        .map_err(|e| SyncError::Local {
            path: file.clone(),
            error: std::io::Error::other(e.to_string()),
        })??;
        let put = store.put_file(&key, &file, size).await;
        let _ = fs::remove_file(&file);
        put?;
        uploaded.push((key, size));
    }
    Ok(uploaded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qm-output-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch");
        dir
    }

    #[test]
    fn a_folder_becomes_a_tar_gz_with_links_kept_as_links() {
        let root = scratch("archive");
        let model = root.join("model");
        fs::create_dir_all(model.join("sub")).expect("dirs");
        fs::write(model.join("weights.bin"), vec![7u8; 100_000]).expect("write");
        fs::write(model.join("sub/config.json"), b"{\"a\":1}").expect("write");
        std::os::unix::fs::symlink("/etc/hostname", model.join("leak")).expect("link");
        let dest = root.join("model.tar.gz");
        let size = archive(&model, &dest).expect("archived");
        assert_eq!(size, fs::metadata(&dest).expect("file").len());
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(
            fs::File::open(&dest).expect("open"),
        ));
        let mut seen = Vec::new();
        for entry in tar.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let path = entry.path().expect("path").display().to_string();
            let kind = entry.header().entry_type();
            let mut body = Vec::new();
            entry.read_to_end(&mut body).expect("read");
            if path == "leak" {
                assert_eq!(kind, tar::EntryType::Symlink);
                assert!(body.is_empty(), "a link's target is never read");
            }
            if path == "weights.bin" {
                assert_eq!(body, vec![7u8; 100_000]);
            }
            seen.push(path);
        }
        seen.sort();
        assert_eq!(seen, ["leak", "sub", "sub/config.json", "weights.bin"]);
        let _ = fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn outputs_go_to_the_job_s_output_folder_and_the_scratch_file_is_removed() {
        let root = scratch("upload");
        fs::create_dir_all(root.join("model")).expect("dir");
        fs::write(root.join("model/m.pt"), b"weights").expect("write");
        let store = crate::MemoryStore::new();
        let uploaded = upload(
            &store,
            "models/run-1",
            "job-7",
            &[
                (root.join("model"), "model.tar.gz"),
                (root.join("output/data"), "output.tar.gz"),
            ],
            &root,
        )
        .await
        .expect("uploaded");
        let keys: Vec<&str> = uploaded.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "models/run-1/job-7/output/model.tar.gz",
                "models/run-1/job-7/output/output.tar.gz"
            ]
        );
        assert!(store
            .get("models/run-1/job-7/output/model.tar.gz")
            .await
            .expect("get")
            .is_some());
        let left: Vec<_> = fs::read_dir(&root)
            .expect("read")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(".qm-output"))
            .collect();
        assert!(left.is_empty());
        let _ = fs::remove_dir_all(&root);
    }
}

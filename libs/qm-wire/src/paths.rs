//! Paths that name something inside a directory: a checkpoint manifest's
//! file paths, a job's `checkpointConfig.localPath`, an S3 key prefix; and
//! the conventions the executor and the checkpoint service of a node share.

use std::path::{Component, Path};

/// Whether `path` stays inside the directory it is relative to: relative,
/// `/`-separated, no `..`, no root or prefix, no empty or `.` components,
/// no `\` or NUL.
pub fn safe_relative_path(path: &str) -> bool {
    if path.is_empty() || path.contains('\\') || path.contains('\0') {
        return false;
    }
    let p = Path::new(path);
    !p.is_absolute()
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// A node's work directory when its settings name none: the executor
/// `node` keeps its attempts there, and the checkpoint service serving
/// `node` syncs from there (both default to the same place).
pub fn default_node_work_dir(node: &str) -> String {
    format!("/tmp/qm-executor-{node}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_leave_the_directory_are_unsafe() {
        for ok in ["model.pt", "opt/state.bin", "a/b/c"] {
            assert!(safe_relative_path(ok), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a/./b",
            "a\\b",
            "..",
            "a/..",
        ] {
            assert!(!safe_relative_path(bad), "{bad}");
        }
    }
}

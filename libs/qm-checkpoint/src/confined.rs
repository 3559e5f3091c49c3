//! Reading a directory that a job may change while it is read, without
//! ever following a symbolic link (issue 28).
//!
//! A checkpoint (or output) directory belongs to the job: between the
//! moment a path is checked and the moment it is opened, the job can swap
//! any directory on the way, or the file itself, for a link to anything the
//! reader may read. So nothing here opens a path whole. The directory is
//! opened one component at a time from `/`, each with `O_NOFOLLOW`; every
//! listing and every open is relative to a directory already open
//! (`openat`), again with `O_NOFOLLOW`, and a file is read only if what was
//! opened is a regular file (`O_NONBLOCK`, so a FIFO swapped in cannot hold
//! the reader). A link anywhere fails the open: it is never followed.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{openat, statat, AtFlags, FileType, Mode, OFlags, CWD};

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

const FILE_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::CLOEXEC);

/// A directory opened without following a link.
pub struct Tree {
    root: OwnedFd,
    path: PathBuf,
}

/// A visible regular file below a [`Tree`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Visible {
    /// Relative, `/`-separated.
    pub rel: String,
    pub ino: u64,
    pub size: u64,
    pub mtime: i64,
    pub mtime_nsec: i64,
}

fn err(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// Why an open failed: a link in the way reads as such.
fn open_error(path: &Path, e: rustix::io::Errno) -> io::Error {
    if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is or goes through a symbolic link (or something not a directory): refused",
                path.display()
            ),
        )
    } else {
        err(e)
    }
}

impl Tree {
    /// Opens absolute `dir`, refusing a symbolic link at any component.
    pub fn open(dir: &Path) -> io::Result<Tree> {
        if !dir.is_absolute() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not absolute", dir.display()),
            ));
        }
        let mut fd = openat(CWD, "/", DIR_FLAGS, Mode::empty()).map_err(err)?;
        for c in dir.components() {
            match c {
                Component::RootDir => {}
                Component::Normal(name) => {
                    fd = openat(&fd, name, DIR_FLAGS, Mode::empty())
                        .map_err(|e| open_error(dir, e))?;
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{} has '.' or '..'", dir.display()),
                    ))
                }
            }
        }
        Ok(Tree {
            root: fd,
            path: dir.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every visible (no component starting with `.`) regular file below,
    /// sorted by relative path. Links, FIFOs, sockets and devices are left
    /// out; directories are entered only through `O_NOFOLLOW` opens.
    pub fn files(&self) -> io::Result<Vec<Visible>> {
        let mut out = Vec::new();
        let mut stack: Vec<(String, OwnedFd)> = vec![(
            String::new(),
            self.root
                .try_clone()
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))?,
        )];
        while let Some((prefix, dir)) = stack.pop() {
            let listing = rustix::fs::Dir::read_from(&dir).map_err(err)?;
            for entry in listing {
                let entry = entry.map_err(err)?;
                let name = OsStr::from_bytes(entry.file_name().to_bytes());
                if name.as_bytes().first() == Some(&b'.') {
                    continue; // `.`, `..` and work in progress
                }
                let rel = if prefix.is_empty() {
                    name.to_string_lossy().into_owned()
                } else {
                    format!("{prefix}/{}", name.to_string_lossy())
                };
                let st = match statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => st,
                    // Removed since it was listed.
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(e) => return Err(err(e)),
                };
                match FileType::from_raw_mode(st.st_mode) {
                    FileType::Directory => match openat(&dir, name, DIR_FLAGS, Mode::empty()) {
                        Ok(sub) => stack.push((rel, sub)),
                        // Swapped for a link or removed since: not ours
                        // to read.
                        Err(rustix::io::Errno::NOENT)
                        | Err(rustix::io::Errno::LOOP)
                        | Err(rustix::io::Errno::NOTDIR) => {}
                        Err(e) => return Err(err(e)),
                    },
                    FileType::RegularFile => out.push(Visible {
                        rel,
                        ino: st.st_ino,
                        size: st.st_size as u64,
                        mtime: st.st_mtime,
                        mtime_nsec: st.st_mtime_nsec as i64,
                    }),
                    _ => {}
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Opens relative `rel` for reading: each directory on the way and the
    /// file itself without following a link, and only if it is a regular
    /// file now.
    pub fn open_file(&self, rel: &str) -> io::Result<std::fs::File> {
        let full = self.path.join(rel);
        let mut parts: Vec<&str> = rel.split('/').collect();
        let name = parts.pop().unwrap_or_default();
        if name.is_empty()
            || parts
                .iter()
                .chain(std::iter::once(&name))
                .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{rel:?} is not a plain relative path"),
            ));
        }
        let mut dir: Option<OwnedFd> = None;
        for p in parts {
            let base = dir.as_ref().map_or(self.root.as_fd(), AsFd::as_fd);
            dir =
                Some(openat(base, p, DIR_FLAGS, Mode::empty()).map_err(|e| open_error(&full, e))?);
        }
        let base = dir.as_ref().map_or(self.root.as_fd(), AsFd::as_fd);
        let fd = openat(base, name, FILE_FLAGS, Mode::empty()).map_err(|e| open_error(&full, e))?;
        let st = rustix::fs::fstat(&fd).map_err(err)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file: refused", full.display()),
            ));
        }
        // Reads block as usual from here (O_NONBLOCK only kept the open
        // from waiting on a FIFO).
        rustix::fs::fcntl_setfl(&fd, OFlags::empty()).map_err(err)?;
        Ok(std::fs::File::from(fd))
    }
}

/// A path that opens the very file `file` is (`/proc/self/fd/N`), whatever
/// has happened to the path it was opened by since: for readers that take
/// a path (the S3 SDK streams a part from a path and an offset). Valid as
/// long as `file` is open.
pub fn path_of(file: &std::fs::File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qm-confined-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ckpt/sub")).expect("dirs");
        std::fs::write(dir.join("ckpt/a"), b"A").expect("a");
        std::fs::write(dir.join("ckpt/sub/b"), b"BB").expect("b");
        std::fs::write(dir.join("ckpt/.hidden"), b"h").expect("h");
        std::fs::create_dir_all(dir.join("secret")).expect("secret");
        std::fs::write(dir.join("secret/b"), b"SECRET").expect("s");
        dir
    }

    #[test]
    fn lists_and_opens_regular_files_and_nothing_through_a_link() {
        let dir = scratch("links");
        let ckpt = dir.join("ckpt");
        std::os::unix::fs::symlink(dir.join("secret/b"), ckpt.join("leak")).expect("link");
        std::os::unix::fs::symlink(dir.join("secret"), ckpt.join("leakdir")).expect("link");
        let tree = Tree::open(&ckpt).expect("opened");
        let rels: Vec<String> = tree
            .files()
            .expect("listed")
            .into_iter()
            .map(|v| v.rel)
            .collect();
        assert_eq!(rels, ["a", "sub/b"], "links and hidden files left out");
        let mut s = String::new();
        tree.open_file("sub/b")
            .expect("opened")
            .read_to_string(&mut s)
            .expect("read");
        assert_eq!(s, "BB");
        for rel in ["leak", "leakdir/b", "../secret/b", "sub/../a", "/a"] {
            assert!(tree.open_file(rel).is_err(), "{rel} must be refused");
        }
        // The directory on the way is swapped for a link after the tree was
        // listed: its file is not read through it.
        std::fs::remove_dir_all(ckpt.join("sub")).expect("rm");
        std::os::unix::fs::symlink(dir.join("secret"), ckpt.join("sub")).expect("swap");
        assert!(
            tree.open_file("sub/b").is_err(),
            "the swapped directory is not followed"
        );
        // The checkpoint directory itself swapped for a link: refused.
        let moved = dir.join("moved");
        std::fs::rename(&ckpt, &moved).expect("mv");
        std::os::unix::fs::symlink(dir.join("secret"), &ckpt).expect("swap root");
        assert!(Tree::open(&ckpt).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fifo_is_neither_listed_nor_waited_on() {
        let dir = scratch("fifo");
        let ckpt = dir.join("ckpt");
        let fifo = ckpt.join("pipe");
        rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0)
            .expect("fifo");
        let tree = Tree::open(&ckpt).expect("opened");
        assert!(!tree
            .files()
            .expect("listed")
            .iter()
            .any(|v| v.rel == "pipe"));
        let refused = tree.open_file("pipe").expect_err("not a regular file");
        assert!(
            refused.to_string().contains("not a regular file"),
            "{refused}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_proc_fd_path_reads_the_opened_file_even_after_a_swap() {
        let dir = scratch("procfd");
        let ckpt = dir.join("ckpt");
        let tree = Tree::open(&ckpt).expect("opened");
        let file = tree.open_file("a").expect("a");
        std::fs::remove_file(ckpt.join("a")).expect("rm");
        std::os::unix::fs::symlink(dir.join("secret/b"), ckpt.join("a")).expect("swap");
        assert_eq!(std::fs::read(path_of(&file)).expect("read"), b"A");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

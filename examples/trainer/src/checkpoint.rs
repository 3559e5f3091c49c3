//! The trainer's checkpoint: its whole state in one file, written atomically
//! (temporary file, fsync, rename, fsync of the directory), so a crash at any
//! moment leaves either the previous checkpoint or the new one, never half of
//! one. A SHA-256 of the contents is stored with them and verified on load.
//!
//! Layout (little-endian): magic `QMTRAIN1`, step u64, rng u64, parameter
//! count u64, parameters f64s, velocities f64s, then 32 bytes of SHA-256 over
//! everything before them.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::model::{Rng, State, PARAMS};

const MAGIC: &[u8; 8] = b"QMTRAIN1";
pub const FILE: &str = "trainer-state.bin";

/// Why a checkpoint could not be read or written.
#[derive(Debug)]
pub enum CheckpointError {
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    Corrupt {
        path: PathBuf,
        why: String,
    },
}

impl std::fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckpointError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            CheckpointError::Corrupt { path, why } => write!(
                f,
                "{}: not a valid trainer checkpoint ({why}); refusing to overwrite it - move it away to start over",
                path.display()
            ),
        }
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> CheckpointError + '_ {
    move |error| CheckpointError::Io {
        path: path.to_path_buf(),
        error,
    }
}

pub fn encode(state: &State) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 24 + 16 * PARAMS + 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&state.step.to_le_bytes());
    out.extend_from_slice(&state.rng.0.to_le_bytes());
    out.extend_from_slice(&(state.params.len() as u64).to_le_bytes());
    for v in state.params.iter().chain(&state.velocity) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

pub fn decode(bytes: &[u8], path: &Path) -> Result<State, CheckpointError> {
    let corrupt = |why: &str| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        why: why.into(),
    };
    if bytes.len() < 8 + 24 + 32 || &bytes[..8] != MAGIC {
        return Err(corrupt("bad header"));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != sum {
        return Err(corrupt("checksum mismatch"));
    }
    let word =
        |i: usize| u64::from_le_bytes(body[8 + 8 * i..16 + 8 * i].try_into().expect("8 bytes"));
    let (step, rng, n) = (word(0), word(1), word(2) as usize);
    if n != PARAMS || body.len() != 32 + 16 * n {
        return Err(corrupt("parameter count does not match this model"));
    }
    let floats: Vec<f64> = body[32..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let (params, velocity) = floats.split_at(n);
    Ok(State {
        step,
        rng: Rng(rng),
        params: params.to_vec(),
        velocity: velocity.to_vec(),
    })
}

/// Loads the checkpoint in `dir`, if there is one.
pub fn load(dir: &Path) -> Result<Option<State>, CheckpointError> {
    let path = dir.join(FILE);
    match fs::read(&path) {
        Ok(bytes) => decode(&bytes, &path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(&path)(e)),
    }
}

/// Writes `state` into `dir` atomically.
/// The file the checkpoint service reads the step from.
pub const STEP_FILE: &str = "qm-checkpoint.json";

pub fn save(dir: &Path, state: &State) -> Result<(), CheckpointError> {
    fs::create_dir_all(dir).map_err(io(dir))?;
    write_atomically(dir, FILE, &encode(state))?;
    // The step, for the checkpoint service's manifest (informational).
    let step = format!("{{\"step\": {}}}\n", state.step);
    write_atomically(dir, STEP_FILE, step.as_bytes())?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
}

/// Writes `name` in `dir` as a dot-file, syncs it, then renames it: readers
/// (and the checkpoint service, which skips dot-files) never see half a file.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), CheckpointError> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut file = File::create(&tmp).map_err(io(&tmp))?;
    file.write_all(bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    fs::rename(&tmp, &path).map_err(io(&path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_round_trips_bit_exactly() {
        let mut state = State::initial(3);
        let data = crate::model::Data::generate(3);
        for _ in 0..5 {
            state.train_step(&data);
        }
        let bytes = encode(&state);
        assert_eq!(decode(&bytes, Path::new("x")).expect("valid"), state);
    }

    #[test]
    fn a_damaged_checkpoint_is_refused() {
        let mut bytes = encode(&State::initial(3));
        let n = bytes.len();
        bytes[n / 2] ^= 1;
        let err = decode(&bytes, Path::new("ck")).expect_err("damaged");
        assert!(err.to_string().contains("checksum mismatch"), "{err}");
        assert!(decode(b"short", Path::new("ck")).is_err());
    }
}

//! Snapshots of the leader's state, so that a new leader reads only the log
//! written since, and the log can be truncated behind them.
//!
//! A snapshot is one object in the `qm_snapshots` object store, named by
//! its cut (`snapshot-<after>-<sched>`, zero-padded so names sort like
//! cuts). Its bytes are a header line (JSON) and a body (CBOR; from format
//! 2, zstd-compressed CBOR, `"compression":"zstd"`):
//!
//! ```text
//! {"format":2,"cut":{...},"positions":[a,b,i],"bodyBytes":N,"sha256":"...","compression":"zstd"}\n
//! <N bytes: the state, CBOR, compressed>
//! ```
//!
//! Compressed because size is what a snapshot costs the system: the fleet
//! benchmark's 65 MB snapshots (100,000 jobs) took 7-10 s to store and held
//! up every other JetStream write meanwhile; CBOR's repeated field names
//! and values compress several times over.
//!
//! A snapshot whose header cannot be read, whose body has another length
//! or checksum, or whose body does not decode is *damaged*: a new leader
//! says so and uses the one before it (the leader keeps two and truncates
//! the log only behind the older one, so the log still holds what follows
//! either).
//!
//! Compatibility across versions (see ADR 0010): the body is the state's
//! own serde form, self-describing (CBOR keeps field names), so a field
//! added with `#[serde(default)]` reads old snapshots as they are. A change
//! that old snapshots cannot be read into bumps [`FORMAT`]; a scheduler
//! refuses a format newer than its own (it stands by rather than lead with
//! a state it cannot read), and a release that bumps it first ships able to
//! read both, writing the old one, like Garage's versioned types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::state::{Cut, Positions, State};

/// The snapshot format this scheduler writes and the newest it reads:
/// 1, a CBOR body; 2, a body compressed as `compression` says; 3, the
/// state with its usage ledger (a format 2 snapshot reads with an empty
/// ledger, which counts from then on). An older reader refuses a newer
/// format rather than misread it.
pub const FORMAT: u32 = 3;

/// The body's compression in the snapshots this scheduler writes.
const COMPRESSION: &str = "zstd";
/// zstd's level: fast (hundreds of MB/s) at a good ratio.
const ZSTD_LEVEL: i32 = 3;

/// What a snapshot holds besides the state's cut: enough to continue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    pub format: u32,
    pub cut: Cut,
    /// Where event numbering continues after the cut.
    pub positions: Positions,
    /// When it was taken (ms since the Unix epoch) and by which leader.
    pub taken_at: u64,
    pub holder: String,
    /// Jobs it holds (said when a leader loads it).
    pub jobs: u64,
    pub body_bytes: u64,
    pub sha256: String,
    /// How the body is compressed (format 2); absent: plain CBOR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
}

/// The body: the state, and each live job's place in its trace (W3C
/// `traceparent`), so a job keeps one trace across leaders.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Image {
    pub state: State,
    #[serde(default)]
    pub traces: BTreeMap<String, String>,
}

/// Why a stored snapshot cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Damage {
    #[error("no header line")]
    NoHeader,
    #[error("unreadable header: {0}")]
    Header(String),
    #[error("format {found} is newer than this scheduler reads ({FORMAT}); upgrade it")]
    Newer { found: u32 },
    #[error("the body has {found} bytes, the header says {expected}")]
    Length { found: u64, expected: u64 },
    #[error("the body's checksum does not match its header's")]
    Checksum,
    #[error("unreadable body: {0}")]
    Body(String),
}

/// The object name of a snapshot at `cut`.
pub fn name(cut: Cut) -> String {
    format!("snapshot-{:020}-{:020}", cut.after, cut.sched)
}

/// The cut of a snapshot's object name (None: not a snapshot's name).
pub fn cut_of(name: &str) -> Option<Cut> {
    let rest = name.strip_prefix("snapshot-")?;
    let (after, sched) = rest.split_once('-')?;
    Some(Cut {
        after: after.parse().ok()?,
        sched: sched.parse().ok()?,
    })
}

/// Encodes a snapshot of `image` at `cut`.
pub fn encode(
    image: &Image,
    cut: Cut,
    positions: Positions,
    taken_at: u64,
    holder: &str,
) -> Vec<u8> {
    let mut encoder = zstd::stream::Encoder::new(Vec::new(), ZSTD_LEVEL).expect("a zstd encoder");
    ciborium::into_writer(image, &mut encoder).expect("the state serializes");
    let body = encoder.finish().expect("compressed in memory");
    let header = Header {
        format: FORMAT,
        cut,
        positions,
        taken_at,
        holder: holder.to_string(),
        jobs: image
            .state
            .queues
            .values()
            .map(|q| q.meta.len() as u64)
            .sum(),
        body_bytes: body.len() as u64,
        sha256: hex::encode(Sha256::digest(&body)),
        compression: Some(COMPRESSION.into()),
    };
    let mut out = serde_json::to_vec(&header).expect("the header serializes");
    out.push(b'\n');
    out.extend_from_slice(&body);
    out
}

/// Splits the header off the body and reads it.
fn header(bytes: &[u8]) -> Result<(Header, &[u8]), Damage> {
    let end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or(Damage::NoHeader)?;
    let header: Header =
        serde_json::from_slice(&bytes[..end]).map_err(|e| Damage::Header(e.to_string()))?;
    if header.format > FORMAT {
        return Err(Damage::Newer {
            found: header.format,
        });
    }
    Ok((header, &bytes[end + 1..]))
}

/// Decodes a snapshot, checking its length and checksum first.
pub fn decode(bytes: &[u8]) -> Result<(Header, Image), Damage> {
    let (header, body) = header(bytes)?;
    if body.len() as u64 != header.body_bytes {
        return Err(Damage::Length {
            found: body.len() as u64,
            expected: header.body_bytes,
        });
    }
    if hex::encode(Sha256::digest(body)) != header.sha256 {
        return Err(Damage::Checksum);
    }
    let image: Image = match header.compression.as_deref() {
        None => ciborium::from_reader(body),
        Some("zstd") => {
            let decoder =
                zstd::stream::Decoder::new(body).map_err(|e| Damage::Body(format!("zstd: {e}")))?;
            ciborium::from_reader(std::io::BufReader::new(decoder))
        }
        Some(other) => return Err(Damage::Body(format!("unknown compression {other:?}"))),
    }
    .map_err(|e| Damage::Body(e.to_string()))?;
    let mut image: Image = image;
    // The indexes are derived from the jobs: refile them, so a snapshot
    // written before workload classes (which filed jobs by whether they
    // checkpoint) reads into today's indexes.
    for queue in image.state.queues.values_mut() {
        queue.cluster.refile_all();
    }
    Ok((header, image))
}

// ----- the object store ------------------------------------------------------

use async_nats::jetstream::object_store::ObjectStore;
use futures::StreamExt;
use tokio::io::AsyncReadExt;

/// A snapshot a new leader can start from.
pub struct Loaded {
    pub name: String,
    pub header: Header,
    pub image: Image,
}

/// What a leader found: the snapshot it starts from (None: the empty
/// state) and the newer ones it could not use, damaged or older than the
/// log's start (removed once it has stored a snapshot of its own, so they
/// never count as kept).
pub struct Found {
    pub loaded: Option<Loaded>,
    pub damaged: Vec<String>,
}

/// Why a leader cannot start from the stored snapshots and log.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("listing the snapshots: {0}")]
    Store(#[source] async_nats::Error),
    #[error("snapshot {name}: {damage}")]
    Newer { name: String, damage: Damage },
    #[error(
        "the log starts at entry {first}, but no readable snapshot covers what came before it \
         ({tried} tried): refusing to lead with a partial state"
    )]
    Truncated { first: u64, tried: usize },
}

/// The stored snapshots' names and cuts, oldest first.
pub async fn list(store: &ObjectStore) -> Result<Vec<(Cut, String)>, async_nats::Error> {
    let mut objects = store.list().await?;
    let mut out = Vec::new();
    while let Some(info) = objects.next().await {
        let info = info?;
        if let Some(cut) = cut_of(&info.name) {
            out.push((cut, info.name));
        }
    }
    out.sort();
    Ok(out)
}

async fn read(store: &ObjectStore, name: &str) -> Result<Vec<u8>, async_nats::Error> {
    let mut object = store.get(name).await?;
    let mut bytes = Vec::new();
    object.read_to_end(&mut bytes).await?;
    Ok(bytes)
}

/// The first log entry a replay from `cut` needs.
pub fn needs_from(cut: Cut) -> u64 {
    cut.after.min(cut.sched) + 1
}

/// The newest snapshot that reads and whose following entries the log
/// still holds (`first`: the log's first sequence). None: start from the
/// empty state (no snapshot, and the log was never truncated).
pub async fn load_newest(store: &ObjectStore, first: u64) -> Result<Found, LoadError> {
    let stored = list(store).await.map_err(LoadError::Store)?;
    let mut damaged = Vec::new();
    for (cut, name) in stored.into_iter().rev() {
        damaged.push(name.clone());
        if needs_from(cut) < first {
            tracing::error!(snapshot = %name, first, "snapshot older than the log's start; skipped");
            continue;
        }
        let bytes = match read(store, &name).await {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(snapshot = %name, error = %e, "snapshot damaged (unreadable); trying the one before it");
                continue;
            }
        };
        match decode(&bytes) {
            Ok((header, image)) if header.cut == cut => {
                damaged.pop();
                return Ok(Found {
                    loaded: Some(Loaded {
                        name,
                        header,
                        image,
                    }),
                    damaged,
                });
            }
            Ok((header, _)) => tracing::error!(
                snapshot = %name, cut = ?header.cut,
                "snapshot damaged (its header names another cut); trying the one before it"
            ),
            Err(damage @ Damage::Newer { .. }) => return Err(LoadError::Newer { name, damage }),
            Err(damage) => tracing::error!(
                snapshot = %name, %damage,
                "snapshot damaged; trying the one before it"
            ),
        }
    }
    if first > 1 {
        let tried = damaged.len();
        return Err(LoadError::Truncated { first, tried });
    }
    Ok(Found {
        loaded: None,
        damaged,
    })
}

/// Stores a snapshot (encoded) under its cut's name.
pub async fn store(store: &ObjectStore, cut: Cut, bytes: &[u8]) -> Result<(), async_nats::Error> {
    let mut reader = bytes;
    store.put(name(cut).as_str(), &mut reader).await?;
    Ok(())
}

/// Deletes the `damaged` (unusable) snapshots, keeps the newest `keep` others
/// (deleting the rest) and returns the first log entry the oldest kept one
/// needs: the log may be truncated below it.
pub async fn prune(
    store: &ObjectStore,
    keep: usize,
    damaged: &[String],
) -> Result<Option<u64>, async_nats::Error> {
    let mut stored = list(store).await?;
    for (_, name) in stored.iter().filter(|(_, n)| damaged.contains(n)) {
        tracing::warn!(snapshot = %name, "unusable snapshot removed (damaged, or older than the log's start)");
        store.delete(name).await?;
    }
    stored.retain(|(_, n)| !damaged.contains(n));
    if stored.len() < keep {
        return Ok(None); // until there are `keep`, the log is left whole
    }
    let drop = stored.len() - keep;
    for (_, name) in &stored[..drop] {
        store.delete(name).await?;
    }
    Ok(stored.get(drop).map(|(cut, _)| needs_from(*cut)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut image = Image::default();
        image.state.epoch = 7;
        image.traces.insert("j1".into(), "00-abc-def-01".into());
        encode(
            &image,
            Cut {
                after: 12,
                sched: 9,
            },
            Positions::at((12, 0, 3)),
            1_000,
            "s1",
        )
    }

    #[test]
    fn a_snapshot_reads_back_as_written() {
        let (header, image) = decode(&sample()).expect("decodes");
        assert_eq!(
            header.cut,
            Cut {
                after: 12,
                sched: 9
            }
        );
        assert_eq!(header.positions, Positions::at((12, 0, 3)));
        assert_eq!((header.format, header.holder.as_str()), (FORMAT, "s1"));
        assert_eq!(image.state.epoch, 7);
        assert_eq!(image.traces["j1"], "00-abc-def-01");
    }

    #[test]
    fn damage_is_named() {
        let good = sample();
        let body_at = good.iter().position(|&b| b == b'\n').expect("header") + 1;
        let mut flipped = good.clone();
        flipped[body_at + 3] ^= 0x40;
        assert_eq!(decode(&flipped).err(), Some(Damage::Checksum));
        assert!(matches!(
            decode(&good[..good.len() - 1]).err(),
            Some(Damage::Length { .. })
        ));
        assert_eq!(decode(b"garbage").err(), Some(Damage::NoHeader));
        assert!(matches!(
            decode(b"{not json\nxx").err(),
            Some(Damage::Header(_))
        ));
        let newer = String::from_utf8_lossy(&good[..body_at])
            .replace(
                &format!("\"format\":{FORMAT}"),
                &format!("\"format\":{}", FORMAT + 1),
            )
            .into_bytes();
        assert_eq!(
            decode(&[newer, good[body_at..].to_vec()].concat()).err(),
            Some(Damage::Newer { found: FORMAT + 1 })
        );
        // A body that checks out but is not a state (written by a bug).
        let mut junk = Vec::new();
        ciborium::into_writer(&"not a state", &mut junk).expect("cbor");
        let header = Header {
            format: FORMAT,
            cut: Cut::default(),
            positions: Positions::default(),
            taken_at: 0,
            holder: String::new(),
            jobs: 0,
            body_bytes: junk.len() as u64,
            sha256: hex::encode(Sha256::digest(&junk)),
            compression: None,
        };
        let mut bytes = serde_json::to_vec(&header).expect("json");
        bytes.push(b'\n');
        bytes.extend(junk);
        assert!(matches!(decode(&bytes).err(), Some(Damage::Body(_))));
    }

    /// Format 1 snapshots (a plain CBOR body, no `compression`), written
    /// before bodies were compressed, still read.
    #[test]
    fn a_format_1_snapshot_still_reads() {
        let mut image = Image::default();
        image.state.epoch = 5;
        let mut body = Vec::new();
        ciborium::into_writer(&image, &mut body).expect("cbor");
        let header = format!(
            r#"{{"format":1,"cut":{{"after":3,"sched":2}},"positions":[3,0,0],"takenAt":1,"holder":"old","jobs":0,"bodyBytes":{},"sha256":"{}"}}"#,
            body.len(),
            hex::encode(Sha256::digest(&body))
        );
        let bytes = [header.into_bytes(), b"\n".to_vec(), body].concat();
        let (header, image) = decode(&bytes).expect("a format 1 snapshot reads");
        assert_eq!((header.format, header.compression), (1, None));
        assert_eq!(image.state.epoch, 5);
    }

    /// A large state compresses several times over (what made snapshots
    /// cheap to store).
    #[test]
    fn bodies_are_compressed() {
        let mut image = Image::default();
        for i in 0..2_000 {
            image.traces.insert(
                format!("job-{i:08}"),
                format!("00-4bf92f3577b34da6a3ce929d0e0e{i:04}-00f067aa0ba902b7-01"),
            );
        }
        let mut plain = Vec::new();
        ciborium::into_writer(&image, &mut plain).expect("cbor");
        let bytes = encode(&image, Cut::default(), Positions::default(), 0, "s1");
        let (header, back) = decode(&bytes).expect("reads back");
        assert_eq!(header.compression.as_deref(), Some("zstd"));
        assert_eq!(back, image);
        assert!(
            header.body_bytes * 3 < plain.len() as u64,
            "{} compressed vs {} plain",
            header.body_bytes,
            plain.len()
        );
    }

    #[test]
    fn names_sort_like_cuts() {
        let a = name(Cut {
            after: 9,
            sched: 100,
        });
        let b = name(Cut {
            after: 10,
            sched: 2,
        });
        assert!(a < b);
        assert_eq!(
            cut_of(&b),
            Some(Cut {
                after: 10,
                sched: 2
            })
        );
        assert_eq!(cut_of("other"), None);
        assert_eq!(cut_of("snapshot-1-x"), None);
    }
}

#[cfg(test)]
#[path = "snapshot_golden.rs"]
mod golden;

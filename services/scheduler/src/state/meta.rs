//! What the scheduler keeps of a job beyond the core's state, packed: a
//! backlog of 100,000 waiting jobs is 100,000 of these, so each is a
//! public id shared with the id index, the submit as its compact JSON (read
//! whole when the job starts or is described; an event reads only its name),
//! and the notes only a few jobs ever have behind one pointer.
//!
//! The snapshot form is the one from before the packing, field for field
//! (`snapshot_golden.rs`): the submit as its object, the notes as two
//! fields left out when empty.

use std::collections::BTreeMap;
use std::sync::Arc;

use qm_wire::messages::SubmitServiceJob;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A job's submit, kept as its JSON (one allocation of ~150 bytes where
/// the struct is 480 bytes and an allocation per string).
#[derive(Clone, PartialEq, Eq)]
pub struct StoredSubmit(Box<[u8]>);

impl StoredSubmit {
    pub fn new(job: &SubmitServiceJob) -> StoredSubmit {
        // A submit is strings, numbers and maps of strings: it serializes.
        let json = serde_json::to_vec(job).unwrap_or_else(|e| {
            tracing::error!(job = %job.job_name, error = %e, "a submit did not encode; kept empty");
            Vec::new()
        });
        StoredSubmit(json.into_boxed_slice())
    }

    /// The submit as it was stored.
    pub fn get(&self) -> SubmitServiceJob {
        // Written by `new` from a submit: it reads back.
        serde_json::from_slice(&self.0).unwrap_or_else(|e| {
            tracing::error!(error = %e, "a kept submit did not decode");
            SubmitServiceJob::default()
        })
    }

    /// Its `jobName`, read alone (the rest is skipped, not built).
    pub fn job_name(&self) -> String {
        #[derive(Deserialize)]
        struct Name<'a> {
            #[serde(borrow, rename = "jobName")]
            job_name: std::borrow::Cow<'a, str>,
        }
        serde_json::from_slice::<Name<'_>>(&self.0)
            .map(|n| n.job_name.into_owned())
            .unwrap_or_else(|_| self.get().job_name)
    }
}

impl std::fmt::Debug for StoredSubmit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl Serialize for StoredSubmit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(s)
    }
}

impl<'de> Deserialize<'de> for StoredSubmit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StoredSubmit, D::Error> {
        SubmitServiceJob::deserialize(d).map(|job| StoredSubmit::new(&job))
    }
}

/// What few jobs have: reasons their attempts failed, a start in progress.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobNotes {
    /// Per attempt: why it failed, as its first failing rank reported it
    /// (the job's `/opt/ml/output/failure`, an out-of-memory kill, or why
    /// it could not be launched: a refused image pull).
    pub attempt_reasons: BTreeMap<u32, String>,
    /// The current attempt's start, as its executor last reported it
    /// (pulling its image, downloading an input channel).
    pub start_progress: Option<(u32, String)>,
}

/// What the scheduler keeps per job beyond the core's state.
#[derive(Clone, Debug, PartialEq)]
pub struct JobMeta {
    /// Shared with the queue's id index (`QueueState::ids`).
    pub public_id: Arc<str>,
    pub submit: StoredSubmit,
    notes: Option<Box<JobNotes>>,
}

impl JobMeta {
    pub fn new(public_id: Arc<str>, submit: &SubmitServiceJob) -> JobMeta {
        JobMeta {
            public_id,
            submit: StoredSubmit::new(submit),
            notes: None,
        }
    }

    /// Why each attempt failed (see [`JobNotes`]).
    pub fn attempt_reason(&self, attempt: u32) -> Option<&String> {
        self.notes.as_ref()?.attempt_reasons.get(&attempt)
    }

    /// The current attempt's start in progress (see [`JobNotes`]).
    pub fn start_progress(&self) -> Option<&(u32, String)> {
        self.notes.as_ref()?.start_progress.as_ref()
    }

    /// The notes, to change them.
    pub fn notes_mut(&mut self) -> &mut JobNotes {
        self.notes.get_or_insert_with(Default::default)
    }
}

impl Serialize for JobMeta {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let notes = self.notes.as_deref();
        let reasons = notes.map(|n| &n.attempt_reasons).filter(|r| !r.is_empty());
        let progress = notes.and_then(|n| n.start_progress.as_ref());
        let fields = 2 + usize::from(reasons.is_some()) + usize::from(progress.is_some());
        let mut out = s.serialize_struct("JobMeta", fields)?;
        out.serialize_field("public_id", &*self.public_id)?;
        out.serialize_field("submit", &self.submit)?;
        match reasons {
            Some(r) => out.serialize_field("attempt_reasons", r)?,
            None => out.skip_field("attempt_reasons")?,
        }
        match progress {
            Some(p) => out.serialize_field("start_progress", p)?,
            None => out.skip_field("start_progress")?,
        }
        out.end()
    }
}

/// [`JobMeta`] as a snapshot holds it.
#[derive(Deserialize)]
struct StoredMeta {
    public_id: String,
    submit: StoredSubmit,
    #[serde(default)]
    attempt_reasons: BTreeMap<u32, String>,
    #[serde(default)]
    start_progress: Option<(u32, String)>,
}

impl<'de> Deserialize<'de> for JobMeta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JobMeta, D::Error> {
        let m = StoredMeta::deserialize(d)?;
        let notes = JobNotes {
            attempt_reasons: m.attempt_reasons,
            start_progress: m.start_progress,
        };
        Ok(JobMeta {
            public_id: m.public_id.into(),
            submit: m.submit,
            notes: (notes != JobNotes::default()).then(|| Box::new(notes)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_job_reads_and_stores_as_before() {
        let job = SubmitServiceJob {
            job_name: "train".into(),
            job_queue: "training".into(),
            quota_share_name: Some("QS1".into()),
            instance_type: "ml.g5.xlarge".into(),
            command: vec!["python".into(), "train.py".into()],
            environment: [("A".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let mut meta = JobMeta::new("j-1".into(), &job);
        assert_eq!(meta.submit.get(), job);
        assert_eq!(meta.submit.job_name(), "train");
        assert_eq!(meta.attempt_reason(1), None);
        let plain = serde_json::to_value(&meta).expect("json");
        assert_eq!(
            plain,
            serde_json::json!({"public_id": "j-1", "submit": serde_json::to_value(&job).expect("json")}),
            "notes left out when there are none"
        );
        meta.notes_mut().attempt_reasons.insert(1, "OOM".into());
        meta.notes_mut().start_progress = Some((2, "pulling".into()));
        let noted = serde_json::to_value(&meta).expect("json");
        assert_eq!(noted["attempt_reasons"]["1"], "OOM");
        assert_eq!(noted["start_progress"], serde_json::json!([2, "pulling"]));
        let back: JobMeta = serde_json::from_value(noted).expect("reads back");
        assert_eq!(back, meta);
        let back: JobMeta = serde_json::from_value(plain).expect("reads back");
        assert_eq!(back.notes, None, "no notes, nothing allocated for them");
    }
}

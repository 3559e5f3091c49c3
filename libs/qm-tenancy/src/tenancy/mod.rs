//! The tenancy file: teams and the shares they own, admins, readers, and
//! one identity per service or node; its checks (`checks.rs`) and what it
//! says of each principal (`principals.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use qm_wire::subjects;
use serde::{Deserialize, Serialize};

/// The tenancy file. See `docs/tenancy.md` for the format with an example.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tenancy {
    /// Team name -> its shares and users.
    #[serde(default)]
    pub teams: BTreeMap<String, Team>,
    /// Principals that may change queues and shares and act on any job.
    #[serde(default)]
    pub admins: Vec<String>,
    /// Principals that may read everything and change nothing.
    #[serde(default)]
    pub readers: Vec<String>,
    #[serde(default)]
    pub services: Services,
    /// AWS access key id -> the principal (an admin, reader or team user)
    /// the AWS Batch gateway may act for when a request is signed with that
    /// key. The secrets are not here: they live only in the gateway's keys
    /// file (ADR 0012).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub aws_access_keys: BTreeMap<String, String>,
    /// Principal -> the public NATS nkeys (`U...`) it may connect with:
    /// one, or two while a key is being rotated (both work until the old
    /// one is removed). The seeds are never here: each stays in its
    /// owner's `.nk` file. `qm tenancy apply --keys DIR` fills this in from
    /// the `.nk` files `qm auth` writes; a principal a new revision lists
    /// no keys for keeps the keys it had.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nkeys: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Team {
    /// `queue/share`, or `queue/*` for every share of a queue.
    pub shares: Vec<String>,
    pub users: Vec<String>,
}

/// One identity per service instance or node (or node group).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Services {
    /// Principals of admission instances (stateless; one identity for all
    /// replicas is fine).
    #[serde(default)]
    pub admission: Vec<String>,
    /// Principals of scheduler instances (the leader and its standbys).
    #[serde(default)]
    pub scheduler: Vec<String>,
    /// Executor principal -> the executor ids it may act as.
    #[serde(default)]
    pub executors: BTreeMap<String, ExecutorIdentity>,
    /// Checkpoint service principal -> the nodes it serves.
    #[serde(default)]
    pub checkpoint: BTreeMap<String, CheckpointIdentity>,
    /// Principals of AWS Batch gateway instances: they may speak for the
    /// principals `awsAccessKeys` names, and for no one else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateway: Vec<String>,
    /// Principals of web console instances (`qm-console`): they may speak
    /// for the people (admins, readers, team users) who signed in to them,
    /// and for no service; they read every event to push live updates,
    /// each filtered to what its viewer may read (ADR 0018).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub console: Vec<String>,
    /// Principals of `qm tenancy sync-nats`, which writes each NATS
    /// server's authorization from the tenancy in effect and has the
    /// server reload it: they read the tenancy and nothing else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nats_auth: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecutorIdentity {
    /// Executor ids (`executorId` settings) this principal runs.
    pub executors: Vec<String>,
    /// The checkpoint nodes its executors call; default: the executor ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoint_nodes: Vec<String>,
}

impl ExecutorIdentity {
    pub fn nodes(&self) -> &[String] {
        if self.checkpoint_nodes.is_empty() {
            &self.executors
        } else {
            &self.checkpoint_nodes
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointIdentity {
    pub nodes: Vec<String>,
}

/// Public keys one principal may hold at once (two while rotating; a few
/// more for people with several machines).
pub const MAX_KEYS_PER_PRINCIPAL: usize = 4;

/// Everything wrong with a tenancy file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tenancy ({} problem{}):\n  - {}", .0.len(), if .0.len() == 1 { "" } else { "s" }, .0.join("\n  - "))]
pub struct TenancyError(pub Vec<String>);

/// What a principal is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Admin,
    Reader,
    Team { team: String, shares: Vec<String> },
    Admission,
    Scheduler,
    Executor(ExecutorIdentity),
    Checkpoint(CheckpointIdentity),
    Gateway,
    Console,
    NatsAuth,
}

impl Role {
    /// A few words for people (comments in the generated configuration).
    pub fn label(&self) -> String {
        match self {
            Role::Admin => "admin".into(),
            Role::Reader => "reader".into(),
            Role::Team { team, .. } => format!("team {team}"),
            Role::Admission => "admission".into(),
            Role::Scheduler => "scheduler".into(),
            Role::Executor(_) => "executor".into(),
            Role::Checkpoint(_) => "checkpoint service".into(),
            Role::Gateway => "AWS Batch gateway".into(),
            Role::Console => "web console".into(),
            Role::NatsAuth => "NATS authorization sync".into(),
        }
    }
}

/// A share a team owns: a queue and one share, or every share of it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub queue: String,
    /// None: every share of the queue (`queue/*`).
    pub share: Option<String>,
}

impl Grant {
    pub fn parse(text: &str) -> Result<Grant, String> {
        let (queue, share) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} must be queue/share or queue/*"))?;
        subjects::token(queue).map_err(|e| format!("{text:?}: queue {e}"))?;
        let share = if share == "*" {
            None
        } else {
            subjects::token(share).map_err(|e| format!("{text:?}: share {e}"))?;
            Some(share.to_string())
        };
        Ok(Grant {
            queue: queue.to_string(),
            share,
        })
    }

    pub fn covers(&self, queue: &str, share: &str) -> bool {
        self.queue == queue && self.share.as_deref().is_none_or(|s| s == share)
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.queue, self.share.as_deref().unwrap_or("*"))
    }
}

mod checks;
mod principals;

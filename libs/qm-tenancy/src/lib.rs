//! Quartermaster's trust model, in one place:
//!
//! - [`Tenancy`]: the tenancy file (teams and the shares they own, admins,
//!   readers, and one identity per service or node), validated whole;
//! - [`authorize`]: who may do what on which share (admission and the
//!   scheduler both call it: the second check is defence in depth);
//! - [`nats`]: the nats-server authorization the file compiles to (least
//!   privilege per principal, enforced by the server itself) and the nkey
//!   credentials of each principal.
//!
//! No I/O except reading and writing the files named by the caller; no
//! async runtime.

pub mod aws;
mod diff;
pub mod live;
pub mod nats;

pub use diff::changes;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use qm_wire::messages::Caller;
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

impl Tenancy {
    /// Parses and validates a tenancy file's text (YAML or JSON).
    pub fn parse(text: &str) -> Result<Tenancy, TenancyError> {
        let t: Tenancy =
            serde_yaml_ng::from_str(text).map_err(|e| TenancyError(vec![e.to_string()]))?;
        let problems = t.problems();
        if problems.is_empty() {
            Ok(t)
        } else {
            Err(TenancyError(problems))
        }
    }

    /// Reads and validates a tenancy file.
    pub fn load(path: &std::path::Path) -> Result<Tenancy, TenancyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| TenancyError(vec![format!("{}: cannot read: {e}", path.display())]))?;
        Tenancy::parse(&text).map_err(|TenancyError(p)| {
            TenancyError(
                p.into_iter()
                    .map(|m| format!("{}: {m}", path.display()))
                    .collect(),
            )
        })
    }

    /// Every problem, each naming where it is.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let mut principal = |p: &mut Vec<String>, name: &str, place: String| {
            if let Err(e) = subjects::token(name) {
                p.push(format!("{place}: principal {e}"));
            }
            if let Some(first) = seen.get(name) {
                p.push(format!(
                    "{place}: principal {name:?} is already declared at {first} (one principal, one role)"
                ));
            } else {
                seen.insert(name.to_string(), place);
            }
        };
        for (team, t) in &self.teams {
            if let Err(e) = subjects::token(team) {
                p.push(format!("teams.{team}: team name {e}"));
            }
            if t.shares.is_empty() {
                p.push(format!(
                    "teams.{team}.shares: a team owns at least one share (queue/share or queue/*)"
                ));
            }
            for (i, s) in t.shares.iter().enumerate() {
                if let Err(e) = Grant::parse(s) {
                    p.push(format!("teams.{team}.shares[{i}]: {e}"));
                }
            }
            if t.users.is_empty() {
                p.push(format!("teams.{team}.users: a team has at least one user"));
            }
            for (i, u) in t.users.iter().enumerate() {
                principal(&mut p, u, format!("teams.{team}.users[{i}]"));
            }
        }
        for (i, a) in self.admins.iter().enumerate() {
            principal(&mut p, a, format!("admins[{i}]"));
        }
        for (i, r) in self.readers.iter().enumerate() {
            principal(&mut p, r, format!("readers[{i}]"));
        }
        let s = &self.services;
        if s.admission.is_empty() {
            p.push("services.admission: name at least one admission principal".into());
        }
        if s.scheduler.is_empty() {
            p.push("services.scheduler: name at least one scheduler principal".into());
        }
        for (i, a) in s.admission.iter().enumerate() {
            principal(&mut p, a, format!("services.admission[{i}]"));
        }
        for (i, a) in s.scheduler.iter().enumerate() {
            principal(&mut p, a, format!("services.scheduler[{i}]"));
        }
        for (i, a) in s.console.iter().enumerate() {
            principal(&mut p, a, format!("services.console[{i}]"));
        }
        for (i, a) in s.gateway.iter().enumerate() {
            principal(&mut p, a, format!("services.gateway[{i}]"));
        }
        for (i, a) in s.nats_auth.iter().enumerate() {
            principal(&mut p, a, format!("services.natsAuth[{i}]"));
        }
        let mut executor_owner: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, e) in &s.executors {
            principal(&mut p, name, format!("services.executors.{name}"));
            if e.executors.is_empty() {
                p.push(format!(
                    "services.executors.{name}.executors: name at least one executor id"
                ));
            }
            for (i, id) in e.executors.iter().enumerate() {
                if let Err(err) = subjects::token(id) {
                    p.push(format!(
                        "services.executors.{name}.executors[{i}]: executor id {err}"
                    ));
                }
                if let Some(other) = executor_owner.insert(id, name) {
                    p.push(format!(
                        "services.executors.{name}.executors[{i}]: executor {id:?} already belongs to {other:?}"
                    ));
                }
            }
            for (i, n) in e.checkpoint_nodes.iter().enumerate() {
                if let Err(err) = subjects::token(n) {
                    p.push(format!(
                        "services.executors.{name}.checkpointNodes[{i}]: node {err}"
                    ));
                }
            }
        }
        let mut node_owner: BTreeMap<&str, &str> = BTreeMap::new();
        for (name, c) in &s.checkpoint {
            principal(&mut p, name, format!("services.checkpoint.{name}"));
            if c.nodes.is_empty() {
                p.push(format!(
                    "services.checkpoint.{name}.nodes: name at least one node"
                ));
            }
            for (i, n) in c.nodes.iter().enumerate() {
                if let Err(err) = subjects::token(n) {
                    p.push(format!("services.checkpoint.{name}.nodes[{i}]: node {err}"));
                }
                if let Some(other) = node_owner.insert(n, name) {
                    p.push(format!(
                        "services.checkpoint.{name}.nodes[{i}]: node {n:?} is already served by {other:?}"
                    ));
                }
            }
        }
        for (key, who) in &self.aws_access_keys {
            if !access_key_id_ok(key) {
                p.push(format!(
                    "awsAccessKeys.{key}: an access key id is 16 to 128 uppercase letters and digits"
                ));
            }
            if !self.may_be_spoken_for(who) {
                p.push(format!(
                    "awsAccessKeys.{key}: {who:?} is not an admin, reader or team user of this file (only people, never services, may hold access keys)"
                ));
            }
        }
        p.extend(self.key_problems());
        if !self.aws_access_keys.is_empty() && s.gateway.is_empty() {
            p.push(
                "awsAccessKeys: name the gateway's principal in services.gateway (no one can use the keys without it)"
                    .into(),
            );
        }
        p
    }

    /// What is wrong with `nkeys`: keys of principals the file does not
    /// declare, strings that are not public user nkeys, a key two
    /// principals share (a key is one identity).
    fn key_problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let declared: BTreeSet<String> = self.principals().into_iter().collect();
        let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
        for (who, keys) in &self.nkeys {
            if !declared.contains(who) {
                p.push(format!(
                    "nkeys.{who}: {who:?} is not a principal of this file (remove its keys with it)"
                ));
            }
            if keys.is_empty() || keys.len() > MAX_KEYS_PER_PRINCIPAL {
                p.push(format!(
                    "nkeys.{who}: list 1 to {MAX_KEYS_PER_PRINCIPAL} keys (two while one is rotated)"
                ));
            }
            for (i, k) in keys.iter().enumerate() {
                if !k.starts_with('U') || nkeys::KeyPair::from_public_key(k).is_err() {
                    p.push(format!(
                        "nkeys.{who}[{i}]: {:?} is not a public user nkey (56 characters starting with U; never the seed, which starts with SU)",
                        k.chars().take(12).collect::<String>()
                    ));
                }
                if let Some(other) = owner.insert(k, who) {
                    if other != who {
                        p.push(format!(
                            "nkeys.{who}[{i}]: the key is also {other:?}'s (one key, one principal)"
                        ));
                    } else {
                        p.push(format!("nkeys.{who}[{i}]: the key is listed twice"));
                    }
                }
            }
        }
        p
    }

    /// The principals that have no NATS key in `nkeys`.
    pub fn missing_keys(&self) -> Vec<String> {
        self.principals()
            .into_iter()
            .filter(|p| self.nkeys.get(p).is_none_or(Vec::is_empty))
            .collect()
    }

    /// Gives every principal that `nkeys` lists no keys for the keys it
    /// has in `before` (a revision changes keys only where it names them),
    /// and drops the keys of principals no longer declared.
    pub fn keep_keys_from(&mut self, before: &Tenancy) {
        let declared: BTreeSet<String> = self.principals().into_iter().collect();
        self.nkeys.retain(|p, _| declared.contains(p));
        for p in declared {
            if self.nkeys.get(&p).is_none_or(Vec::is_empty) {
                if let Some(keys) = before.nkeys.get(&p) {
                    self.nkeys.insert(p, keys.clone());
                }
            }
        }
    }

    /// May the AWS Batch gateway act for `principal` at all? Only admins,
    /// readers and team users may, never a service identity.
    fn may_be_spoken_for(&self, principal: &str) -> bool {
        matches!(
            self.role(principal),
            Some(Role::Admin | Role::Reader | Role::Team { .. })
        )
    }

    /// The principal an AWS access key id acts as, if the file maps it.
    pub fn access_key_principal(&self, access_key_id: &str) -> Option<&str> {
        self.aws_access_keys.get(access_key_id).map(String::as_str)
    }

    /// The caller a gateway request speaks for: `principal` must hold an
    /// access key in this file (so a gateway cannot act for anyone else,
    /// services included).
    pub fn spoken_for(&self, principal: &str) -> Result<Caller, Denied> {
        let holds_key = self.aws_access_keys.values().any(|p| p == principal);
        match self.caller(principal) {
            Some(caller) if holds_key && self.may_be_spoken_for(principal) => Ok(caller),
            _ => Err(Denied(format!(
                "the gateway may not act for {principal:?}: no access key in the tenancy file's awsAccessKeys maps to it"
            ))),
        }
    }

    /// The caller a web console request speaks for: any person (admin,
    /// reader, team user) who signed in to it, never a service (ADR 0018).
    pub fn console_speaks_for(&self, principal: &str) -> Result<Caller, Denied> {
        match self.caller(principal) {
            Some(caller) if self.may_be_spoken_for(principal) => Ok(caller),
            _ => Err(Denied(format!(
                "the console may not act for {principal:?}: only admins, readers and team users sign in to it"
            ))),
        }
    }

    /// The role of `principal`, if the file declares it.
    pub fn role(&self, principal: &str) -> Option<Role> {
        if self.admins.iter().any(|a| a == principal) {
            return Some(Role::Admin);
        }
        if self.readers.iter().any(|a| a == principal) {
            return Some(Role::Reader);
        }
        for (team, t) in &self.teams {
            if t.users.iter().any(|u| u == principal) {
                return Some(Role::Team {
                    team: team.clone(),
                    shares: t.shares.clone(),
                });
            }
        }
        let s = &self.services;
        if s.admission.iter().any(|a| a == principal) {
            return Some(Role::Admission);
        }
        if s.scheduler.iter().any(|a| a == principal) {
            return Some(Role::Scheduler);
        }
        if let Some(e) = s.executors.get(principal) {
            return Some(Role::Executor(e.clone()));
        }
        if let Some(c) = s.checkpoint.get(principal) {
            return Some(Role::Checkpoint(c.clone()));
        }
        if s.gateway.iter().any(|a| a == principal) {
            return Some(Role::Gateway);
        }
        if s.console.iter().any(|a| a == principal) {
            return Some(Role::Console);
        }
        if s.nats_auth.iter().any(|a| a == principal) {
            return Some(Role::NatsAuth);
        }
        None
    }

    /// Every principal the file declares, each once, in a stable order.
    pub fn principals(&self) -> Vec<String> {
        let mut all = BTreeSet::new();
        for t in self.teams.values() {
            all.extend(t.users.iter().cloned());
        }
        all.extend(self.admins.iter().cloned());
        all.extend(self.readers.iter().cloned());
        let s = &self.services;
        all.extend(s.admission.iter().cloned());
        all.extend(s.scheduler.iter().cloned());
        all.extend(s.executors.keys().cloned());
        all.extend(s.checkpoint.keys().cloned());
        all.extend(s.gateway.iter().cloned());
        all.extend(s.console.iter().cloned());
        all.extend(s.nats_auth.iter().cloned());
        all.into_iter().collect()
    }

    /// The caller record admission attaches to a request of `principal`.
    pub fn caller(&self, principal: &str) -> Option<Caller> {
        let role = self.role(principal)?;
        let (role, team, shares) = match role {
            Role::Admin => ("ADMIN", None, Vec::new()),
            Role::Reader => ("READER", None, Vec::new()),
            Role::Team { team, shares } => ("TEAM", Some(team), shares),
            _ => ("SERVICE", None, Vec::new()),
        };
        Some(Caller {
            principal: principal.to_string(),
            role: role.to_string(),
            team,
            shares,
        })
    }

    /// May `principal` register as executor `executor_id`?
    pub fn may_register(&self, principal: &str, executor_id: &str) -> Result<(), Denied> {
        match self.role(principal) {
            Some(Role::Executor(e)) if e.executors.iter().any(|x| x == executor_id) => Ok(()),
            _ => Err(Denied(format!(
                "principal {principal:?} may not register executor {executor_id:?} (only the executor identity the tenancy file gives that id may)"
            ))),
        }
    }

    /// An executor identity registers an executor whose checkpoints the
    /// checkpoint service of `node` syncs: only a node of its own
    /// (`checkpointNodes`, default its executor ids). Another identity's
    /// node would have its commits count for this executor's attempts.
    pub fn may_use_checkpoint_node(&self, principal: &str, node: &str) -> Result<(), Denied> {
        match self.role(principal) {
            Some(Role::Executor(e)) if e.nodes().iter().any(|n| n == node) => Ok(()),
            _ => Err(Denied(format!(
                "principal {principal:?} may not name checkpoint node {node:?} (only the checkpointNodes the tenancy file gives it, or its executor ids)"
            ))),
        }
    }
}

/// An AWS access key id: 16 to 128 uppercase letters and digits (AWS's
/// own are 20, `AKIA...`).
fn access_key_id_ok(key: &str) -> bool {
    (16..=128).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// What a caller wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// Submit a job to a share.
    Submit { queue: &'a str, share: &'a str },
    /// Change a job of a share (priority update, terminate).
    ChangeJob { queue: &'a str, share: &'a str },
    /// Read a job of a share (describe, list, logs, its audit entries).
    ReadJob { queue: &'a str, share: &'a str },
    /// Read a queue's configuration and snapshot.
    ReadQueue { queue: &'a str },
    /// Create, change or delete a queue or its shares.
    ChangeConfig { queue: &'a str },
}

impl Action<'_> {
    fn describe(&self) -> String {
        match self {
            Action::Submit { queue, share } => format!("submit jobs to share {queue}/{share}"),
            Action::ChangeJob { queue, share } => {
                format!("update or terminate jobs of share {queue}/{share}")
            }
            Action::ReadJob { queue, share } => format!("read jobs of share {queue}/{share}"),
            Action::ReadQueue { queue } => format!("read job queue {queue}"),
            Action::ChangeConfig { queue } => {
                format!("change the configuration of job queue {queue}")
            }
        }
    }
}

/// A refused request: one line naming the principal, the operation and
/// the share.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denied(pub String);

fn grants(caller: &Caller) -> impl Iterator<Item = Grant> + '_ {
    caller.shares.iter().filter_map(|s| Grant::parse(s).ok())
}

/// Does `caller` own `queue/share`?
pub fn owns(caller: &Caller, queue: &str, share: &str) -> bool {
    grants(caller).any(|g| g.covers(queue, share))
}

/// Does `caller` own any share of `queue`?
pub fn in_queue(caller: &Caller, queue: &str) -> bool {
    grants(caller).any(|g| g.queue == queue)
}

/// Sees everything (admins and readers).
pub fn sees_all(caller: &Caller) -> bool {
    matches!(caller.role.as_str(), "ADMIN" | "READER")
}

/// A read of one share's records (`share` given) or of a whole queue's
/// (each share then filtered by who may read it).
pub fn authorize_read(caller: &Caller, queue: &str, share: Option<&str>) -> Result<(), Denied> {
    match share {
        Some(share) => authorize(caller, Action::ReadJob { queue, share }),
        None => authorize(caller, Action::ReadQueue { queue }),
    }
}

/// The rule: admins may do anything; readers may read anything; a team may
/// submit to, change and read the jobs of the shares it owns and read the
/// queues it has a share in; services act through their own subjects, not
/// through the API.
pub fn authorize(caller: &Caller, action: Action<'_>) -> Result<(), Denied> {
    let allowed = match (caller.role.as_str(), action) {
        ("ADMIN", _) => true,
        ("READER", Action::ReadJob { .. } | Action::ReadQueue { .. }) => true,
        (
            "TEAM",
            Action::Submit { queue, share }
            | Action::ChangeJob { queue, share }
            | Action::ReadJob { queue, share },
        ) => owns(caller, queue, share),
        ("TEAM", Action::ReadQueue { queue }) => in_queue(caller, queue),
        _ => false,
    };
    if allowed {
        return Ok(());
    }
    let who = match (&caller.team, caller.role.as_str()) {
        (Some(team), _) => format!("principal {:?} (team {team})", caller.principal),
        (None, "") => format!(
            "principal {:?} (unknown to the tenancy file)",
            caller.principal
        ),
        (None, role) => format!("principal {:?} ({})", caller.principal, role.to_lowercase()),
    };
    Err(Denied(format!("{who} may not {}", action.describe())))
}

/// May a job of `queue/share` keep its checkpoints (or outputs) at
/// `s3_uri`? Under one of the share's `checkpointS3Prefixes` when it has
/// them; else under `s3://<default bucket>/<queue>/shares/<share>/` (when
/// the default bucket is not known, only the path is checked; the
/// checkpoint service, which knows it, checks the bucket too).
pub fn checkpoint_uri_allowed(
    s3_uri: &str,
    allowed: Option<&[String]>,
    default_bucket: Option<&str>,
    queue: &str,
    share: &str,
) -> Result<(), String> {
    let place = SharePlace {
        queue,
        share,
        key: "checkpointS3Prefixes",
        doing: "keep checkpoints",
    };
    place.allows(s3_uri, allowed, default_bucket)
}

/// May a job of `queue/share` read an input channel at `s3_uri`? Under one
/// of the share's `inputS3Prefixes` when it has them; else, as for
/// checkpoints, under `s3://<default bucket>/<queue>/shares/<share>/`.
pub fn input_uri_allowed(
    s3_uri: &str,
    allowed: Option<&[String]>,
    default_bucket: Option<&str>,
    queue: &str,
    share: &str,
) -> Result<(), String> {
    let place = SharePlace {
        queue,
        share,
        key: "inputS3Prefixes",
        doing: "read inputs",
    };
    place.allows(s3_uri, allowed, default_bucket)
}

/// One share's S3 places of one kind: the rule both checks share, with the
/// setting's name and what the share does there for the refusals.
struct SharePlace<'a> {
    queue: &'a str,
    share: &'a str,
    key: &'a str,
    doing: &'a str,
}

impl SharePlace<'_> {
    /// Under one of `allowed` (a `/` boundary), else under the share's own
    /// area of the default bucket.
    fn allows(
        &self,
        s3_uri: &str,
        allowed: Option<&[String]>,
        default_bucket: Option<&str>,
    ) -> Result<(), String> {
        let (queue, share, key, doing) = (self.queue, self.share, self.key, self.doing);
        let uri = qm_wire::messages::parse_s3_uri(s3_uri)?;
        let under = |bucket: Option<&str>, prefix: &str| {
            bucket.is_none_or(|b| b == uri.bucket)
                && (uri.prefix == prefix || uri.prefix.starts_with(&format!("{prefix}/")))
        };
        match allowed {
            Some(list) => {
                for entry in list {
                    let e = qm_wire::messages::parse_s3_uri(entry)
                        .map_err(|err| format!("{key} entry {entry:?}: {err}"))?;
                    if under(Some(&e.bucket), &e.prefix) {
                        return Ok(());
                    }
                }
                Err(format!(
                    "{s3_uri:?} is outside the {key} share {queue}/{share} allows ({})",
                    list.join(", ")
                ))
            }
            None => {
                let prefix = format!("{queue}/shares/{share}");
                if under(default_bucket, &prefix) {
                    Ok(())
                } else {
                    let bucket = default_bucket.unwrap_or("<checkpoint bucket>");
                    Err(format!(
                        "{s3_uri:?} is outside s3://{bucket}/{prefix}/, the only place share {queue}/{share} may {doing} (an admin can allow more with the share's {key})"
                    ))
                }
            }
        }
    }
}

/// May a job of `queue/share` run `image`? Only when one of the share's
/// `imagePrefixes` covers it: an entry ending in `/` covers every image
/// under it; any other entry is a repository and covers that repository
/// with any tag or digest (`team/trainer` covers `team/trainer:1` and
/// `team/trainer@sha256:...`, not `team/trainer-2`).
pub fn image_allowed(
    image: &str,
    allowed: Option<&[String]>,
    queue: &str,
    share: &str,
) -> Result<(), String> {
    let list = allowed.unwrap_or_default();
    let covers = |entry: &str| {
        if entry.is_empty() {
            return false;
        }
        if entry.ends_with('/') {
            return image.starts_with(entry);
        }
        match image.strip_prefix(entry) {
            Some("") => true,
            // A tag (no '/': `ubuntu:5000/x` is registry `ubuntu`'s image)
            // or a digest.
            Some(rest) => (rest.starts_with(':') && !rest.contains('/')) || rest.starts_with('@'),
            None => false,
        }
    };
    if list.iter().any(|e| covers(e)) {
        return Ok(());
    }
    if list.is_empty() {
        return Err(format!(
            "share {queue}/{share} may not run images (an admin allows them with the share's imagePrefixes)"
        ));
    }
    Err(format!(
        "{image:?} is not an image share {queue}/{share} may run (its imagePrefixes: {})",
        list.join(", ")
    ))
}

/// Checks an `imagePrefixes` entry: a repository or a prefix ending in
/// `/`, as an image reference's name part.
pub fn check_image_prefix(entry: &str) -> Result<(), String> {
    let name = entry.trim_end_matches('/');
    if name.is_empty() {
        return Err("an entry must name a registry or repository".into());
    }
    if name.contains(['@', ' '])
        || name
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains(':') && entry.ends_with('/'))
    {
        return Err(format!(
            "{entry:?} must be a repository or a prefix ending in '/', without a tag or digest"
        ));
    }
    qm_wire::messages::check_image_reference(name).map_err(|e| format!("{entry:?}: {e}"))
}

#[cfg(test)]
mod tests;

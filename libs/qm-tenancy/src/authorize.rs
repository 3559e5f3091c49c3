//! Who may do what on which share: admission and the scheduler both call
//! [`authorize`] (the second check is defence in depth).

use qm_wire::messages::Caller;

use crate::tenancy::Grant;

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

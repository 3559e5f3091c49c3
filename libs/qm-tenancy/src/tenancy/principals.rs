//! What the tenancy file says of a principal: its role, the caller it acts
//! as, whom the gateway and the console may speak for, what an executor or
//! checkpoint node may name.

use qm_wire::messages::Caller;

use super::*;
use crate::authorize::Denied;

impl Tenancy {
    /// May the AWS Batch gateway act for `principal` at all? Only admins,
    /// readers and team users may, never a service identity.
    pub(super) fn may_be_spoken_for(&self, principal: &str) -> bool {
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

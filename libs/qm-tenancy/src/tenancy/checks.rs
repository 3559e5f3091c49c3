//! Reading a tenancy file and every problem with it, each naming where it is.

use std::collections::{BTreeMap, BTreeSet};

use qm_wire::subjects;

use super::*;

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
}

/// An AWS access key id: 16 to 128 uppercase letters and digits (AWS's
/// own are 20, `AKIA...`).
fn access_key_id_ok(key: &str) -> bool {
    (16..=128).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

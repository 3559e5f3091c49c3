//! Who gains and loses what between two tenancies: what `qm tenancy
//! apply --dry-run` and `qm tenancy diff` show, and what every revision
//! records for `qm tenancy history` and the audit log.

use std::collections::{BTreeMap, BTreeSet};

use crate::{Role, Tenancy};

/// A principal's rights, in a few words.
fn rights(role: &Role) -> String {
    match role {
        Role::Team { team, shares } => format!("team {team} ({})", shares.join(", ")),
        Role::Executor(e) => format!("executor {}", e.executors.join(", ")),
        Role::Checkpoint(c) => format!("checkpoint service of {}", c.nodes.join(", ")),
        other => other.label(),
    }
}

/// The first characters of a public key: enough to tell keys apart.
fn short(key: &str) -> String {
    format!("{}…", key.chars().take(10).collect::<String>())
}

/// Every difference from `old` to `new` that changes what someone may do,
/// one line each: `+` gains, `-` loses, `~` changes. Empty: no one's
/// rights change (the texts may still differ in order or comments).
pub fn changes(old: &Tenancy, new: &Tenancy) -> Vec<String> {
    let mut out = Vec::new();
    let before: BTreeSet<String> = old.principals().into_iter().collect();
    let after: BTreeSet<String> = new.principals().into_iter().collect();
    for p in after.difference(&before) {
        let role = new.role(p).map(|r| rights(&r)).unwrap_or_default();
        out.push(format!("+ {p}: added as {role}"));
    }
    for p in before.difference(&after) {
        let role = old.role(p).map(|r| rights(&r)).unwrap_or_default();
        out.push(format!(
            "- {p}: removed (was {role}); its NATS connections are closed and its requests refused"
        ));
    }
    for p in before.intersection(&after) {
        let (Some(was), Some(is)) = (old.role(p), new.role(p)) else {
            continue;
        };
        match (&was, &is) {
            (
                Role::Team {
                    team: t0,
                    shares: s0,
                },
                Role::Team {
                    team: t1,
                    shares: s1,
                },
            ) => {
                let s0: BTreeSet<&String> = s0.iter().collect();
                let s1: BTreeSet<&String> = s1.iter().collect();
                let gains: Vec<&str> = s1.difference(&s0).map(|s| s.as_str()).collect();
                let loses: Vec<&str> = s0.difference(&s1).map(|s| s.as_str()).collect();
                let mut parts = Vec::new();
                if t0 != t1 {
                    parts.push(format!("moves from team {t0} to team {t1}"));
                }
                if !gains.is_empty() {
                    parts.push(format!("gains {}", gains.join(", ")));
                }
                if !loses.is_empty() {
                    parts.push(format!("loses {}", loses.join(", ")));
                }
                if !parts.is_empty() {
                    out.push(format!("~ {p}: {}", parts.join("; ")));
                }
            }
            _ if rights(&was) != rights(&is) => {
                out.push(format!("~ {p}: {} -> {}", rights(&was), rights(&is)));
            }
            _ => {}
        }
    }
    keys(old, new, &after, &mut out);
    access_keys(&old.aws_access_keys, &new.aws_access_keys, &mut out);
    out
}

fn keys(old: &Tenancy, new: &Tenancy, after: &BTreeSet<String>, out: &mut Vec<String>) {
    let none = Vec::new();
    for p in after {
        let k0: BTreeSet<&String> = old.nkeys.get(p).unwrap_or(&none).iter().collect();
        let k1: BTreeSet<&String> = new.nkeys.get(p).unwrap_or(&none).iter().collect();
        let added: Vec<String> = k1.difference(&k0).map(|k| short(k)).collect();
        let removed: Vec<String> = k0.difference(&k1).map(|k| short(k)).collect();
        if !added.is_empty() {
            out.push(format!("+ {p}: NATS key {}", added.join(", ")));
        }
        if !removed.is_empty() {
            out.push(format!(
                "- {p}: NATS key {} (connections made with it are closed)",
                removed.join(", ")
            ));
        }
    }
}

fn access_keys(
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
    out: &mut Vec<String>,
) {
    for (id, who) in new {
        match old.get(id) {
            None => out.push(format!("+ access key {id}: acts for {who}")),
            Some(was) if was != who => {
                out.push(format!("~ access key {id}: acted for {was}, now for {who}"));
            }
            Some(_) => {}
        }
    }
    for (id, who) in old {
        if !new.contains_key(id) {
            out.push(format!(
                "- access key {id} (of {who}): refused by the gateway and the console; console sessions signed in with it end"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> Tenancy {
        Tenancy::parse(text).expect("valid")
    }

    const BASE: &str = "teams:\n  vision: {shares: [training/QS1], users: [alice]}\n  speech: {shares: [training/QS2], users: [bob]}\nadmins: [platform]\nservices: {admission: [admission], scheduler: [scheduler], gateway: [gw]}\nawsAccessKeys: {AKIAALICE0000001: alice}\n";

    #[test]
    fn the_same_tenancy_changes_nothing() {
        assert!(changes(&t(BASE), &t(BASE)).is_empty());
    }

    #[test]
    fn who_gains_and_loses_what_is_named() {
        let new = BASE
            .replace("[training/QS1]", "[training/QS1, training/QS3]")
            .replace("users: [bob]", "users: [carol]")
            .replace("AKIAALICE0000001: alice", "AKIAALICE0000002: alice");
        let lines = changes(&t(BASE), &t(&new));
        assert!(
            lines.contains(&"~ alice: gains training/QS3".to_string()),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"+ carol: added as team speech (training/QS2)".to_string()),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("- bob: removed (was team speech")),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"+ access key AKIAALICE0000002: acts for alice".to_string()),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("- access key AKIAALICE0000001 (of alice): refused")),
            "{lines:?}"
        );
        assert_eq!(lines.len(), 5, "{lines:?}");
    }

    #[test]
    fn a_role_change_and_a_key_rotation_are_named() {
        let a = nkeys::KeyPair::new_user().public_key();
        let b = nkeys::KeyPair::new_user().public_key();
        let old = t(&format!("{BASE}nkeys: {{alice: [{a}]}}\n"));
        let new = t(&format!(
            "{}nkeys: {{alice: [{b}]}}\n",
            BASE.replace("admins: [platform]", "admins: [platform]\nreaders: [bob]")
                .replace(
                    "  speech: {shares: [training/QS2], users: [bob]}\n",
                    "  speech: {shares: [training/QS2], users: [dan]}\n"
                )
        ));
        let lines = changes(&old, &new);
        assert!(
            lines.contains(&"~ bob: team speech (training/QS2) -> reader".to_string()),
            "{lines:?}"
        );
        assert!(
            lines.contains(&format!("+ alice: NATS key {}", short(&b))),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("- alice: NATS key {}", short(&a)))),
            "{lines:?}"
        );
    }
}

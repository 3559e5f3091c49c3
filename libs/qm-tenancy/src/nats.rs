//! What the tenancy file compiles to for the NATS server: one user per
//! principal, authenticated by its nkey, with publish and subscribe
//! permissions that allow exactly what its role needs (everything else is
//! refused by the server), and the principal's credentials file.
//!
//! The permission lists are the least privilege each role needs:
//! - a team member, reader or admin publishes only API requests under its
//!   own name (`qm.v1.api.<principal>.>`, which is how admission knows who
//!   asked) and receives only its own replies (`_INBOX_<principal>.>`) and
//!   the events of the shares it may read;
//! - only admission writes submits, configuration and registrations to the
//!   log and creates the streams and buckets;
//! - only the scheduler publishes executor commands, writes decisions
//!   (`qm.v1.log.sched`) and holds the leader lease;
//! - an executor receives only its own commands and log requests and
//!   publishes only its own reports and heartbeats, its registration
//!   request and requests to its own node's checkpoint service;
//! - a checkpoint service answers only its own nodes' requests and writes
//!   only its own nodes' commits.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use qm_wire::subjects;

use crate::{Grant, Role, Tenancy};

/// A principal's publish and subscribe allow-lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Permissions {
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
    /// May answer requests it received (publish once to their reply subject).
    pub responds: bool,
}

/// JetStream API subjects for reading `stream` through consumers (ordered
/// push consumers deliver to the reader's own inbox).
fn stream_reader(stream: &str, out: &mut Vec<String>) {
    for api in [
        format!("$JS.API.STREAM.INFO.{stream}"),
        format!("$JS.API.CONSUMER.CREATE.{stream}"),
        format!("$JS.API.CONSUMER.CREATE.{stream}.>"),
        format!("$JS.API.CONSUMER.DELETE.{stream}.>"),
        format!("$JS.API.CONSUMER.INFO.{stream}.>"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.>"),
        format!("$JS.API.STREAM.MSG.GET.{stream}"),
        format!("$JS.API.DIRECT.GET.{stream}"),
        format!("$JS.API.DIRECT.GET.{stream}.>"),
        format!("$JS.ACK.{stream}.>"),
        format!("$JS.FC.{stream}.>"),
    ] {
        out.push(api);
    }
}

/// Reading keys of a KV bucket (`get`, `entry`, `keys`, `watch`).
fn kv_reader(bucket: &str, out: &mut Vec<String>) {
    stream_reader(&format!("KV_{bucket}"), out);
}

/// Reading and writing a KV bucket.
fn kv_writer(bucket: &str, out: &mut Vec<String>) {
    kv_reader(bucket, out);
    out.push(format!("$KV.{bucket}.>"));
}

fn team_events(grant: &Grant) -> Vec<String> {
    let share = grant.share.as_deref().unwrap_or("*");
    [
        subjects::JOB_EVENTS,
        subjects::PREEMPTION_EVENTS,
        subjects::CHECKPOINT_EVENTS,
    ]
    .iter()
    .map(|prefix| format!("{prefix}.{}.{share}.>", grant.queue))
    .collect()
}

/// The inboxes of the principals with the given roles: where a service
/// that answers their requests may publish its replies. Granted besides
/// `allow_responses`, because nats-server forgets which replies a
/// connection may send when it reloads its authorization: without these,
/// every reply in flight at a `qm tenancy sync-nats` reload would be
/// refused (ADR 0020).
fn inboxes_of(tenancy: &Tenancy, roles: &[&str]) -> Vec<String> {
    tenancy
        .principals()
        .into_iter()
        .filter(|p| {
            let label = match tenancy.role(p) {
                Some(Role::Admission) => "admission",
                Some(Role::Scheduler) => "scheduler",
                Some(Role::Executor(_)) => "executor",
                _ => "",
            };
            roles.contains(&label)
        })
        .map(|p| format!("_INBOX_{p}.>"))
        .collect()
}

/// The permissions of `principal` under `tenancy` (None: not declared).
pub fn permissions(tenancy: &Tenancy, principal: &str) -> Option<Permissions> {
    let role = tenancy.role(principal)?;
    let api = |p: &str| format!("{}.{p}.>", subjects::API_PREFIX);
    let inbox = |p: &str| format!("_INBOX_{p}.>");
    let mut perms = Permissions {
        subscribe: vec![inbox(principal)],
        ..Permissions::default()
    };
    match role {
        Role::Admin | Role::Reader => {
            perms.publish.push(api(principal));
            perms.subscribe.push("qm.v1.events.>".into());
        }
        Role::Team { shares, .. } => {
            perms.publish.push(api(principal));
            for grant in shares.iter().filter_map(|s| Grant::parse(s).ok()) {
                perms.subscribe.extend(team_events(&grant));
            }
        }
        Role::Admission => admission_permissions(tenancy, &mut perms),
        Role::Scheduler => scheduler_permissions(tenancy, &mut perms),
        Role::Executor(identity) => {
            perms.responds = true;
            let p = &mut perms.publish;
            // It answers admission's log requests (see `inboxes_of`).
            p.extend(inboxes_of(tenancy, &["admission", "scheduler"]));
            p.push(format!(
                "{}.{principal}.{}",
                subjects::API_PREFIX,
                subjects::Operation::RegisterExecutor.name()
            ));
            for id in &identity.executors {
                p.push(format!("{}.exec.{id}", subjects::LOG_PREFIX));
                p.push(format!("{}.{id}.heartbeat", subjects::EXEC_PREFIX));
                perms
                    .subscribe
                    .push(format!("{}.{id}.command", subjects::EXEC_PREFIX));
                perms
                    .subscribe
                    .push(format!("{}.{id}.logs", subjects::EXEC_PREFIX));
            }
            for node in identity.nodes() {
                p.push(format!("{}.{node}.*", subjects::CKPT_PREFIX));
            }
            // The fencing epoch comes from the leader's lease, read here.
            kv_reader(subjects::LEADER_BUCKET, p);
        }
        Role::Gateway => {
            // Its own API subject (admission believes its Qm-Caller header
            // only there), and the bucket of what AWS Batch has and
            // Quartermaster does not (tags, scheduling policies, service
            // environments, submitted payloads).
            perms.publish.push(api(principal));
            let p = &mut perms.publish;
            p.push("$JS.API.INFO".into());
            for name in [subjects::GATEWAY_BUCKET, subjects::GATEWAY_JOBS_BUCKET] {
                p.push(format!("$JS.API.STREAM.CREATE.KV_{name}"));
                kv_writer(name, p);
            }
            // Which access key acts for whom follows the tenancy in effect.
            kv_reader(subjects::TENANCY_BUCKET, p);
        }
        Role::Console => {
            // Its own API subject (admission believes its Qm-Caller header
            // only there, and only for people), and every event, which it
            // filters per viewer by the same rules as the API.
            perms.publish.push(api(principal));
            perms.subscribe.push("qm.v1.events.>".into());
            // Who may sign in, and with which key, follows the tenancy.
            kv_reader(subjects::TENANCY_BUCKET, &mut perms.publish);
        }
        Role::NatsAuth => {
            // It reads the tenancy in effect, and nothing else.
            kv_reader(subjects::TENANCY_BUCKET, &mut perms.publish);
        }
        Role::Checkpoint(identity) => {
            perms.responds = true;
            let p = &mut perms.publish;
            // It answers the executors' requests (see `inboxes_of`).
            p.extend(inboxes_of(tenancy, &["executor", "admission", "scheduler"]));
            for node in &identity.nodes {
                perms
                    .subscribe
                    .push(format!("{}.{node}.*", subjects::CKPT_PREFIX));
                p.push(format!("{}.checkpoint.{node}", subjects::LOG_PREFIX));
            }
            p.push(format!("{}.>", subjects::CHECKPOINT_EVENTS));
            // A share's checkpointS3Prefixes are read from the configuration.
            kv_reader(subjects::CONFIG_BUCKET, p);
        }
    }
    Some(perms)
}

/// Admission's permissions: it answers everyone's API requests, appends to
/// the log and sets up the streams and buckets every service uses.
fn admission_permissions(tenancy: &Tenancy, perms: &mut Permissions) {
    let inbox = |p: &str| format!("_INBOX_{p}.>");
    perms.responds = true;
    perms
        .subscribe
        .push(format!("{}.*.*", subjects::API_PREFIX));
    let p = &mut perms.publish;
    // It answers everyone's API requests (see `inboxes_of`). Each
    // inbox is named: `*` is a wildcard only as a whole token, so
    // `_INBOX_*.>` would grant nothing.
    // (Not the services admission itself asks, nor the other
    // replicas: no reply of theirs could be forged.)
    p.extend(
        tenancy
            .principals()
            .into_iter()
            .filter(|p| {
                !matches!(
                    tenancy.role(p),
                    Some(Role::Admission | Role::Scheduler | Role::NatsAuth)
                )
            })
            .map(|p| inbox(&p)),
    );
    for s in ["submit", "config", "register"] {
        p.push(format!("{}.{s}.*", subjects::LOG_PREFIX));
    }
    p.push(subjects::SCHED_REQUEST.into());
    p.push(format!("{}.*.logs", subjects::EXEC_PREFIX));
    // Admission sets up the streams and buckets every service uses
    // (creating a bucket first reads the account's limits).
    p.push("$JS.API.INFO".into());
    for stream in [
        subjects::LOG_STREAM.to_string(),
        subjects::EVENTS_STREAM.to_string(),
        format!("KV_{}", subjects::CONFIG_BUCKET),
        format!("KV_{}", subjects::TOKENS_BUCKET),
        format!("KV_{}", subjects::LEADER_BUCKET),
        format!("KV_{}", subjects::TENANCY_BUCKET),
        subjects::ARCHIVE_STREAM.to_string(),
        subjects::AUDIT_STREAM.to_string(),
        format!("OBJ_{}", subjects::SNAPSHOT_BUCKET),
    ] {
        p.push(format!("$JS.API.STREAM.CREATE.{stream}"));
        p.push(format!("$JS.API.STREAM.INFO.{stream}"));
    }
    // ...and keeps the retention of what ages out as its settings say.
    for stream in [
        subjects::EVENTS_STREAM.to_string(),
        format!("KV_{}", subjects::TOKENS_BUCKET),
        subjects::ARCHIVE_STREAM.to_string(),
        subjects::AUDIT_STREAM.to_string(),
    ] {
        p.push(format!("$JS.API.STREAM.UPDATE.{stream}"));
    }
    // It copies every accepted write from the log (a durable
    // consumer) to the audit stream, which `qm audit` reads.
    stream_reader(subjects::LOG_STREAM, p);
    p.push(format!(
        "$JS.API.CONSUMER.DURABLE.CREATE.{}.{}",
        subjects::LOG_STREAM,
        subjects::AUDIT_COPIER
    ));
    p.push(format!("{}.>", subjects::AUDIT_PREFIX));
    stream_reader(subjects::AUDIT_STREAM, p);
    // ListEvents reads the stored events for callers (frames mix
    // every team's events, so no team reads the stream itself).
    stream_reader(subjects::EVENTS_STREAM, p);
    kv_writer(subjects::CONFIG_BUCKET, p);
    kv_writer(subjects::TOKENS_BUCKET, p);
    // It stores the tenancy's revisions (`qm tenancy apply`).
    kv_writer(subjects::TENANCY_BUCKET, p);
}

/// A scheduler's permissions: it answers relays, probes and heartbeats,
/// commands executors, and keeps the log, snapshots and archive.
fn scheduler_permissions(tenancy: &Tenancy, perms: &mut Permissions) {
    perms.responds = true;
    perms.subscribe.push(subjects::SCHED_REQUEST.into());
    perms
        .subscribe
        .push(format!("{}.*.heartbeat", subjects::EXEC_PREFIX));
    // Schedulers probe each other's presence (leader.rs).
    let presence = format!("{}.*", subjects::SCHED_PRESENCE_PREFIX);
    perms.subscribe.push(presence.clone());
    let p = &mut perms.publish;
    // It answers admission's relays, the other schedulers' probes
    // and the executors' heartbeats (see `inboxes_of`).
    p.extend(inboxes_of(tenancy, &["admission", "scheduler", "executor"]));
    p.push(presence);
    p.push(format!("{}.*.command", subjects::EXEC_PREFIX));
    p.push(subjects::LOG_SCHED.into());
    p.push("qm.v1.events.>".into());
    stream_reader(subjects::LOG_STREAM, p);
    stream_reader(subjects::EVENTS_STREAM, p);
    kv_writer(subjects::LEADER_BUCKET, p);
    // Truncates the log behind its snapshots, which it writes and
    // prunes, and archives finished jobs.
    p.push(format!("$JS.API.STREAM.PURGE.{}", subjects::LOG_STREAM));
    let snapshots = format!("OBJ_{}", subjects::SNAPSHOT_BUCKET);
    stream_reader(&snapshots, p);
    p.push(format!("$JS.API.STREAM.PURGE.{snapshots}"));
    p.push(format!("$O.{}.>", subjects::SNAPSHOT_BUCKET));
    p.push(format!("{}.>", subjects::ARCHIVE_PREFIX));
    stream_reader(subjects::ARCHIVE_STREAM, p);
}

fn quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Each principal's public nkeys: those the tenancy lists under `nkeys`,
/// else the one of its credentials file (`dir_keys`, from [`ensure_keys`]).
pub fn public_keys(
    tenancy: &Tenancy,
    dir_keys: &BTreeMap<String, String>,
) -> BTreeMap<String, Vec<String>> {
    tenancy
        .principals()
        .into_iter()
        .filter_map(|p| {
            let keys = match tenancy.nkeys.get(&p) {
                Some(k) if !k.is_empty() => k.clone(),
                _ => vec![dir_keys.get(&p)?.clone()],
            };
            Some((p, keys))
        })
        .collect()
}

/// The `authorization { users = [...] }` block of a nats-server
/// configuration: one user per principal and key (a principal rotating its
/// key has two), each with the principal's permissions. `keys` maps each
/// principal to its public nkeys (see [`public_keys`]).
pub fn authorization(
    tenancy: &Tenancy,
    keys: &BTreeMap<String, Vec<String>>,
) -> Result<String, String> {
    let missing: Vec<String> = tenancy
        .principals()
        .into_iter()
        .filter(|p| keys.get(p).is_none_or(Vec::is_empty))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "no public nkey for {} (give them keys: `qm tenancy apply --keys DIR`, or `nkeys` in the tenancy)",
            missing.join(", ")
        ));
    }
    authorization_of_keyed(tenancy, keys).map(|(text, _)| text)
}

/// The authorization of the principals that have keys (a principal
/// without one could not connect anyway), and the names of those skipped.
/// Err when no principal has a key: that authorization would let no one
/// in, the services included.
pub fn authorization_of_keyed(
    tenancy: &Tenancy,
    keys: &BTreeMap<String, Vec<String>>,
) -> Result<(String, Vec<String>), String> {
    let (keyed, skipped): (Vec<String>, Vec<String>) = tenancy
        .principals()
        .into_iter()
        .partition(|p| keys.get(p).is_some_and(|k| !k.is_empty()));
    if keyed.is_empty() {
        return Err("no principal has a NATS key yet (apply the tenancy once with `qm tenancy apply --keys DIR`)".into());
    }
    let mut out = String::from(
        "# Generated by Quartermaster from the tenancy (`qm auth`, `qm tenancy sync-nats`):\n\
         # change the tenancy, not this file.\n\
         authorization {\n  users = [\n",
    );
    for principal in &keyed {
        let perms = permissions(tenancy, principal)
            .ok_or_else(|| format!("principal {principal:?} has no role"))?;
        let role = tenancy
            .role(principal)
            .map(|r| r.label())
            .unwrap_or_default();
        for key in keys.get(principal).into_iter().flatten() {
            user(&mut out, principal, &role, key, &perms);
        }
    }
    out.push_str("  ]\n}\n");
    Ok((out, skipped))
}

fn user(out: &mut String, principal: &str, role: &str, key: &str, perms: &Permissions) {
    let _ = writeln!(out, "    # {principal} ({role})");
    let _ = writeln!(out, "    {{ nkey: \"{key}\", permissions: {{");
    let _ = writeln!(
        out,
        "        publish: {{ allow: {} }}",
        quoted_list(&perms.publish)
    );
    let _ = writeln!(
        out,
        "        subscribe: {{ allow: {} }}",
        quoted_list(&perms.subscribe)
    );
    if perms.responds {
        let _ = writeln!(out, "        allow_responses: true");
    }
    let _ = writeln!(out, "    }} }}");
}

/// First line of a credentials file `qm auth` writes: names the principal,
/// so clients know which API subject and inbox are theirs.
const HEADER: &str = "# quartermaster principal: ";

/// A principal's credentials file: `<dir>/<principal>.nk`.
pub fn key_path(dir: &Path, principal: &str) -> PathBuf {
    dir.join(format!("{principal}.nk"))
}

/// Reads a credentials file: the principal named in its header (if any)
/// and the nkey seed.
pub fn read_key_file(path: &Path) -> Result<(Option<String>, String), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the nkey file {}: {e}", path.display()))?;
    let mut principal = None;
    let mut seed = None;
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix(HEADER) {
            principal = Some(name.trim().to_string());
        } else if line.starts_with("SU") {
            seed = Some(line.to_string());
        }
    }
    let seed = seed.ok_or_else(|| {
        format!(
            "{} holds no user nkey seed (a line starting with SU)",
            path.display()
        )
    })?;
    nkeys::KeyPair::from_seed(&seed)
        .map_err(|e| format!("{}: not a valid nkey seed: {e}", path.display()))?;
    Ok((principal, seed))
}

/// Makes sure every principal has a credentials file in `dir` (existing
/// ones are kept, so re-running after adding a team changes no one else's
/// key); returns each principal's public key. New files are created with
/// mode 0600.
pub fn ensure_keys(tenancy: &Tenancy, dir: &Path) -> Result<BTreeMap<String, String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut keys = BTreeMap::new();
    for principal in tenancy.principals() {
        let public = ensure_key(&key_path(dir, &principal), &principal)?;
        keys.insert(principal, public);
    }
    Ok(keys)
}

/// The public key of the credentials file at `path`, which is made (mode
/// 0600, a new seed, naming `principal`) when it does not exist; and the
/// seed alone beside it ([`seed_path`]), made when missing.
pub fn ensure_key(path: &Path, principal: &str) -> Result<String, String> {
    if path.exists() {
        let (_, seed) = read_key_file(path)?;
        ensure_seed_file(path, &seed)?;
        return public_key_of(path);
    }
    let pair = nkeys::KeyPair::new_user();
    let seed = pair
        .seed()
        .map_err(|e| format!("cannot encode a new nkey seed: {e}"))?;
    let text = format!(
        "{HEADER}{principal}\n# Keep this file secret: it is {principal}'s NATS credential.\n{seed}\n"
    );
    write_private(path, text.as_bytes())?;
    ensure_seed_file(path, &seed)?;
    Ok(pair.public_key())
}

/// Where the seed of the credentials file `nk` is kept alone, for NATS's
/// own clients and tools, which take a file holding nothing but the seed
/// (nats-py's `nkeys_seed`, the `nats` CLI's `--nkey`): `alice.nk` ->
/// `alice.seed`, `alice.nk.next` -> `alice.seed.next`.
pub fn seed_path(nk: &Path) -> PathBuf {
    let name = nk
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let seed = match name.rfind(".nk") {
        Some(at) => format!("{}.seed{}", &name[..at], &name[at + 3..]),
        None => format!("{name}.seed"),
    };
    nk.with_file_name(seed)
}

/// Writes the seed-only file of `nk` (mode 0600) unless it already holds
/// that seed.
fn ensure_seed_file(nk: &Path, seed: &str) -> Result<(), String> {
    let path = seed_path(nk);
    if std::fs::read_to_string(&path).is_ok_and(|t| t.trim() == seed) {
        return Ok(());
    }
    let _ = std::fs::remove_file(&path);
    write_private(&path, format!("{seed}\n").as_bytes())
}

/// The public key of the seed in the credentials file at `path`.
pub fn public_key_of(path: &Path) -> Result<String, String> {
    let (_, seed) = read_key_file(path)?;
    Ok(nkeys::KeyPair::from_seed(&seed)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .public_key())
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenancy() -> Tenancy {
        Tenancy::parse(crate::tests::EXAMPLE).expect("valid")
    }

    #[test]
    fn teams_publish_only_under_their_name_and_hear_only_their_shares() {
        let t = tenancy();
        let p = permissions(&t, "alice").expect("declared");
        assert_eq!(p.publish, vec!["qm.v1.api.alice.>"]);
        assert!(p.subscribe.contains(&"_INBOX_alice.>".to_string()));
        assert!(p
            .subscribe
            .contains(&"qm.v1.events.job.training.QS1.>".to_string()));
        assert!(!p.subscribe.iter().any(|s| s.contains("QS2")));
        assert!(!p.responds);
        let bob = permissions(&t, "bob").expect("declared");
        assert!(bob
            .subscribe
            .contains(&"qm.v1.events.job.research.*.>".to_string()));
    }

    /// Whether the NATS subject pattern `pattern` (with `*` and `>`)
    /// matches `subject`.
    fn matches(pattern: &str, subject: &str) -> bool {
        let (mut p, mut s) = (pattern.split('.'), subject.split('.'));
        loop {
            match (p.next(), s.next()) {
                (Some(">"), Some(_)) => return true,
                (Some("*"), Some(_)) => {}
                (Some(a), Some(b)) if a == b => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    #[test]
    fn only_the_scheduler_commands_executors_and_only_admission_writes_submits() {
        let t = tenancy();
        for principal in t.principals() {
            let p = permissions(&t, &principal).expect("declared");
            let commands = p.publish.iter().any(|s| s.ends_with(".command"));
            assert_eq!(commands, principal == "scheduler", "{principal}");
            let submits = p.publish.iter().any(|s| s.starts_with("qm.v1.log.submit"));
            assert_eq!(submits, principal == "admission", "{principal}");
            let decisions = p.publish.iter().any(|s| s == "qm.v1.log.sched");
            assert_eq!(decisions, principal == "scheduler", "{principal}");
            // Nobody else can answer for the leader (and so delay a
            // failover) or probe for it.
            let presence = |l: &[String]| l.iter().any(|s| s.starts_with("qm.v1.sched.presence"));
            assert_eq!(
                presence(&p.subscribe),
                principal == "scheduler",
                "{principal}"
            );
            assert_eq!(
                presence(&p.publish),
                principal == "scheduler",
                "{principal}"
            );
            assert!(
                !p.publish.iter().any(|s| s == ">" || s == "$JS.API.>"),
                "{principal}"
            );
            // The stored events mix every team's: only the scheduler
            // (which writes them) and admission (ListEvents, which
            // filters them per caller) read the stream.
            let reads_events = [
                "$JS.API.CONSUMER.CREATE.QM_EVENTS",
                "$JS.API.CONSUMER.CREATE.QM_EVENTS.c.qm.v1.events.frames",
                "$JS.API.CONSUMER.MSG.NEXT.QM_EVENTS.c",
                "$JS.API.DIRECT.GET.QM_EVENTS",
                "$JS.API.STREAM.MSG.GET.QM_EVENTS",
            ]
            .iter()
            .any(|subject| p.publish.iter().any(|pattern| matches(pattern, subject)));
            assert_eq!(
                reads_events,
                principal == "scheduler" || principal == "admission",
                "{principal}"
            );
        }
        let node = permissions(&t, "node-1").expect("declared");
        assert!(node
            .subscribe
            .contains(&"qm.v1.exec.node-1.command".to_string()));
        assert!(!node.subscribe.iter().any(|s| s.contains("gpu-1")));
        assert!(node.publish.contains(&"qm.v1.ckpt.node-1.*".to_string()));
        let pool = permissions(&t, "gpu-pool").expect("declared");
        assert!(pool.publish.contains(&"qm.v1.ckpt.gpu-pool.*".to_string()));
        assert!(pool.publish.contains(&"qm.v1.log.exec.gpu-2".to_string()));
    }

    #[test]
    fn keys_are_kept_across_runs_and_the_config_names_every_principal() {
        let t = tenancy();
        let dir = std::env::temp_dir().join(format!("qm-tenancy-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = ensure_keys(&t, &dir).expect("keys");
        let again = ensure_keys(&t, &dir).expect("keys");
        assert_eq!(first, again, "existing keys are kept");
        let (principal, seed) = read_key_file(&key_path(&dir, "alice")).expect("readable");
        assert_eq!(principal.as_deref(), Some("alice"));
        // The seed alone beside it, private too, for NATS's own clients.
        let alone = seed_path(&key_path(&dir, "alice"));
        assert_eq!(alone, dir.join("alice.seed"));
        assert_eq!(
            std::fs::read_to_string(&alone).expect("seed file").trim(),
            seed
        );
        assert_eq!(
            std::fs::metadata(&alone)
                .expect("exists")
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        std::fs::remove_file(&alone).expect("removed");
        ensure_keys(&t, &dir).expect("keys");
        assert!(
            alone.exists(),
            "made again for a file made before it existed"
        );
        assert_eq!(
            seed_path(Path::new("d/alice.nk.next")),
            Path::new("d/alice.seed.next")
        );
        assert_eq!(
            nkeys::KeyPair::from_seed(&seed).expect("seed").public_key(),
            first["alice"]
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(key_path(&dir, "alice"))
            .expect("exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let conf = authorization(&t, &public_keys(&t, &first)).expect("config");
        for principal in t.principals() {
            assert!(conf.contains(&first[&principal]), "{principal}");
        }
        assert!(conf.contains("allow_responses: true"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

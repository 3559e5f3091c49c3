//! `qm tenancy`: change who may do what while everything runs (ADR 0020).
//!
//! `apply` stores a new revision (admins; checked whole; `--dry-run`
//! shows who gains and loses what), `diff` compares a file with the
//! revision in effect, `show` and `history` read the stored revisions,
//! `rotate-key` gives a principal a second NATS key and later retires the
//! first, and `sync-nats` keeps a NATS server's authorization file in
//! step with the tenancy in effect and has the server reload it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use qm_service::client::Client;
use qm_tenancy::live::{
    ApplyTenancy, ApplyTenancyResponse, DescribeTenancy, ListTenancyRevisions,
    ListTenancyRevisionsResponse, TenancyRevision,
};
use qm_tenancy::Tenancy;
use qm_wire::messages::ErrorCode;
use qm_wire::subjects;

use super::failure::{usage, Failure};
use super::output::{print_json, rfc3339, table};

#[derive(clap::Subcommand, Debug)]
pub enum TenancyCommand {
    /// Check a tenancy file whole and store it as the revision in effect
    /// (admins only). Admission, the gateway and the console act on it at
    /// once, with no restart; NATS servers follow when `qm tenancy
    /// sync-nats` has rewritten their authorization. A principal the file
    /// lists no `nkeys` for keeps the keys it has; a new one gets its key
    /// from --keys DIR (made there, as `qm auth` does, if missing).
    #[command(
        after_help = "Examples:\n  qm tenancy apply -f tenancy.yaml --keys /etc/quartermaster/auth --dry-run\n  qm tenancy apply -f tenancy.yaml --keys /etc/quartermaster/auth\n  qm tenancy apply -f tenancy.yaml --expect-revision 7   # refused if someone changed it since"
    )]
    Apply {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Credentials directory (`qm auth --out`): new principals' keys
        /// are taken from (or made in) `DIR/<principal>.nk`.
        #[arg(long, value_name = "DIR")]
        keys: Option<PathBuf>,
        /// Check it and show who gains and loses what; store nothing.
        #[arg(long)]
        dry_run: bool,
        /// Apply only if this revision is still in effect.
        #[arg(long, value_name = "N")]
        expect_revision: Option<u64>,
    },
    /// Who would gain and lose what if a tenancy file were applied
    /// (compared with the revision in effect; nothing is sent but a read).
    #[command(after_help = "Example:\n  qm tenancy diff -f tenancy.yaml")]
    Diff {
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Print the tenancy in effect (or an earlier revision) as YAML, keys
    /// included (public keys only: no secret is ever stored).
    #[command(
        after_help = "Examples:\n  qm tenancy show > tenancy.yaml   # edit, then qm tenancy apply -f tenancy.yaml\n  qm tenancy show --revision 3"
    )]
    Show {
        #[arg(long, value_name = "N")]
        revision: Option<u64>,
    },
    /// The stored revisions, newest first: when, by whom, how, and who
    /// gained and lost what (the last 64; every change is also in `qm audit`).
    History,
    /// Rotate a principal's NATS key with an overlap: the first run makes
    /// a new key (`DIR/<principal>.nk.next`) and lets the principal connect
    /// with either; give them the new file, then run again with --finish:
    /// the old key stops working (its connections are closed) and the new
    /// file replaces `DIR/<principal>.nk`.
    #[command(
        after_help = "Example:\n  qm tenancy rotate-key alice --keys /etc/quartermaster/auth\n  # give alice /etc/quartermaster/auth/alice.nk.next; once she uses it:\n  qm tenancy rotate-key alice --keys /etc/quartermaster/auth --finish"
    )]
    RotateKey {
        /// The principal whose key is rotated (named `who` inside: the
        /// global --principal is yours).
        #[arg(value_name = "PRINCIPAL")]
        who: String,
        #[arg(long, value_name = "DIR")]
        keys: PathBuf,
        /// Retire the old key: only the new one works from now on.
        #[arg(long)]
        finish: bool,
    },
    /// Keep a NATS server's authorization in step with the tenancy in
    /// effect: at every revision, write the `authorization { ... }` block
    /// to --out (the file the server's configuration includes) and have
    /// the server reload it. Runs until stopped (one per NATS server, next
    /// to it); acts as a `services.natsAuth` principal.
    #[command(
        after_help = "Examples:\n  qm --nkey nats-auth.nk tenancy sync-nats --out /etc/nats/qm-auth.conf --pid-file /var/run/nats/nats.pid\n  qm --nkey nats-auth.nk tenancy sync-nats --out /etc/nats/qm-auth.conf -- nats-server --signal reload=/var/run/nats/nats.pid\n  qm --nkey nats-auth.nk tenancy sync-nats --out /etc/nats/qm-auth.conf --once"
    )]
    SyncNats(SyncNatsArgs),
}

#[derive(clap::Args, Debug)]
pub struct SyncNatsArgs {
    /// The authorization file to keep (written whole, then renamed in place).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// nats-server's pid file (its `pid_file` setting): the server is
    /// sent SIGHUP, which makes it reload its configuration.
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
    /// Write the revision in effect once, reload, and exit.
    #[arg(long)]
    pub once: bool,
    /// Instead of --pid-file: a command that makes the server reload (run
    /// without a shell; it must exit 0).
    #[arg(last = true, value_name = "RELOAD COMMAND")]
    pub reload_command: Vec<String>,
}

fn read_file(file: &Path) -> Result<Tenancy, Failure> {
    Tenancy::load(file).map_err(|e| usage(e.to_string()))
}

/// The revision in effect (None: none stored yet).
async fn in_effect(c: &Client) -> Result<Option<TenancyRevision>, Failure> {
    match c.describe_tenancy(&DescribeTenancy::default()).await {
        Ok(r) => Ok(Some(r)),
        Err(qm_service::client::CallError::Api(e)) if e.code == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn print_changes(changes: &[String]) {
    if changes.is_empty() {
        println!("  (no one's rights change)");
    }
    for line in changes {
        println!("  {line}");
    }
}

pub async fn apply(
    c: &Client,
    file: &Path,
    keys: Option<&Path>,
    (dry_run, expected_revision): (bool, Option<u64>),
    json: bool,
) -> Result<(), Failure> {
    let mut tenancy = read_file(file)?;
    let mut before = None;
    if let Some(dir) = keys {
        before = in_effect(c).await?;
        let has = |p: &str| {
            before
                .as_ref()
                .is_some_and(|b| b.tenancy.nkeys.get(p).is_some_and(|k| !k.is_empty()))
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure(format!("cannot create {}: {e}", dir.display()), 1))?;
        for p in tenancy.principals() {
            if tenancy.nkeys.get(&p).is_none_or(Vec::is_empty) && !has(&p) {
                let path = qm_tenancy::nats::key_path(dir, &p);
                let made = !path.exists();
                let public = qm_tenancy::nats::ensure_key(&path, &p).map_err(|e| Failure(e, 1))?;
                if made && !json {
                    eprintln!("qm: made {} (give it to {p} only)", path.display());
                }
                tenancy.nkeys.insert(p, vec![public]);
            }
        }
    }
    let after = tenancy.principals();
    let r: ApplyTenancyResponse = c
        .apply_tenancy(&ApplyTenancy {
            tenancy,
            dry_run,
            expected_revision,
        })
        .await?;
    // A removed principal's credentials file is set aside, so adding the
    // name again later makes a new key instead of reviving the old one.
    if let (Some(dir), Some(before), true) = (keys, &before, r.applied) {
        let now: std::collections::BTreeSet<String> = after.into_iter().collect();
        for gone in before
            .tenancy
            .principals()
            .into_iter()
            .filter(|p| !now.contains(p))
        {
            let path = qm_tenancy::nats::key_path(dir, &gone);
            let _ = std::fs::rename(
                qm_tenancy::nats::seed_path(&path),
                dir.join(format!("{gone}.seed.removed-{}", r.revision)),
            );
            if path.exists() {
                let aside = dir.join(format!("{gone}.nk.removed-{}", r.revision));
                match std::fs::rename(&path, &aside) {
                    Ok(()) if !json => eprintln!(
                        "qm: {gone} was removed: {} is now {}",
                        path.display(),
                        aside.display()
                    ),
                    Ok(()) => {}
                    Err(e) => eprintln!("qm: warning: cannot set {} aside: {e}", path.display()),
                }
            }
        }
    }
    if json {
        print_json(&r);
    } else if r.applied {
        println!(
            "tenancy revision {} applied (replacing {}):",
            r.revision, r.previous_revision
        );
        print_changes(&r.changes);
        println!("admission, the gateway and the console act on it now; each NATS server once `qm tenancy sync-nats` has reloaded it");
    } else if dry_run {
        println!(
            "dry run against revision {}: valid; applying it would change:",
            r.previous_revision
        );
        print_changes(&r.changes);
    } else {
        println!(
            "revision {} is already this tenancy: nothing to do",
            r.revision
        );
    }
    Ok(())
}

pub async fn diff(c: &Client, file: &Path, json: bool) -> Result<(), Failure> {
    let mut tenancy = read_file(file)?;
    let before = in_effect(c).await?;
    let empty = Tenancy::default();
    let old = before.as_ref().map_or(&empty, |b| &b.tenancy);
    tenancy.keep_keys_from(old);
    let changes = qm_tenancy::changes(old, &tenancy);
    let missing = tenancy.missing_keys();
    let revision = before.as_ref().map_or(0, |b| b.revision);
    if json {
        print_json(&serde_json::json!({
            "revision": revision,
            "changes": changes,
            "withoutKeys": missing,
        }));
        return Ok(());
    }
    println!("{} against revision {revision}:", file.display());
    print_changes(&changes);
    if !missing.is_empty() {
        println!(
            "no NATS key yet for {}: apply with --keys DIR to make them",
            missing.join(", ")
        );
    }
    Ok(())
}

pub async fn show(c: &Client, revision: Option<u64>, json: bool) -> Result<(), Failure> {
    let r: TenancyRevision = c.describe_tenancy(&DescribeTenancy { revision }).await?;
    if json {
        print_json(&r);
        return Ok(());
    }
    let yaml = serde_yaml_ng::to_string(&r.tenancy)
        .map_err(|e| Failure(format!("cannot print YAML: {e}"), 1))?;
    println!(
        "# tenancy revision {}, {} by {} ({})",
        r.revision,
        rfc3339(r.at),
        r.principal,
        r.source
    );
    print!("{yaml}");
    Ok(())
}

pub async fn history(c: &Client, json: bool) -> Result<(), Failure> {
    let r: ListTenancyRevisionsResponse =
        c.list_tenancy_revisions(&ListTenancyRevisions {}).await?;
    if json {
        print_json(&r);
        return Ok(());
    }
    let mut t = table(&["REVISION", "TIME", "BY", "SOURCE", "CHANGES"], &[0]);
    for r in &r.revisions {
        let changes = if r.changes.is_empty() {
            "-".to_string()
        } else {
            r.changes.join("\n")
        };
        t.add_row(vec![
            r.revision.to_string(),
            rfc3339(r.at),
            r.principal.clone(),
            r.source.clone(),
            changes,
        ]);
    }
    println!("{}", t.trim_fmt());
    Ok(())
}

/// `DIR/<principal>.nk.next`: the key a rotation is moving to.
fn next_key_path(dir: &Path, principal: &str) -> PathBuf {
    dir.join(format!("{principal}.nk.next"))
}

pub async fn rotate_key(
    c: &Client,
    principal: &str,
    dir: &Path,
    finish: bool,
    json: bool,
) -> Result<(), Failure> {
    subjects::token(principal).map_err(|e| usage(format!("principal {e}")))?;
    let before = in_effect(c).await?.ok_or_else(|| {
        Failure(
            "no tenancy revision is stored yet: `qm tenancy apply` one first".into(),
            1,
        )
    })?;
    let mut tenancy = before.tenancy.clone();
    if tenancy.role(principal).is_none() {
        return Err(Failure(
            format!(
                "{principal:?} is not a principal of tenancy revision {}",
                before.revision
            ),
            1,
        ));
    }
    let next = next_key_path(dir, principal);
    let current: Vec<String> = tenancy.nkeys.get(principal).cloned().unwrap_or_default();
    let keys = if finish {
        if !next.exists() {
            return Err(usage(format!(
                "{} does not exist: start the rotation first (without --finish)",
                next.display()
            )));
        }
        let new = qm_tenancy::nats::public_key_of(&next).map_err(|e| Failure(e, 1))?;
        if !current.contains(&new) {
            return Err(Failure(
                format!("{principal}'s keys in revision {} do not include the key of {}: run the rotation's first step again", before.revision, next.display()),
                1,
            ));
        }
        // The key retired is the one of DIR/<principal>.nk; any other keys
        // the principal holds (other machines) stay.
        let path = qm_tenancy::nats::key_path(dir, principal);
        let old = qm_tenancy::nats::public_key_of(&path).map_err(|e| {
            Failure(
                format!("{e}: the key to retire is the one of {}", path.display()),
                1,
            )
        })?;
        if old == new {
            return Err(usage(format!(
                "{} and {} hold the same key: nothing to retire",
                path.display(),
                next.display()
            )));
        }
        current.into_iter().filter(|k| *k != old).collect()
    } else {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure(format!("cannot create {}: {e}", dir.display()), 1))?;
        let new = qm_tenancy::nats::ensure_key(&next, principal).map_err(|e| Failure(e, 1))?;
        let mut keys = current.clone();
        if !keys.contains(&new) {
            keys.push(new);
        }
        keys
    };
    tenancy.nkeys.insert(principal.to_string(), keys);
    let r: ApplyTenancyResponse = c
        .apply_tenancy(&ApplyTenancy {
            tenancy,
            dry_run: false,
            expected_revision: Some(before.revision),
        })
        .await?;
    if finish {
        let path = qm_tenancy::nats::key_path(dir, principal);
        let _ = std::fs::rename(
            qm_tenancy::nats::seed_path(&next),
            qm_tenancy::nats::seed_path(&path),
        );
        std::fs::rename(&next, &path).map_err(|e| {
            Failure(
                format!(
                    "the old key is retired (revision {}), but {} could not replace {}: {e}",
                    r.revision,
                    next.display(),
                    path.display()
                ),
                1,
            )
        })?;
    }
    if json {
        print_json(&r);
    } else if finish {
        println!(
            "revision {}: {principal} connects with the new key only; {} holds it now",
            r.revision,
            qm_tenancy::nats::key_path(dir, principal).display()
        );
        print_changes(&r.changes);
    } else {
        println!(
            "revision {}: {principal} may connect with the old key or the new one ({})",
            r.revision,
            next.display()
        );
        print_changes(&r.changes);
        println!(
            "next: give {} to {principal} (it replaces their .nk file), then `qm tenancy rotate-key {principal} --keys {} --finish`",
            next.display(),
            dir.display()
        );
    }
    Ok(())
}

/// Writes `text` to `path` whole: a temporary file of this process's own
/// beside it, synced, renamed over it, and the directory synced, so a
/// crash leaves the old file or the new one, never a part.
fn write_whole(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let failed = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let mut f = std::fs::File::create(&tmp).map_err(failed)?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(failed)?;
    std::fs::rename(&tmp, path).map_err(failed)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The process of `pid` must be nats-server: a stale pid file must not
/// have SIGHUP (whose default action ends a process) sent to another.
fn is_nats_server(pid: i32) -> Result<(), String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_err(|e| format!("no process {pid} (from the pid file): {e}"))?;
    if comm.trim().starts_with("nats-server") {
        Ok(())
    } else {
        Err(format!(
            "process {pid} (from the pid file) is {:?}, not nats-server: not signalled",
            comm.trim()
        ))
    }
}

fn reload(args: &SyncNatsArgs) -> Result<String, String> {
    if let Some(pid_file) = &args.pid_file {
        let text = std::fs::read_to_string(pid_file)
            .map_err(|e| format!("cannot read the pid file {}: {e}", pid_file.display()))?;
        let pid = text
            .trim()
            .parse::<i32>()
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| format!("{} holds no process id", pid_file.display()))?;
        let raw = pid.as_raw_nonzero().get();
        is_nats_server(raw)?;
        rustix::process::kill_process(pid, rustix::process::Signal::HUP)
            .map_err(|e| format!("cannot signal nats-server (pid {raw}): {e}"))?;
        return Ok(format!("sent SIGHUP to nats-server (pid {raw})"));
    }
    let Some((program, rest)) = args.reload_command.split_first() else {
        return Err("no way to reload the server was given".into());
    };
    // A reload command that hangs is killed, and the reload retried: it
    // must not stop sync-nats from following the tenancy.
    let mut child = std::process::Command::new(program)
        .args(rest)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run the reload command {program:?}: {e}"))?;
    let deadline = std::time::Instant::now() + RELOAD_COMMAND_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the reload command {program:?} did not finish within {} s: killed",
                    RELOAD_COMMAND_LIMIT.as_secs()
                ));
            }
        }
    };
    if !status.success() {
        let mut said = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut said);
        }
        return Err(format!(
            "the reload command {program:?} failed ({status}): {}",
            said.trim()
        ));
    }
    Ok(format!("ran {}", args.reload_command.join(" ")))
}

/// How long a reload command may run before it is killed.
const RELOAD_COMMAND_LIMIT: Duration = Duration::from_secs(10);

/// The authorization file's text for revision `r`, and a line saying what
/// is in it. Err: nothing to write (no principal has a key yet).
fn authorization_text(r: &TenancyRevision) -> Result<(String, String), String> {
    let (conf, skipped) = qm_tenancy::nats::authorization_of_keyed(&r.tenancy, &r.tenancy.nkeys)
        .map_err(|e| {
            format!(
                "revision {} not written (the file keeps the one before): {e}",
                r.revision
            )
        })?;
    let text = format!(
        "# tenancy revision {} ({} by {})\n{conf}",
        r.revision,
        rfc3339(r.at),
        r.principal
    );
    let keys: usize = r.tenancy.nkeys.values().map(Vec::len).sum();
    let mut what = format!(
        "{} principals, {keys} keys",
        r.tenancy.principals().len() - skipped.len()
    );
    if !skipped.is_empty() {
        what.push_str(&format!(
            "; without a key, so not let in: {}",
            skipped.join(", ")
        ));
    }
    Ok((text, what))
}

/// What sync-nats has done: the text the server last reloaded
/// successfully (None: not yet, so the first revision always reloads).
#[derive(Default)]
struct Synced {
    reloaded: Option<String>,
    /// A text written but not yet reloaded (the reload failed): retried.
    pending: Option<(u64, String)>,
}

impl Synced {
    /// Writes revision `r`'s authorization if the file differs, and
    /// reloads if the server has not loaded exactly this text.
    fn revision(&mut self, r: &TenancyRevision, args: &SyncNatsArgs) -> Result<String, String> {
        let (text, what) = authorization_text(r)?;
        let on_disk = std::fs::read_to_string(&args.out).ok();
        let wrote = on_disk.as_deref() != Some(text.as_str());
        if wrote {
            write_whole(&args.out, &text)?;
        }
        if self.reloaded.as_deref() == Some(text.as_str()) {
            self.pending = None;
            return Ok(format!(
                "revision {}: {} is already in effect",
                r.revision,
                args.out.display()
            ));
        }
        self.pending = Some((r.revision, text.clone()));
        let reloaded = reload(args)
            .map_err(|e| format!("revision {}: written, but {e}; retrying", r.revision))?;
        self.reloaded = Some(text);
        self.pending = None;
        Ok(format!(
            "revision {}: {} {} ({what}); {reloaded}",
            r.revision,
            if wrote { "wrote" } else { "kept" },
            args.out.display(),
        ))
    }

    /// Retries a failed reload.
    fn retry(&mut self, args: &SyncNatsArgs) -> Option<Result<String, String>> {
        let (revision, text) = self.pending.clone()?;
        Some(match reload(args) {
            Ok(line) => {
                self.reloaded = Some(text);
                self.pending = None;
                Ok(format!("revision {revision}: reloaded at last; {line}"))
            }
            Err(e) => Err(format!("revision {revision}: {e}; retrying")),
        })
    }
}

pub fn check_sync_args(args: &SyncNatsArgs) -> Result<(), Failure> {
    if args.pid_file.is_some() && !args.reload_command.is_empty() {
        return Err(usage(
            "give --pid-file or a reload command after --, not both",
        ));
    }
    if args.pid_file.is_none() && args.reload_command.is_empty() {
        return Err(usage(
            "say how the NATS server reloads: --pid-file FILE (SIGHUP), or a command after --",
        ));
    }
    let parent = args
        .out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(usage(format!(
            "--out {}: the directory {} does not exist",
            args.out.display(),
            parent.display()
        )));
    }
    Ok(())
}

/// How often a failed reload is tried again.
const RETRY: Duration = Duration::from_secs(2);

pub async fn sync_nats(c: &Client, args: &SyncNatsArgs) -> Result<(), Failure> {
    let js = async_nats::jetstream::new(c.nats.clone());
    let mut told = false;
    let mut synced = Synced::default();
    let shutdown = qm_service::nats::shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let bucket = match js.get_key_value(subjects::TENANCY_BUCKET).await {
            Ok(b) => b,
            Err(e) => {
                if args.once {
                    return Err(Failure(
                        format!("no stored tenancy ({e}): is admission running this release?"),
                        1,
                    ));
                }
                if !told {
                    eprintln!("qm: no stored tenancy yet ({e}); waiting for admission to make it");
                    told = true;
                }
                tokio::select! {
                    _ = &mut shutdown => return Ok(()),
                    _ = tokio::time::sleep(RETRY) => continue,
                }
            }
        };
        if args.once {
            let r = qm_service::tenancy::newest_valid(&bucket, "sync-nats")
                .await
                .ok_or_else(|| Failure("no valid tenancy revision is stored yet".into(), 1))?;
            let line = synced.revision(&r, args).map_err(|e| Failure(e, 1))?;
            println!("{line}");
            return Ok(());
        }
        // The newest valid revision first (the last one may not validate),
        // then the last one and every one written after it.
        let mut seen = 0;
        if let Some(r) = qm_service::tenancy::newest_valid(&bucket, "sync-nats").await {
            seen = r.revision;
            report(synced.revision(&r, args));
        }
        let mut updates = match bucket.watch_with_history(subjects::TENANCY_KEY).await {
            Ok(u) => u,
            Err(e) => {
                eprintln!("qm: cannot follow the tenancy ({e}); retrying");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        loop {
            let next = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                n = updates.next() => n,
                _ = tokio::time::sleep(RETRY), if synced.pending.is_some() => {
                    if let Some(r) = synced.retry(args) {
                        report(r);
                    }
                    continue;
                }
            };
            let entry = match next {
                Some(Ok(e)) => e,
                Some(Err(e)) => {
                    eprintln!("qm: following the tenancy paused ({e}); retrying");
                    break;
                }
                None => break,
            };
            if entry.operation != async_nats::jetstream::kv::Operation::Put
                || entry.revision <= seen
            {
                continue;
            }
            seen = entry.revision;
            match qm_tenancy::live::read_revision(&entry.value, entry.revision) {
                Ok(r) => report(synced.revision(&r, args)),
                Err(e) => eprintln!("qm: error: {e}; not written"),
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn report(line: Result<String, String>) {
    match line {
        Ok(line) => println!("{line}"),
        Err(e) => eprintln!("qm: error: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(command: &[&str]) -> SyncNatsArgs {
        SyncNatsArgs {
            out: PathBuf::from("/nonexistent/auth.conf"),
            pid_file: None,
            once: false,
            reload_command: command.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_reload_command_is_run_and_a_failing_or_hanging_one_is_an_error() {
        assert!(reload(&args(&["true"]))
            .expect("runs")
            .starts_with("ran true"));
        let e = reload(&args(&["sh", "-c", "echo no server >&2; exit 3"])).expect_err("fails");
        assert!(e.contains("no server"), "{e}");
        let started = std::time::Instant::now();
        let e = reload(&args(&["sleep", "600"])).expect_err("hangs");
        assert!(e.contains("killed"), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "it was not waited out"
        );
    }

    #[test]
    fn only_nats_server_is_signalled() {
        let me = std::process::id() as i32;
        let e = is_nats_server(me).expect_err("a test binary is not nats-server");
        assert!(e.contains("not nats-server"), "{e}");
    }
}

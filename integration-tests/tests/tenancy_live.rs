//! The tenancy, live (ADR 0020), end to end: NATS includes its
//! authorization from a file `qm tenancy sync-nats` rewrites and has the
//! server reload; admission, the gateway and the console follow the stored
//! revisions. A team is added and removed, keys are rotated with an
//! overlap, and every path a removed person had is cut off, with the time
//! each took measured; changing the tenancy is tried as an attacker would.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_batch::config::{BehaviorVersion, Credentials, Region};
use futures::StreamExt;
use qm_integration_tests::browser::{secret_of, Console};
use qm_integration_tests::gateway::GatewayProc;
use qm_integration_tests::stack::{bin, running_on, start_nats_reloadable, Auth, Nats, Stack};
use qm_service::client::{CallError, Client};
use qm_tenancy::live::{
    ApplyTenancy, ApplyTenancyResponse, DescribeTenancy, ListTenancyRevisions,
    ListTenancyRevisionsResponse, TenancyRevision,
};
use qm_tenancy::Tenancy;
use qm_wire::messages::{Caller, ErrorCode};
use qm_wire::subjects::Operation;

const QUEUE_YAML: &str = include_str!("../../examples/queues/three-shares.yaml");
const DAVE_KEY: &str = "AKIAQMDAVE000000001";
const ALICE_KEY: &str = "AKIAQMALICE00000001";
const ALICE_NEW_KEY: &str = "AKIAQMALICE00000002";
/// Revocation on every path must happen within this (it takes well under
/// a second here; the bound leaves room for a loaded machine).
const BOUND: Duration = Duration::from_secs(15);

fn qm(stack: &Stack, principal: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin("qm"))
        .args(["--nats", &stack.nats_url, "--nkey"])
        .arg(stack.auth.key(principal))
        .args(args)
        .output()
        .expect("qm runs")
}

fn ok(out: std::process::Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("--- {what}\n{stdout}{stderr}");
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    stdout
}

/// `qm tenancy apply` as `platform` with the stack's keys directory; the
/// revision stored.
fn apply(stack: &Stack, file: &Path) -> ApplyTenancyResponse {
    let out = qm(
        stack,
        "platform",
        &[
            "--output",
            "json",
            "tenancy",
            "apply",
            "-f",
            &file.display().to_string(),
            "--keys",
            &stack.auth.dir.display().to_string(),
        ],
    );
    let text = ok(out, "qm tenancy apply");
    let r: ApplyTenancyResponse = serde_json::from_str(&text).expect("an ApplyTenancyResponse");
    assert!(r.applied, "{r:?}");
    r
}

/// The dev tenancy with `edit` applied to its text, written to the stack's
/// directory as `name`.
fn tenancy_file(stack: &Stack, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let text = std::fs::read_to_string(&stack.auth.tenancy_file).expect("the dev tenancy");
    let path = stack.dir.join(name);
    std::fs::write(&path, edit(text)).expect("tenancy written");
    path
}

fn with_dave(text: String) -> String {
    let text = text.replace("users: [alice]", "users: [alice, dave]");
    assert!(text.contains("users: [alice, dave]"));
    text.replace(
        "awsAccessKeys:\n",
        &format!("awsAccessKeys:\n  {DAVE_KEY}: dave\n"),
    )
}

/// `WhoAmI` asked by nats-py (NATS's own Python client, pinned in
/// integration-tests/nats-clients) connecting with a seed file: its answer.
fn nats_py_whoami(url: &str, principal: &str, seed: &Path) -> String {
    let python = qm_integration_tests::gateway::pinned_clients("nats-clients").join("bin/python");
    let script = r#"
import asyncio, sys, nats
async def main():
    url, principal, seed = sys.argv[1:4]
    nc = await nats.connect(url, nkeys_seed=seed, inbox_prefix="_INBOX_" + principal)
    reply = await nc.request(f"qm.v1.api.{principal}.WhoAmI", b"{}", timeout=5)
    print(reply.data.decode())
    await nc.close()
asyncio.run(main())
"#;
    let out = Command::new(python)
        .args(["-c", script, url, principal])
        .arg(seed)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "nats-py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `qm tenancy sync-nats` for one NATS server, stopped when dropped.
struct Sync {
    child: Child,
    log: PathBuf,
}

impl Sync {
    fn start(stack: &Stack, nats: &Nats) -> Sync {
        let log = stack.dir.join("sync-nats.log");
        let file = std::fs::File::create(&log).expect("log");
        let mut cmd = Command::new(bin("qm"));
        cmd.args(["--nats", &stack.nats_url, "--nkey"])
            .arg(stack.auth.key("nats-auth"))
            .args(["tenancy", "sync-nats", "--out"])
            .arg(nats.live_authorization())
            .arg("--")
            .args(nats.reload_command())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .stdin(Stdio::null());
        Sync {
            child: cmd.spawn().expect("qm tenancy sync-nats starts"),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until revision `n` is written and the server told to reload.
    async fn wait_for(&self, n: u64) {
        let deadline = Instant::now() + BOUND;
        let done = |log: String| {
            log.lines().any(|l| {
                l.starts_with(&format!("revision {n}: "))
                    && (l.contains("; ran docker kill") || l.contains("already in effect"))
            })
        };
        while !done(self.log()) {
            assert!(
                Instant::now() < deadline,
                "sync-nats did not write revision {n}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Sync {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A NATS connection of `principal` with the seed in `key`, and when the
/// server closed it (None: still open).
async fn watched(
    url: &str,
    principal: &str,
    key: &Path,
) -> Result<(Client, Arc<Mutex<Option<Instant>>>), String> {
    let (_, seed) = qm_tenancy::nats::read_key_file(key)?;
    let closed = Arc::new(Mutex::new(None));
    let seen = Arc::clone(&closed);
    let options = async_nats::ConnectOptions::with_nkey(seed)
        .custom_inbox_prefix(format!("_INBOX_{principal}"))
        .max_reconnects(Some(1))
        .connection_timeout(Duration::from_secs(5))
        .event_callback(move |event| {
            let seen = Arc::clone(&seen);
            async move {
                if matches!(event, async_nats::Event::Disconnected) {
                    let mut s = seen.lock().expect("lock");
                    s.get_or_insert_with(Instant::now);
                }
            }
        });
    let client = async_nats::connect_with_options(url, options)
        .await
        .map_err(|e| e.to_string())?;
    Ok((Client::new(client, principal), closed))
}

/// Waits until `principal` can connect with `key` and be answered; the
/// client.
async fn connects(url: &str, principal: &str, key: &Path) -> (Client, Arc<Mutex<Option<Instant>>>) {
    let deadline = Instant::now() + BOUND;
    loop {
        match watched(url, principal, key).await {
            Ok((c, closed)) => {
                let me: Result<Caller, _> = c.call(Operation::WhoAmI, &serde_json::json!({})).await;
                match me {
                    Ok(me) => {
                        assert_eq!(me.principal, principal);
                        return (c, closed);
                    }
                    Err(e) => assert!(Instant::now() < deadline, "{principal}: {e}"),
                }
            }
            Err(e) => assert!(Instant::now() < deadline, "{principal} cannot connect: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the server has closed a connection; how long after `since`.
async fn closed_within(
    closed: &Arc<Mutex<Option<Instant>>>,
    since: Instant,
    what: &str,
) -> Duration {
    let deadline = Instant::now() + BOUND;
    loop {
        if let Some(at) = *closed.lock().expect("lock") {
            return at.saturating_duration_since(since);
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the connection stayed open"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The gateway, started on the shared keys file: its endpoint.
async fn gateway(stack: &mut Stack, keys: &Path) -> String {
    GatewayProc::start(stack, "gateway", keys, None, "eu-west-1", &[])
        .await
        .endpoint
}

/// Whether the gateway answers a request signed with `key` (of `who`).
async fn gateway_answers(endpoint: &str, key: &str, who: &str) -> Result<(), String> {
    let conf = aws_sdk_batch::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("eu-west-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new(key, secret_of(who), None, None, "test"))
        .build();
    aws_sdk_batch::Client::from_conf(conf)
        .describe_job_queues()
        .send()
        .await
        .map(drop)
        .map_err(|e| format!("{:?}", e.into_service_error()))
}

/// Waits until `check` holds; how long after `since` it first did.
async fn until(since: Instant, what: &str, mut check: impl AsyncFnMut() -> bool) -> Duration {
    let deadline = Instant::now() + BOUND;
    loop {
        if check().await {
            return since.elapsed();
        }
        assert!(Instant::now() < deadline, "{what}: not within {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Adds `key` (of `who`) to a keys file, as an operator would.
fn add_secret(file: &Path, key: &str, who: &str) {
    let mut text = std::fs::read_to_string(file).expect("keys file");
    text.push_str(&format!("{key}: {{secret: {}}}\n", secret_of(who)));
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text).expect("keys written");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::rename(&tmp, file).expect("keys replaced");
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_member_added_live_works_at_once_and_once_removed_is_cut_off_on_every_path() {
    let nats = start_nats_reloadable(Auth::dev("tenancy-live")).await;
    let (nats, _s3, mut stack) = running_on(nats, "tenancy-live", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 2);
    let console = Console::start(&mut stack, "console", &[]).await;
    let keys = stack.dir.join("console-keys.yaml");
    let endpoint = gateway(&mut stack, &keys).await;
    let sync = Sync::start(&stack, &nats);

    // The tenancy file admission started with is revision 1; applied with
    // the keys `qm auth` made, it is the one the NATS server enforces.
    let first = apply(&stack, &stack.auth.tenancy_file.clone());
    assert!(
        !first.changes.is_empty() && first.changes.iter().all(|c| c.contains("NATS key")),
        "only keys were added: {:?}",
        first.changes
    );
    sync.wait_for(first.revision).await;

    // A reload forgets which replies each connection may send; admission
    // must still reach a person's inbox, with no request of hers pending.
    let (alice, _) = connects(&stack.nats_url, "alice", &stack.auth.key("alice")).await;
    let (admission, _) = watched(&stack.nats_url, "admission", &stack.auth.key("admission"))
        .await
        .expect("admission connects");
    let mut inbox = alice
        .nats
        .subscribe("_INBOX_alice.probe")
        .await
        .expect("alice subscribes to her inbox");
    alice.nats.flush().await.expect("flushed");
    // (Sent again while the server may still be reloading: a message
    // published mid-reload can be dropped; a refused one never arrives.)
    let mut got = None;
    for _ in 0..25 {
        admission
            .nats
            .publish("_INBOX_alice.probe", "unasked".into())
            .await
            .expect("published");
        admission.nats.flush().await.expect("flushed");
        if let Ok(m) = tokio::time::timeout(Duration::from_millis(200), inbox.next()).await {
            got = m;
            break;
        }
    }
    let got = got.expect("admission may publish into alice's inbox after a reload");
    assert_eq!(&got.payload[..], b"unasked");

    // dave joins team vision, with an AWS access key. A dry run says so
    // and changes nothing.
    let file = tenancy_file(&stack, "with-dave.yaml", with_dave);
    let diff = ok(
        qm(
            &stack,
            "dashboard",
            &["tenancy", "diff", "-f", &file.display().to_string()],
        ),
        "diff as a reader",
    );
    assert!(diff.contains("+ dave: added as team vision"), "{diff}");
    assert!(diff.contains("no NATS key yet for dave"), "{diff}");
    let dry = ok(
        qm(
            &stack,
            "platform",
            &[
                "tenancy",
                "apply",
                "-f",
                &file.display().to_string(),
                "--keys",
                &stack.auth.dir.display().to_string(),
                "--dry-run",
            ],
        ),
        "dry run",
    );
    assert!(
        dry.contains("+ dave: added as team vision (training/QS1, ops/*)"),
        "{dry}"
    );
    assert!(
        dry.contains(&format!("+ access key {DAVE_KEY}: acts for dave")),
        "{dry}"
    );
    let now: TenancyRevision = stack
        .client
        .call(Operation::DescribeTenancy, &DescribeTenancy::default())
        .await
        .expect("describe");
    assert_eq!(now.revision, first.revision, "a dry run stores nothing");
    add_secret(&keys, DAVE_KEY, "dave");
    let added_at = Instant::now();
    let added = apply(&stack, &file);
    assert!(stack.auth.key("dave").exists(), "qm made dave's key");
    // NATS lets him in once sync-nats has reloaded it; admission knows him
    // with no restart: he submits to his team's share.
    let (dave, dave_closed) = connects(&stack.nats_url, "dave", &stack.auth.key("dave")).await;
    let nats_in = added_at.elapsed();
    let me: Caller = dave
        .call(Operation::WhoAmI, &serde_json::json!({}))
        .await
        .expect("whoami");
    assert_eq!(
        (me.role.as_str(), me.team.as_deref()),
        ("TEAM", Some("vision"))
    );
    let job = stack
        .submit_as(
            &dave,
            &qm_integration_tests::story::sleeper("dave-1", "QS1", 600),
        )
        .await;
    // NATS's own Python client takes the seed file qm made beside his .nk.
    let said = nats_py_whoami(&stack.nats_url, "dave", &stack.auth.dir.join("dave.seed"));
    assert!(
        said.contains("\"principal\":\"dave\"") && said.contains("vision"),
        "{said}"
    );
    assert!(job.starts_with("j-"), "{job}");
    let gateway_in = until(added_at, "the gateway lets dave in", async || {
        gateway_answers(&endpoint, DAVE_KEY, "dave").await.is_ok()
    })
    .await;
    // The console has read dave's secret from its keys file (looked at
    // every second) before he signs in.
    until(
        added_at,
        "the console reads the new keys file",
        async || stack.log_of("console").contains("the keys file changed"),
    )
    .await;
    let dave_cookie = {
        let deadline = Instant::now() + BOUND;
        loop {
            let form = format!("accessKeyId={DAVE_KEY}&secret={}", secret_of("dave"));
            let a = console
                .request(
                    "POST",
                    "/sign-in",
                    &[("content-type", "application/x-www-form-urlencoded")],
                    &form,
                )
                .await;
            if a.status == 303 {
                break a
                    .header("set-cookie")
                    .expect("cookie")
                    .split(';')
                    .next()
                    .expect("pair")
                    .to_string();
            }
            assert!(
                Instant::now() < deadline,
                "dave cannot sign in: {} {}",
                a.status,
                a.body
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let console_in = added_at.elapsed();
    assert_eq!(console.get(&dave_cookie, "/queues").await.status, 200);
    println!(
        "dave added (revision {}): NATS {} ms, gateway {} ms, console {} ms after the apply began",
        added.revision,
        ms(nats_in),
        ms(gateway_in),
        ms(console_in)
    );

    // dave leaves: the dev tenancy again. Every path he had closes, and a
    // live view he was waiting on (nothing of his changes now) is answered
    // at once instead of after its 25 s.
    stack
        .wait_for(&job, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let page = console.get(&dave_cookie, "/queues").await.body;
    let at = page
        .find("data-live-since=\"")
        .expect("the page's live position")
        + "data-live-since=\"".len();
    let since = &page[at..at + page[at..].find('"').expect("closed")];
    let live_path = format!("/live?since={since}");
    let stack_ref = &stack;
    let answered = async {
        let poll = console.get(&dave_cookie, &live_path).await;
        (Instant::now(), poll)
    };
    let ((poll_at, poll), (removed_at, removed)) = tokio::join!(answered, async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let file = stack_ref.auth.tenancy_file.clone();
        let at = Instant::now();
        (at, tokio::task::block_in_place(|| apply(stack_ref, &file)))
    });
    assert!(
        poll_at > removed_at,
        "the live view was answered before the apply began: it did not wait"
    );
    let poll_out = poll_at.duration_since(removed_at);
    assert_eq!(poll.status, 200, "{}", poll.body);
    assert!(poll.body.contains("\"changes\":[]"), "{}", poll.body);
    assert!(poll_out < BOUND, "the live view waited {poll_out:?}");
    assert!(
        removed
            .changes
            .iter()
            .any(|c| c.starts_with("- dave: removed")),
        "{:?}",
        removed.changes
    );
    let nats_out = closed_within(&dave_closed, removed_at, "dave's NATS connection").await;
    let aside = stack
        .auth
        .dir
        .join(format!("dave.nk.removed-{}", removed.revision));
    assert!(
        !stack.auth.key("dave").exists() && aside.exists(),
        "qm set dave's credentials aside"
    );
    let refused = watched(&stack.nats_url, "dave", &aside).await;
    assert!(refused.is_err(), "dave's key still connects");
    let gateway_out = until(removed_at, "the gateway refuses dave", async || {
        gateway_answers(&endpoint, DAVE_KEY, "dave").await.is_err()
    })
    .await;
    let console_out = until(removed_at, "dave's console session ends", async || {
        let a = console.get(&dave_cookie, "/queues").await;
        a.status == 303 && a.header("location") == Some("/sign-in")
    })
    .await;
    println!(
        "dave removed (revision {}): NATS connection closed {} ms, gateway key refused {} ms, console session ended {} ms after the apply began (his waiting live view answered within {} ms of it)",
        removed.revision,
        ms(nats_out),
        ms(gateway_out),
        ms(console_out),
        ms(poll_out)
    );
    // The others never noticed: alice still works through every path.
    let (_alice, _) = connects(&stack.nats_url, "alice", &stack.auth.key("alice")).await;
    gateway_answers(&endpoint, ALICE_KEY, "alice")
        .await
        .expect("alice through the gateway");
    // The job dave left behind is still there for the admins.
    assert!(stack.describe(&job).await.is_some());

    // Every change is in the history and the audit log.
    let history: ListTenancyRevisionsResponse = stack
        .client
        .call(Operation::ListTenancyRevisions, &ListTenancyRevisions {})
        .await
        .expect("history");
    let revisions: Vec<u64> = history.revisions.iter().map(|r| r.revision).collect();
    assert_eq!(
        &revisions[..3],
        &[removed.revision, added.revision, first.revision],
        "newest first"
    );
    assert_eq!(history.revisions[0].principal, "platform");
    let shown = ok(qm(&stack, "platform", &["tenancy", "history"]), "history");
    assert!(shown.contains("- dave: removed"), "{shown}");
    let audit = ok(
        qm(&stack, "platform", &["audit", "--by", "platform"]),
        "audit",
    );
    assert!(audit.contains("ApplyTenancy"), "{audit}");
    assert!(audit.contains("+ dave: added as team vision"), "{audit}");
    drop(sync);
}

/// Only admins change the tenancy; readers read it; teams do neither; nor
/// can the gateway or the console, even naming an admin.
async fn assert_only_admins_change_it(stack: &Stack, current: &TenancyRevision) {
    let alice = stack.auth.client(&stack.nats_url, "alice").await;
    let change = ApplyTenancy {
        tenancy: current.tenancy.clone(),
        dry_run: false,
        expected_revision: None,
    };
    let e = alice
        .call::<_, ApplyTenancyResponse>(Operation::ApplyTenancy, &change)
        .await
        .expect_err("alice may not change the tenancy");
    assert_eq!(e.code(), Some(ErrorCode::AccessDenied), "{e}");
    assert!(e.to_string().contains("alice"), "{e}");
    let e = alice
        .call::<_, TenancyRevision>(Operation::DescribeTenancy, &DescribeTenancy::default())
        .await
        .expect_err("alice may not read it");
    assert_eq!(e.code(), Some(ErrorCode::AccessDenied), "{e}");
    let reader = stack.auth.client(&stack.nats_url, "dashboard").await;
    reader
        .call::<_, TenancyRevision>(Operation::DescribeTenancy, &DescribeTenancy::default())
        .await
        .expect("a reader reads it");
    let e = reader
        .call::<_, ApplyTenancyResponse>(Operation::ApplyTenancy, &change)
        .await
        .expect_err("a reader may not change it");
    assert_eq!(e.code(), Some(ErrorCode::AccessDenied), "{e}");

    // Nor can the gateway or the console, even naming an admin.
    for relay in ["gateway", "console"] {
        let relayed = stack
            .auth
            .client(&stack.nats_url, relay)
            .await
            .acting_for("platform");
        let e = relayed
            .call::<_, ApplyTenancyResponse>(Operation::ApplyTenancy, &change)
            .await
            .expect_err("no change through a relay");
        assert_eq!(e.code(), Some(ErrorCode::AccessDenied), "{relay}: {e}");
        assert!(
            e.to_string().contains("own NATS connection"),
            "{relay}: {e}"
        );
    }
}

/// A bad tenancy, one without an admin, and a stale revision: every problem
/// named, nothing stored.
async fn assert_bad_tenancies_are_refused(stack: &Stack, current: &TenancyRevision) {
    let mut bad = current.tenancy.clone();
    bad.admins.push("alice".into()); // alice is also a team user
    bad.nkeys.insert("ghost".into(), vec!["SUAAAA".into()]);
    bad.teams
        .get_mut("vision")
        .expect("vision")
        .shares
        .push("training".into());
    let e = stack
        .client
        .call::<_, ApplyTenancyResponse>(
            Operation::ApplyTenancy,
            &ApplyTenancy {
                tenancy: bad,
                dry_run: false,
                expected_revision: None,
            },
        )
        .await
        .expect_err("refused");
    let text = match &e {
        CallError::Api(api) => format!("{} {:?}", api.message, api.problems),
        other => panic!("{other}"),
    };
    for needle in [
        "already declared",
        "ghost",
        "not a public user nkey",
        "queue/share",
    ] {
        assert!(text.contains(needle), "{needle:?} missing in {text}");
    }
    let mut headless = current.tenancy.clone();
    headless.admins.clear();
    headless.readers.push("platform".into());
    let e = stack
        .client
        .call::<_, ApplyTenancyResponse>(
            Operation::ApplyTenancy,
            &ApplyTenancy {
                tenancy: headless,
                dry_run: false,
                expected_revision: None,
            },
        )
        .await
        .expect_err("no admin left");
    assert!(e.to_string().contains("at least one admin"), "{e}");
    let e = stack
        .client
        .call::<_, ApplyTenancyResponse>(
            Operation::ApplyTenancy,
            &ApplyTenancy {
                tenancy: current.tenancy.clone(),
                dry_run: false,
                expected_revision: Some(current.revision - 1),
            },
        )
        .await
        .expect_err("a stale revision");
    assert_eq!(e.code(), Some(ErrorCode::Conflict), "{e}");
    let still: TenancyRevision = stack
        .client
        .call(Operation::DescribeTenancy, &DescribeTenancy::default())
        .await
        .expect("describe");
    assert_eq!(still.revision, current.revision, "nothing was stored");
}

/// The sync principal reads the tenancy and nothing else: no API, no other
/// bucket.
async fn assert_sync_principal_reads_only_the_tenancy(stack: &Stack) {
    let (sync_client, _) = watched(&stack.nats_url, "nats-auth", &stack.auth.key("nats-auth"))
        .await
        .expect("nats-auth connects");
    let e = sync_client
        .call::<_, Caller>(Operation::WhoAmI, &serde_json::json!({}))
        .await
        .expect_err("no API for the sync principal");
    assert!(
        !matches!(e, CallError::Api(_)),
        "admission never saw it: {e}"
    );
    let js = async_nats::jetstream::new(sync_client.nats.clone());
    assert!(
        js.get_key_value(qm_wire::subjects::CONFIG_BUCKET)
            .await
            .is_err(),
        "nats-auth reads the queue configuration"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_rotate_with_an_overlap_and_only_admins_change_the_tenancy() {
    let nats = start_nats_reloadable(Auth::dev("tenancy-rotate")).await;
    let (nats, _s3, mut stack) = running_on(nats, "tenancy-rotate", QUEUE_YAML).await;
    let keys = qm_integration_tests::browser::write_keys(&stack.dir);
    let endpoint = gateway(&mut stack, &keys).await;
    let sync = Sync::start(&stack, &nats);
    let first = apply(&stack, &stack.auth.tenancy_file.clone());
    sync.wait_for(first.revision).await;
    let current: TenancyRevision = stack
        .client
        .call(Operation::DescribeTenancy, &DescribeTenancy::default())
        .await
        .expect("describe");

    assert_only_admins_change_it(&stack, &current).await;
    assert_bad_tenancies_are_refused(&stack, &current).await;
    assert_sync_principal_reads_only_the_tenancy(&stack).await;

    // alice's NATS key, rotated: the new key works while the old one
    // still does; finishing closes the old key's connections.
    let (old_conn, old_closed) = connects(&stack.nats_url, "alice", &stack.auth.key("alice")).await;
    let dir = stack.auth.dir.display().to_string();
    let out = ok(
        qm(
            &stack,
            "platform",
            &["tenancy", "rotate-key", "alice", "--keys", &dir],
        ),
        "rotate-key",
    );
    assert!(
        out.contains("may connect with the old key or the new one"),
        "{out}"
    );
    let next = stack.auth.dir.join("alice.nk.next");
    let (new_conn, _) = connects(&stack.nats_url, "alice", &next).await;
    let me: Caller = old_conn
        .call(Operation::WhoAmI, &serde_json::json!({}))
        .await
        .expect("the old key still works during the overlap");
    assert_eq!(me.principal, "alice");
    let finished_at = Instant::now();
    ok(
        qm(
            &stack,
            "platform",
            &["tenancy", "rotate-key", "alice", "--keys", &dir, "--finish"],
        ),
        "rotate-key --finish",
    );
    let old_out = closed_within(&old_closed, finished_at, "alice's old-key connection").await;
    let me: Caller = new_conn
        .call(Operation::WhoAmI, &serde_json::json!({}))
        .await
        .expect("the new key works");
    assert_eq!(me.principal, "alice");
    assert!(!next.exists(), "the new key replaced alice.nk");
    let (_again, _) = connects(&stack.nats_url, "alice", &stack.auth.key("alice")).await;
    println!(
        "alice's old NATS key closed {} ms after --finish began",
        ms(old_out)
    );

    // Her AWS access key, rotated the same way: both work, then only the new.
    add_secret(&keys, ALICE_NEW_KEY, "alice");
    let both = tenancy_file(&stack, "alice-two-keys.yaml", |t| {
        t.replace(
            "awsAccessKeys:\n",
            &format!("awsAccessKeys:\n  {ALICE_NEW_KEY}: alice\n"),
        )
    });
    let since = Instant::now();
    let r = apply(&stack, &both);
    // (No request of this test straddles a server's reload: one in flight
    // then may go unanswered, docs/tenancy.md.)
    sync.wait_for(r.revision).await;
    until(since, "the gateway takes alice's new key", async || {
        gateway_answers(&endpoint, ALICE_NEW_KEY, "alice")
            .await
            .is_ok()
    })
    .await;
    gateway_answers(&endpoint, ALICE_KEY, "alice")
        .await
        .expect("the old key works during the overlap");
    let only_new = tenancy_file(&stack, "alice-new-key.yaml", |t| {
        t.replace(
            &format!("  {ALICE_KEY}: alice\n"),
            &format!("  {ALICE_NEW_KEY}: alice\n"),
        )
    });
    let since = Instant::now();
    let r = apply(&stack, &only_new);
    let refused = until(since, "the gateway refuses alice's old key", async || {
        gateway_answers(&endpoint, ALICE_KEY, "alice")
            .await
            .is_err()
    })
    .await;
    sync.wait_for(r.revision).await;
    gateway_answers(&endpoint, ALICE_NEW_KEY, "alice")
        .await
        .expect("the new key works");
    println!(
        "alice's old access key refused {} ms after the apply began",
        ms(refused)
    );

    // Admission restarted with its unchanged tenancy file undoes nothing.
    let before: TenancyRevision = stack
        .client
        .call(Operation::DescribeTenancy, &DescribeTenancy::default())
        .await
        .expect("describe");
    stack.signal("admission", "TERM");
    stack.restart("admission");
    let deadline = Instant::now() + Duration::from_secs(30);
    let after: TenancyRevision = loop {
        match stack
            .client
            .call(Operation::DescribeTenancy, &DescribeTenancy::default())
            .await
        {
            Ok(r) => break r,
            Err(e) => assert!(Instant::now() < deadline, "admission is back: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        after.revision, before.revision,
        "a restart stores no revision"
    );
    assert_eq!(
        after.tenancy.access_key_principal(ALICE_NEW_KEY),
        Some("alice")
    );
    let t: Tenancy = after.tenancy;
    assert!(t.access_key_principal(ALICE_KEY).is_none());
    drop(sync);
}

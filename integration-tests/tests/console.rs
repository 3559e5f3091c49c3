//! The web console in a real browser (Debian's headless Chromium over
//! WebDriver) against the real services: alice watches the three-share
//! story happen on her share's page without reloading it, reads why a job
//! waits and when it starts; the console tried as an attacker would; and
//! every action reached from the keyboard, every input labelled.
//! Screenshots of each view are kept in `target/console-artifacts/`.

use std::time::Duration;

use fantoccini::Locator;
use qm_integration_tests::browser::{Browser, Console};
use qm_integration_tests::stack::{running, Stack};
use qm_integration_tests::story::{sleeper, three_shares, QUEUE_YAML};
use qm_wire::messages::ServiceJob;
use qm_wire::subjects::Operation;

async fn status_of(stack: &Stack, id: &str) -> String {
    stack
        .client
        .call::<_, ServiceJob>(
            Operation::DescribeServiceJob,
            &qm_wire::messages::JobRef { job_id: id.into() },
        )
        .await
        .map(|j| j.status)
        .unwrap_or_default()
}

/// A pushed change reached the page: how long after it was published
/// (printed, and kept beside the screenshots).
async fn record_push_latency(browser: &Browser) {
    let latency = browser
        .js("return document.body.dataset.lastLatencyMs || null;")
        .await;
    let latency: u64 = latency
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a pushed update re-rendered the page");
    println!("push latency (event published -> page re-rendered): {latency} ms");
    std::fs::write(
        browser.artifacts.join("push-latency-ms.txt"),
        format!("{latency}\n"),
    )
    .expect("written");
}

/// The admin foresees a limit change: QS1 down to 0 puts `own` on
/// borrowed capacity, preemptible by a lender; nothing changes.
async fn assert_what_if_stores_nothing(stack: &Stack, console: &Console, own: &str) {
    let admin = console.sign_in("platform").await;
    let page = console.get(&admin, "/queues/training/what-if").await;
    let lowered = console
        .request(
            "POST",
            "/queues/training/what-if/limit",
            &[
                ("cookie", &admin),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            &format!(
                "share=QS1&instanceType=ml.g5.xlarge&maxCapacity=0&csrf={}",
                Console::csrf_of(&page.body)
            ),
        )
        .await;
    assert_eq!(lowered.status, 200, "{}", lowered.body);
    let preemptible = lowered
        .body
        .split("Become preemptible")
        .nth(1)
        .unwrap_or_default();
    assert!(preemptible.contains("a-own"), "{}", lowered.body);
    assert_eq!(status_of(stack, own).await, "RUNNING");
    let described: serde_json::Value = stack
        .client
        .call(
            Operation::DescribeQuotaShare,
            &serde_json::json!({"jobQueue": "training", "quotaShareName": "QS1"}),
        )
        .await
        .expect("QS1");
    assert_eq!(
        described["capacityLimits"][0]["maxCapacity"],
        serde_json::json!(1),
        "the what-if stored nothing: {described}"
    );
}

/// The waiting job is expected to start when the first of `running` ends
/// (900 s after it started), and is first in line.
async fn assert_estimated_start(
    stack: &Stack,
    alice_api: &qm_service::client::Client,
    running: [&String; 2],
    waits: &str,
) {
    let mut started = Vec::new();
    for id in running {
        let j = stack
            .wait_for(id, 10, "started", |j| {
                j.attempts.first().is_some_and(|a| a.started_at.is_some())
            })
            .await;
        started.extend(j.attempts[0].started_at);
    }
    let first_end = started.into_iter().min().expect("started") + 900_000;
    let outlook: qm_wire::messages::JobOutlook = alice_api
        .call(
            Operation::ExplainServiceJob,
            &qm_wire::messages::JobRef {
                job_id: waits.to_string(),
            },
        )
        .await
        .expect("explained");
    let estimate = outlook.estimated_start.expect("an estimated start");
    assert!(
        estimate.abs_diff(first_end) < 5_000,
        "expected when a-own or a-borrowing ends ({first_end}), got {estimate}: {outlook:?}"
    );
    assert_eq!(outlook.position_in_line, Some(0), "{outlook:?}");
}

/// What-if: a submit foreseen, nothing stored.
async fn assert_what_if_submit(carol: &Browser, console: &Console) {
    carol.goto(&console.url("/queues/training/what-if")).await;
    let form = carol
        .client
        .form(Locator::Css("main form"))
        .await
        .expect("the what-if form");
    form.set_by_name("count", "1").await.expect("typed");
    form.submit().await.expect("submitted");
    let answer = carol.wait_text("main", "It would", 20).await;
    assert!(
        answer.contains("wait"),
        "QS3's instance is in use: {answer}"
    );
    carol.screenshot("what-if").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn alice_watches_the_story_live_and_reads_why_a_job_waits_and_when_it_starts() {
    let (_nats, _s3, mut stack) = running("console-story", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let console = Console::start(&mut stack, "console", &[]).await;
    let browser = Browser::start().await;
    browser.sign_in(&console, "alice").await;
    browser
        .goto(&console.url("/queues/training/shares/QS1"))
        .await;
    browser.wait_text("main", "No job here", 10).await;
    // The page is loaded once: a marker set now survives every live update.
    browser.js("window.qmLoadedOnce = 'yes'; return 1;").await;

    let watch = async {
        // Her jobs appear and change on the open page, pushed, not reloaded.
        browser.wait_text("main table.jobs", "p3", 60).await;
        browser.wait_text("main table.jobs", "RUNNING", 60).await;
        browser.screenshot("share-borrowing").await;
        // The story's cross-share preemption of p2 reaches the live feed.
        browser
            .wait_text("#live", "preemption started (CROSS_SHARE", 180)
            .await;
        browser.screenshot("share-reclaimed").await;
    };
    let (jobs, ()) = tokio::join!(three_shares(&stack, None, None), watch);
    assert_eq!(
        browser
            .js("return window.qmLoadedOnce || 'reloaded';")
            .await,
        serde_json::json!("yes"),
        "the page was updated in place"
    );
    record_push_latency(&browser).await;
    browser.wait_text("main table.jobs", "SUCCEEDED", 120).await;

    // The job page tells p2's story: preempted for QS2's job, resumed.
    browser
        .goto(&console.url(&format!("/jobs/{}", jobs.p2)))
        .await;
    let p2 = browser.text("main").await;
    assert!(p2.contains("PREEMPTED_CROSS_SHARE"), "{p2}");
    assert!(p2.contains("preempted for"), "{p2}");
    assert!(p2.contains("restored checkpoint step"), "{p2}");
    browser.screenshot("job-preempted-and-resumed").await;

    // A waiting job: why, what would unblock it, when it starts, its place.
    let carol_api = stack.auth.client(&stack.nats_url, "carol").await;
    let long = stack
        .submit_as(&carol_api, &sleeper("long-run", "QS3", 3600))
        .await;
    stack
        .wait_for(&long, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let next = stack
        .submit_as(&carol_api, &sleeper("next-run", "QS3", 60))
        .await;
    stack
        .wait_for(&next, 30, "a reason", |j| {
            j.status == "RUNNABLE" && !j.status_reason.starts_with("QUEUED")
        })
        .await;
    // alice's share borrows QS2's idle instance: her share's page shows
    // which of her jobs QS2 would take it back from, and what each loses.
    let alice_api = stack.auth.client(&stack.nats_url, "alice").await;
    let own = stack
        .submit_as(&alice_api, &sleeper("a-own", "QS1", 900))
        .await;
    stack
        .wait_for(&own, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let lent = stack
        .submit_as(&alice_api, &sleeper("a-borrowing", "QS1", 900))
        .await;
    stack
        .wait_for(&lent, 60, "RUNNING on QS2's instance", |j| {
            j.status == "RUNNING" && j.on_borrowed_capacity
        })
        .await;
    browser
        .goto(&console.url("/queues/training/shares/QS1"))
        .await;
    let exposure = browser
        .wait_text("main ul.exposure", "would preempt:", 10)
        .await;
    assert!(
        exposure.contains("QS2 (lends 1 × ml.g5.xlarge)"),
        "{exposure}"
    );
    assert!(
        exposure.contains("of work (since its last checkpoint, or its start)"),
        "{exposure}"
    );
    browser.screenshot("share-exposure").await;

    assert_what_if_stores_nothing(&stack, &console, &own).await;

    // alice's next job waits: QS1's instance and QS2's lent one are busy,
    // QS3 keeps its own. Her page says why, what would unblock it, its
    // place, and when it starts: when the first of her running jobs is
    // expected to end (900 s after it started).
    let waits = stack
        .submit_as(&alice_api, &sleeper("a-waits", "QS1", 60))
        .await;
    stack
        .wait_for(&waits, 30, "a reason", |j| {
            j.status == "RUNNABLE" && !j.status_reason.starts_with("QUEUED")
        })
        .await;
    assert_estimated_start(&stack, &alice_api, [&own, &lent], &waits).await;
    browser.goto(&console.url(&format!("/jobs/{waits}"))).await;
    let why = browser.wait_text("main", "Why it waits", 10).await;
    assert!(why.contains("What would unblock it"), "{why}");
    assert!(why.contains("first of its share and type"), "{why}");
    assert!(
        why.lines()
            .any(|l| l.contains("Expected to start") && l.contains("UTC")),
        "{why}"
    );
    browser.screenshot("job-waiting-alice").await;

    // alice may not read QS3: to her the job does not exist.
    browser.goto(&console.url(&format!("/jobs/{next}"))).await;
    let refused = browser.text("main").await;
    assert!(refused.contains("There is no job"), "{refused}");
    assert!(!refused.contains("next-run"), "{refused}");
    let carol = Browser::start().await;
    carol.sign_in(&console, "carol").await;
    carol.goto(&console.url(&format!("/jobs/{next}"))).await;
    let why = carol.wait_text("main", "Why it waits", 10).await;
    assert!(why.contains("What would unblock it"), "{why}");
    assert!(why.contains("first of its share and type"), "{why}");
    // long-run expects 3600 s: next-run is expected when it ends.
    let expected = why
        .lines()
        .find(|l| l.contains("Expected to start"))
        .unwrap_or_default()
        .to_string();
    assert!(expected.contains("UTC"), "a time, not unknown: {why}");
    carol.screenshot("job-waiting").await;
    carol.goto(&console.url("/queues/training")).await;
    carol.wait_text("main", "QS3", 10).await;
    carol.screenshot("queue").await;
    carol.goto(&console.url("/queues/training/flows")).await;
    carol.screenshot("flows").await;
    carol.goto(&console.url("/audit")).await;
    carol.wait_text("main", "SubmitServiceJob", 10).await;
    carol.screenshot("audit").await;

    assert_what_if_submit(&carol, &console).await;

    // carol terminates her waiting job from its page.
    carol.goto(&console.url(&format!("/jobs/{next}"))).await;
    let form = carol
        .client
        .form(Locator::Css("form[action$='/terminate']"))
        .await
        .expect("the terminate form");
    form.set_by_name("reason", "not needed after all")
        .await
        .expect("typed");
    form.submit().await.expect("submitted");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while status_of(&stack, &next).await != "FAILED" {
        assert!(std::time::Instant::now() < deadline, "not terminated");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // ...and the audit log names her, not the console.
    let audit = carol
        .wait_text_after_reload(&console, "/audit?principal=carol", "TerminateServiceJob")
        .await;
    assert!(audit.contains("carol"), "{audit}");
    carol.close().await;
    browser.close().await;
    stack.stop_all();
}
/// A forged session, none at all, and a wrong secret: no way in.
async fn assert_no_session_is_accepted(console: &Console) {
    let forged = console
        .get(&format!("__Host-qm_session={}", "a".repeat(64)), "/queues")
        .await;
    assert_eq!(
        (forged.status, forged.header("location")),
        (303, Some("/sign-in"))
    );
    let none = console.request("GET", "/queues/training", &[], "").await;
    assert_eq!(
        (none.status, none.header("location")),
        (303, Some("/sign-in"))
    );
    let bad_sign_in = console
        .request(
            "POST",
            "/sign-in",
            &[("content-type", "application/x-www-form-urlencoded")],
            "accessKeyId=AKIAQMALICE00000001&secret=guess",
        )
        .await;
    assert_eq!(bad_sign_in.status, 401);
    assert!(bad_sign_in.header("set-cookie").is_none());
}

/// A write without the CSRF token, or with another's: refused, nothing
/// done; with her own `token` it goes through admission, as her; bob's
/// token and session cannot change her job either.
async fn assert_writes_need_their_csrf_token(
    stack: &Stack,
    console: &Console,
    alice: &str,
    bob: &str,
    job: &str,
    token: &str,
) {
    let bob_token = Console::csrf_of(&console.get(bob, "/queues").await.body);
    for form in [
        "reason=gone".to_string(),
        format!("reason=gone&csrf={bob_token}"),
    ] {
        let w = console
            .request(
                "POST",
                &format!("/jobs/{job}/terminate"),
                &[
                    ("cookie", alice),
                    ("content-type", "application/x-www-form-urlencoded"),
                ],
                &form,
            )
            .await;
        assert_eq!(w.status, 403, "{form}: {}", w.body);
        assert!(w.body.contains("CSRF"), "{}", w.body);
    }
    assert_eq!(status_of(stack, job).await, "RUNNING");
    // With her token it goes through admission, as her.
    let w = console
        .request(
            "POST",
            &format!("/jobs/{job}/priority"),
            &[
                ("cookie", alice),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            &format!("priority=7&csrf={token}"),
        )
        .await;
    assert_eq!(w.status, 303, "{}", w.body);
    // bob's token and session cannot change her job either.
    let w = console
        .request(
            "POST",
            &format!("/jobs/{job}/terminate"),
            &[
                ("cookie", bob),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            &format!("reason=mine-now&csrf={bob_token}"),
        )
        .await;
    assert_eq!(w.status, 403, "{}", w.body);
    assert_eq!(status_of(stack, job).await, "RUNNING");
}

/// A sign-in posted from another site's page (login CSRF): refused.
async fn assert_cross_site_sign_in_refused(console: &Console) {
    let cross = console
        .request(
            "POST",
            "/sign-in",
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", "https://evil.example"),
            ],
            &format!(
                "accessKeyId=AKIAQMBOB0000000001&secret={}",
                qm_integration_tests::browser::secret_of("bob")
            ),
        )
        .await;
    assert_eq!(cross.status, 403, "{}", cross.body);
    assert!(cross.header("set-cookie").is_none());
}

/// A team may not foresee a limit change (an admin's), through the console
/// or on NATS, nor may another team ask for QS1's reclaim exposure on NATS
/// itself (it names QS1's jobs and what each would lose); alice may.
async fn assert_admins_and_owners_only(
    stack: &Stack,
    console: &Console,
    alice: &str,
    alice_api: &qm_service::client::Client,
) {
    let page = console.get(alice, "/queues/training/what-if").await;
    assert!(
        !page.body.contains("What if a share's limit changed"),
        "{}",
        page.body
    );
    let refused = alice_api
        .call::<_, serde_json::Value>(
            Operation::DryRunUpdateQuotaShare,
            &serde_json::json!({"jobQueue": "training", "quotaShareName": "QS1",
                                "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 0}]}),
        )
        .await
        .expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("may not change the configuration"),
        "{refused}"
    );

    // Nor may another team ask for QS1's reclaim exposure on NATS itself
    // (it names QS1's jobs and what each would lose).
    let bob_api = stack.auth.client(&stack.nats_url, "bob").await;
    let exposure = serde_json::json!({"jobQueue": "training", "quotaShareName": "QS1"});
    let refused = bob_api
        .call::<_, serde_json::Value>(Operation::GetReclaimExposure, &exposure)
        .await
        .expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("may not read jobs of share training/QS1"),
        "{refused}"
    );
    let allowed = alice_api
        .call::<_, qm_wire::messages::ReclaimExposure>(Operation::GetReclaimExposure, &exposure)
        .await
        .expect("alice reads her own share's exposure");
    assert_eq!(allowed.quota_share_name, "QS1");
}

/// A session used after sign-out is no session; the session cookie is
/// HttpOnly, Secure and SameSite=Strict.
async fn assert_sessions_end_and_cookies_are_strict(console: &Console) {
    let again = console.sign_in("alice").await;
    let page = console.get(&again, "/queues").await;
    let out = console
        .request(
            "POST",
            "/sign-out",
            &[
                ("cookie", &again),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            &format!("csrf={}", Console::csrf_of(&page.body)),
        )
        .await;
    assert_eq!(out.status, 303);
    assert!(out
        .header("set-cookie")
        .is_some_and(|c| c.contains("Max-Age=0")));
    let after = console.get(&again, "/queues").await;
    assert_eq!(
        (after.status, after.header("location")),
        (303, Some("/sign-in"))
    );
    // The session cookie is HttpOnly, Secure and SameSite=Strict.
    let set = console
        .request(
            "POST",
            "/sign-in",
            &[("content-type", "application/x-www-form-urlencoded")],
            &format!(
                "accessKeyId=AKIAQMBOB0000000001&secret={}",
                qm_integration_tests::browser::secret_of("bob")
            ),
        )
        .await;
    let cookie = set.header("set-cookie").expect("a cookie").to_string();
    for part in [
        "HttpOnly",
        "Secure",
        "SameSite=Strict",
        "Max-Age=28800",
        "__Host-",
    ] {
        assert!(cookie.contains(part), "{cookie}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_refuses_what_an_attacker_tries() {
    let (_nats, _s3, mut stack) = running("console-attacks", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let console = Console::start(&mut stack, "console", &[]).await;
    let alice_api = stack.auth.client(&stack.nats_url, "alice").await;
    let evil = "<img src=x onerror=alert(1)>";
    let job = stack
        .submit_as(&alice_api, &sleeper(evil, "QS1", 600))
        .await;
    stack
        .wait_for(&job, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let alice = console.sign_in("alice").await;
    let bob = console.sign_in("bob").await;

    // alice reads her job; bob, opening it by URL, learns nothing of it.
    let mine = console.get(&alice, &format!("/jobs/{job}")).await;
    assert_eq!(mine.status, 200, "{}", mine.body);
    let theirs = console.get(&bob, &format!("/jobs/{job}")).await;
    assert_eq!(theirs.status, 404, "{}", theirs.body);
    assert!(!theirs.body.contains("onerror"), "{}", theirs.body);
    assert!(
        !theirs.body.contains("QS1"),
        "not even its share: {}",
        theirs.body
    );
    let unknown = console
        .get(&bob, "/jobs/j-00000000000000000000000000000000")
        .await;
    assert_eq!(unknown.status, 404, "as an unknown job: {}", unknown.body);
    // Nor her share's page, nor its exposure.
    let share = console.get(&bob, "/queues/training/shares/QS1").await;
    assert_eq!(share.status, 403, "{}", share.body);

    // Every answer carries the policy: no inline script, nothing from elsewhere.
    let csp = mine.header("content-security-policy").expect("a CSP");
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(mine.header("x-frame-options"), Some("DENY"));
    assert!(
        !mine.body.contains("http://") && !mine.body.contains("https://"),
        "no outside asset"
    );

    // The job's name is text, never markup, in every view that shows it.
    for path in [
        format!("/jobs/{job}"),
        "/queues/training/shares/QS1".to_string(),
    ] {
        let page = console.get(&alice, &path).await;
        assert!(
            page.body.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{path}: {}",
            page.body
        );
        assert!(!page.body.contains("<img"), "{path}: {}", page.body);
    }

    assert_no_session_is_accepted(&console).await;

    let token = Console::csrf_of(&mine.body);
    assert_writes_need_their_csrf_token(&stack, &console, &alice, &bob, &job, &token).await;

    assert_cross_site_sign_in_refused(&console).await;
    assert_admins_and_owners_only(&stack, &console, &alice, &alice_api).await;

    assert_sessions_end_and_cookies_are_strict(&console).await;

    // The proxy's header, from someone who is not the proxy: refused.
    let spoofed = console
        .request("GET", "/queues", &[("x-forwarded-user", "platform")], "")
        .await;
    assert_eq!(spoofed.status, 403, "{}", spoofed.body);
    assert!(
        spoofed
            .body
            .contains("accepted only from the authenticating proxy"),
        "{}",
        spoofed.body
    );
    // A console that trusts this address as its proxy believes it, for
    // people only.
    let proxied = Console::start(
        &mut stack,
        "console-behind-proxy",
        &[("QM_CONSOLE_TRUSTED_PROXY_ADDRESSES", "[\"127.0.0.1\"]")],
    )
    .await;
    let via = proxied
        .request("GET", "/queues", &[("x-forwarded-user", "alice")], "")
        .await;
    assert_eq!(via.status, 200, "{}", via.body);
    assert!(via.body.contains("alice (team)"), "{}", via.body);
    let service = proxied
        .request("GET", "/queues", &[("x-forwarded-user", "scheduler")], "")
        .await;
    assert_eq!(service.status, 403, "{}", service.body);

    // The console's own NATS identity cannot be used to act as a service.
    let console_nats = stack.auth.client(&stack.nats_url, "console").await;
    let forged = console_nats
        .acting_for("scheduler")
        .call::<_, serde_json::Value>(Operation::WhoAmI, &serde_json::json!({}))
        .await
        .expect_err("refused");
    assert!(
        forged
            .to_string()
            .contains("only admins, readers and team users"),
        "{forged}"
    );
    let unnamed = console_nats
        .call::<_, serde_json::Value>(Operation::WhoAmI, &serde_json::json!({}))
        .await
        .expect_err("refused");
    assert!(unnamed.to_string().contains("Qm-Caller"), "{unnamed}");

    // In the browser: the name shows as text and no script runs.
    let browser = Browser::start().await;
    browser.sign_in(&console, "alice").await;
    browser.goto(&console.url(&format!("/jobs/{job}"))).await;
    let h1 = browser.text("main h1").await;
    assert_eq!(h1, format!("Job {evil}"));
    assert!(
        browser.client.get_alert_text().await.is_err(),
        "no script of the job's name ran"
    );
    assert_eq!(
        browser
            .js("return document.querySelectorAll('main img').length;")
            .await,
        serde_json::json!(0)
    );
    keyboard_reaches_every_action_and_every_input_is_labelled(&browser, &console, &job).await;
    browser.close().await;
    stack.stop_all();
}

/// Tab through a page, recording which of its actions gets the focus.
async fn tab_through(browser: &Browser) -> (u64, u64) {
    let total = browser
        .js(
            "const all = document.querySelectorAll('a[href], button, input:not([type=hidden]), select, textarea');\
             all.forEach((e, i) => e.dataset.qmIndex = String(i)); window.qmSeen = new Set();\
             document.activeElement && document.activeElement.blur(); return all.length;",
        )
        .await
        .as_u64()
        .unwrap_or(0);
    browser.js("document.body.focus(); return 1;").await;
    for _ in 0..(total + 5) {
        browser.tab().await;
        browser
            .js("const i = document.activeElement && document.activeElement.dataset.qmIndex; if (i !== undefined) window.qmSeen.add(i); return 1;")
            .await;
    }
    let seen = browser
        .js("return window.qmSeen.size;")
        .await
        .as_u64()
        .unwrap_or(0);
    (seen, total)
}

async fn keyboard_reaches_every_action_and_every_input_is_labelled(
    browser: &Browser,
    console: &Console,
    job: &str,
) {
    for path in [
        format!("/jobs/{job}"),
        "/queues/training/what-if".to_string(),
        "/audit".to_string(),
        "/queues/training/shares/QS1".to_string(),
    ] {
        browser.goto(&console.url(&path)).await;
        let (seen, total) = tab_through(browser).await;
        assert!(total > 3, "{path}: {total} actions");
        assert_eq!(seen, total, "{path}: Tab reached {seen} of {total} actions");
        let unlabelled = browser
            .js(
                "return Array.from(document.querySelectorAll('input:not([type=hidden]), select, textarea'))\
                 .filter(e => e.labels.length === 0 && !e.getAttribute('aria-label')).map(e => e.name);",
            )
            .await;
        assert_eq!(
            unlabelled,
            serde_json::json!([]),
            "{path}: inputs without a label"
        );
    }
    // Signing in needs no mouse either.
    browser
        .js("document.querySelector('form.who button').click(); return 1;")
        .await;
    browser.wait_text("main", "Access key id", 10).await;
    browser.js("document.body.focus(); return 1;").await;
    browser.tab().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let name = browser
            .js("return document.activeElement.name || '';")
            .await;
        if name == serde_json::json!("accessKeyId") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Tab never reached the key field"
        );
        browser.tab().await;
    }
    let key = browser.client.active_element().await.expect("focus");
    key.send_keys("AKIAQMALICE00000001").await.expect("typed");
    browser.tab().await;
    let secret = browser.client.active_element().await.expect("focus");
    secret
        .send_keys(&format!(
            "{}\u{e007}",
            qm_integration_tests::browser::secret_of("alice")
        ))
        .await
        .expect("typed, Enter");
    browser.wait_text("header", "alice", 20).await;
}

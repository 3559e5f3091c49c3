//! Every decoder of bytes from outside, fed random and mutated input: it
//! answers with an error or a value, and never panics, overflows its stack
//! or hangs. Cases per property: `PROPTEST_CASES` (256 by default, in
//! `make test`; `make fuzz` runs 20,000). A failing case is written to
//! `fuzz/proptest-regressions/` and replayed first from then on: commit it.

use proptest::prelude::*;
use qm_fuzz::{edits, mutate, nested};

fn repo(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Decodes `bytes` as every type that arrives on a NATS subject or in a
/// stored entry; a log entry is also bound to a subject.
fn decode_wire(bytes: &[u8], subject: &str) {
    macro_rules! each {
        ($($t:ty),* $(,)?) => {
            $( let _ = serde_json::from_slice::<$t>(bytes); )*
        };
    }
    use qm_wire::messages::*;
    use qm_wire::system::*;
    each!(
        SubmitServiceJob,
        JobRef,
        UpdateServiceJob,
        TerminateServiceJob,
        ListServiceJobs,
        QueueRef,
        ShareRef,
        QuotaShare,
        JobQueue,
        RegisterExecutor,
        ListAuditEvents,
        GetServiceJobLogs,
        Caller,
        ApiError,
        ServiceJob,
        JobQueueSnapshot,
        ListServiceJobsResponse,
        JobStateChange,
        PreemptionEvent,
        QueueDocument,
        Report,
        ExecCommand,
        Heartbeat,
        HeartbeatAck,
        LogsRequest,
        LogsResponse,
        CheckpointRequest,
        CheckpointReply,
        SchedRequest,
        LeaderLease,
    );
    if let Ok(mut entry) = serde_json::from_slice::<LogEntry>(bytes) {
        let _ = entry.bind_to_subject(subject);
    }
}

fn wire_fixtures() -> Vec<Vec<u8>> {
    let dir = format!(
        "{}/../libs/qm-wire/tests/fixtures",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut all: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .flatten()
        .map(|e| std::fs::read(e.path()).expect("fixture"))
        .collect();
    all.sort();
    all
}

proptest! {
    #[test]
    fn wire_messages_from_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512), subject in "qm\\.v1\\.log\\.[a-z]{0,8}(\\.[a-z0-9-]{0,8}){0,2}") {
        decode_wire(&bytes, &subject);
    }

    #[test]
    fn wire_messages_from_mutated_fixtures(which in any::<usize>(), edits in edits()) {
        let fixtures = wire_fixtures();
        let base = &fixtures[which % fixtures.len()];
        decode_wire(&mutate(base, &edits), "qm.v1.log.exec.node-1");
    }

    #[test]
    fn sigv4_from_any_request(
        method in "[A-Z]{0,8}",
        path in "[ -~]{0,64}",
        query in "[ -~]{0,64}",
        headers in proptest::collection::vec(("[a-zA-Z-]{1,24}", "[ -~]{0,128}"), 0..8),
        body in proptest::collection::vec(any::<u8>(), 0..256),
        now in any::<i64>(),
    ) {
        let headers: Vec<(String, String)> = headers;
        let req = qm_sigv4::Request { method: &method, path: &path, query: &query, headers: &headers, body: &body };
        let scope = qm_sigv4::Scope { region: "us-east-1".into(), service: "batch".into() };
        let _ = qm_sigv4::verify(&req, &scope, |_| Some("secret".into()), now);
        let _ = qm_sigv4::verify_before_body(&req, &scope, |_| Some("secret".into()), now);
        let _ = qm_sigv4::percent_decode(&path);
    }

    #[test]
    fn sigv4_from_a_mutated_authorization(edits in edits(), now in 1_700_000_000i64..1_900_000_000) {
        let auth = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261204/us-east-1/batch/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7";
        let mutated = String::from_utf8_lossy(&mutate(auth.as_bytes(), &edits)).into_owned();
        let headers = vec![
            ("Authorization".to_string(), mutated),
            ("X-Amz-Date".to_string(), "20261204T173812Z".to_string()),
            ("Host".to_string(), "127.0.0.1".to_string()),
        ];
        let req = qm_sigv4::Request { method: "POST", path: "/v1/listservicejobs", query: "", headers: &headers, body: b"{}" };
        let scope = qm_sigv4::Scope { region: "us-east-1".into(), service: "batch".into() };
        let _ = qm_sigv4::verify(&req, &scope, |_| Some("secret".into()), now);
        let _ = qm_sigv4::verify_before_body(&req, &scope, |_| Some("secret".into()), now);
    }

    #[test]
    fn tenancy_files_from_mutated_examples(edits in edits()) {
        let base = repo("deploy/tenancy.dev.yaml");
        let text = String::from_utf8_lossy(&mutate(base.as_bytes(), &edits)).into_owned();
        let _ = qm_tenancy::Tenancy::parse(&text);
    }

    #[test]
    fn tenancy_files_from_any_text(text in "[ -~\\n]{0,512}") {
        let _ = qm_tenancy::Tenancy::parse(&text);
    }

    #[test]
    fn scenarios_from_mutated_examples(which in 0usize..64, edits in edits()) {
        let dir = format!("{}/../examples/scenarios", env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<_> = std::fs::read_dir(&dir).expect("scenarios").flatten().map(|e| e.path()).collect();
        files.sort();
        // The large benchmark scenario is left to `make fuzz`'s longer run.
        files.retain(|f| !f.to_string_lossy().contains("bench-"));
        let base = std::fs::read(&files[which % files.len()]).expect("scenario");
        let text = String::from_utf8_lossy(&mutate(&base, &edits)).into_owned();
        let _ = qm_sim::sim::parse(&text);
        if let Ok(env) = qm_sim::sim::parse_environment(&text) {
            let _ = qm_sim::Environment::new(env, qm_sim::Options::default());
        }
    }

    #[test]
    fn itp_traces_from_mutated_excerpts(edits in edits()) {
        let base = repo("libs/qm-eval/tests/data/itp-2021/cluster01.csv");
        let text = String::from_utf8_lossy(&mutate(base.as_bytes(), &edits)).into_owned();
        let _ = qm_eval::trace::read_itp("cluster01.csv", &text, qm_eval::trace::OnBadLine::Skip);
        let _ = qm_eval::trace::read_itp("cluster01.csv", &text, qm_eval::trace::OnBadLine::Fail);
        let _ = qm_eval::trace::read_quota("quota.csv", &text);
    }

    #[test]
    fn settings_files_from_any_text(text in "[ -~\\n]{0,256}", var in "[A-Z_]{0,24}", value in "[ -~]{0,32}") {
        let dir = std::env::temp_dir().join(format!("qm-fuzz-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join(format!("{}.yaml", std::thread::current().name().unwrap_or("t").replace(':', "_")));
        std::fs::write(&file, &text).expect("write");
        let env = vec![(format!("QM_FUZZ_{var}"), value.clone()), ("QM_NATS_URL".to_string(), value)];
        let _ = qm_service::settings::load::<Fuzzed>("fuzz", Some(&file), env);
    }
}

/// A service's settings, as every service declares its own.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Fuzzed {
    name: String,
    count: u32,
    ratio: f64,
    list: Vec<String>,
}

impl qm_service::settings::Validate for Fuzzed {
    fn problems(&self) -> Vec<String> {
        Vec::new()
    }
}

#[test]
fn nesting_deeper_than_any_stack_is_an_error_not_a_crash() {
    // 100,000 levels: a recursive parser without a limit overflows its
    // stack long before.
    let json = nested("[", "]", 100_000);
    decode_wire(json.as_bytes(), "qm.v1.log.exec.node-1");
    let objects = nested("{\"a\":", "}", 100_000);
    decode_wire(objects.as_bytes(), "qm.v1.log.exec.node-1");
    let yaml = nested("[", "]", 100_000);
    assert!(qm_tenancy::Tenancy::parse(&yaml).is_err());
    assert!(qm_sim::sim::parse(&yaml).is_err());
    let block = (0..20_000)
        .map(|i| format!("{}- ", "  ".repeat(i.min(2_000))))
        .collect::<String>();
    let _ = qm_tenancy::Tenancy::parse(&block);
}

use super::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Demo {
    work_dir: String,
    heartbeat_seconds: u64,
}

impl Default for Demo {
    fn default() -> Self {
        Demo {
            work_dir: String::new(),
            heartbeat_seconds: 1,
        }
    }
}

impl Validate for Demo {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.work_dir.is_empty() {
            p.push("workDir: is required".into());
        }
        if self.heartbeat_seconds == 0 {
            p.push("heartbeatSeconds: must be >= 1".into());
        }
        p
    }
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn environment_overrides_defaults_and_numbers_parse() {
    let (s, nats): (Demo, _) = load(
        "demo",
        None,
        env(&[
            ("QM_NATS_URL", "nats://n:4222"),
            ("QM_NATS_PRINCIPAL", "everyone"),
            ("QM_DEMO_NATS_PRINCIPAL", "demo-1"),
            ("QM_DEMO_WORK_DIR", "/w"),
            ("QM_DEMO_HEARTBEAT_SECONDS", "3"),
        ]),
    )
    .expect("valid");
    assert_eq!(nats.nats_url, "nats://n:4222");
    assert_eq!(
        nats.nats_principal, "demo-1",
        "the service's own variable wins"
    );
    assert_eq!(s.work_dir, "/w");
    assert_eq!(s.heartbeat_seconds, 3);
}

#[test]
fn a_unit_in_a_key_is_one_word_in_its_variable() {
    assert_eq!(screaming("partSizeMiB"), "PART_SIZE_MIB");
    assert_eq!(screaming("heartbeatSeconds"), "HEARTBEAT_SECONDS");
}

#[test]
fn every_problem_is_reported_at_once() {
    let e = load::<Demo>(
        "demo",
        None,
        env(&[
            ("QM_DEMO_HEARTBEAT_SECONDS", "0"),
            ("QM_NATS_URL", "http://x"),
            ("QM_NATS_USER", "u"),
        ]),
    )
    .expect_err("invalid");
    assert_eq!(e.0.len(), 4, "{e}");
    assert!(
        e.to_string().contains("must start with nats:// or tls://"),
        "{e}"
    );
    assert!(e.to_string().contains("natsUser and natsPassword"), "{e}");
    assert!(e.to_string().contains("workDir"), "{e}");
    assert!(e.to_string().contains("heartbeatSeconds"), "{e}");
}

#[test]
fn unknown_fields_and_missing_files_are_named() {
    let dir = std::env::temp_dir().join(format!("qm-settings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("s.yaml");
    std::fs::write(&file, "workDir: /w\nheartbeatSecond: 2\n").expect("write");
    let e = load::<Demo>("demo", Some(&file), env(&[])).expect_err("unknown field");
    assert!(e.to_string().contains("heartbeatSecond"), "{e}");
    let e =
        load::<Demo>("demo", Some(&dir.join("missing.yaml")), env(&[])).expect_err("missing file");
    assert!(e.to_string().contains("cannot read"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_password_is_never_printed() {
    let s = NatsSettings {
        nats_user: "u".into(),
        nats_password: "hunter2".into(),
        ..Default::default()
    };
    let shown = format!("{s:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

const DEMO: Spec = Spec {
    service: "demo",
    about: "A service of the tests.",
    keys: &[
        Key {
            name: "workDir",
            help: "where it works",
        },
        Key {
            name: "heartbeatSeconds",
            help: "how often it says it lives",
        },
    ],
    notes: "",
};

fn args(a: &[&str]) -> Vec<String> {
    std::iter::once("qm-demo")
        .chain(a.iter().copied())
        .map(String::from)
        .collect()
}

#[test]
fn each_layer_wins_over_the_one_before() {
    let dir = std::env::temp_dir().join(format!("qm-layers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("s.yaml");
    std::fs::write(
        &file,
        "workDir: /from-file\nheartbeatSeconds: 2\nnatsUrl: nats://file:4222\n",
    )
    .expect("write");
    let inv = DEMO
        .parse_args::<Demo>(args(&[
            "--config",
            file.to_str().expect("a UTF-8 path"),
            "--heartbeat-seconds",
            "9",
        ]))
        .expect("parses");
    assert_eq!(inv.config.as_deref(), Some(file.as_path()));
    let (s, nats, _): (Demo, _, _) = load_layers(
        "demo",
        inv.config.as_deref(),
        env(&[
            ("QM_DEMO_HEARTBEAT_SECONDS", "5"),
            ("QM_NATS_URL", "nats://env:4222"),
        ]),
        &inv.flags,
    )
    .expect("valid");
    assert_eq!(s.work_dir, "/from-file", "the file over the default");
    assert_eq!(nats.nats_url, "nats://env:4222", "a variable over the file");
    assert_eq!(s.heartbeat_seconds, 9, "a flag over the variable");
    let (d, _, _): (Demo, _, _) =
        load_layers("demo", None, env(&[("QM_DEMO_WORK_DIR", "/w")]), &[]).expect("valid");
    assert_eq!(d.heartbeat_seconds, 1, "the default when no layer sets it");
    let (d, _, _): (Demo, _, _) = load_layers(
        "demo",
        None,
        env(&[("QM_DEMO_WORK_DIR", "0123")]),
        &[("heartbeatSeconds".into(), "4".into())],
    )
    .expect("a string key takes digits as text");
    assert_eq!((d.work_dir.as_str(), d.heartbeat_seconds), ("0123", 4));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_flag_that_sets_no_key_is_refused_and_help_names_every_key_and_its_variable() {
    let e = DEMO
        .parse_args::<Demo>(args(&["--work-dri", "/w"]))
        .expect_err("unknown flag");
    assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument, "{e}");
    let help = DEMO.command::<Demo>().render_long_help().to_string();
    for needle in [
        "--work-dir",
        "QM_DEMO_WORK_DIR",
        "--heartbeat-seconds",
        "[default: 1]",
        "--nats-url",
        "QM_NATS_URL or QM_DEMO_NATS_URL",
        "--metrics-address",
        "--config",
    ] {
        assert!(help.contains(needle), "{needle} in\n{help}");
    }
    assert!(
        !help.contains("--nats-password"),
        "a secret has no flag (the command line is visible to other users):\n{help}"
    );
    assert!(DEMO
        .parse_args::<Demo>(args(&["--nats-password", "hunter2"]))
        .is_err());
}

#[test]
fn a_description_missing_a_key_or_naming_a_stale_one_is_found() {
    assert!(
        DEMO.undescribed::<Demo>().is_empty(),
        "{:?}",
        DEMO.undescribed::<Demo>()
    );
    const STALE: Spec = Spec {
        service: "demo",
        about: "",
        keys: &[Key {
            name: "workDirectory",
            help: "renamed",
        }],
        notes: "",
    };
    let problems = STALE.undescribed::<Demo>().join("\n");
    assert!(
        problems.contains("the key workDir is not described"),
        "{problems}"
    );
    assert!(
        problems.contains("the key heartbeatSeconds is not described"),
        "{problems}"
    );
    assert!(
        problems.contains("workDirectory is described but is no key"),
        "{problems}"
    );
}

#[test]
fn docs_naming_a_stale_variable_and_deploy_files_that_do_not_load_are_found() {
    let root = std::env::temp_dir().join(format!("qm-documented-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("docs")).expect("docs");
    std::fs::create_dir_all(root.join("deploy/compose/config")).expect("deploy");
    std::fs::create_dir_all(root.join("deploy/kubernetes")).expect("deploy");
    std::fs::write(
        root.join("README.md"),
        "QM_DEMO_WORK_DIR=/w and QM_DEMO_NATS_URL, QM_DEMO_<KEY>",
    )
    .expect("readme");
    std::fs::write(root.join("docs/a.md"), "set QM_DEMO_WORKDIR").expect("doc");
    std::fs::write(
        root.join("deploy/compose/config/demo.yaml"),
        "workDir: /w\nheartbeatSeconds: often\n",
    )
    .expect("compose");
    std::fs::write(
        root.join("deploy/kubernetes/config.yaml"),
        "kind: ConfigMap\ndata:\n  demo.yaml: |\n    workDir: /w\n    heartbeat: 3\n---\nkind: Service\n",
    )
    .expect("k8s");
    let problems = DEMO.check_documented::<Demo>(&root, &[]).join("\n");
    assert!(
        problems.contains("docs/a.md: QM_DEMO_WORKDIR sets no key"),
        "{problems}"
    );
    assert!(!problems.contains("README.md"), "{problems}");
    assert!(
        problems.contains("deploy/compose/config/demo.yaml: does not load")
            && problems.contains("often"),
        "{problems}"
    );
    assert!(
        problems.contains("ConfigMap entry demo.yaml") && problems.contains("heartbeat"),
        "{problems}"
    );
    assert_eq!(problems.lines().count(), 3, "{problems}");
    let fixed = DEMO
        .check_documented::<Demo>(&root, &["QM_DEMO_WORKDIR"])
        .join("\n");
    assert!(!fixed.contains("docs/a.md"), "{fixed}");
    // Nothing to check is a problem too, not a pass.
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("root");
    let empty = DEMO.check_documented::<Demo>(&root, &[]).join("\n");
    for needle in [
        "docs/: no files",
        "deploy/: no files",
        "no settings file of qm-demo",
    ] {
        assert!(empty.contains(needle), "{needle} in {empty}");
    }
    let _ = std::fs::remove_dir_all(root);
}

#[test]
fn the_generated_tables_must_match_and_bless_writes_them() {
    let root = std::env::temp_dir().join(format!("qm-generated-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("docs")).expect("docs");
    let page = "# Settings\n<!-- generated: demo -->\nold\n<!-- end: demo -->\n\n<!-- generated: shared -->\n<!-- end: shared -->\n";
    std::fs::write(root.join("docs/settings.md"), page).expect("page");
    let problems = DEMO.check_generated::<Demo>(&root).join("\n");
    assert!(
        problems.contains("the table of demo is not the one"),
        "{problems}"
    );
    assert!(
        problems.contains("the table of shared is not the one"),
        "{problems}"
    );
    let text = std::fs::read_to_string(root.join("docs/settings.md")).expect("read");
    assert_eq!(text, page, "nothing written without QM_BLESS_DOCS=1");
    let blessed = DEMO.check_generated_as::<Demo>(&root, true).join("\n");
    assert!(blessed.contains("the table of demo written"), "{blessed}");
    let text = std::fs::read_to_string(root.join("docs/settings.md")).expect("read");
    assert!(
        text.contains("| `workDir` | `QM_DEMO_WORK_DIR` | `--work-dir` |"),
        "{text}"
    );
    assert!(
        text.starts_with("# Settings\n<!-- generated: demo -->\n| Key |"),
        "{text}"
    );
    let again = DEMO.check_generated_as::<Demo>(&root, true);
    assert!(again.is_empty(), "written once, then it matches: {again:?}");
    let _ = std::fs::remove_dir_all(root);
}

//! The deploy files say what the services read: every settings file in the
//! Kubernetes ConfigMap loads in its service with no unknown or invalid
//! setting (the only problems left are the credential files that exist in
//! the cluster, not here), and its tenancy is valid. The manifests
//! themselves are validated against the Kubernetes schemas by
//! `deploy/kubernetes/check.sh` (`make check-deploy`).

use qm_integration_tests::stack::bin;

const CONFIG: &str = include_str!("../../deploy/kubernetes/config.yaml");

fn data(key: &str) -> String {
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(CONFIG).expect("config.yaml is YAML");
    doc["data"][key]
        .as_str()
        .unwrap_or_else(|| panic!("config.yaml has data.{key}"))
        .to_string()
}

#[test]
fn each_services_settings_in_the_configmap_load_in_that_service() {
    let dir = std::env::temp_dir().join(format!("qm-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (file, binary, env) in [
        ("admission.yaml", "qm-admission", vec![]),
        (
            "scheduler.yaml",
            "qm-scheduler",
            vec![("QM_SCHEDULER_HOLDER", "pod-0")],
        ),
        (
            "executor.yaml",
            "qm-executor",
            vec![
                ("QM_EXECUTOR_EXECUTOR_ID", "gpu-node-1"),
                ("QM_EXECUTOR_CHECKPOINT_NODE", "gpu-node-1"),
            ],
        ),
        (
            "checkpoint.yaml",
            "qm-checkpoint",
            vec![("QM_CHECKPOINT_NODE", "gpu-node-1")],
        ),
        ("gateway.yaml", "qm-gateway", vec![]),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, data(file)).expect("settings file");
        let out = std::process::Command::new(bin(binary))
            .arg("--config")
            .arg(&path)
            .env_clear()
            .envs(env)
            .output()
            .expect("the service runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{binary}: {stderr}");
        let problems: Vec<&str> = stderr
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("- "))
            .collect();
        assert!(!problems.is_empty(), "{binary}: {stderr}");
        for p in &problems {
            let about_a_secret = (p.starts_with("natsNkeyFile:")
                && p.contains("/run/secrets/quartermaster/nats/"))
                || (p.starts_with("metricsTokenFile:")
                    && p.contains("/run/secrets/quartermaster/metrics/token"));
            assert!(
                about_a_secret,
                "{binary}: {file} has a problem of its own: {p}"
            );
        }
    }
    let tenancy = dir.join("tenancy.yaml");
    std::fs::write(&tenancy, data("tenancy.yaml")).expect("tenancy");
    let out = std::process::Command::new(bin("qm"))
        .args(["auth", "--check", "--tenancy"])
        .arg(&tenancy)
        .output()
        .expect("qm runs");
    assert!(out.status.success(), "the ConfigMap's tenancy: {out:?}");
}

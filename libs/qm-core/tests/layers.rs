//! The core's layers (README.md, "Layers"): imports run down, never up and
//! never in a circle. A new module must be placed in a layer here.

const LAYERS: qm_arch::Layers = qm_arch::Layers {
    layers: &[
        (
            "base: ids, time and the percentile rule",
            &["ids", "time", "stats"],
        ),
        (
            "model: plain types, knowing nothing of their checks",
            &[
                "outcome",
                "reason",
                "nodes",
                "config",
                "job",
                "plan",
                "usage",
                "ledger",
                "index",
                "table",
                "policy",
                "policy::budgets",
                "policy::classes",
                "policy::drills",
                "policy::fair_share",
                "policy::groups",
                "policy::protections",
                "policy::runtimes",
            ],
        ),
        (
            "validation",
            &[
                "validate",
                "policy::budgets::validate",
                "policy::classes::validate",
                "policy::groups::validate",
            ],
        ),
        ("state: the cluster", &["cluster", "policy::environments"]),
        (
            "the policies' hooks: read the state and a pass's projection",
            &[
                "policy::view",
                "policy::hooks",
                "policy::budgets::hooks",
                "policy::classes::hooks",
                "policy::drills::hooks",
                "policy::fair_share::hooks",
                "policy::groups::hooks",
                "policy::protections::hooks",
                "policy::runtimes::hooks",
            ],
        ),
        ("the pass: a fixed pipeline of phases", &["pass"]),
        (
            "what reads the pass",
            &[
                "invariants",
                "dry_run",
                "outlook",
                "cluster::entry",
                "cluster::dry_run",
                "cluster::outlook",
            ],
        ),
    ],
};

#[test]
fn imports_run_down_the_layers_and_never_in_a_circle() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // The reader sees the crate: a check that found no module or no import
    // would pass whatever the code did.
    let modules = qm_arch::modules(&src);
    let pass = modules.iter().find(|m| m.path == "pass").expect("the pass");
    assert!(modules.len() > 30, "{} modules", modules.len());
    for below in ["cluster", "plan", "time"] {
        assert!(
            pass.imports.contains_key(below),
            "the pass imports {below}: {:?}",
            pass.imports
        );
    }
    qm_arch::assert_layered(&src, &LAYERS);
}

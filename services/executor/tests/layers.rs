//! The executor's layers (services/README.md, "Layers"): imports run down,
//! never up and never in a circle. A new module must be placed here.

const LAYERS: qm_arch::Layers = qm_arch::Layers {
    layers: &[
        (
            "settings, errors, records and the outbox",
            &["settings", "error", "record", "outbox", "gpus", "observe"],
        ),
        (
            "the two runtimes and the SageMaker contract",
            &["process", "container", "sagemaker"],
        ),
        ("what the runtimes share", &["runtime"]),
        (
            "the node: `Executor`, its attempts and launches",
            &["node", "sweep"],
        ),
        ("startup (main.rs)", &[""]),
    ],
};

#[test]
fn imports_run_down_the_layers_and_never_in_a_circle() {
    qm_arch::assert_crate_layered(
        env!("CARGO_MANIFEST_DIR"),
        &LAYERS,
        &[("node::launch", "runtime"), ("runtime", "process")],
    );
}

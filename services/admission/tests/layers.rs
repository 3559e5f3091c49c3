//! Admission's layers (services/README.md, "Layers"): imports run down,
//! never up and never in a circle. A new module must be placed here.

const LAYERS: qm_arch::Layers = qm_arch::Layers {
    layers: &[
        ("settings, errors and ids", &["settings", "errors", "ids"]),
        ("what admission stores and reads back", &["audit", "events"]),
        (
            "the service: `Admission` (main.rs) and the files of its methods",
            &[
                "",
                "drills",
                "handlers",
                "jobs",
                "queue_ops",
                "queues",
                "relays",
                "tenancy",
            ],
        ),
    ],
};

#[test]
fn imports_run_down_the_layers_and_never_in_a_circle() {
    qm_arch::assert_crate_layered(
        env!("CARGO_MANIFEST_DIR"),
        &LAYERS,
        &[("jobs", "errors"), ("handlers", "events"), ("jobs", "")],
    );
}

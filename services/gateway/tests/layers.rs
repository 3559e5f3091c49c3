//! The gateway's layers (services/README.md, "Layers"): imports run down,
//! never up and never in a circle. A new module must be placed here.

const LAYERS: qm_arch::Layers = qm_arch::Layers {
    layers: &[
        (
            "settings, the API's names and errors, ARNs, the store",
            &["settings", "api", "arn", "store"],
        ),
        (
            "reading requests: CreateTrainingJob's payload, the inputs and shared checks",
            &["payload", "ops::requests"],
        ),
        (
            "the service: `Gateway` (main.rs), its HTTP loop and its operations",
            &[
                "",
                "http",
                "ops",
                "ops::environments",
                "ops::jobs",
                "ops::policies",
                "ops::queues",
                "ops::shares",
                "ops::tags",
            ],
        ),
    ],
};

#[test]
fn imports_run_down_the_layers_and_never_in_a_circle() {
    qm_arch::assert_crate_layered(
        env!("CARGO_MANIFEST_DIR"),
        &LAYERS,
        &[
            ("ops::jobs", "ops::requests"),
            ("http", "api"),
            ("ops", "ops::requests"),
        ],
    );
}

//! `qm`'s layers (services/README.md, "Layers"): imports run down, never
//! up and never in a circle. A new module must be placed here.

const LAYERS: qm_arch::Layers = qm_arch::Layers {
    layers: &[
        (
            "what a command fails with and how it shows things",
            &["live::failure", "live::output"],
        ),
        ("the connection", &["live::connect"]),
        (
            "the commands, a file per group",
            &[
                "live::admin",
                "live::audit",
                "live::drill",
                "live::events",
                "live::governance",
                "live::jobs",
                "live::observe",
                "live::profile",
                "live::queues",
                "live::submit",
                "live::tenancy",
                "live::usage",
                "whatif",
            ],
        ),
        (
            "the command line (main.rs) and the commands' index",
            &["", "live"],
        ),
    ],
};

#[test]
fn imports_run_down_the_layers_and_never_in_a_circle() {
    qm_arch::assert_crate_layered(
        env!("CARGO_MANIFEST_DIR"),
        &LAYERS,
        &[
            ("live::jobs", "live::output"),
            ("live::profile", "live::connect"),
            ("live", "live::submit"),
        ],
    );
}

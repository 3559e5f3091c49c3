//! The checkpoint service's layers (services/README.md, "Layers"): imports
//! run down, never up and never in a circle. A new module must be placed
//! here.

const LAYERS: qm_arch::Layers = qm_arch::Layers {
    layers: &[
        ("settings and metrics", &["settings", "observe"]),
        (
            "the service: restores, tracking, the transfers' channels",
            &["service"],
        ),
        ("startup (main.rs)", &[""]),
    ],
};

#[test]
fn imports_run_down_the_layers_and_never_in_a_circle() {
    qm_arch::assert_crate_layered(
        env!("CARGO_MANIFEST_DIR"),
        &LAYERS,
        &[("service", "observe")],
    );
}

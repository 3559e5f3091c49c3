//! The console's layers (services/README.md, "Layers"): imports run down,
//! never up and never in a circle. A new module must be placed here.

const LAYERS: qm_arch::Layers = qm_arch::Layers {
    layers: &[
        ("settings and sessions", &["settings", "session"]),
        ("the live feed and the pages", &["live", "pages"]),
        ("requests and their answers", &["http"]),
        ("the service: `Console` (main.rs)", &[""]),
    ],
};

#[test]
fn imports_run_down_the_layers_and_never_in_a_circle() {
    qm_arch::assert_crate_layered(
        env!("CARGO_MANIFEST_DIR"),
        &LAYERS,
        &[("http", "pages"), ("http", "session")],
    );
}

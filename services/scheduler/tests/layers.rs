//! The scheduler's layers (services/README.md, "Layers"): imports run
//! down, never up and never in a circle. A new module must be placed here.

const LAYERS: qm_arch::Layers = qm_arch::Layers {
    layers: &[
        ("the leader's tenure, archives", &["tenure", "archive"]),
        (
            "the state: every queue's core, positions, views, usage",
            &["state"],
        ),
        (
            "snapshots of the state, and what an operator sees",
            &["snapshot", "snapshot_golden", "observe"],
        ),
        (
            "the log stream's headers and errors, acknowledgements",
            &["stream", "acks"],
        ),
        (
            "following the log, leading it, upkeep",
            &["follow", "runner", "upkeep"],
        ),
        ("the lease", &["leader"]),
        ("startup and settings (main.rs)", &[""]),
    ],
};

#[test]
fn imports_run_down_the_layers_and_never_in_a_circle() {
    qm_arch::assert_crate_layered(
        env!("CARGO_MANIFEST_DIR"),
        &LAYERS,
        &[
            ("follow", "stream"),
            ("runner", "state"),
            ("leader", "observe"),
        ],
    );
}

//! Resume drills: proof that a job of a workload class resumes.
//!
//! A drill runs two copies of one job on its share's own capacity: the
//! *subject*, which is stopped at a point chosen from the drill's seed
//! after its first committed checkpoint and then resumes from it, and the
//! *reference*, which runs uninterrupted. When both have succeeded, the
//! results they declare (the text each writes to `$QM_RESULT_FILE`) are
//! compared, with the class's tolerance; the outcome is kept per share,
//! class and artifact (`Cluster::record_resume_drill`), and a class with
//! `borrowRequiresResumeProof` borrows only for artifacts whose last drill
//! passed. Drill jobs never borrow and their stop never counts in the
//! lost-work ledger; they are named `<name>-resumed` and
//! `<name>-uninterrupted`, and the stop ends an attempt `PREEMPTED_DRILL`.
//!
//! | part | where |
//! |---|---|
//! | configuration | the class's `resumeDrill` settings (`crate::policy::classes`) |
//! | validation | the class's (`crate::policy::classes::validate`) |
//! | state | here: [`Drill`]; kept and advanced by the cluster (`cluster/drills.rs`) |
//! | hooks | `hooks.rs`: the subjects due to stop (a phase of stops due) |

pub mod hooks;

use crate::ids::JobId;
use crate::time::Time;

/// The longest a drill waits after the subject's first committed
/// checkpoint before it stops it (the point is drawn from the seed in
/// `0..=DRILL_MAX_DELAY_MS`).
pub const DRILL_MAX_DELAY_MS: u64 = 20_000;

/// Decided drills a cluster keeps (the oldest go first); their outcomes
/// stay as resume proofs.
pub const KEPT_DECIDED_DRILLS: usize = 500;

/// The longest result text a job may declare (larger ones are cut, and
/// the comparison says so).
pub const MAX_RESULT_BYTES: usize = 16 * 1024;

/// A drill job's part in its drill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DrillRole {
    pub drill: u64,
    /// The uninterrupted copy; else the subject (stopped and resumed).
    pub reference: bool,
}

/// Where a drill stands.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DrillState {
    Running,
    Passed,
    /// What differed, or why it could not be decided.
    Failed(String),
}

impl DrillState {
    pub fn as_str(&self) -> &'static str {
        match self {
            DrillState::Running => "RUNNING",
            DrillState::Passed => "PASSED",
            DrillState::Failed(_) => "FAILED",
        }
    }
}

/// One resume drill.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Drill {
    pub id: u64,
    pub share: String,
    pub class: String,
    /// What it proves (`JobSpec::artifact`).
    pub artifact: String,
    pub subject: JobId,
    pub reference: JobId,
    pub started_at: Time,
    /// From the seed: how long after the subject's first committed
    /// checkpoint it is stopped.
    pub delay_ms: u64,
    /// When the subject is to be stopped (set at its first commit).
    pub stop_at: Option<Time>,
    /// When it was stopped.
    pub stopped_at: Option<Time>,
    pub state: DrillState,
    pub finished_at: Option<Time>,
    /// Work the subject lost to the stop and computed again (ms per
    /// instance: from its last checkpoint to the stop).
    pub recomputed_ms: Option<u64>,
    /// The checkpoint step the resumed attempt restored.
    pub restored_step: Option<u64>,
    /// From the resumed attempt's placement to its process running (the
    /// restore and the launch), ms.
    pub restore_ms: Option<u64>,
}

/// The delay a seed draws (`0..=DRILL_MAX_DELAY_MS`), the same on every
/// replay.
pub fn delay_for(seed: u64) -> u64 {
    // splitmix64: a well-mixed draw from any seed, even 0.
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    z % (DRILL_MAX_DELAY_MS + 1)
}

/// A result as metrics: every non-empty line `name value`, `name=value`
/// or `name: value` with a number; None if any line is not.
fn metrics(text: &str) -> Option<Vec<(String, f64)>> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once('=')
            .or_else(|| line.split_once(':'))
            .or_else(|| line.split_once(char::is_whitespace))?;
        let value: f64 = value.trim().parse().ok()?;
        if !value.is_finite() {
            return None;
        }
        out.push((name.trim().to_string(), value));
    }
    (!out.is_empty()).then_some(out)
}

/// Compares what the uninterrupted and the resumed run declared. Results
/// that are metrics (see [`metrics`]) must name the same metrics, each
/// within `tolerance_ppm` (parts per million, relative to the larger
/// magnitude; 0: equal); any other text must be equal (surrounding
/// whitespace aside). Err says what differed.
pub fn compare_results(
    reference: Option<&str>,
    resumed: Option<&str>,
    tolerance_ppm: u32,
) -> Result<(), String> {
    let (Some(reference), Some(resumed)) = (reference, resumed) else {
        let which = match (reference, resumed) {
            (None, None) => "neither run",
            (None, Some(_)) => "the uninterrupted run",
            _ => "the resumed run",
        };
        return Err(format!(
            "{which} declared no result: a job under drill writes its result (a digest, or metrics as `name value` lines) to $QM_RESULT_FILE"
        ));
    };
    if let (Some(a), Some(b)) = (metrics(reference), metrics(resumed)) {
        let names = |m: &[(String, f64)]| m.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        if names(&a) != names(&b) {
            return Err(format!(
                "the runs declared different metrics: {:?} uninterrupted, {:?} resumed",
                names(&a),
                names(&b)
            ));
        }
        let tolerance = f64::from(tolerance_ppm) / 1e6;
        let differing: Vec<String> = a
            .iter()
            .zip(&b)
            .filter(|((_, x), (_, y))| (x - y).abs() > tolerance * x.abs().max(y.abs()))
            .map(|((name, x), (_, y))| format!("{name}: {x} uninterrupted, {y} resumed"))
            .collect();
        if differing.is_empty() {
            return Ok(());
        }
        return Err(format!(
            "{} beyond the class's tolerance ({} ppm): {}",
            if differing.len() == 1 {
                "a metric differs"
            } else {
                "metrics differ"
            },
            tolerance_ppm,
            differing.join("; ")
        ));
    }
    if reference.trim() == resumed.trim() {
        return Ok(());
    }
    let first = reference
        .lines()
        .zip(resumed.lines())
        .position(|(a, b)| a.trim() != b.trim())
        .unwrap_or_else(|| reference.lines().count().min(resumed.lines().count()));
    let line = |t: &str| {
        t.lines()
            .nth(first)
            .unwrap_or("(nothing)")
            .trim()
            .to_string()
    };
    Err(format!(
        "the results differ at line {}: {:?} uninterrupted, {:?} resumed",
        first + 1,
        line(reference),
        line(resumed)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_drawn_from_the_seed_and_bounded() {
        assert_eq!(delay_for(7), delay_for(7));
        let draws: std::collections::BTreeSet<u64> = (0..100).map(delay_for).collect();
        assert!(draws.len() > 90, "spread out: {}", draws.len());
        assert!(draws.iter().all(|&d| d <= DRILL_MAX_DELAY_MS));
    }

    #[test]
    fn a_digest_must_be_equal() {
        assert_eq!(compare_results(Some("ab12\n"), Some("ab12"), 0), Ok(()));
        let e = compare_results(Some("ab12"), Some("ab13"), 1_000_000).expect_err("differs");
        assert!(
            e.contains("line 1: \"ab12\" uninterrupted, \"ab13\" resumed"),
            "{e}"
        );
    }

    #[test]
    fn metrics_compare_within_the_tolerance() {
        let a = "loss 0.5000\naccuracy=0.91\n";
        let b = "loss 0.5004\naccuracy=0.91\n";
        assert_eq!(compare_results(Some(a), Some(b), 1_000), Ok(()));
        let e = compare_results(Some(a), Some(b), 100).expect_err("0.08% > 0.01%");
        assert!(
            e.contains("a metric differs") && e.contains("loss: 0.5"),
            "{e}"
        );
        let e = compare_results(Some(a), Some("loss 0.5\n"), 1_000).expect_err("fewer");
        assert!(e.contains("different metrics"), "{e}");
    }

    #[test]
    fn a_missing_result_fails_naming_the_run() {
        let e = compare_results(Some("x"), None, 0).expect_err("none");
        assert!(e.starts_with("the resumed run declared no result"), "{e}");
        let e = compare_results(None, None, 0).expect_err("none");
        assert!(e.starts_with("neither run"), "{e}");
    }
}

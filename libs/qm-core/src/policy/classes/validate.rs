//! The checks of a share's workload classes (`crate::policy::classes`).

use std::collections::BTreeSet;

use crate::config::*;
use crate::policy::classes::*;

/// The problems with a share's classes; `field` is the share's path.
pub(crate) fn class_problems(field: &str, share: &QuotaShare, out: &mut Vec<ConfigProblem>) {
    let problem = |f: String, message: String| ConfigProblem { field: f, message };
    let classes = &share.classes;
    if classes.len() > MAX_CLASSES_PER_SHARE {
        out.push(problem(
            format!("{field}.workloadClasses"),
            format!(
                "a share declares at most {MAX_CLASSES_PER_SHARE} workload classes, got {}",
                classes.len()
            ),
        ));
    }
    if classes.is_empty() {
        if let Some(d) = &share.default_class {
            out.push(problem(
                format!("{field}.defaultWorkloadClass"),
                format!("names {d:?}, but the share declares no workloadClasses"),
            ));
        }
        return;
    }
    let names: BTreeSet<&str> = classes.iter().map(|c| c.name.as_str()).collect();
    let mut seen = BTreeSet::new();
    for (i, c) in classes.iter().enumerate() {
        let f = format!("{field}.workloadClasses[{i}]");
        if !crate::config::valid_name(&c.name) {
            out.push(problem(
                format!("{f}.name"),
                format!(
                    "class name {:?} must be 1-{} characters of letters, digits, '-' and '_'",
                    c.name,
                    crate::config::MAX_NAME_LEN
                ),
            ));
        }
        if !seen.insert(c.name.as_str()) {
            out.push(problem(
                format!("{f}.name"),
                format!("class {:?} is declared more than once", c.name),
            ));
        }
        if c.priority_min > c.priority_max {
            out.push(problem(
                format!("{f}.priorityBand"),
                format!("min {} is above max {}", c.priority_min, c.priority_max),
            ));
        }
        if c.priority_max > MAX_PRIORITY {
            out.push(problem(
                format!("{f}.priorityBand.max"),
                format!("must be at most {MAX_PRIORITY}, got {}", c.priority_max),
            ));
        }
        for (j, other) in classes.iter().enumerate().take(i) {
            let overlap =
                c.priority_min <= other.priority_max && other.priority_min <= c.priority_max;
            if overlap
                && c.priority_min <= c.priority_max
                && other.priority_min <= other.priority_max
            {
                out.push(problem(
                    format!("{f}.priorityBand"),
                    format!(
                        "{}..={} overlaps class {:?}'s band {}..={} (workloadClasses[{j}]): bands must not overlap, so that a higher class always outranks a lower one",
                        c.priority_min, c.priority_max, other.name, other.priority_min, other.priority_max
                    ),
                ));
            }
        }
        if let Some(by) = &c.preemptible_by {
            for (k, name) in by.iter().enumerate() {
                if !names.contains(name.as_str()) {
                    out.push(problem(
                        format!("{f}.preemptibleBy[{k}]"),
                        format!(
                            "names class {name:?}, which the share does not declare (it declares {})",
                            names.iter().copied().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
        }
        if c.borrow_requires_resume_proof {
            if !c.may_borrow {
                out.push(problem(
                    format!("{f}.borrowRequiresResumeProof"),
                    "is set, but the class never borrows (mayBorrow: false): a proof would gate nothing; drop one of them".into(),
                ));
            } else if !c.requires_checkpoint {
                out.push(problem(
                    format!("{f}.borrowRequiresResumeProof"),
                    "needs requiresCheckpoint: true: a resume drill preempts a job after a committed checkpoint, so no drill can prove a job that does not checkpoint".into(),
                ));
            }
            if share.strategy != Strategy::LendAndBorrow {
                out.push(problem(
                    format!("{f}.borrowRequiresResumeProof"),
                    format!(
                        "is set, but the share never borrows (strategy {}); use LEND_AND_BORROW or drop it",
                        share.strategy.as_str()
                    ),
                ));
            }
        }
        if c.result_tolerance_ppm > 1_000_000 {
            out.push(problem(
                format!("{f}.resultTolerancePpm"),
                format!(
                    "must be at most 1000000 (100%), got {}",
                    c.result_tolerance_ppm
                ),
            ));
        }
        if let Some(secs) = c.checkpoint_before_preempt_secs {
            if secs > crate::job::MAX_CHECKPOINT_BEFORE_PREEMPT_SECS {
                out.push(problem(
                    format!("{f}.checkpointBeforePreemptSeconds"),
                    format!(
                        "must be at most {} (a preempting job waits this long)",
                        crate::job::MAX_CHECKPOINT_BEFORE_PREEMPT_SECS
                    ),
                ));
            }
        }
    }
    if let Some(d) = &share.default_class {
        if !names.contains(d.as_str()) {
            out.push(problem(
                format!("{field}.defaultWorkloadClass"),
                format!(
                    "names {d:?}, which the share does not declare (it declares {})",
                    names.iter().copied().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{QueueConfig, QuotaShare, Strategy};
    use crate::validate::validate_queue;

    fn share_with(classes: Vec<WorkloadClass>) -> QuotaShare {
        let mut s = QuotaShare::new("team-a", &[("ml.g5.xlarge", 4)]);
        s.strategy = Strategy::LendAndBorrow;
        s.classes = classes;
        s
    }

    fn fields(share: QuotaShare) -> Vec<String> {
        match validate_queue(&QueueConfig::new("q", vec![share])) {
            Ok(()) => Vec::new(),
            Err(e) => e.0.into_iter().map(|p| p.field).collect(),
        }
    }

    #[test]
    fn a_share_without_classes_has_the_implicit_one_with_its_protections() {
        let mut s = QuotaShare::new("s", &[("t", 1)]);
        s.protections.min_runtime_before_preemption_secs = 60;
        let rules = s.rules(None);
        assert_eq!((rules.priority_min, rules.priority_max), (0, MAX_PRIORITY));
        assert!(rules.may_borrow);
        assert_eq!(rules.min_runtime_before_preemption_secs, 60);
        assert_eq!(s.class_name(None), IMPLICIT_CLASS);
        assert!(s.class_may_preempt(None, None));
    }

    #[test]
    fn the_default_class_is_the_named_one_or_the_first() {
        let mut s = share_with(vec![
            WorkloadClass::new("exploratory", 0, 99),
            WorkloadClass::new("urgent", 200, 299),
        ]);
        assert_eq!(s.class_name(None), "exploratory");
        s.default_class = Some("urgent".into());
        assert_eq!(s.class_name(None), "urgent");
        assert_eq!(s.rules(Some("exploratory")).priority_max, 99);
    }

    #[test]
    fn class_overrides_fall_back_to_the_share() {
        let mut c = WorkloadClass::new("c", 0, 9);
        c.min_runtime_before_preemption_secs = Some(5);
        let mut s = share_with(vec![c, WorkloadClass::new("d", 10, 19)]);
        s.protections.min_runtime_before_preemption_secs = 60;
        assert_eq!(s.rules(Some("c")).min_runtime_before_preemption_secs, 5);
        assert_eq!(s.rules(Some("d")).min_runtime_before_preemption_secs, 60);
    }

    #[test]
    fn preemptible_by_names_who_may_preempt() {
        let mut release = WorkloadClass::new("release", 100, 199);
        release.preemptible_by = Some(vec!["urgent".into()]);
        let mut pinned = WorkloadClass::new("pinned", 300, 399);
        pinned.preemptible_by = Some(Vec::new());
        let s = share_with(vec![
            WorkloadClass::new("exploratory", 0, 99),
            release,
            WorkloadClass::new("urgent", 200, 299),
            pinned,
        ]);
        assert!(s.class_may_preempt(Some("urgent"), Some("release")));
        assert!(!s.class_may_preempt(Some("exploratory"), Some("release")));
        assert!(s.class_may_preempt(Some("release"), Some("exploratory")));
        assert!(
            s.class_may_preempt(None, Some("exploratory")),
            "None is the default class"
        );
        assert!(!s.class_may_preempt(Some("urgent"), Some("pinned")));
    }

    #[test]
    fn validation_names_every_conflict() {
        let mut bad_band = WorkloadClass::new("b", 50, 10);
        bad_band.checkpoint_before_preempt_secs = Some(99_999);
        let mut proof_never = WorkloadClass::new("p", 200, 299);
        proof_never.may_borrow = false;
        proof_never.borrow_requires_resume_proof = true;
        let mut proof_no_ckpt = WorkloadClass::new("q", 300, 399);
        proof_no_ckpt.borrow_requires_resume_proof = true;
        let mut unknown = WorkloadClass::new("u", 400, 10_000);
        unknown.preemptible_by = Some(vec!["nobody".into()]);
        let mut s = share_with(vec![
            WorkloadClass::new("a", 0, 100),
            WorkloadClass::new("a", 100, 150),
            bad_band,
            proof_never,
            proof_no_ckpt,
            unknown,
            WorkloadClass::new("bad name", 160, 170),
        ]);
        s.default_class = Some("missing".into());
        assert_eq!(
            fields(s),
            vec![
                "quotaShares[0].workloadClasses[1].name",
                "quotaShares[0].workloadClasses[1].priorityBand",
                "quotaShares[0].workloadClasses[2].priorityBand",
                "quotaShares[0].workloadClasses[2].checkpointBeforePreemptSeconds",
                "quotaShares[0].workloadClasses[3].borrowRequiresResumeProof",
                "quotaShares[0].workloadClasses[4].borrowRequiresResumeProof",
                "quotaShares[0].workloadClasses[5].priorityBand.max",
                "quotaShares[0].workloadClasses[5].preemptibleBy[0]",
                "quotaShares[0].workloadClasses[6].name",
                "quotaShares[0].defaultWorkloadClass",
            ]
        );
    }

    #[test]
    fn a_proof_in_a_share_that_never_borrows_is_a_conflict() {
        let mut c = WorkloadClass::new("c", 0, 9);
        c.borrow_requires_resume_proof = true;
        c.requires_checkpoint = true;
        let mut s = share_with(vec![c]);
        assert!(fields(s.clone()).is_empty());
        s.strategy = Strategy::Lend;
        assert_eq!(
            fields(s),
            vec!["quotaShares[0].workloadClasses[0].borrowRequiresResumeProof"]
        );
    }

    #[test]
    fn at_most_ten_classes_and_a_default_needs_classes() {
        let s = share_with(
            (0..11)
                .map(|i| WorkloadClass::new(format!("c{i}"), i * 10, i * 10 + 9))
                .collect(),
        );
        assert_eq!(fields(s), vec!["quotaShares[0].workloadClasses"]);
        let mut s = share_with(Vec::new());
        s.default_class = Some("x".into());
        assert_eq!(fields(s), vec!["quotaShares[0].defaultWorkloadClass"]);
    }

    #[test]
    fn a_drill_tolerance_is_at_most_everything() {
        let mut c = WorkloadClass::new("c", 0, 9);
        c.result_tolerance_ppm = 1_000_001;
        assert_eq!(
            fields(share_with(vec![c])),
            vec!["quotaShares[0].workloadClasses[0].resultTolerancePpm"]
        );
    }
}

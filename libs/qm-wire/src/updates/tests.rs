use serde_json::json;

use super::*;

/// Two values for every settable field of a share: the stored one and the
/// one an update sends. A field added to `QuotaShare` without a line here
/// fails `every_field_of_a_share_is_covered`.
fn samples() -> Vec<(&'static str, Value, Value)> {
    vec![
        ("state", json!("ENABLED"), json!("DISABLED")),
        (
            "capacityLimits",
            json!([{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 4}, {"capacityUnit": "ml.p4d.24xlarge", "maxCapacity": 1}]),
            json!([{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 2}]),
        ),
        (
            "resourceSharingConfiguration",
            json!({"strategy": "LEND_AND_BORROW", "borrowLimit": 50}),
            json!({"strategy": "LEND"}),
        ),
        (
            "preemptionConfiguration",
            json!({"inSharePreemption": "ENABLED"}),
            json!({"inSharePreemption": "DISABLED"}),
        ),
        (
            "protections",
            json!({"minRuntimeBeforePreemptionSeconds": 120, "borrowRequiresCheckpoint": true}),
            json!({"reborrowCooldownSeconds": 60}),
        ),
        (
            "checkpointS3Prefixes",
            json!(["s3://ckpt/a/", "s3://ckpt/b/"]),
            json!(["s3://ckpt/c/"]),
        ),
        (
            "imagePrefixes",
            json!(["registry.local/team-a/", "registry.local/shared/x"]),
            json!(["registry.local/team-b/"]),
        ),
        (
            "inputS3Prefixes",
            json!(["s3://data/a/"]),
            json!(["s3://data/b/", "s3://data/c/"]),
        ),
        ("runAsNonRoot", json!(true), json!(false)),
        (
            "workloadClasses",
            json!([{"name": "prod", "priorityBand": {"min": 50, "max": 99}, "mayBorrow": false},
                   {"name": "batch", "priorityBand": {"min": 0, "max": 49}}]),
            json!([{"name": "eval", "priorityBand": {"min": 0, "max": 9}}]),
        ),
        ("defaultWorkloadClass", json!("prod"), json!("batch")),
        (
            "borrowBudget",
            json!({"instanceHours": 5.0, "windowHours": 24}),
            json!({"instanceHours": 2.5, "halfLifeHours": 12}),
        ),
        (
            "onBudgetExhausted",
            json!("FINISH"),
            json!("CHECKPOINT_AND_STOP"),
        ),
        ("fairShareWeight", json!(3), json!(7)),
        ("shareGroup", json!("research"), json!("product")),
    ]
}

fn stored() -> QuotaShare {
    let mut doc = Map::new();
    doc.insert("jobQueue".into(), json!("training"));
    doc.insert("quotaShareName".into(), json!("QS1"));
    for (field, value, _) in samples() {
        doc.insert(field.into(), value);
    }
    serde_json::from_value(Value::Object(doc)).expect("the stored sample is a share")
}

fn patch(raw: Value) -> SharePatch {
    serde_json::from_value(raw).expect("a patch")
}

fn as_json(share: &QuotaShare) -> Map<String, Value> {
    match serde_json::to_value(share).expect("json") {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

#[test]
fn every_field_of_a_share_is_covered() {
    let schema = schemars::schema_for!(QuotaShare);
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .expect("QuotaShare's schema lists its properties");
    let covered: Vec<&str> = samples().iter().map(|(f, _, _)| *f).collect();
    for name in properties.keys() {
        assert!(
            IDENTITY.contains(&name.as_str()) || covered.contains(&name.as_str()),
            "the share field {name:?} has no case in updates::tests::samples()"
        );
    }
    assert_eq!(as_json(&stored()).len(), covered.len() + IDENTITY.len());
}

#[test]
fn an_update_of_one_field_changes_that_field_only() {
    let before = as_json(&stored());
    for (field, _, new) in samples() {
        let merged = merge_share(
            &stored(),
            &patch(json!({"jobQueue": "training", "quotaShareName": "QS1", field: new})),
        )
        .unwrap_or_else(|p| panic!("{field}: {p:?}"));
        let after = as_json(&merged);
        for (key, value) in &before {
            if key == field {
                continue;
            }
            assert_eq!(after.get(key), Some(value), "{field} changed {key}");
        }
        let expected = if field == "protections" {
            // Merged by field: the stored settings stay beside the new one.
            json!({"minRuntimeBeforePreemptionSeconds": 120, "borrowRequiresCheckpoint": true,
                   "reborrowCooldownSeconds": 60})
        } else {
            new
        };
        assert_eq!(after.get(field), Some(&expected), "{field}");
    }
}

#[test]
fn null_removes_each_field_and_nothing_else() {
    let before = as_json(&stored());
    for (field, _, _) in samples() {
        let merged = merge_share(
            &stored(),
            &patch(json!({"quotaShareName": "QS1", field: null})),
        )
        .unwrap_or_else(|p| panic!("{field}: {p:?}"));
        let after = as_json(&merged);
        assert!(after.get(field).is_none(), "{field} was not removed");
        for (key, value) in &before {
            let with_budget = field == "borrowBudget" && key == "onBudgetExhausted";
            if key == field || with_budget {
                continue;
            }
            assert_eq!(after.get(key), Some(value), "null {field} changed {key}");
        }
    }
}

#[test]
fn protections_merge_field_by_field_and_null_removes_one_setting() {
    // A share's minimum runtime survives an update that names only the
    // cooldown (it used to be replaced with the whole object).
    let merged = merge_share(
        &stored(),
        &patch(json!({"quotaShareName": "QS1", "protections": {"reborrowCooldownSeconds": 60}})),
    )
    .expect("merged");
    let p = merged.protections.expect("protections kept");
    assert_eq!(p.min_runtime_before_preemption_seconds, Some(120));
    assert_eq!(p.reborrow_cooldown_seconds, Some(60));
    assert_eq!(p.borrow_requires_checkpoint, Some(true));

    let merged = merge_share(
        &stored(),
        &patch(json!({"quotaShareName": "QS1",
                      "protections": {"minRuntimeBeforePreemptionSeconds": null, "borrowRequiresCheckpoint": false}})),
    )
    .expect("merged");
    let p = merged.protections.expect("protections kept");
    assert_eq!(
        p.min_runtime_before_preemption_seconds, None,
        "null removes"
    );
    assert_eq!(p.borrow_requires_checkpoint, Some(false));

    // Removing every setting removes the object; a share without
    // protections gets the ones an update names.
    let merged = merge_share(
        &stored(),
        &patch(json!({"quotaShareName": "QS1",
                      "protections": {"minRuntimeBeforePreemptionSeconds": null, "borrowRequiresCheckpoint": null}})),
    )
    .expect("merged");
    assert_eq!(merged.protections, None);
    let merged = merge_share(
        &merged,
        &patch(json!({"quotaShareName": "QS1", "protections": {"reborrowCooldownSeconds": 5}})),
    )
    .expect("merged");
    assert_eq!(
        merged.protections.and_then(|p| p.reborrow_cooldown_seconds),
        Some(5)
    );
}

#[test]
fn a_structure_that_states_one_choice_is_replaced_whole() {
    let merged = merge_share(
        &stored(),
        &patch(
            json!({"quotaShareName": "QS1", "resourceSharingConfiguration": {"strategy": "LEND"}}),
        ),
    )
    .expect("merged");
    let rs = merged.resource_sharing_configuration.expect("kept");
    assert_eq!(rs.strategy, "LEND");
    assert_eq!(
        rs.borrow_limit, None,
        "a new strategy takes the default limit"
    );
    let merged = merge_share(
        &stored(),
        &patch(json!({"quotaShareName": "QS1", "borrowBudget": {"instanceHours": 1.0, "halfLifeHours": 6}})),
    )
    .expect("merged");
    let budget = merged.borrow_budget.flatten().expect("a budget");
    assert_eq!(budget.window_hours, None, "not merged with the old window");
    assert_eq!(budget.half_life_hours, Some(6));
}

#[test]
fn removing_the_budget_removes_what_it_did_when_spent_unless_stated() {
    let merged = merge_share(
        &stored(),
        &patch(json!({"quotaShareName": "QS1", "borrowBudget": null})),
    )
    .expect("merged");
    assert_eq!(merged.borrow_budget, None);
    assert_eq!(merged.on_budget_exhausted, None);
    let merged = merge_share(
        &stored(),
        &patch(json!({"quotaShareName": "QS1", "borrowBudget": null, "onBudgetExhausted": "CHECKPOINT_AND_STOP"})),
    )
    .expect("merged");
    assert_eq!(
        merged.on_budget_exhausted.as_deref(),
        Some("CHECKPOINT_AND_STOP")
    );
}

#[test]
fn the_name_is_not_a_setting_and_a_wrong_type_is_refused_by_name() {
    let merged = merge_share(
        &stored(),
        &patch(json!({"jobQueue": "other", "quotaShareName": "QS1", "fairShareWeight": 2})),
    )
    .expect("merged");
    assert_eq!(merged.job_queue, "training");
    assert_eq!(merged.quota_share_name, "QS1");

    let e = serde_json::from_value::<SharePatch>(
        json!({"quotaShareName": "QS1", "fairShareWeight": "heavy"}),
    )
    .expect_err("a string weight");
    assert!(e.to_string().contains("invalid type"), "{e}");
    let e = serde_json::from_value::<SharePatch>(json!(["QS1"])).expect_err("an array");
    assert!(e.to_string().contains("must be an object"), "{e}");
}

#[test]
fn the_typed_form_keeps_what_it_leaves_out_and_removes_what_it_nulls() {
    let update = QuotaShare {
        quota_share_name: "QS1".into(),
        fair_share_weight: Some(9),
        share_group: Some(None),
        ..QuotaShare::default()
    };
    let merged = merge_share(&stored(), &SharePatch::from_share(update)).expect("merged");
    assert_eq!(merged.fair_share_weight, Some(9));
    assert_eq!(merged.share_group, None);
    assert_eq!(merged.state.as_deref(), Some("ENABLED"), "kept");
    assert!(merged.workload_classes.is_some(), "kept");
}

#[test]
fn null_for_a_required_field_is_refused_by_the_checks_that_follow() {
    // The merge removes it; converting the share for the core names it.
    let merged = merge_share(
        &stored(),
        &patch(json!({"quotaShareName": "QS1", "capacityLimits": null})),
    )
    .expect("merged");
    assert_eq!(merged.capacity_limits, None);
    let mut problems = Vec::new();
    crate::to_core::share(&merged, "quotaShares[0]", &mut problems);
    assert!(
        problems
            .iter()
            .any(|p| p.field == "quotaShares[0].capacityLimits" && p.message == "is required"),
        "{problems:?}"
    );
}

#[test]
fn a_stored_null_is_a_field_left_out() {
    // A create that sent `"borrowBudget": null` stored it; it is not kept.
    let mut with_null = stored();
    with_null.borrow_budget = Some(None);
    let merged = merge_share(
        &with_null,
        &patch(json!({"quotaShareName": "QS1", "fairShareWeight": 2})),
    )
    .expect("merged");
    assert_eq!(merged.borrow_budget, None);
    assert_eq!(merged.fair_share_weight, Some(2));
}

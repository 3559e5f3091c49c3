//! What an update means, defined once: `UpdateQuotaShare` merged onto a
//! stored share. Admission (the update and its dry run), the simulator and
//! every other reader call [`merge_share`]; nothing else merges a share.
//!
//! The rule is AWS's for updates of nested structures, written as a JSON
//! merge patch (RFC 7396) with one exception:
//! - a field the update leaves out keeps its stored value;
//! - `null` removes the field (it takes its default again), for every field;
//! - `protections`, whose fields are each an independent setting, merges
//!   field by field, as AWS merges `ComputeResourceUpdate` (a field left
//!   out is kept, `null` removes that one field);
//! - every other structure states one choice and is replaced whole, as AWS
//!   replaces `resourceSharingConfiguration` (its `strategy` is required;
//!   a strategy given without `borrowLimit` takes the default limit),
//!   `preemptionConfiguration` and `borrowBudget` (exactly one window);
//!   lists (`capacityLimits`, `workloadClasses`, the prefixes) are
//!   replaced whole;
//! - `jobQueue` and `quotaShareName` name the share, they change nothing;
//! - removing `borrowBudget` also removes `onBudgetExhausted`, what the
//!   budget did when spent, unless the same update states it.
//!
//! `docs/semantics-decisions.md` ("Updates of a quota share") records the
//! choice; the tests below pin it for every field of a share.

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::messages::{Problem, QuotaShare};

/// The fields of a share that merge field by field; every other object is
/// replaced whole.
const MERGED_BY_FIELD: &[&str] = &["protections"];

/// The fields that name the share rather than set it.
const IDENTITY: &[&str] = &["jobQueue", "quotaShareName"];

/// An `UpdateQuotaShare` body as sent: the typed share (to read its name and
/// check its fields' types) and the JSON it came as (so that `null` can be
/// told from a field left out, for every field).
#[derive(Clone, Debug, PartialEq)]
pub struct SharePatch {
    pub share: QuotaShare,
    pub raw: Value,
}

impl SharePatch {
    /// A patch from the typed form alone: fields that are `None` are left
    /// out (only `borrowBudget` and `shareGroup` can state `null` there).
    pub fn from_share(share: QuotaShare) -> SharePatch {
        let raw = serde_json::to_value(&share).expect("a share serializes");
        SharePatch { share, raw }
    }
}

impl<'de> Deserialize<'de> for SharePatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(d)?;
        if !raw.is_object() {
            return Err(serde::de::Error::custom(
                "a quota share update must be an object",
            ));
        }
        let share = QuotaShare::deserialize(&raw).map_err(serde::de::Error::custom)?;
        Ok(SharePatch { share, raw })
    }
}

fn problem(field: &str, message: String) -> Problem {
    Problem {
        field: field.to_string(),
        message,
    }
}

/// Merges one object's fields into another: left out kept, `null` removed,
/// anything else replaces.
fn merge_fields(doc: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (key, value) in patch {
        if value.is_null() {
            doc.remove(key);
        } else {
            doc.insert(key.clone(), value.clone());
        }
    }
}

/// `stored` with `update` applied (module documentation). The result is
/// read back as a share; a value of the wrong type is refused with serde's
/// message (what it found and what it expected), and `stored` is never
/// changed.
pub fn merge_share(stored: &QuotaShare, update: &SharePatch) -> Result<QuotaShare, Problem> {
    let Value::Object(mut doc) =
        serde_json::to_value(stored).map_err(|e| problem("", e.to_string()))?
    else {
        return Err(problem("", "a stored share is not an object".into()));
    };
    // A stored `null` (a create that sent one) is a field left out.
    doc.retain(|_, v| !v.is_null());
    let Value::Object(patch) = &update.raw else {
        return Err(problem("", "a quota share update must be an object".into()));
    };
    if patch.get("borrowBudget").is_some_and(Value::is_null)
        && !patch.contains_key("onBudgetExhausted")
    {
        doc.remove("onBudgetExhausted");
    }
    for (key, value) in patch {
        if IDENTITY.contains(&key.as_str()) {
            continue;
        }
        match value {
            Value::Object(fields) if MERGED_BY_FIELD.contains(&key.as_str()) => {
                let current = doc
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(current) = current {
                    merge_fields(current, fields);
                    if current.is_empty() {
                        doc.remove(key);
                    }
                } else {
                    doc.insert(key.clone(), value.clone());
                }
            }
            Value::Null => {
                doc.remove(key);
            }
            value => {
                doc.insert(key.clone(), value.clone());
            }
        }
    }
    serde_json::from_value(Value::Object(doc)).map_err(|e| problem("", e.to_string()))
}

#[cfg(test)]
mod tests;

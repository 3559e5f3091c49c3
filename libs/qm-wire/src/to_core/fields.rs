//! Problems named by field, and a value that must be one of a list.

use qm_core::ConfigProblem;

pub(super) fn problem(field: impl Into<String>, message: impl Into<String>) -> ConfigProblem {
    ConfigProblem {
        field: field.into(),
        message: message.into(),
    }
}

pub(super) fn one_of<T: Copy>(
    field: &str,
    value: &str,
    allowed: &[(&str, T)],
    problems: &mut Vec<ConfigProblem>,
) -> Option<T> {
    let found = allowed
        .iter()
        .find(|(name, _)| *name == value)
        .map(|(_, v)| *v);
    if found.is_none() {
        let names: Vec<&str> = allowed.iter().map(|(n, _)| *n).collect();
        problems.push(problem(
            field,
            format!("{value:?} is not one of {}", names.join(", ")),
        ));
    }
    found
}

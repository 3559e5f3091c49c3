//! Runtime names -> the core's runtime sets.

use qm_core::{Runtime, Runtimes};

/// Runtime names (an executor's `runtimes` setting, a scenario's nodes) ->
/// the core's set; an unknown name is an error that lists the known ones.
pub fn runtimes(names: &[String]) -> Result<Runtimes, String> {
    let mut set = Runtimes::NONE;
    for name in names {
        match Runtime::from_name(name) {
            Some(r) => set.insert(r),
            None => {
                return Err(format!(
                    "{name:?} is not a runtime (known: {})",
                    Runtime::ALL.map(Runtime::name).join(", ")
                ))
            }
        }
    }
    if set.is_empty() {
        return Err("at least one runtime is required (process, container)".into());
    }
    Ok(set)
}

/// What a registration's runtime names offer, as far as this build knows
/// them: unknown names are left out, and none at all is `process` (an
/// executor from before runtimes existed).
pub fn known_runtimes(names: &[String]) -> Runtimes {
    let set: Runtimes = names.iter().filter_map(|n| Runtime::from_name(n)).collect();
    if names.is_empty() {
        Runtimes::default()
    } else {
        set
    }
}

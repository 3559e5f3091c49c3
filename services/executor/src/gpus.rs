//! GPU discovery and assignment: each instance slot of a type gets
//! `gpusPerInstance` GPU indices, from configuration or `nvidia-smi`.

use std::collections::BTreeMap;

use crate::settings::InstanceSpec;

/// GPU indices `nvidia-smi` reports, or None when it is absent or fails.
pub fn discover() -> Option<Vec<u32>> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index", "--format=csv,noheader"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// Per type, the GPU indices of each slot. Errors name what does not add up.
pub fn assign(
    instances: &[InstanceSpec],
    configured: Option<Vec<u32>>,
) -> Result<BTreeMap<String, Vec<Vec<u32>>>, String> {
    let needed: u32 = instances
        .iter()
        .map(|i| i.count * i.gpus_per_instance)
        .sum();
    let mut out = BTreeMap::new();
    if needed == 0 {
        return Ok(out);
    }
    let available = match configured {
        Some(g) => g,
        None => discover().ok_or_else(|| {
            "instances ask for GPUs (gpusPerInstance > 0) but nvidia-smi found none; set gpus: [indices] or gpusPerInstance: 0".to_string()
        })?,
    };
    if (available.len() as u32) < needed {
        return Err(format!(
            "instances need {needed} GPU(s) but only {} are available ({available:?})",
            available.len()
        ));
    }
    let mut next = available.into_iter();
    for i in instances {
        let slots: &mut Vec<Vec<u32>> = out.entry(i.instance_type.clone()).or_default();
        for _ in 0..i.count {
            slots.push(next.by_ref().take(i.gpus_per_instance as usize).collect());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(t: &str, count: u32, gpus: u32) -> InstanceSpec {
        InstanceSpec {
            instance_type: t.into(),
            count,
            gpus_per_instance: gpus,
            ..Default::default()
        }
    }

    #[test]
    fn slots_get_consecutive_gpus() {
        let g = assign(
            &[spec("a", 2, 2), spec("b", 1, 1)],
            Some(vec![0, 1, 2, 3, 4]),
        )
        .expect("fits");
        assert_eq!(g["a"], vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(g["b"], vec![vec![4]]);
    }

    #[test]
    fn too_few_gpus_is_an_error_that_counts() {
        let e = assign(&[spec("a", 2, 2)], Some(vec![0, 1])).expect_err("short");
        assert!(e.contains("need 4"), "{e}");
    }

    #[test]
    fn no_gpus_needed_means_no_discovery() {
        assert!(assign(&[spec("a", 3, 0)], None)
            .expect("cpu only")
            .is_empty());
    }
}

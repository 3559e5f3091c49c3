//! Service environments.

use qm_wire::messages::{self as wire, Caller};
use qm_wire::subjects::Operation;
use serde_json::{json, Value};

use crate::api::AwsError;
use crate::arn::Resource;
use crate::store::{self, EnvironmentRecord};
use crate::Gateway;

use super::requests::{
    check_tags, is_admin, page, page_size, state_ok, store_failed, Answer, DescribeEnvsIn, EnvIn,
    JOB_TYPE,
};

impl Gateway {
    /// Capacity limits as the job queue takes them: per instance type.
    pub(super) fn queue_limits(
        &self,
        env: &str,
        limits: &[Value],
    ) -> Result<Vec<wire::CapacityLimit>, AwsError> {
        limits
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let unit = l["capacityUnit"].as_str().unwrap_or_default();
                let max = l["maxCapacity"].as_i64().unwrap_or(-1);
                if unit.is_empty() || unit == "NUM_INSTANCES" {
                    return Err(self.bad(format!(
                        "service environment {env:?}: capacityLimits[{i}].capacityUnit must be an instance type (ml.p5.48xlarge, ...): quota shares are per instance type"
                    )));
                }
                if max < 0 {
                    return Err(self.bad(format!(
                        "service environment {env:?}: capacityLimits[{i}].maxCapacity must be 0 or more"
                    )));
                }
                Ok(wire::CapacityLimit {
                    capacity_unit: unit.into(),
                    max_capacity: max,
                })
            })
            .collect()
    }

    fn environment_view(&self, name: &str, e: &EnvironmentRecord) -> Value {
        json!({
            "serviceEnvironmentName": name,
            "serviceEnvironmentArn": self.arns.of(&Resource::ServiceEnvironment(name.into())),
            "serviceEnvironmentType": JOB_TYPE,
            "state": e.state,
            "status": "VALID",
            "capacityLimits": e.capacity_limits,
            "tags": e.tags,
        })
    }

    pub(super) async fn put_environment(&self, caller: &Caller, e: EnvIn, create: bool) -> Answer {
        is_admin(caller)?;
        state_ok("state", &e.state)?;
        let (field, given) = if create {
            ("serviceEnvironmentName", e.service_environment_name.clone())
        } else {
            ("serviceEnvironment", e.service_environment.clone())
        };
        let name = self
            .arns
            .named(field, given.as_deref().unwrap_or_default(), false)
            .map_err(|e| self.bad(e))?;
        let key = format!("{}{name}", store::ENVIRONMENT_PREFIX);
        if let Some(limits) = &e.capacity_limits {
            self.queue_limits(&name, limits)?;
        }
        let arn = self.arns.of(&Resource::ServiceEnvironment(name.clone()));
        if create {
            if e.service_environment_type.as_deref() != Some(JOB_TYPE) {
                return Err(self.bad(format!(
                    "serviceEnvironmentType: {:?} is not supported (only {JOB_TYPE})",
                    e.service_environment_type.unwrap_or_default()
                )));
            }
            let tags = e.tags.clone().unwrap_or_default();
            check_tags(&tags)?;
            let record = EnvironmentRecord {
                state: e.state.clone().unwrap_or_else(|| "ENABLED".into()),
                capacity_limits: e
                    .capacity_limits
                    .clone()
                    .ok_or_else(|| self.bad("capacityLimits: is required".into()))?,
                tags,
            };
            if !self
                .store
                .config
                .create(&key, &record)
                .await
                .map_err(store_failed)?
            {
                return Err(self.bad(format!("service environment {name:?} already exists")));
            }
        } else {
            let mut record: EnvironmentRecord = self
                .store
                .config
                .get(&key)
                .await
                .map_err(store_failed)?
                .ok_or_else(|| {
                    self.bad(format!(
                        "serviceEnvironment: no service environment {name:?}"
                    ))
                })?;
            if let Some(s) = e.state {
                record.state = s;
            }
            if let Some(limits) = e.capacity_limits {
                record.capacity_limits = limits;
                // The queues drawing on it take its new limits.
                for (queue, q) in self.queue_records().await? {
                    if q.service_environment.as_deref() == Some(name.as_str()) {
                        // Only the limits change (the queue's other fields
                        // stay as stored when the change lands).
                        let patch = json!({
                            "jobQueueName": queue,
                            "capacityLimits": self.queue_limits(&name, &record.capacity_limits)?,
                        });
                        let _: Value = self.call(caller, Operation::UpdateJobQueue, &patch).await?;
                    }
                }
            }
            // The fields it changes, on the record as stored (a concurrent
            // tag change is kept).
            self.store
                .config
                .update(&key, |stored: Option<EnvironmentRecord>| {
                    let mut stored = stored.unwrap_or_else(|| record.clone());
                    stored.state.clone_from(&record.state);
                    stored.capacity_limits.clone_from(&record.capacity_limits);
                    Ok::<_, AwsError>(stored)
                })
                .await?;
        }
        Ok(json!({
            "serviceEnvironmentName": name,
            "serviceEnvironmentArn": arn,
        }))
    }

    pub(super) async fn describe_environments(&self, d: DescribeEnvsIn) -> Answer {
        let names = if d.service_environments.is_empty() {
            self.store
                .config
                .names(store::ENVIRONMENT_PREFIX)
                .await
                .map_err(store_failed)?
        } else {
            d.service_environments
                .iter()
                .map(|n| self.arns.named("serviceEnvironments", n, false))
                .collect::<Result<_, _>>()
                .map_err(|e| self.bad(e))?
        };
        let (names, next) = page(&names, page_size(d.max_results)?, d.next_token.as_deref())?;
        let mut out = Vec::new();
        for name in names {
            let key = format!("{}{name}", store::ENVIRONMENT_PREFIX);
            if let Some(e) = self
                .store
                .config
                .get::<EnvironmentRecord>(&key)
                .await
                .map_err(store_failed)?
            {
                out.push(self.environment_view(&name, &e));
            }
        }
        let mut v = json!({ "serviceEnvironments": out });
        if let Some(n) = next {
            v["nextToken"] = json!(n);
        }
        Ok(v)
    }
}

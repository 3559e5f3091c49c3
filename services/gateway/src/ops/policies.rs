//! Scheduling policies.

use qm_wire::messages::Caller;
use serde_json::{json, Value};

use crate::api::AwsError;
use crate::arn::Resource;
use crate::store::{self, PolicyRecord};
use crate::Gateway;

use super::requests::{check_tags, is_admin, store_failed, Answer, ArnsIn, PolicyIn};

impl Gateway {
    fn policy_view(&self, name: &str, p: &PolicyRecord) -> Value {
        json!({
            "name": name,
            "arn": self.arns.of(&Resource::SchedulingPolicy(name.into())),
            "quotaSharePolicy": p.quota_share_policy,
            "tags": p.tags,
        })
    }

    pub(super) async fn put_policy(&self, caller: &Caller, p: PolicyIn, create: bool) -> Answer {
        is_admin(caller)?;
        if p.fairshare_policy.is_some() {
            return Err(self.bad(
                "fairsharePolicy: fair-share scheduling is not supported; give quotaSharePolicy"
                    .into(),
            ));
        }
        let policy = p
            .quota_share_policy
            .clone()
            .unwrap_or_else(|| json!({"idleResourceAssignmentStrategy": "FIFO"}));
        if policy.get("idleResourceAssignmentStrategy") != Some(&json!("FIFO")) {
            return Err(self.bad(
                "quotaSharePolicy.idleResourceAssignmentStrategy: only FIFO is supported".into(),
            ));
        }
        let name = if create {
            p.name.clone().unwrap_or_default()
        } else {
            p.arn.clone().unwrap_or_default()
        };
        let field = if create { "name" } else { "arn" };
        let name = self
            .arns
            .named(field, &name, true)
            .map_err(|e| self.bad(e))?;
        let key = format!("{}{name}", store::POLICY_PREFIX);
        if create {
            let tags = p.tags.clone().unwrap_or_default();
            check_tags(&tags)?;
            let record = PolicyRecord {
                quota_share_policy: policy,
                tags,
            };
            if !self
                .store
                .config
                .create(&key, &record)
                .await
                .map_err(store_failed)?
            {
                return Err(self.bad(format!("scheduling policy {name:?} already exists")));
            }
            return Ok(json!({
                "name": name,
                "arn": self.arns.of(&Resource::SchedulingPolicy(name.clone())),
            }));
        }
        let mut record: PolicyRecord = self
            .store
            .config
            .get(&key)
            .await
            .map_err(store_failed)?
            .ok_or_else(|| self.bad(format!("arn: no scheduling policy {name:?}")))?;
        record.quota_share_policy = policy;
        // On the record as stored (a concurrent tag change is kept).
        self.store
            .config
            .update(&key, |stored: Option<PolicyRecord>| {
                let mut stored = stored.unwrap_or_else(|| record.clone());
                stored
                    .quota_share_policy
                    .clone_from(&record.quota_share_policy);
                Ok::<_, AwsError>(stored)
            })
            .await?;
        Ok(json!({}))
    }

    pub(super) async fn describe_policies(&self, a: ArnsIn) -> Answer {
        if a.arns.is_empty() {
            return Err(self.bad("arns: name at least one scheduling policy".into()));
        }
        let mut out = Vec::new();
        for arn in &a.arns {
            let name = self
                .arns
                .named("arns", arn, true)
                .map_err(|e| self.bad(e))?;
            let key = format!("{}{name}", store::POLICY_PREFIX);
            if let Some(p) = self
                .store
                .config
                .get::<PolicyRecord>(&key)
                .await
                .map_err(store_failed)?
            {
                out.push(self.policy_view(&name, &p));
            }
        }
        Ok(json!({ "schedulingPolicies": out }))
    }
}

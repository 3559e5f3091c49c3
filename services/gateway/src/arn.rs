//! ARNs: every resource's, derived from the gateway's region and account
//! id, and accepted wherever AWS accepts a name or an ARN.
//!
//! | resource | ARN |
//! |---|---|
//! | job queue | `arn:aws:batch:<region>:<account>:job-queue/<queue>` |
//! | quota share | `arn:aws:batch:<region>:<account>:job-queue/<queue>/quota-share/<share>` |
//! | service job | `arn:aws:batch:<region>:<account>:service-job/<jobId>` |
//! | scheduling policy | `arn:aws:batch:<region>:<account>:scheduling-policy/<name>` |
//! | service environment | `arn:aws:batch:<region>:<account>:service-environment/<name>` |
//! | an attempt (its SageMaker training job) | `arn:aws:sagemaker:<region>:<account>:training-job/<jobId>-<attempt>` |

use qm_wire::subjects;

/// What an ARN names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resource {
    JobQueue(String),
    QuotaShare { queue: String, share: String },
    ServiceJob(String),
    SchedulingPolicy(String),
    ServiceEnvironment(String),
}

/// The gateway's region and account: the ARNs it makes and accepts.
#[derive(Clone, Debug)]
pub struct Arns {
    pub region: String,
    pub account: String,
}

impl Arns {
    fn prefix(&self) -> String {
        format!("arn:aws:batch:{}:{}:", self.region, self.account)
    }

    pub fn of(&self, r: &Resource) -> String {
        let p = self.prefix();
        match r {
            Resource::JobQueue(q) => format!("{p}job-queue/{q}"),
            Resource::QuotaShare { queue, share } => {
                format!("{p}job-queue/{queue}/quota-share/{share}")
            }
            Resource::ServiceJob(id) => format!("{p}service-job/{id}"),
            Resource::SchedulingPolicy(n) => format!("{p}scheduling-policy/{n}"),
            Resource::ServiceEnvironment(n) => format!("{p}service-environment/{n}"),
        }
    }

    pub fn queue(&self, q: &str) -> String {
        self.of(&Resource::JobQueue(q.into()))
    }

    pub fn job(&self, id: &str) -> String {
        self.of(&Resource::ServiceJob(id.into()))
    }

    pub fn share(&self, queue: &str, share: &str) -> String {
        self.of(&Resource::QuotaShare {
            queue: queue.into(),
            share: share.into(),
        })
    }

    pub fn training_job(&self, job_id: &str, attempt: u32) -> String {
        format!(
            "arn:aws:sagemaker:{}:{}:training-job/{job_id}-{attempt}",
            self.region, self.account
        )
    }

    /// The resource an ARN names, or why it is not one of ours.
    pub fn parse(&self, field: &str, arn: &str) -> Result<Resource, String> {
        let rest = arn.strip_prefix("arn:").ok_or_else(|| {
            format!("{field}: {arn:?} is not an ARN (arn:aws:batch:<region>:<account>:...)")
        })?;
        let parts: Vec<&str> = rest.splitn(5, ':').collect();
        let [partition, service, region, account, resource] = parts[..] else {
            return Err(format!("{field}: {arn:?} is not an ARN"));
        };
        if partition != "aws" || service != "batch" {
            return Err(format!("{field}: {arn:?} is not an AWS Batch ARN"));
        }
        if region != self.region || account != self.account {
            return Err(format!(
                "{field}: {arn:?} is in region {region:?}, account {account:?}; this endpoint serves region {:?}, account {:?}",
                self.region, self.account
            ));
        }
        let tok = |v: &str| {
            subjects::token(v)
                .map(|t| t.to_string())
                .map_err(|e| format!("{field}: {e}"))
        };
        let segments: Vec<&str> = resource.split('/').collect();
        match segments[..] {
            ["job-queue", q] => Ok(Resource::JobQueue(tok(q)?)),
            ["job-queue", q, "quota-share", s] => Ok(Resource::QuotaShare {
                queue: tok(q)?,
                share: tok(s)?,
            }),
            ["service-job", id] => Ok(Resource::ServiceJob(tok(id)?)),
            ["scheduling-policy", n] => Ok(Resource::SchedulingPolicy(tok(n)?)),
            ["service-environment", n] => Ok(Resource::ServiceEnvironment(tok(n)?)),
            _ => Err(format!(
                "{field}: {arn:?} names no resource this endpoint has (job-queue, quota-share, service-job, scheduling-policy, service-environment)"
            )),
        }
    }

    /// A job queue given by name or ARN.
    pub fn queue_name(&self, field: &str, value: &str) -> Result<String, String> {
        if value.starts_with("arn:") {
            match self.parse(field, value)? {
                Resource::JobQueue(q) => Ok(q),
                _ => Err(format!("{field}: {value:?} is not a job queue's ARN")),
            }
        } else {
            subjects::token(value)
                .map(|t| t.to_string())
                .map_err(|e| format!("{field}: {e}"))
        }
    }

    /// A quota share given by its ARN.
    pub fn share_of(&self, field: &str, value: &str) -> Result<(String, String), String> {
        match self.parse(field, value)? {
            Resource::QuotaShare { queue, share } => Ok((queue, share)),
            _ => Err(format!("{field}: {value:?} is not a quota share's ARN")),
        }
    }

    /// A scheduling policy or service environment given by name or ARN.
    pub fn named(&self, field: &str, value: &str, policy: bool) -> Result<String, String> {
        if !value.starts_with("arn:") {
            return subjects::token(value)
                .map(|t| t.to_string())
                .map_err(|e| format!("{field}: {e}"));
        }
        match (self.parse(field, value)?, policy) {
            (Resource::SchedulingPolicy(n), true) | (Resource::ServiceEnvironment(n), false) => {
                Ok(n)
            }
            _ => Err(format!(
                "{field}: {value:?} is not a {} ARN",
                if policy {
                    "scheduling policy's"
                } else {
                    "service environment's"
                }
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arns_round_trip_and_foreign_ones_are_refused() {
        let a = Arns {
            region: "eu-west-1".into(),
            account: "123456789012".into(),
        };
        for r in [
            Resource::JobQueue("training".into()),
            Resource::QuotaShare {
                queue: "training".into(),
                share: "QS1".into(),
            },
            Resource::ServiceJob("j-1".into()),
            Resource::SchedulingPolicy("qsp".into()),
            Resource::ServiceEnvironment("fleet".into()),
        ] {
            assert_eq!(a.parse("arn", &a.of(&r)), Ok(r));
        }
        assert_eq!(
            a.queue_name(
                "jobQueue",
                "arn:aws:batch:eu-west-1:123456789012:job-queue/training"
            ),
            Ok("training".into())
        );
        assert_eq!(a.queue_name("jobQueue", "training"), Ok("training".into()));
        let e = a
            .queue_name(
                "jobQueue",
                "arn:aws:batch:us-east-1:123456789012:job-queue/t",
            )
            .expect_err("other region");
        assert!(
            e.contains("this endpoint serves region \"eu-west-1\""),
            "{e}"
        );
        let e = a.queue_name("jobQueue", "a.b").expect_err("not a token");
        assert!(e.starts_with("jobQueue: "), "{e}");
        let e = a
            .share_of("quotaShareArn", &a.queue("training"))
            .expect_err("a queue");
        assert!(e.contains("not a quota share's ARN"), "{e}");
        assert!(a.parse("arn", "arn:aws:s3:::bucket").is_err());
        assert!(a
            .parse(
                "arn",
                "arn:aws:batch:eu-west-1:123456789012:job-queue/a/../b"
            )
            .is_err());
        assert_eq!(
            a.training_job("j-1", 2),
            "arn:aws:sagemaker:eu-west-1:123456789012:training-job/j-1-2"
        );
    }
}

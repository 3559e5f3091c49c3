//! The AWS Batch API as the gateway speaks it: the operations (each name
//! spelled once), the routes of the restJson1 protocol, query values, and
//! AWS's error shape (`x-amzn-ErrorType` and `{"__type", "message"}`).

use hyper::Method;

/// An error as AWS answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct AwsError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl AwsError {
    /// Bad input: AWS Batch's `ClientException` (400).
    pub fn client(message: impl Into<String>) -> AwsError {
        AwsError {
            status: 400,
            code: "ClientException",
            message: message.into(),
        }
    }

    /// Our failure (storage, NATS): AWS Batch's `ServerException` (500).
    pub fn server(message: impl Into<String>) -> AwsError {
        AwsError {
            status: 500,
            code: "ServerException",
            message: message.into(),
        }
    }
}

/// Makes [`Op`] and the operations routed by `POST /v1/<name>` from one
/// list: AWS Batch's operation names, each spelled once.
macro_rules! aws_operations {
    (post: [$($post:ident),* $(,)?], tags: [$($tag:ident),* $(,)?] $(,)?) => {
        /// The operations, by route.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Op {
            $($post,)*
            $($tag,)*
        }

        /// The operations routed by `POST /v1/<name>`.
        const POST_OPS: &[Op] = &[$(Op::$post,)*];
    };
}

aws_operations! {
    post: [
        SubmitServiceJob,
        DescribeServiceJob,
        ListServiceJobs,
        UpdateServiceJob,
        TerminateServiceJob,
        TerminateServiceJobs,
        CreateQuotaShare,
        UpdateQuotaShare,
        DescribeQuotaShare,
        ListQuotaShares,
        DeleteQuotaShare,
        GetJobQueueSnapshot,
        CreateSchedulingPolicy,
        DescribeSchedulingPolicies,
        UpdateSchedulingPolicy,
        ListSchedulingPolicies,
        DeleteSchedulingPolicy,
        CreateJobQueue,
        UpdateJobQueue,
        DescribeJobQueues,
        DeleteJobQueue,
        CreateServiceEnvironment,
        DescribeServiceEnvironments,
        UpdateServiceEnvironment,
        DeleteServiceEnvironment,
    ],
    // Routed by method on `/v1/tags/{resourceArn}`.
    tags: [TagResource, UntagResource, ListTagsForResource],
}

impl Op {
    pub fn name(self) -> String {
        format!("{self:?}")
    }
}

/// The operation a method and path name, and the `{resourceArn}` of the
/// tag routes (percent-decoded).
pub fn route(method: &Method, path: &str) -> Option<(Op, Option<String>)> {
    if let Some(arn) = path.strip_prefix("/v1/tags/") {
        let arn = qm_sigv4::percent_decode(arn)?;
        let op = match *method {
            Method::POST => Op::TagResource,
            Method::DELETE => Op::UntagResource,
            Method::GET => Op::ListTagsForResource,
            _ => return None,
        };
        return Some((op, Some(arn)));
    }
    if method != Method::POST {
        return None;
    }
    let name = path.strip_prefix("/v1/")?;
    POST_OPS
        .iter()
        .copied()
        .find(|op| op.name().eq_ignore_ascii_case(name))
        .map(|op| (op, None))
}

/// The values of query parameter `name`, decoded as the signature was
/// computed over them (`+` is itself, as AWS clients send `%20`).
pub fn query_values(query: &str, name: &str) -> Vec<String> {
    query
        .split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (qm_sigv4::percent_decode(k)? == name).then(|| qm_sigv4::percent_decode(v))?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_follow_the_service_model() {
        assert_eq!(
            route(&Method::POST, "/v1/submitservicejob"),
            Some((Op::SubmitServiceJob, None))
        );
        assert_eq!(
            route(&Method::POST, "/v1/getjobqueuesnapshot"),
            Some((Op::GetJobQueueSnapshot, None))
        );
        assert_eq!(route(&Method::GET, "/v1/submitservicejob"), None);
        assert_eq!(
            route(&Method::POST, "/v1/deletejobqueue"),
            Some((Op::DeleteJobQueue, None))
        );
        assert_eq!(route(&Method::POST, "/v1/createcomputeenvironment"), None);
        assert_eq!(route(&Method::POST, "/v1/tags"), None);
        let arn = "arn:aws:batch:us-east-1:000000000000:job-queue/training";
        let encoded = arn.replace(':', "%3A").replace('/', "%2F");
        for (m, op) in [
            (Method::POST, Op::TagResource),
            (Method::DELETE, Op::UntagResource),
            (Method::GET, Op::ListTagsForResource),
        ] {
            assert_eq!(
                route(&m, &format!("/v1/tags/{encoded}")),
                Some((op, Some(arn.to_string())))
            );
        }
        assert_eq!(route(&Method::GET, "/v1/tags/%ZZ"), None);
    }

    #[test]
    fn query_values_are_decoded_and_repeated() {
        assert_eq!(
            query_values("tagKeys=a&tagKeys=b%20c&x=1&tagKeys=d+e", "tagKeys"),
            ["a", "b c", "d+e"].map(String::from)
        );
        assert!(query_values("", "tagKeys").is_empty());
    }
}

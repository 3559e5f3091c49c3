//! `serviceRequestPayload`: SageMaker's `CreateTrainingJob` request, as an
//! AWS Batch service job carries it, turned into what a Quartermaster job
//! runs. What can be honoured is; what cannot is refused with the field
//! named, so a job never silently runs differently from what was asked.

use std::collections::BTreeMap;

use qm_wire::messages::CheckpointConfig;
use serde_json::{Map, Value};

/// What a job runs, from its payload.
#[derive(Debug, Default, PartialEq)]
pub struct Training {
    pub instance_type: String,
    pub instance_count: u32,
    /// `ContainerEntrypoint` then `ContainerArguments`.
    pub command: Vec<String>,
    pub environment: BTreeMap<String, String>,
    pub checkpoint: Option<CheckpointConfig>,
    /// `StoppingCondition.MaxRuntimeInSeconds`.
    pub max_runtime_seconds: Option<u64>,
    pub training_image: String,
    /// The image the job runs in (`TrainingImage`), unless the gateway's
    /// `hostCommandImages` name it: then its entrypoint runs as a host
    /// command.
    pub container_image: Option<String>,
    /// `OutputDataConfig.S3OutputPath` (container jobs).
    pub output_path: Option<String>,
    /// `InputDataConfig` (container jobs).
    pub channels: Vec<qm_wire::messages::InputChannel>,
    /// The training job's own `Tags`.
    pub tags: BTreeMap<String, String>,
}

/// Fields accepted and recorded but with no effect here (docs/aws-api.md).
const NO_EFFECT: [&str; 4] = [
    "TrainingJobName",
    "RoleArn",
    "ExperimentConfig",
    "EnableInterContainerTrafficEncryption",
];

/// Fields no Quartermaster executor can honour: refused when given.
const REFUSED: [(&str, &str); 12] = [
    ("VpcConfig", "jobs run on the executor's network"),
    ("DebugHookConfig", "SageMaker Debugger is not available"),
    (
        "DebugRuleConfigurations",
        "SageMaker Debugger is not available",
    ),
    (
        "TensorBoardOutputConfig",
        "TensorBoard output is not uploaded",
    ),
    ("ProfilerConfig", "SageMaker Profiler is not available"),
    (
        "ProfilerRuleConfigurations",
        "SageMaker Profiler is not available",
    ),
    (
        "RetryStrategy",
        "use the service job's retryStrategy instead",
    ),
    ("RemoteDebugConfig", "remote debugging is not available"),
    (
        "InfraCheckConfig",
        "infrastructure checks are not available",
    ),
    ("SessionChainingConfig", "session chaining is not available"),
    ("MlflowConfig", "MLflow integration is not available"),
    (
        "EnableManagedSpotTraining",
        "there is no spot capacity; borrowing is how idle capacity is used",
    ),
];

/// The payload's problem, naming the field (`serviceRequestPayload.X.Y`).
fn bad(field: &str, why: impl std::fmt::Display) -> String {
    format!("serviceRequestPayload.{field}: {why}")
}

fn object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object().ok_or_else(|| bad(field, "must be an object"))
}

fn string(v: &Value, field: &str) -> Result<String, String> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| bad(field, "must be a string"))
}

fn strings(v: &Value, field: &str) -> Result<Vec<String>, String> {
    v.as_array()
        .ok_or_else(|| bad(field, "must be a list of strings"))?
        .iter()
        .enumerate()
        .map(|(i, x)| string(x, &format!("{field}[{i}]")))
        .collect()
}

fn string_map(v: &Value, field: &str) -> Result<BTreeMap<String, String>, String> {
    object(v, field)?
        .iter()
        .map(|(k, x)| Ok((k.clone(), string(x, &format!("{field}.{k}"))?)))
        .collect()
}

fn number(v: &Value, field: &str) -> Result<u64, String> {
    v.as_u64()
        .ok_or_else(|| bad(field, "must be a non-negative whole number"))
}

/// Refuses any key of `map` not in `known` (a misspelt field must not be
/// silently dropped).
fn only(map: &Map<String, Value>, field: &str, known: &[&str]) -> Result<(), String> {
    match map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(bad(
            &format!("{field}{}{k}", if field.is_empty() { "" } else { "." }),
            "is not a field Quartermaster knows or honours",
        )),
        None => Ok(()),
    }
}

/// One `InputDataConfig` entry: an `S3DataSource` of type `S3Prefix`, in
/// File mode, uncompressed; anything else is refused with the field named.
fn channel(v: &Value, field: &str) -> Result<qm_wire::messages::InputChannel, String> {
    let c = object(v, field)?;
    only(
        c,
        field,
        &[
            "ChannelName",
            "DataSource",
            "InputMode",
            "ContentType",
            "CompressionType",
            "RecordWrapperType",
            "ShuffleConfig",
        ],
    )?;
    let name = string(
        c.get("ChannelName")
            .ok_or_else(|| bad(&format!("{field}.ChannelName"), "is required"))?,
        &format!("{field}.ChannelName"),
    )?;
    qm_wire::messages::check_channel_name(&name)
        .map_err(|e| bad(&format!("{field}.ChannelName"), e))?;
    if let Some(mode) = c.get("InputMode") {
        if string(mode, &format!("{field}.InputMode"))? != "File" {
            return Err(bad(&format!("{field}.InputMode"), "only File is supported"));
        }
    }
    if let Some(x) = c.get("CompressionType") {
        if string(x, &format!("{field}.CompressionType"))? != "None" {
            return Err(bad(
                &format!("{field}.CompressionType"),
                "only None is supported",
            ));
        }
    }
    if let Some(x) = c.get("RecordWrapperType") {
        if string(x, &format!("{field}.RecordWrapperType"))? != "None" {
            return Err(bad(
                &format!("{field}.RecordWrapperType"),
                "only None is supported",
            ));
        }
    }
    if c.contains_key("ShuffleConfig") {
        return Err(bad(&format!("{field}.ShuffleConfig"), "is not supported"));
    }
    let source = object(
        c.get("DataSource")
            .ok_or_else(|| bad(&format!("{field}.DataSource"), "is required"))?,
        &format!("{field}.DataSource"),
    )?;
    let f = format!("{field}.DataSource");
    only(source, &f, &["S3DataSource"])?;
    let s3 = object(
        source.get("S3DataSource").ok_or_else(|| {
            bad(
                &format!("{f}.S3DataSource"),
                "is required (only S3 sources are supported)",
            )
        })?,
        &format!("{f}.S3DataSource"),
    )?;
    let f = format!("{f}.S3DataSource");
    only(
        s3,
        &f,
        &[
            "S3DataType",
            "S3Uri",
            "S3DataDistributionType",
            "AttributeNames",
            "InstanceGroupNames",
        ],
    )?;
    for unsupported in ["AttributeNames", "InstanceGroupNames"] {
        if s3.contains_key(unsupported) {
            return Err(bad(&format!("{f}.{unsupported}"), "is not supported"));
        }
    }
    let kind = string(
        s3.get("S3DataType")
            .ok_or_else(|| bad(&format!("{f}.S3DataType"), "is required"))?,
        &format!("{f}.S3DataType"),
    )?;
    if kind != "S3Prefix" {
        return Err(bad(
            &format!("{f}.S3DataType"),
            format!("{kind:?} is not supported (only S3Prefix)"),
        ));
    }
    let uri = string(
        s3.get("S3Uri")
            .ok_or_else(|| bad(&format!("{f}.S3Uri"), "is required"))?,
        &format!("{f}.S3Uri"),
    )?;
    qm_wire::messages::parse_s3_uri(&uri).map_err(|e| bad(&format!("{f}.S3Uri"), e))?;
    let distribution = match s3.get("S3DataDistributionType") {
        Some(d) => {
            let d = string(d, &format!("{f}.S3DataDistributionType"))?;
            if d != "FullyReplicated" && d != "ShardedByS3Key" {
                return Err(bad(
                    &format!("{f}.S3DataDistributionType"),
                    format!("{d:?} is not FullyReplicated or ShardedByS3Key"),
                ));
            }
            Some(d)
        }
        None => None,
    };
    Ok(qm_wire::messages::InputChannel {
        channel_name: name,
        s3_uri: uri,
        s3_data_distribution_type: distribution,
    })
}

/// Reads `payload` (a JSON `CreateTrainingJob` request). `host_images`:
/// `TrainingImage` values that stand for the host runtime (the job's
/// `ContainerEntrypoint` runs as a host command); any other image is run
/// in the container runtime (its share's `imagePrefixes` must allow it).
pub fn parse(payload: &str, host_images: &[String]) -> Result<Training, String> {
    let v: Value = serde_json::from_str(payload)
        .map_err(|e| format!("serviceRequestPayload: not a JSON CreateTrainingJob request: {e}"))?;
    let top = v
        .as_object()
        .ok_or_else(|| "serviceRequestPayload: must be a JSON object".to_string())?;
    for (field, why) in REFUSED {
        let given = match top.get(field) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        };
        if given {
            return Err(bad(field, format!("is not supported ({why})")));
        }
    }
    if top.get("EnableNetworkIsolation") == Some(&Value::Bool(true)) {
        return Err(bad(
            "EnableNetworkIsolation",
            "is not supported (jobs run on the executor's network)",
        ));
    }
    let mut known: Vec<&str> = NO_EFFECT.to_vec();
    known.extend(REFUSED.iter().map(|(f, _)| *f));
    known.extend([
        "EnableNetworkIsolation",
        "AlgorithmSpecification",
        "ResourceConfig",
        "StoppingCondition",
        "CheckpointConfig",
        "Environment",
        "HyperParameters",
        "Tags",
        "OutputDataConfig",
        "InputDataConfig",
    ]);
    only(top, "", &known)?;

    let mut t = Training::default();
    resource_config(top, &mut t)?;
    algorithm(top, host_images, &mut t)?;
    stopping_condition(top, &mut t)?;
    checkpoint_config(top, &mut t)?;
    output_data_config(top, &mut t)?;

    // InputDataConfig: S3Prefix channels in File mode (container jobs).
    if let Some(list) = top.get("InputDataConfig") {
        let list = list
            .as_array()
            .ok_or_else(|| bad("InputDataConfig", "must be a list of channels"))?;
        if !list.is_empty() && t.container_image.is_none() {
            return Err(bad(
                "InputDataConfig",
                "needs a TrainingImage run as a container (this one runs as a host command)",
            ));
        }
        for (i, c) in list.iter().enumerate() {
            t.channels
                .push(channel(c, &format!("InputDataConfig[{i}]"))?);
        }
    }

    if let Some(env) = top.get("Environment") {
        t.environment = string_map(env, "Environment")?;
    }
    if let Some(hps) = top.get("HyperParameters") {
        // As SageMaker gives them: SM_HPS (the JSON object, which the
        // executor also writes to input/config/hyperparameters.json) and
        // one SM_HP_<NAME> per hyperparameter.
        let hps = string_map(hps, "HyperParameters")?;
        for (k, v) in &hps {
            let name: String = k
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_uppercase()
                    } else {
                        '_'
                    }
                })
                .collect();
            t.environment.insert(format!("SM_HP_{name}"), v.clone());
        }
        let json = serde_json::to_string(&hps).map_err(|e| bad("HyperParameters", e))?;
        t.environment.insert("SM_HPS".into(), json);
    }
    t.environment
        .insert("SM_TRAINING_IMAGE".into(), t.training_image.clone());
    if let Some(tags) = top.get("Tags") {
        let list = tags
            .as_array()
            .ok_or_else(|| bad("Tags", "must be a list of {Key, Value}"))?;
        for (i, tag) in list.iter().enumerate() {
            let field = format!("Tags[{i}]");
            let tag = object(tag, &field)?;
            let key = string(
                tag.get("Key").ok_or_else(|| bad(&field, "needs a Key"))?,
                &format!("{field}.Key"),
            )?;
            let value = match tag.get("Value") {
                Some(v) => string(v, &format!("{field}.Value"))?,
                None => String::new(),
            };
            t.tags.insert(key, value);
        }
    }
    Ok(t)
}

/// ResourceConfig: the instance type and count.
fn resource_config(top: &Map<String, Value>, t: &mut Training) -> Result<(), String> {
    let rc = top.get("ResourceConfig").ok_or_else(|| {
        bad(
            "ResourceConfig",
            "is required (InstanceType, InstanceCount)",
        )
    })?;
    let rc = object(rc, "ResourceConfig")?;
    if rc.contains_key("InstanceGroups") {
        return Err(bad(
            "ResourceConfig.InstanceGroups",
            "is not supported (heterogeneous clusters); give InstanceType and InstanceCount",
        ));
    }
    only(
        rc,
        "ResourceConfig",
        &[
            "InstanceType",
            "InstanceCount",
            "VolumeSizeInGB",
            "VolumeKmsKeyId",
            "KeepAlivePeriodInSeconds",
        ],
    )?;
    t.instance_type = string(
        rc.get("InstanceType")
            .ok_or_else(|| bad("ResourceConfig.InstanceType", "is required"))?,
        "ResourceConfig.InstanceType",
    )?;
    let count = match rc.get("InstanceCount") {
        Some(c) => number(c, "ResourceConfig.InstanceCount")?,
        None => 1,
    };
    t.instance_count = u32::try_from(count)
        .ok()
        .filter(|c| *c >= 1)
        .ok_or_else(|| bad("ResourceConfig.InstanceCount", "must be 1 or more"))?;
    Ok(())
}

/// AlgorithmSpecification: what runs (an image, or a host command for the
/// `host_images`).
fn algorithm(
    top: &Map<String, Value>,
    host_images: &[String],
    t: &mut Training,
) -> Result<(), String> {
    let spec = top.get("AlgorithmSpecification").ok_or_else(|| {
        bad(
            "AlgorithmSpecification",
            "is required (TrainingImage and ContainerEntrypoint)",
        )
    })?;
    let spec = object(spec, "AlgorithmSpecification")?;
    if spec.contains_key("AlgorithmName") {
        return Err(bad(
            "AlgorithmSpecification.AlgorithmName",
            "is not supported (SageMaker's built-in algorithms); give TrainingImage and ContainerEntrypoint",
        ));
    }
    for field in ["MetricDefinitions", "TrainingImageConfig"] {
        if spec.contains_key(field) {
            return Err(bad(
                &format!("AlgorithmSpecification.{field}"),
                "is not supported",
            ));
        }
    }
    only(
        spec,
        "AlgorithmSpecification",
        &[
            "TrainingImage",
            "TrainingInputMode",
            "ContainerEntrypoint",
            "ContainerArguments",
            "EnableSageMakerMetricsTimeSeries",
        ],
    )?;
    if let Some(mode) = spec.get("TrainingInputMode") {
        let mode = string(mode, "AlgorithmSpecification.TrainingInputMode")?;
        if mode != "File" {
            return Err(bad(
                "AlgorithmSpecification.TrainingInputMode",
                format!("{mode:?} is not supported (only File: channels are downloaded before the job starts)"),
            ));
        }
    }
    t.training_image = match spec.get("TrainingImage") {
        Some(i) => string(i, "AlgorithmSpecification.TrainingImage")?,
        None => return Err(bad("AlgorithmSpecification.TrainingImage", "is required")),
    };
    let on_host = host_images.contains(&t.training_image);
    if !on_host {
        qm_wire::messages::check_image_reference(&t.training_image)
            .map_err(|e| bad("AlgorithmSpecification.TrainingImage", e))?;
        t.container_image = Some(t.training_image.clone());
    }
    let entrypoint = match spec.get("ContainerEntrypoint") {
        Some(e) => strings(e, "AlgorithmSpecification.ContainerEntrypoint")?,
        None => Vec::new(),
    };
    let arguments = match spec.get("ContainerArguments") {
        Some(a) => strings(a, "AlgorithmSpecification.ContainerArguments")?,
        None => Vec::new(),
    };
    if entrypoint.is_empty() && on_host {
        return Err(bad(
            "AlgorithmSpecification.ContainerEntrypoint",
            "is required: this gateway runs this TrainingImage as a host command (hostCommandImages)",
        ));
    }
    if entrypoint.is_empty() && !arguments.is_empty() {
        return Err(bad(
            "AlgorithmSpecification.ContainerArguments",
            "needs a ContainerEntrypoint here (without one, the image's entrypoint runs with `train`, as SageMaker does)",
        ));
    }
    // No entrypoint: the image's own, with `train` (an empty command).
    t.command = entrypoint;
    t.command.extend(arguments);
    Ok(())
}

/// StoppingCondition: the longest an attempt may run.
fn stopping_condition(top: &Map<String, Value>, t: &mut Training) -> Result<(), String> {
    if let Some(stop) = top.get("StoppingCondition") {
        let stop = object(stop, "StoppingCondition")?;
        if stop.contains_key("MaxPendingTimeInSeconds") {
            return Err(bad(
                "StoppingCondition.MaxPendingTimeInSeconds",
                "is not supported (a job waits in its queue until it is placed or terminated)",
            ));
        }
        only(
            stop,
            "StoppingCondition",
            &["MaxRuntimeInSeconds", "MaxWaitTimeInSeconds"],
        )?;
        if let Some(max) = stop.get("MaxRuntimeInSeconds") {
            let max = number(max, "StoppingCondition.MaxRuntimeInSeconds")?;
            if max == 0 {
                return Err(bad(
                    "StoppingCondition.MaxRuntimeInSeconds",
                    "must be 1 or more",
                ));
            }
            t.max_runtime_seconds = Some(max);
        }
    }
    Ok(())
}

/// CheckpointConfig: where checkpoints sync to, and the local directory.
fn checkpoint_config(top: &Map<String, Value>, t: &mut Training) -> Result<(), String> {
    if let Some(c) = top.get("CheckpointConfig") {
        let c = object(c, "CheckpointConfig")?;
        only(c, "CheckpointConfig", &["S3Uri", "LocalPath"])?;
        let s3_uri = string(
            c.get("S3Uri")
                .ok_or_else(|| bad("CheckpointConfig.S3Uri", "is required"))?,
            "CheckpointConfig.S3Uri",
        )?;
        qm_wire::messages::parse_s3_uri(&s3_uri).map_err(|e| bad("CheckpointConfig.S3Uri", e))?;
        // SageMaker's LocalPath is absolute (default /opt/ml/checkpoints);
        // here it lies inside the attempt's directory.
        let local = match c.get("LocalPath") {
            Some(p) => string(p, "CheckpointConfig.LocalPath")?,
            None => "/opt/ml/checkpoints".into(),
        };
        let local = local.trim_start_matches('/').to_string();
        qm_wire::messages::check_local_path(&local)
            .map_err(|e| bad("CheckpointConfig.LocalPath", e))?;
        t.checkpoint = Some(CheckpointConfig {
            s3_uri: Some(s3_uri),
            local_path: Some(local),
            ..Default::default()
        });
    }
    Ok(())
}

/// OutputDataConfig: where a container job's model and output data go.
fn output_data_config(top: &Map<String, Value>, t: &mut Training) -> Result<(), String> {
    if let Some(o) = top.get("OutputDataConfig") {
        let o = object(o, "OutputDataConfig")?;
        only(
            o,
            "OutputDataConfig",
            &["S3OutputPath", "KmsKeyId", "CompressionType"],
        )?;
        if o.get("KmsKeyId").is_some() {
            return Err(bad(
                "OutputDataConfig.KmsKeyId",
                "is not supported (the bucket's own encryption applies)",
            ));
        }
        if let Some(c) = o.get("CompressionType") {
            if string(c, "OutputDataConfig.CompressionType")? != "GZIP" {
                return Err(bad(
                    "OutputDataConfig.CompressionType",
                    "only GZIP is supported (model.tar.gz)",
                ));
            }
        }
        let path = string(
            o.get("S3OutputPath")
                .ok_or_else(|| bad("OutputDataConfig.S3OutputPath", "is required"))?,
            "OutputDataConfig.S3OutputPath",
        )?;
        qm_wire::messages::parse_s3_uri(&path)
            .map_err(|e| bad("OutputDataConfig.S3OutputPath", e))?;
        // A host command has no /opt/ml/model to upload: recorded only.
        if t.container_image.is_some() {
            t.output_path = Some(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(extra: Value) -> String {
        let mut v = serde_json::json!({
            "TrainingJobName": "llm-7b",
            "RoleArn": "arn:aws:iam::123456789012:role/sm",
            "AlgorithmSpecification": {
                "TrainingImage": "registry.local/trainer:1",
                "TrainingInputMode": "File",
                "ContainerEntrypoint": ["/usr/bin/python3", "train.py"],
                "ContainerArguments": ["--epochs", "3"]
            },
            "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100},
            "OutputDataConfig": {"S3OutputPath": "s3://out/x"},
            "StoppingCondition": {"MaxRuntimeInSeconds": 3600}
        });
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            for (k, x) in e {
                o.insert(k.clone(), x.clone());
            }
        }
        v.to_string()
    }

    #[test]
    fn a_training_job_request_becomes_what_the_job_runs() {
        let t = parse(
            &payload(serde_json::json!({
                "CheckpointConfig": {"S3Uri": "s3://ckpt/training/shares/QS1/llm", "LocalPath": "/opt/ml/checkpoints"},
                "Environment": {"NCCL_DEBUG": "INFO"},
                "HyperParameters": {"learning-rate": "0.1", "epochs": "3"},
                "Tags": [{"Key": "project", "Value": "llm"}]
            })),
            &[],
        )
        .expect("valid");
        assert_eq!(t.instance_type, "ml.p5.48xlarge");
        assert_eq!(t.instance_count, 2);
        assert_eq!(
            t.command,
            ["/usr/bin/python3", "train.py", "--epochs", "3"].map(String::from)
        );
        assert_eq!(t.max_runtime_seconds, Some(3600));
        let c = t.checkpoint.expect("checkpoints");
        assert_eq!(
            c.s3_uri.as_deref(),
            Some("s3://ckpt/training/shares/QS1/llm")
        );
        assert_eq!(c.local_path.as_deref(), Some("opt/ml/checkpoints"));
        assert_eq!(t.environment["NCCL_DEBUG"], "INFO");
        assert_eq!(t.environment["SM_HP_LEARNING_RATE"], "0.1");
        assert_eq!(t.environment["SM_HP_EPOCHS"], "3");
        let hps: BTreeMap<String, String> =
            serde_json::from_str(&t.environment["SM_HPS"]).expect("json");
        assert_eq!(hps["learning-rate"], "0.1");
        assert_eq!(
            t.environment["SM_TRAINING_IMAGE"],
            "registry.local/trainer:1"
        );
        assert_eq!(t.tags["project"], "llm");
        let channels = parse(
            &payload(serde_json::json!({"InputDataConfig": [{
                "ChannelName": "train", "InputMode": "File",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://data/train/", "S3DataDistributionType": "ShardedByS3Key"}}
            }]})),
            &[],
        )
        .expect("valid")
        .channels;
        assert_eq!(channels.len(), 1);
        assert_eq!(channels[0].channel_name, "train");
        assert!(channels[0].sharded());
        assert_eq!(
            t.container_image.as_deref(),
            Some("registry.local/trainer:1"),
            "the image is run, not only recorded"
        );
    }

    #[test]
    fn without_an_entrypoint_the_image_runs_its_own_with_train() {
        let t = parse(
            &serde_json::json!({
                "AlgorithmSpecification": {"TrainingImage": "quartermaster/pytorch-trainer:local"},
                "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2},
            })
            .to_string(),
            &[],
        )
        .expect("valid");
        assert!(t.command.is_empty(), "{:?}", t.command);
        assert_eq!(
            t.container_image.as_deref(),
            Some("quartermaster/pytorch-trainer:local")
        );
        // An image the gateway runs on the host keeps today's behaviour.
        let host = parse(
            &payload(serde_json::json!({})),
            &["registry.local/trainer:1".to_string()],
        )
        .expect("valid");
        assert_eq!(host.container_image, None);
        assert_eq!(host.command[0], "/usr/bin/python3");
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_with_the_field_named() {
        let refused = |extra: Value, images: &[String], says: &str| {
            let e = parse(&payload(extra.clone()), images).expect_err(&extra.to_string());
            assert!(e.contains(says), "{says:?} not in {e:?}");
        };
        refused(
            serde_json::json!({"InputDataConfig": [{"ChannelName": "train"}]}),
            &[],
            "serviceRequestPayload.InputDataConfig[0].DataSource: is required",
        );
        refused(
            serde_json::json!({"InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {"S3DataType": "ManifestFile", "S3Uri": "s3://b/p"}}}]}),
            &[],
            "S3DataType: \"ManifestFile\" is not supported",
        );
        refused(
            serde_json::json!({"InputDataConfig": [{"ChannelName": "train", "DataSource": {"FileSystemDataSource": {}}}]}),
            &[],
            "InputDataConfig[0].DataSource.FileSystemDataSource: is not a field",
        );
        refused(
            serde_json::json!({"InputDataConfig": [{"ChannelName": "../x", "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/p"}}}]}),
            &[],
            "InputDataConfig[0].ChannelName",
        );
        refused(
            serde_json::json!({"VpcConfig": {"Subnets": []}}),
            &[],
            "serviceRequestPayload.VpcConfig",
        );
        refused(
            serde_json::json!({"EnableManagedSpotTraining": true}),
            &[],
            "EnableManagedSpotTraining",
        );
        refused(
            serde_json::json!({"HyperParameter": {}}),
            &[],
            "serviceRequestPayload.HyperParameter: is not a field",
        );
        refused(
            serde_json::json!({"ResourceConfig": {"InstanceType": "ml.c5.xlarge", "InstanceCount": 0}}),
            &[],
            "ResourceConfig.InstanceCount: must be 1 or more",
        );
        refused(
            serde_json::json!({"ResourceConfig": {"InstanceCount": 1}}),
            &[],
            "ResourceConfig.InstanceType: is required",
        );
        refused(
            serde_json::json!({"AlgorithmSpecification": {"TrainingImage": "x"}}),
            &["x".to_string()],
            "AlgorithmSpecification.ContainerEntrypoint: is required",
        );
        refused(
            serde_json::json!({"AlgorithmSpecification": {"TrainingImage": "x", "ContainerArguments": ["a"]}}),
            &[],
            "AlgorithmSpecification.ContainerArguments: needs a ContainerEntrypoint",
        );
        refused(
            serde_json::json!({"AlgorithmSpecification": {"TrainingImage": "Not An Image", "ContainerEntrypoint": ["a"]}}),
            &[],
            "AlgorithmSpecification.TrainingImage: \"Not An Image\" is not an image reference",
        );
        refused(
            serde_json::json!({"AlgorithmSpecification": {"AlgorithmName": "xgboost"}}),
            &[],
            "AlgorithmSpecification.AlgorithmName",
        );
        refused(
            serde_json::json!({"CheckpointConfig": {"S3Uri": "https://x/y"}}),
            &[],
            "CheckpointConfig.S3Uri",
        );
        refused(
            serde_json::json!({"CheckpointConfig": {"S3Uri": "s3://bucket/p", "LocalPath": "/a/../../etc"}}),
            &[],
            "CheckpointConfig.LocalPath",
        );
        refused(
            serde_json::json!({"Environment": {"A": 1}}),
            &[],
            "Environment.A: must be a string",
        );
        assert!(parse("not json", &[])
            .expect_err("junk")
            .starts_with("serviceRequestPayload: not a JSON CreateTrainingJob request"));
    }
}

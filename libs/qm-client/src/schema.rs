//! The API's JSON Schemas, generated from the types this crate sends and
//! receives, and the parts of `docs/asyncapi.yaml` made from them (its
//! request and reply messages, one AsyncAPI operation per API operation,
//! and `components.schemas`). A test rewrites those parts of the document
//! (`QM_BLESS_DOCS=1`) and fails when they differ from the types, so the
//! document, this crate and the clients generated from the document
//! cannot drift apart.

use std::collections::BTreeMap;

use schemars::generate::SchemaSettings;
use schemars::SchemaGenerator;
use serde_json::{json, Map, Value};

/// The generator the document's schemas come from: JSON Schema draft 7
/// (what an AsyncAPI 3.0 Schema Object extends), definitions under
/// `#/components/schemas/`.
pub fn generator() -> SchemaGenerator {
    let mut settings = SchemaSettings::draft07();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    settings.into_generator()
}

/// The generated regions of `docs/asyncapi.yaml`, by name: each a YAML
/// mapping, unindented.
pub fn regions() -> BTreeMap<&'static str, String> {
    let mut generator = generator();
    let operations = crate::ops::operation_schemas(&mut generator);
    // The events and errors every integration reads.
    let _ = generator.subschema_for::<qm_wire::messages::JobStateChange>();
    let _ = generator.subschema_for::<qm_wire::messages::PreemptionEvent>();
    let _ = generator.subschema_for::<qm_wire::system::CheckpointCommit>();
    let _ = generator.subschema_for::<qm_wire::messages::EventFrame>();
    let _ = generator.subschema_for::<qm_wire::messages::ApiError>();
    let mut channel_messages = Map::new();
    let mut reply_messages = Map::new();
    let mut api_operations = Map::new();
    let mut messages = Map::new();
    for (op, request, reply) in operations {
        let name = op.name();
        let reply_name = format!("{name}Reply");
        channel_messages.insert(
            name.into(),
            json!({"$ref": format!("#/components/messages/{name}")}),
        );
        reply_messages.insert(
            reply_name.clone(),
            json!({"$ref": format!("#/components/messages/{reply_name}")}),
        );
        api_operations.insert(
            name.into(),
            json!({
                "action": "send",
                "channel": {"$ref": "#/channels/api"},
                "summary": format!("{name} (request on qm.v1.api.<principal>.{name}, one reply)"),
                "messages": [{"$ref": format!("#/channels/api/messages/{name}")}],
                "reply": {
                    "channel": {"$ref": "#/channels/apiReplies"},
                    "messages": [{"$ref": format!("#/channels/apiReplies/messages/{reply_name}")}],
                },
            }),
        );
        messages.insert(
            name.into(),
            json!({"name": name, "payload": Value::from(request)}),
        );
        messages.insert(
            reply_name.clone(),
            json!({
                "name": reply_name,
                "payload": {
                    "type": "object",
                    "description": format!("exactly one of ok (the result of {name}) and error"),
                    "properties": {
                        "ok": Value::from(reply),
                        "error": {"$ref": "#/components/schemas/ApiError"},
                    },
                    "minProperties": 1,
                    "maxProperties": 1,
                },
            }),
        );
    }
    let schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    let yaml =
        |v: Map<String, Value>| serde_yaml_ng::to_string(&Value::Object(v)).unwrap_or_default();
    BTreeMap::from([
        ("api-messages", yaml(channel_messages)),
        ("api-replies", yaml(reply_messages)),
        ("api-operations", yaml(api_operations)),
        ("api-component-messages", yaml(messages)),
        ("schemas", yaml(schemas)),
    ])
}

/// `document` with each generated region (between the lines
/// `# >>> generated: <name>` and `# <<< generated`) replaced by what
/// [`regions`] makes of the types now, indented as its opening line.
/// Errors name a region the document lacks or leaves open.
pub fn regenerate(document: &str) -> Result<String, String> {
    let regions = regions();
    let mut out = String::new();
    let mut lines = document.lines();
    let mut seen = Vec::new();
    while let Some(line) = lines.next() {
        out.push_str(line);
        out.push('\n');
        let Some(name) = line.trim_start().strip_prefix("# >>> generated: ") else {
            continue;
        };
        let name = name.trim();
        let text = regions.get(name).ok_or_else(|| {
            format!("the document names a generated region {name:?} no code makes")
        })?;
        let indent = &line[..line.len() - line.trim_start().len()];
        for l in text.lines() {
            out.push_str(indent);
            out.push_str(l);
            out.push('\n');
        }
        loop {
            match lines.next() {
                Some(l) if l.trim_start().starts_with("# <<< generated") => {
                    out.push_str(l);
                    out.push('\n');
                    break;
                }
                Some(_) => {}
                None => return Err(format!("the generated region {name:?} is not closed")),
            }
        }
        seen.push(name.to_string());
    }
    for name in regions.keys() {
        if !seen.iter().any(|s| s == name) {
            return Err(format!("the document has no generated region {name:?}"));
        }
    }
    Ok(out)
}

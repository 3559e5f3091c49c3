//! `docs/asyncapi.yaml` says what the API's types are: its generated parts
//! are exactly what the types make of them, and it lists every operation.

use std::path::PathBuf;

use qm_wire::subjects::Operation;

fn document_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/asyncapi.yaml")
}

#[test]
fn the_document_says_what_the_types_are() {
    let path = document_path();
    let document = std::fs::read_to_string(&path).expect("docs/asyncapi.yaml");
    let fresh = qm_client::schema::regenerate(&document).expect("its generated regions");
    if std::env::var("QM_BLESS_DOCS").as_deref() == Ok("1") {
        std::fs::write(&path, &fresh).expect("written");
        return;
    }
    if document != fresh {
        let (n, (was, now)) = document
            .lines()
            .zip(fresh.lines())
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .unwrap_or((
                document.lines().count().min(fresh.lines().count()),
                ("(end)", "(more)"),
            ));
        panic!(
            "docs/asyncapi.yaml differs from the API's types at line {}:\n  document: {was}\n  types:    {now}\nrun QM_BLESS_DOCS=1 cargo test -p qm-client --test asyncapi, and review the diff",
            n + 1
        );
    }
}

#[test]
fn every_operation_is_in_the_document_with_its_request_and_reply() {
    let document = std::fs::read_to_string(document_path()).expect("docs/asyncapi.yaml");
    let doc: serde_json::Value = serde_yaml_ng::from_str(&document).expect("YAML");
    let mut listed: Vec<&str> = doc["channels"]["api"]["parameters"]["operation"]["enum"]
        .as_array()
        .expect("the operation parameter's enum")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    let mut all: Vec<&str> = Operation::ALL.iter().map(|op| op.name()).collect();
    listed.sort_unstable();
    all.sort_unstable();
    assert_eq!(listed, all, "the api channel's operation enum");
    for op in all {
        let o = &doc["operations"][op];
        assert_eq!(o["action"], "send", "{op}");
        assert_eq!(
            o["messages"][0]["$ref"],
            format!("#/channels/api/messages/{op}"),
            "{op}"
        );
        assert!(
            doc["components"]["messages"][op]["payload"].is_object(),
            "{op} has a request payload"
        );
        assert!(
            doc["components"]["messages"][format!("{op}Reply")]["payload"]["properties"]["ok"]
                .is_object(),
            "{op} has a reply"
        );
    }
}

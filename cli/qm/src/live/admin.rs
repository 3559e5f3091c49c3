//! `qm whoami`, `qm auth` (the tenancy's NATS credentials) and `qm apply`.

use qm_service::client::Client;
use qm_wire::messages::{Caller, Empty};
use qm_wire::system::QueueDocument;

use super::failure::{usage, Failure};
use super::output::print_json;

pub async fn whoami(c: &Client, json: bool) -> Result<(), Failure> {
    let me: Caller = c.who_am_i(&Empty {}).await?;
    if json {
        print_json(&me);
    } else {
        let team = me
            .team
            .as_deref()
            .map(|t| format!(", team {t}"))
            .unwrap_or_default();
        println!("{} ({}{team})", me.principal, me.role.to_lowercase());
        for s in &me.shares {
            println!("  owns {s}");
        }
    }
    Ok(())
}

/// `qm auth`: the tenancy file -> nats-auth.conf and credentials files.
pub fn auth(
    tenancy: &std::path::Path,
    out: Option<&std::path::Path>,
    (check, profiles): (bool, Option<(&str, Option<&str>)>),
    json: bool,
) -> Result<(), Failure> {
    let t = qm_tenancy::Tenancy::load(tenancy).map_err(|e| Failure(e.to_string(), 1))?;
    let principals = t.principals();
    if check {
        println!(
            "{}: valid ({} team(s), {} principal(s))",
            tenancy.display(),
            t.teams.len(),
            principals.len()
        );
        return Ok(());
    }
    let out = out.ok_or_else(|| usage("--out DIR is required (or --check to only validate)"))?;
    let existing: Vec<bool> = principals
        .iter()
        .map(|p| qm_tenancy::nats::key_path(out, p).exists())
        .collect();
    let keys = qm_tenancy::nats::ensure_keys(&t, out).map_err(|e| Failure(e, 1))?;
    let aws = qm_tenancy::aws::ensure_secrets(&t, out).map_err(|e| Failure(e, 1))?;
    let conf = qm_tenancy::nats::authorization(&t, &qm_tenancy::nats::public_keys(&t, &keys))
        .map_err(|e| Failure(e, 1))?;
    // A qm profile per person, naming the server and their key beside it.
    let mut people = Vec::new();
    if let Some((url, ca)) = profiles {
        for p in &principals {
            if matches!(
                t.role(p),
                Some(
                    qm_tenancy::Role::Admin
                        | qm_tenancy::Role::Reader
                        | qm_tenancy::Role::Team { .. }
                )
            ) {
                let path = out.join(format!("{p}.config.yaml"));
                std::fs::write(&path, super::profile::for_person(p, url, ca))
                    .map_err(|e| Failure(format!("cannot write {}: {e}", path.display()), 1))?;
                people.push(path);
            }
        }
    }
    let conf_path = out.join("nats-auth.conf");
    let tmp = out.join(".nats-auth.conf.tmp");
    std::fs::write(&tmp, conf)
        .and_then(|()| std::fs::rename(&tmp, &conf_path))
        .map_err(|e| Failure(format!("cannot write {}: {e}", conf_path.display()), 1))?;
    if json {
        print_json(&serde_json::json!({
            "authorization": conf_path,
            "principals": principals.iter().zip(&existing).map(|(p, kept)| serde_json::json!({
                "principal": p,
                "role": t.role(p).map(|r| r.label()),
                "credentials": qm_tenancy::nats::key_path(out, p),
                "publicKey": keys.get(p),
                "new": !kept,
            })).collect::<Vec<_>>(),
            "awsAccessKeys": aws.iter().map(|k| serde_json::json!({
                "accessKeyId": k.id,
                "principal": k.principal,
                "credentials": qm_tenancy::aws::credentials_path(out, &k.principal),
                "new": k.new,
            })).collect::<Vec<_>>(),
            "gatewayKeysFile": (!aws.is_empty()).then(|| qm_tenancy::aws::keys_path(out)),
            "profiles": people,
        }));
        return Ok(());
    }
    println!("wrote {}", conf_path.display());
    for (p, kept) in principals.iter().zip(&existing) {
        println!(
            "  {:<20} {:<20} {} ({})",
            p,
            t.role(p).map(|r| r.label()).unwrap_or_default(),
            qm_tenancy::nats::key_path(out, p).display(),
            if *kept { "kept" } else { "new" }
        );
    }
    if !aws.is_empty() {
        println!(
            "wrote {} (the AWS Batch gateway's keysFile)",
            qm_tenancy::aws::keys_path(out).display()
        );
        for k in &aws {
            println!(
                "  {:<20} {:<20} {} ({})",
                k.id,
                k.principal,
                qm_tenancy::aws::credentials_path(out, &k.principal).display(),
                if k.new { "new" } else { "kept" }
            );
        }
    }
    for p in &people {
        println!("wrote {} (a qm profile)", p.display());
    }
    println!(
        "next: `include {}` in the nats-server configuration and reload it; give each principal its .nk file (and .seed, for NATS's own clients) only{}",
        conf_path.display(),
        if aws.is_empty() { "" } else { " (and each person its .aws-credentials file)" }
    );
    Ok(())
}

/// Applies every queue document of the file (YAML documents separated by
/// `---`), in order. All are read before any is applied, so one that does
/// not parse changes nothing; admission checks each as it is applied and
/// the first it refuses stops the rest (those before it stay applied, and
/// are said).
pub async fn apply(c: &Client, file: &std::path::Path, json: bool) -> Result<(), Failure> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(file)
        .map_err(|e| usage(format!("cannot read {}: {e}", file.display())))?;
    let mut docs = Vec::new();
    for (i, d) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
        let in_doc =
            |e: serde_yaml_ng::Error| usage(format!("{}: document {}: {e}", file.display(), i + 1));
        let value = serde_yaml_ng::Value::deserialize(d).map_err(in_doc)?;
        if value.is_null() {
            continue; // an empty document (a trailing `---`)
        }
        docs.push(serde_yaml_ng::from_value::<QueueDocument>(value).map_err(in_doc)?);
    }
    if docs.is_empty() {
        return Err(usage(format!("{}: no queue document", file.display())));
    }
    for doc in docs {
        let r: QueueDocument = c.apply_job_queue(&doc).await?;
        if json {
            print_json(&r);
        } else {
            let names: Vec<&str> = r
                .quota_shares
                .iter()
                .map(|s| s.quota_share_name.as_str())
                .collect();
            let environment = match (&r.job_queue.service_environment, r.job_queue.priority) {
                (Some(env), p) => format!(
                    " in service environment {env} (priority {})",
                    p.unwrap_or(0)
                ),
                (None, _) => String::new(),
            };
            println!(
                "job queue {} applied{environment}: {} quota share(s) {}",
                r.job_queue.job_queue_name,
                names.len(),
                names.join(", ")
            );
        }
    }
    Ok(())
}

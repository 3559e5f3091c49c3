use super::*;
use qm_wire::messages::Caller;

#[test]
fn images_are_allowed_only_under_the_shares_prefixes() {
    let list = vec![
        "registry.local/team-a/".to_string(),
        "quartermaster/pytorch-trainer".to_string(),
    ];
    let ok = |image: &str| image_allowed(image, Some(&list), "q", "s");
    assert!(ok("registry.local/team-a/trainer:1").is_ok());
    assert!(ok("quartermaster/pytorch-trainer:local").is_ok());
    assert!(ok("quartermaster/pytorch-trainer").is_ok());
    assert!(ok(&format!(
        "quartermaster/pytorch-trainer@sha256:{}",
        "a".repeat(64)
    ))
    .is_ok());
    let err = ok("quartermaster/pytorch-trainer-evil:1").expect_err("a longer name");
    assert!(err.contains("imagePrefixes"), "{err}");
    assert!(ok("registry.local/team-b/trainer:1").is_err());
    assert!(
        ok("registry.local/team-a").is_err(),
        "the prefix is a folder"
    );
    let single = vec!["ubuntu".to_string()];
    assert!(image_allowed("ubuntu:22.04", Some(&single), "q", "s").is_ok());
    assert!(
        image_allowed("ubuntu:5000/evil", Some(&single), "q", "s").is_err(),
        "a registry named like the repository"
    );
    let none = image_allowed("x/y:1", None, "q", "s").expect_err("no list");
    assert!(none.contains("may not run images"), "{none}");
    assert!(check_image_prefix("registry.local:5000/team-a/").is_ok());
    assert!(check_image_prefix("quartermaster/pytorch-trainer").is_ok());
    assert!(check_image_prefix("").is_err());
    assert!(check_image_prefix("Team/X").is_err());
    assert!(check_image_prefix("team/x@sha256:abc").is_err());
}

#[test]
fn checkpoint_uris_stay_under_the_share_prefix() {
    let ok = |uri: &str, allowed: Option<&[String]>| {
        checkpoint_uri_allowed(uri, allowed, Some("ckpt"), "training", "QS1")
    };
    assert!(ok("s3://ckpt/training/shares/QS1/run-1", None).is_ok());
    assert!(ok("s3://ckpt/training/shares/QS1", None).is_ok());
    assert!(
        ok("s3://ckpt/training/shares/QS10/run", None).is_err(),
        "a prefix of a name is not a parent"
    );
    assert!(ok("s3://ckpt/training/shares/QS2/run", None).is_err());
    assert!(
        ok("s3://ckpt/training/j-0123456789abcdef", None).is_err(),
        "another job's default prefix"
    );
    assert!(
        ok("s3://other/training/shares/QS1/run", None).is_err(),
        "another bucket"
    );
    assert!(ok("s3://ckpt/training/shares/QS1/../QS2", None).is_err());
    let list = vec!["s3://team-bucket/vision/".to_string()];
    assert!(ok("s3://team-bucket/vision/run-9", Some(&list)).is_ok());
    assert!(
        ok("s3://ckpt/training/shares/QS1/run-1", Some(&list)).is_err(),
        "the list replaces the default"
    );
    let err = ok("s3://team-bucket/speech/x", Some(&list)).expect_err("outside");
    assert!(
        err.contains("outside the checkpointS3Prefixes share training/QS1 allows"),
        "{err}"
    );
}

pub(crate) const EXAMPLE: &str = "
teams:
  vision:
    shares: [training/QS1]
    users: [alice]
  speech:
    shares: [training/QS2, research/*]
    users: [bob, carol]
admins: [platform]
readers: [dashboard]
services:
  admission: [admission]
  scheduler: [scheduler]
  executors:
    node-1: {executors: [node-1]}
    gpu-pool: {executors: [gpu-1, gpu-2], checkpointNodes: [gpu-pool]}
  checkpoint:
    ckpt-node-1: {nodes: [node-1]}
";

fn tenancy() -> Tenancy {
    Tenancy::parse(EXAMPLE).expect("the example is valid")
}

#[test]
fn the_gateway_speaks_only_for_people_holding_access_keys() {
    let with_keys = format!(
        "{EXAMPLE}  gateway: [aws-gateway]\nawsAccessKeys:\n  AKIAALICE0000000001: alice\n  AKIAPLATFORM0000001: platform\n"
    );
    let t = Tenancy::parse(&with_keys).expect("valid");
    assert_eq!(t.role("aws-gateway"), Some(Role::Gateway));
    assert_eq!(t.access_key_principal("AKIAALICE0000000001"), Some("alice"));
    assert_eq!(t.access_key_principal("AKIANOBODY000000001"), None);
    assert_eq!(t.spoken_for("alice").expect("alice").role, "TEAM");
    assert_eq!(t.spoken_for("platform").expect("platform").role, "ADMIN");
    // No key: bob exists but cannot be spoken for; nor can services.
    for who in [
        "bob",
        "admission",
        "scheduler",
        "node-1",
        "aws-gateway",
        "mallory",
    ] {
        let e = t.spoken_for(who).expect_err(who);
        assert!(e.0.contains("may not act for"), "{e}");
    }
    let perms = nats::permissions(&t, "aws-gateway").expect("declared");
    assert_eq!(perms.publish[0], "qm.v1.api.aws-gateway.>");
    assert!(!perms.responds);
    assert!(perms.subscribe == vec!["_INBOX_aws-gateway.>".to_string()]);
    assert!(!perms.publish.iter().any(|p| p.starts_with("qm.v1.log")));

    // A key for a service, a key for an unknown principal, a bad id,
    // and keys without a gateway are all refused, each named.
    let bad = format!(
        "{EXAMPLE}awsAccessKeys:\n  AKIASERVICE00000001: scheduler\n  AKIAGHOST0000000001: ghost\n  short: alice\n"
    );
    let e = Tenancy::parse(&bad).expect_err("invalid").0.join("\n");
    for says in [
        "awsAccessKeys.AKIASERVICE00000001: \"scheduler\" is not an admin, reader or team user",
        "awsAccessKeys.AKIAGHOST0000000001: \"ghost\"",
        "awsAccessKeys.short: an access key id is 16 to 128",
        "name the gateway's principal in services.gateway",
    ] {
        assert!(e.contains(says), "{says:?} not in {e}");
    }
}

#[test]
fn teams_act_on_their_own_shares_only() {
    let t = tenancy();
    let alice = t.caller("alice").expect("declared");
    assert!(authorize(
        &alice,
        Action::Submit {
            queue: "training",
            share: "QS1"
        }
    )
    .is_ok());
    assert!(authorize(
        &alice,
        Action::ChangeJob {
            queue: "training",
            share: "QS1"
        }
    )
    .is_ok());
    let denied = authorize(
        &alice,
        Action::Submit {
            queue: "training",
            share: "QS2",
        },
    )
    .expect_err("QS2 is speech's");
    assert_eq!(
        denied.0,
        "principal \"alice\" (team vision) may not submit jobs to share training/QS2"
    );
    assert!(authorize(&alice, Action::ReadQueue { queue: "training" }).is_ok());
    assert!(authorize(&alice, Action::ReadQueue { queue: "research" }).is_err());
    assert!(authorize(&alice, Action::ChangeConfig { queue: "training" }).is_err());
    let bob = t.caller("bob").expect("declared");
    assert!(authorize(
        &bob,
        Action::Submit {
            queue: "research",
            share: "anything"
        }
    )
    .is_ok());
    assert!(authorize(
        &bob,
        Action::ReadJob {
            queue: "training",
            share: "QS1"
        }
    )
    .is_err());
}

#[test]
fn admins_readers_and_services() {
    let t = tenancy();
    let admin = t.caller("platform").expect("declared");
    assert!(authorize(&admin, Action::ChangeConfig { queue: "x" }).is_ok());
    assert!(authorize(
        &admin,
        Action::ChangeJob {
            queue: "x",
            share: "y"
        }
    )
    .is_ok());
    let reader = t.caller("dashboard").expect("declared");
    assert!(authorize(
        &reader,
        Action::ReadJob {
            queue: "x",
            share: "y"
        }
    )
    .is_ok());
    assert!(authorize(
        &reader,
        Action::Submit {
            queue: "x",
            share: "y"
        }
    )
    .is_err());
    assert!(authorize(&reader, Action::ChangeConfig { queue: "x" }).is_err());
    for service in ["admission", "scheduler", "node-1", "ckpt-node-1"] {
        let c = t.caller(service).expect("declared");
        assert!(authorize(
            &c,
            Action::ReadJob {
                queue: "training",
                share: "QS1"
            }
        )
        .is_err());
        assert!(authorize(
            &c,
            Action::Submit {
                queue: "training",
                share: "QS1"
            }
        )
        .is_err());
    }
    assert!(t.caller("mallory").is_none());
    assert!(t.may_register("node-1", "node-1").is_ok());
    assert!(t.may_register("node-1", "gpu-1").is_err());
    assert!(t.may_register("gpu-pool", "gpu-2").is_ok());
    assert!(t.may_register("alice", "node-1").is_err());
    // The checkpoint node an executor names is one of its own.
    assert!(t.may_use_checkpoint_node("node-1", "node-1").is_ok());
    assert!(t.may_use_checkpoint_node("gpu-pool", "gpu-pool").is_ok());
    assert!(t.may_use_checkpoint_node("gpu-pool", "gpu-1").is_err());
    assert!(
        t.may_use_checkpoint_node("node-1", "gpu-pool").is_err(),
        "node-1 cannot have gpu-pool's commits count for its attempts"
    );
    let unknown = Caller {
        principal: "mallory".into(),
        ..Caller::default()
    };
    assert!(authorize(&unknown, Action::ReadQueue { queue: "training" }).is_err());
}

#[test]
fn every_problem_is_named() {
    let bad = "
teams:
  vision:
    shares: [training, 'a.b/QS1', training/*]
    users: [alice, 'x y']
  empty: {shares: [], users: []}
admins: [alice]
services:
  executors:
    n1: {executors: [node-1]}
    n2: {executors: [node-1]}
";
    let err = Tenancy::parse(bad).expect_err("invalid");
    let text = err.to_string();
    for needle in [
        "teams.vision.shares[0]: \"training\" must be queue/share or queue/*",
        "teams.vision.shares[1]",
        "teams.vision.users[1]: principal",
        "teams.empty.shares: a team owns at least one share",
        "teams.empty.users: a team has at least one user",
        "admins[0]: principal \"alice\" is already declared at teams.vision.users[0]",
        "services.admission: name at least one admission principal",
        "services.scheduler: name at least one scheduler principal",
        "executor \"node-1\" already belongs to \"n1\"",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert!(!text.contains("shares[2]"), "queue/* is valid:\n{text}");
    let unknown = Tenancy::parse("teems: {}").expect_err("unknown field");
    assert!(unknown.to_string().contains("teems"), "{unknown}");
}

#[test]
fn a_read_of_a_share_needs_the_share_and_of_a_queue_a_share_in_it() {
    let t = tenancy();
    let alice = t.caller("alice").expect("declared");
    assert!(authorize_read(&alice, "training", Some("QS1")).is_ok());
    assert!(authorize_read(&alice, "training", Some("QS2")).is_err());
    assert!(authorize_read(&alice, "training", None).is_ok());
    assert!(authorize_read(&alice, "elsewhere", None).is_err());
}

#[test]
fn nkeys_must_be_public_user_keys_of_declared_principals_each_held_once() {
    let a = nkeys::KeyPair::new_user();
    let b = nkeys::KeyPair::new_user().public_key();
    let seed = a.seed().expect("seed");
    let account = nkeys::KeyPair::new_account().public_key();
    let text = format!(
        "{EXAMPLE}nkeys:\n  alice: [{a}, {b}]\n  bob: [{seed}]\n  carol: [{account}]\n  dashboard: [{b}]\n  ghost: [{a2}]\n  platform: []\n",
        a = a.public_key(),
        a2 = nkeys::KeyPair::new_user().public_key(),
    );
    let e = Tenancy::parse(&text).expect_err("invalid");
    let all = e.0.join("\n");
    assert!(
        all.contains("nkeys.bob[0]: \"SU"),
        "a seed is named, cut short: {all}"
    );
    assert!(
        !all.contains(&seed),
        "the seed is never echoed whole: {all}"
    );
    assert!(all.contains("nkeys.carol[0]"), "an account key: {all}");
    assert!(
        all.contains("nkeys.dashboard[0]: the key is also \"alice\"'s"),
        "{all}"
    );
    assert!(
        all.contains("nkeys.ghost: \"ghost\" is not a principal"),
        "{all}"
    );
    assert!(all.contains("nkeys.platform: list 1 to 4 keys"), "{all}");
    assert_eq!(e.0.len(), 5, "{all}");
}

#[test]
fn a_revision_keeps_the_keys_it_does_not_name_and_drops_those_of_the_gone() {
    let key = |_: u8| nkeys::KeyPair::new_user().public_key();
    let mut before = tenancy();
    before.nkeys.insert("alice".into(), vec![key(1)]);
    before.nkeys.insert("bob".into(), vec![key(2)]);
    let mut next = tenancy();
    next.teams.get_mut("speech").expect("speech").users = vec!["carol".into()];
    let rotated = vec![key(3), key(4)];
    next.nkeys.insert("alice".into(), rotated.clone());
    next.keep_keys_from(&before);
    assert_eq!(
        next.nkeys["alice"], rotated,
        "named keys are taken as given"
    );
    assert!(
        !next.nkeys.contains_key("bob"),
        "bob left: his key goes with him"
    );
    assert!(next.missing_keys().contains(&"carol".to_string()));
    assert!(!next.missing_keys().contains(&"alice".to_string()));
}

#[test]
fn a_principal_with_two_keys_is_two_users_of_the_same_rights_and_the_sync_reads_only_the_tenancy() {
    let mut t = Tenancy::parse(&format!("{EXAMPLE}  natsAuth: [nats-auth]\n")).expect("valid");
    assert_eq!(t.role("nats-auth"), Some(Role::NatsAuth));
    let mut keys = std::collections::BTreeMap::new();
    for p in t.principals() {
        keys.insert(p, nkeys::KeyPair::new_user().public_key());
    }
    let second = nkeys::KeyPair::new_user().public_key();
    t.nkeys = crate::nats::public_keys(&t, &keys);
    t.nkeys
        .get_mut("alice")
        .expect("alice")
        .push(second.clone());
    let conf = crate::nats::authorization(&t, &t.nkeys).expect("config");
    assert_eq!(conf.matches("# alice (team vision)").count(), 2, "{conf}");
    assert!(conf.contains(&second) && conf.contains(&keys["alice"]));
    let sync = crate::nats::permissions(&t, "nats-auth").expect("declared");
    assert!(
        sync.publish.iter().all(|s| s.contains("KV_qm_tenancy")),
        "{:?}",
        sync.publish
    );
    assert_eq!(sync.subscribe, vec!["_INBOX_nats-auth.>".to_string()]);
    // Without a key for someone, no configuration is made (it would lock
    // them out).
    t.nkeys.remove("bob");
    let e = crate::nats::authorization(&t, &t.nkeys).expect_err("bob has no key");
    assert!(e.contains("bob"), "{e}");
}

#[test]
fn responders_may_reply_into_their_requesters_inboxes_without_the_servers_reply_tracking() {
    // A reload of the server's authorization forgets which replies each
    // connection may send; the services' replies must not depend on it.
    let t = tenancy();
    let publish = |p: &str| crate::nats::permissions(&t, p).expect("declared").publish;
    let admission = publish("admission");
    for requester in ["alice", "platform", "dashboard", "node-1"] {
        assert!(
            admission.contains(&format!("_INBOX_{requester}.>")),
            "{requester}: {admission:?}"
        );
    }
    // Not into the inboxes of the services it asks itself (their replies
    // could be forged), nor of the other replicas.
    for service in ["scheduler", "admission"] {
        assert!(
            !admission.contains(&format!("_INBOX_{service}.>")),
            "{service}: {admission:?}"
        );
    }
    assert!(
        !admission
            .iter()
            .any(|s| s.contains('*') && s.starts_with("_INBOX")),
        "a wildcard inside a token grants nothing: {admission:?}"
    );
    let scheduler = publish("scheduler");
    for requester in ["admission", "scheduler", "node-1", "gpu-pool"] {
        assert!(
            scheduler.contains(&format!("_INBOX_{requester}.>")),
            "{requester}: {scheduler:?}"
        );
    }
    assert!(
        !scheduler.iter().any(|s| s == "_INBOX_alice.>"),
        "{scheduler:?}"
    );
    assert!(publish("node-1").contains(&"_INBOX_admission.>".to_string()));
    assert!(publish("ckpt-node-1").contains(&"_INBOX_node-1.>".to_string()));
    for person in ["alice", "platform", "dashboard"] {
        assert!(
            !publish(person).iter().any(|s| s.starts_with("_INBOX_")),
            "{person}"
        );
    }
}

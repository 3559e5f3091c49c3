use std::path::PathBuf;

use super::*;

/// A crate's sources in a fresh folder, removed when dropped.
struct Tree(PathBuf);

impl std::ops::Deref for Tree {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A crate's sources written to a fresh folder: (relative path, text).
fn tree(name: &str, files: &[(&str, &str)]) -> Tree {
    let dir = std::env::temp_dir().join(format!("qm-arch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
    }
    Tree(dir)
}

const LAYERS: Layers = Layers {
    layers: &[
        ("base", &["ids"]),
        ("state", &["cluster"]),
        ("pass", &["pass"]),
    ],
};

#[test]
fn a_downward_crate_passes_and_an_upward_import_is_named_with_its_line() {
    let files = [
        ("lib.rs", "pub mod ids;\npub mod cluster;\npub mod pass;\npub use cluster::Cluster;\n"),
        ("ids.rs", "pub struct JobId;\n"),
        ("cluster.rs", "use crate::ids::JobId;\npub struct Cluster;\n"),
        ("pass.rs", "use crate::{ids::JobId, Cluster};\n// crate::nothing in a comment\nconst S: &str = \"crate::nothing\";\n"),
    ];
    let src = tree("down", &files);
    assert_eq!(check(&src, &LAYERS), vec![]);
    let mut up = files;
    up[2].1 = "use crate::ids::JobId;\n\nfn f() { crate::pass::go() }\npub struct Cluster;\n";
    let src = tree("up", &up);
    let v = check(&src, &LAYERS);
    assert!(
        v.contains(&Violation::Upward {
            file: "cluster.rs".into(),
            line: 3,
            from: "cluster".into(),
            from_layer: "state".into(),
            to: "pass".into(),
            to_layer: "pass".into(),
        }),
        "{v:?}"
    );
    assert!(
        v.contains(&Violation::Circle(
            vec!["cluster".into(), "pass".into()],
            vec!["cluster".into(), "pass".into(), "cluster".into()]
        )),
        "{v:?}"
    );
}

#[test]
fn helpers_a_parent_holds_and_takes_from_its_children_are_a_circle() {
    let src = tree(
        "parent",
        &[
            (
                "lib.rs",
                "pub mod pass;\npub mod extra;\npub const LIMIT: u32 = 1;\n",
            ),
            (
                "pass/mod.rs",
                "mod sweep;\npub(crate) fn helper() { sweep::run() }\n",
            ),
            (
                "pass/sweep.rs",
                "use super::*;\npub(crate) fn run() -> u32 { crate::LIMIT }\n",
            ),
            ("extra.rs", "\n"),
        ],
    );
    // Listed file by file, the parent and its child are two entries.
    let by_file = Layers {
        layers: &[("pass", &["pass", "pass::sweep"])],
    };
    let v = check(&src, &by_file);
    let shown: Vec<String> = v.iter().map(ToString::to_string).collect();
    assert!(
        shown.contains(
            &"import circle of 2 modules (pass, pass::sweep): pass -> pass::sweep -> pass"
                .to_string()
        ),
        "{shown:?}"
    );
    assert!(v.contains(&Violation::Unplaced("extra".into())), "{v:?}");
    // As one entry, a folder may call back and forth inside itself.
    let v = check(&src, &LAYERS);
    assert!(
        !v.iter().any(|x| matches!(x, Violation::Circle(..))),
        "{v:?}"
    );
    assert_eq!(
        ancestor_imports(&modules(&src)),
        2,
        "the parent and the root"
    );
    // A parent that only declares its children: no circle.
    let src = tree(
        "declares",
        &[
            ("lib.rs", "pub mod pass;\n"),
            ("pass/mod.rs", "mod sweep;\npub struct Pass;\n"),
            ("pass/sweep.rs", "use super::*;\nimpl Pass {}\n"),
        ],
    );
    assert_eq!(check(&src, &LAYERS), vec![]);
}

#[test]
fn test_modules_and_literals_are_not_imports_and_reexports_lead_to_their_origin() {
    let src = tree(
        "tests",
        &[
            ("lib.rs", "pub mod ids;\npub mod cluster;\npub mod pass;\n"),
            ("ids.rs", "#[cfg(test)]\nmod tests {\n    use crate::pass::x;\n}\n#[cfg(test)]\n#[allow(dead_code)]\npub(crate) mod more {\n    use crate::pass::y;\n}\n#[cfg(test)]\nmod in_a_file;\n"),
            ("ids/in_a_file.rs", "use crate::pass::z;\n"),
            ("cluster/mod.rs", "mod state;\npub use state::{Cluster as C};\n"),
            ("cluster/state.rs", "pub struct Cluster;\n"),
            ("pass.rs", "use crate::cluster::C;\nfn f() { let _ = r#\"x \"crate::ids\" y\"#; let _ = '\\''; let _ = \"crate::ids\"; }\nfn g<'a>(x: &'a str) -> &'a str { x }\nmacro_rules! m { () => { $crate::ids::JobId }; }\n"),
        ],
    );
    let modules = modules(&src);
    let pass = modules.iter().find(|m| m.path == "pass").expect("pass");
    assert_eq!(
        pass.imports.keys().collect::<Vec<_>>(),
        vec!["cluster::state"],
        "through the re-export; nothing from the strings, the character or a macro's $crate path"
    );
    let ids = modules.iter().find(|m| m.path == "ids").expect("ids");
    assert!(ids.imports.is_empty(), "{:?}", ids.imports);
    assert!(
        !modules.iter().any(|m| m.path == "ids::in_a_file"),
        "a test module in a file of its own is left out"
    );
}

#[test]
fn a_name_a_glob_brings_leads_to_its_origin_and_the_root_closes_no_circle() {
    let src = tree(
        "glob",
        &[
            (
                "lib.rs",
                "mod ids;\nmod pass;\npub use ids::*;\npub use pass::*;\n",
            ),
            (
                "ids.rs",
                "pub struct JobId;\nfn f() { let _ = crate::LIMIT; }\n",
            ),
            ("pass.rs", "pub const LIMIT: u32 = 1;\nuse crate::JobId;\n"),
        ],
    );
    let v = check(&src, &LAYERS);
    let shown: Vec<String> = v.iter().map(ToString::to_string).collect();
    assert!(
        shown.contains(&"ids.rs:2: `ids` (base) imports `pass` (pass), a higher layer".to_string()),
        "crate::LIMIT is pass's, through the root's glob: {shown:?}"
    );
    assert_eq!(
        shown.iter().filter(|s| s.contains("circle")).count(),
        1,
        "ids <-> pass only, none through the root: {shown:?}"
    );
}

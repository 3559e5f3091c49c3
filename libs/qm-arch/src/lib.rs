//! The workspace's architecture rule, checked by a `layers` test in each
//! crate that names its layers (`qm-core`, each service, `qm`): **imports
//! run down the layers, never up, and never in a circle.**
//!
//! A crate names its layers bottom first, each a list of module paths
//! ([`Layers`]); a file belongs to the layer of the longest path that holds
//! its module. [`check`] reads every `use crate::…`, `crate::…`,
//! `super::…` and child-module path of the crate's non-test source
//! (comments, literals and `#[cfg(test)] mod` blocks left out), resolves it
//! through `pub use` re-exports to the module that defines the item, and
//! reports:
//! - an import of a module in a higher layer;
//! - every import circle (each group found once) between the table's
//!   entries: an entry is a module with everything under it that no longer
//!   entry holds, since a type split over the files of its folder calls
//!   back and forth inside it. A parent `mod.rs` whose children import
//!   helpers it holds while it uses theirs is the usual circle where a
//!   crate's table lists its files one by one;
//! - a module no layer holds, so a new module is placed on purpose.
//!
//! The crate root (`lib.rs`, `main.rs`) is the crate's face: it may import
//! anything, and a path through it counts as a path to what it re-exports.
//! A method call is not an import, so a call up a layer through a method
//! is not seen. No dependency: only the standard library.

mod graph;
mod parse;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

pub use graph::circles;

/// A crate's layers, bottom first: each a name and the module paths in it
/// (`"pass"` holds `pass` and everything under it; a longer path given in
/// another layer wins for what it holds).
pub struct Layers<'a> {
    pub layers: &'a [(&'a str, &'a [&'a str])],
}

/// One module of the crate: its path (`a::b`; the root is `""`), file and
/// what it imports.
#[derive(Clone, Debug)]
pub struct Module {
    pub path: String,
    pub file: PathBuf,
    /// Imported module path, with the line of the first such import.
    pub imports: BTreeMap<String, usize>,
}

/// What breaks the rule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Violation {
    Upward {
        file: String,
        line: usize,
        from: String,
        from_layer: String,
        to: String,
        to_layer: String,
    },
    /// The modules that import each other, and one circle through them.
    Circle(Vec<String>, Vec<String>),
    Unplaced(String),
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Upward {
                file,
                line,
                from,
                from_layer,
                to,
                to_layer,
            } => write!(
                f,
                "{file}:{line}: `{from}` ({from_layer}) imports `{to}` ({to_layer}), a higher layer"
            ),
            Violation::Circle(members, c) => write!(
                f,
                "import circle of {} modules ({}): {}",
                members.len(),
                members.join(", "),
                c.join(" -> ")
            ),
            Violation::Unplaced(m) => write!(
                f,
                "module `{m}` is in no layer; add it to the crate's layers"
            ),
        }
    }
}

/// Every module of the crate whose sources are under `src`.
pub fn modules(src: &Path) -> Vec<Module> {
    let mut files = Vec::new();
    collect(src, &mut files);
    files.sort();
    // A crate with both is a library and a binary that uses it by name.
    if files.contains(&src.join("lib.rs")) {
        files.retain(|f| f != &src.join("main.rs"));
    }
    let read: Vec<(String, PathBuf, String, Vec<String>)> = files
        .into_iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(&f).ok()?;
            let path = parse::module_path(src, &f)?;
            let (text, tests) = parse::strip(&text);
            Some((path, f, text, tests))
        })
        .collect();
    // Test modules kept in files of their own are left out with them.
    let tests: BTreeSet<String> = read
        .iter()
        .flat_map(|(p, _, _, t)| {
            t.iter().map(move |name| {
                if p.is_empty() {
                    name.clone()
                } else {
                    format!("{p}::{name}")
                }
            })
        })
        .collect();
    let texts: Vec<(String, PathBuf, String)> = read
        .into_iter()
        .filter(|(p, _, _, _)| {
            !tests
                .iter()
                .any(|t| p == t || p.starts_with(&format!("{t}::")))
        })
        .map(|(p, f, t, _)| (p, f, t))
        .collect();
    let known: BTreeSet<String> = texts.iter().map(|(p, _, _)| p.clone()).collect();
    let exports: BTreeMap<String, parse::Exports> = texts
        .iter()
        .map(|(p, _, t)| (p.clone(), parse::exports(p, t, &known)))
        .collect();
    texts
        .iter()
        .map(|(path, file, text)| {
            let mut imports = BTreeMap::new();
            for (raw, line) in parse::paths(path, text, &known) {
                if let Some(target) = parse::resolve(&raw, &known, &exports) {
                    if &target != path {
                        imports.entry(target).or_insert(line);
                    }
                }
            }
            Module {
                path: path.clone(),
                file: file.clone(),
                imports,
            }
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

impl Layers<'_> {
    /// The layer (index, name) holding `module`, if any; the root is above
    /// every layer.
    pub fn of(&self, module: &str) -> Option<(usize, &str)> {
        if module.is_empty() {
            return Some((usize::MAX, "crate root"));
        }
        self.entry(module).map(|(i, name, _)| (i, name))
    }

    /// The entry holding `module`: its layer's index and name, and the path
    /// of the table that holds it (the longest).
    fn entry(&self, module: &str) -> Option<(usize, &str, &str)> {
        let mut best: Option<(usize, &str, &str)> = None;
        for (i, (name, paths)) in self.layers.iter().enumerate() {
            for p in *paths {
                let holds = module == *p || module.starts_with(&format!("{p}::"));
                if holds && best.is_none_or(|(_, _, b)| p.len() > b.len()) {
                    best = Some((i, name, p));
                }
            }
        }
        best
    }
}

/// Whether `ancestor` is `module`'s parent, or a parent of its parent (the
/// crate root, "", is every module's).
pub fn is_ancestor(ancestor: &str, module: &str) -> bool {
    if ancestor.is_empty() {
        return !module.is_empty();
    }
    module.starts_with(&format!("{ancestor}::"))
}

/// The modules merged into the units circles are looked for between: each
/// entry of the layer table with everything under it that no longer entry
/// holds (a type split over the files of its own folder calls back and
/// forth inside it); a module no entry holds is a unit of its own.
fn units(modules: &[Module], layers: &Layers) -> Vec<Module> {
    let unit_of = |m: &str| -> String {
        layers
            .entry(m)
            .map_or_else(|| m.to_string(), |(_, _, p)| p.to_string())
    };
    let mut merged: BTreeMap<String, Module> = BTreeMap::new();
    for m in modules {
        let unit = unit_of(&m.path);
        if m.path.is_empty() {
            // The root may import anything: it re-exports the crate's face.
            continue;
        }
        let entry = merged.entry(unit.clone()).or_insert_with(|| Module {
            path: unit.clone(),
            file: m.file.clone(),
            imports: BTreeMap::new(),
        });
        for (to, line) in &m.imports {
            let to = unit_of(to);
            if to != unit {
                entry.imports.entry(to).or_insert(*line);
            }
        }
    }
    merged.into_values().collect()
}

/// Every violation of the rule in the crate under `src`, sorted; file names
/// are given relative to `src`.
pub fn check(src: &Path, layers: &Layers) -> Vec<Violation> {
    check_modules(src, &modules(src), layers)
}

/// [`check`] over modules already read from `src`.
pub fn check_modules(src: &Path, modules: &[Module], layers: &Layers) -> Vec<Violation> {
    let mut out = Vec::new();
    let rel = |f: &Path| {
        f.strip_prefix(src)
            .unwrap_or(f)
            .to_string_lossy()
            .into_owned()
    };
    for m in modules {
        let placed = layers.of(&m.path);
        if placed.is_none() {
            out.push(Violation::Unplaced(m.path.clone()));
        }
        for (to, line) in &m.imports {
            if is_ancestor(to, &m.path) {
                // Acyclic, a child may use what its parent holds; helpers
                // a parent both holds and takes from its children are
                // found as circles.
                continue;
            }
            if let (Some((from_i, from_name)), Some((to_i, to_name))) = (placed, layers.of(to)) {
                if to_i > from_i {
                    out.push(Violation::Upward {
                        file: rel(&m.file),
                        line: *line,
                        from: m.path.clone(),
                        from_layer: from_name.to_string(),
                        to: to.clone(),
                        to_layer: to_name.to_string(),
                    });
                }
            }
        }
    }
    let units = units(modules, layers);
    out.extend(
        circles(&units)
            .into_iter()
            .map(|(members, c)| Violation::Circle(members, c)),
    );
    out.sort();
    out
}

/// Counts for a report: (upward imports, circles).
pub fn summary(violations: &[Violation]) -> (usize, usize) {
    let count = |f: fn(&Violation) -> bool| violations.iter().filter(|v| f(v)).count();
    (
        count(|v| matches!(v, Violation::Upward { .. })),
        count(|v| matches!(v, Violation::Circle(..))),
    )
}

/// Imports of a module's own ancestor (the crate root included): allowed
/// when they close no circle, counted for reports.
pub fn ancestor_imports(modules: &[Module]) -> usize {
    modules
        .iter()
        .map(|m| {
            m.imports
                .keys()
                .filter(|to| is_ancestor(to, &m.path))
                .count()
        })
        .sum()
}

/// Panics listing every violation, for a crate's layers test.
pub fn assert_layered(src: &Path, layers: &Layers) {
    let v = check(src, layers);
    if !v.is_empty() {
        let list: Vec<String> = v.iter().map(ToString::to_string).collect();
        panic!(
            "{} import(s) break the layers (docs/layout.md):\n{}",
            v.len(),
            list.join("\n")
        );
    }
}

/// A crate's layers test (`tests/layers.rs`): first shows the reader sees
/// the crate (each `(module, import)` of `expect` is read; a reader that
/// saw nothing would pass), then panics listing every violation.
pub fn assert_crate_layered(manifest_dir: &str, layers: &Layers, expect: &[(&str, &str)]) {
    let src = Path::new(manifest_dir).join("src");
    let all = modules(&src);
    for (module, import) in expect {
        let m = all
            .iter()
            .find(|m| m.path == *module)
            .unwrap_or_else(|| panic!("no module {module:?} in {}", src.display()));
        assert!(
            m.imports.contains_key(*import),
            "{module} imports {import}: {:?}",
            m.imports
        );
    }
    assert_layered(&src, layers);
}

#[cfg(test)]
mod tests;

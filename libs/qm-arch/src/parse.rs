//! Reading a crate's sources just enough to see its imports: module paths
//! from file names, source without comments, strings or test modules, use
//! trees expanded to absolute paths, and `pub use` re-exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `src/a/b.rs` and `src/a/b/mod.rs` -> `a::b`; `lib.rs` and `main.rs` -> `""`;
/// `src/bin/x.rs` and other roots of their own -> `None`.
pub fn module_path(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    match parts.as_slice() {
        [one] if one == "lib" || one == "main" => Some(String::new()),
        [rest @ .., last] if last == "mod" => Some(rest.join("::")),
        all => Some(all.join("::")),
    }
}

/// The source with comments, string and character literals blanked and
/// `#[cfg(test)] mod …` items removed; newlines are kept so line numbers
/// still hold.
pub fn strip(text: &str) -> String {
    let blank = blank_literals(text);
    remove_test_modules(&blank)
}

fn blank_literals(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let keep_lines = |s: &[char], out: &mut String| {
        for ch in s {
            out.push(if *ch == '\n' { '\n' } else { ' ' });
        }
    };
    let mut i = 0;
    while i < c.len() {
        let rest = &c[i..];
        if rest.starts_with(&['/', '/']) {
            let end = rest.iter().position(|&x| x == '\n').unwrap_or(rest.len());
            keep_lines(&rest[..end], &mut out);
            i += end;
        } else if rest.starts_with(&['/', '*']) {
            let (mut depth, mut j) = (0usize, 0usize);
            while j < rest.len() {
                if rest[j..].starts_with(&['/', '*']) {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(&['*', '/']) {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            keep_lines(&rest[..j.min(rest.len())], &mut out);
            i += j;
        } else if let Some(len) = raw_string(rest) {
            keep_lines(&rest[..len], &mut out);
            i += len;
        } else if rest[0] == '"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != '"' {
                j += if rest[j] == '\\' { 2 } else { 1 };
            }
            keep_lines(&rest[..(j + 1).min(rest.len())], &mut out);
            i += j + 1;
        } else if rest[0] == '\'' && char_literal(rest).is_some() {
            let len = char_literal(rest).unwrap_or(1);
            keep_lines(&rest[..len], &mut out);
            i += len;
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    out
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`, `br"…"`) at the
/// start of `s`, if there is one.
fn raw_string(s: &[char]) -> Option<usize> {
    let start = match s {
        ['r', ..] => 1,
        ['b', 'r', ..] => 2,
        _ => return None,
    };
    let hashes = s[start..].iter().take_while(|&&c| c == '#').count();
    if s.get(start + hashes) != Some(&'"') {
        return None;
    }
    let body = start + hashes + 1;
    let close: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat_n('#', hashes))
        .collect();
    (body..s.len())
        .find(|&j| s[j..].starts_with(&close))
        .map(|j| j + close.len())
}

/// The length of a character literal at the start of `s` (not a lifetime).
fn char_literal(s: &[char]) -> Option<usize> {
    if s.get(1) == Some(&'\\') {
        let end = s.iter().skip(2).position(|&c| c == '\'')?;
        return Some(end + 3);
    }
    (s.get(2) == Some(&'\'')).then_some(3)
}

fn remove_test_modules(text: &str) -> String {
    let mut out: Vec<char> = text.chars().collect();
    let pattern: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + pattern.len() <= out.len() {
        if out[i..].starts_with(&pattern) {
            let mut j = i + pattern.len();
            let word = |j: &mut usize, out: &[char]| {
                while *j < out.len() && out[*j].is_whitespace() {
                    *j += 1;
                }
                let s = *j;
                while *j < out.len() && (out[*j].is_alphanumeric() || out[*j] == '_') {
                    *j += 1;
                }
                out[s..*j].iter().collect::<String>()
            };
            let mut w = word(&mut j, &out);
            if w == "pub" {
                w = word(&mut j, &out);
            }
            if w == "mod" {
                let _name = word(&mut j, &out);
                while j < out.len() && out[j].is_whitespace() {
                    j += 1;
                }
                let end = if out.get(j) == Some(&'{') {
                    let mut depth = 0;
                    let mut k = j;
                    while k < out.len() {
                        match out[k] {
                            '{' => depth += 1,
                            '}' => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        k += 1;
                    }
                    k + 1
                } else {
                    j + 1
                };
                for ch in out.iter_mut().take(end.min(text.len())).skip(i) {
                    if *ch != '\n' {
                        *ch = ' ';
                    }
                }
                i = end;
                continue;
            }
        }
        i += 1;
    }
    out.into_iter().collect()
}

/// A use tree expanded: each leaf's path (segments as written) and whether
/// it is a glob.
fn expand(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = split_path(&tree[..open]);
        let close = tree.rfind('}').unwrap_or(tree.len());
        let inner = &tree[open + 1..close];
        let mut base = prefix.to_vec();
        base.extend(head);
        let mut depth = 0;
        let mut start = 0;
        for (k, ch) in inner.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&inner[start..k], &base, out);
                    start = k + 1;
                }
                _ => {}
            }
        }
        expand(&inner[start..], &base, out);
    } else if !tree.is_empty() {
        let plain = tree.split(" as ").next().unwrap_or(tree);
        let mut path = prefix.to_vec();
        path.extend(split_path(plain));
        out.push(path);
    }
}

fn split_path(s: &str) -> Vec<String> {
    s.split("::")
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// A path as written in `module` -> absolute segments under the crate, or
/// `None` for another crate's.
fn absolute(module: &str, path: &[String], known: &BTreeSet<String>) -> Option<Vec<String>> {
    let here: Vec<String> = split_path(module);
    let first = path.first()?;
    let mut abs = match first.as_str() {
        "crate" => Vec::new(),
        "self" => here.clone(),
        "super" => {
            let mut up = here.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                up.pop();
                rest = &rest[1..];
            }
            up.extend(rest.iter().cloned());
            return Some(up);
        }
        name => {
            // A child module named without `self::` (2018 paths).
            let mut child = here.clone();
            child.push(name.to_string());
            if known.contains(&child.join("::")) {
                here.clone()
            } else {
                return None;
            }
        }
    };
    let skip = usize::from(matches!(first.as_str(), "crate" | "self"));
    abs.extend(path.iter().skip(skip).cloned());
    Some(abs)
}

/// Every path of the crate that `text` (module `module`) names, with its
/// line: use declarations (expanded) and paths written inline.
pub fn paths(module: &str, text: &str, known: &BTreeSet<String>) -> Vec<(Vec<String>, usize)> {
    let mut out = Vec::new();
    let line_of = |pos: usize| text[..pos].matches('\n').count() + 1;
    let mut in_use = vec![false; text.len()];
    for (pos, tree) in use_declarations(text) {
        let mut leaves = Vec::new();
        expand(&tree.0, &[], &mut leaves);
        for leaf in leaves {
            let leaf: Vec<String> = leaf.into_iter().filter(|s| s != "*").collect();
            if let Some(abs) = absolute(module, &leaf, known) {
                out.push((abs, line_of(pos)));
            }
        }
        for flag in in_use.iter_mut().skip(pos).take(tree.1) {
            *flag = true;
        }
    }
    let children: Vec<String> = known
        .iter()
        .filter_map(|k| {
            let rest = if module.is_empty() {
                k.as_str()
            } else {
                k.strip_prefix(module)?.strip_prefix("::")?
            };
            (!rest.is_empty() && !rest.contains("::")).then(|| format!("{rest}::"))
        })
        .collect();
    let starts = ["crate::".to_string(), "super::".to_string()];
    for start in starts.iter().chain(&children) {
        for (pos, _) in text.match_indices(start.as_str()) {
            let before = text[..pos].chars().next_back();
            if in_use[pos] || before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let tail: String = text[pos..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let segs = split_path(&tail);
            if let Some(abs) = absolute(module, &segs, known) {
                out.push((abs, line_of(pos)));
            }
        }
    }
    out
}

/// `use …;` declarations (any visibility): position, and (tree, length).
fn use_declarations(text: &str) -> Vec<(usize, (String, usize))> {
    let mut out = Vec::new();
    for (pos, _) in text.match_indices("use ") {
        let before = text[..pos].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = text[pos..].find(';') else {
            continue;
        };
        let tree = text[pos + 4..pos + end].trim().to_string();
        if tree.starts_with('{') || tree.chars().next().is_some_and(char::is_alphabetic) {
            out.push((pos, (tree, end)));
        }
    }
    out
}

/// The names `module` re-exports (`pub use`, `pub(crate) use`), each with
/// the absolute path it stands for; a glob re-export is kept under `*`.
pub fn reexports(module: &str, text: &str, known: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (pos, (tree, _)) in use_declarations(text) {
        let head = text[..pos].trim_end();
        if !(head.ends_with("pub") || head.ends_with(')')) {
            continue;
        }
        let mut leaves = Vec::new();
        expand_named(&tree, &[], &mut leaves);
        for (path, name) in leaves {
            if let Some(abs) = absolute(module, &path, known) {
                out.insert(name, abs.join("::"));
            }
        }
    }
    out
}

/// As `expand`, keeping the name each leaf is known by (`as` or its last
/// segment; `*` for a glob).
fn expand_named(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let mut plain = Vec::new();
    expand(tree, prefix, &mut plain);
    let renames: BTreeMap<String, String> = tree
        .split([',', '{', '}'])
        .filter_map(|part| {
            let (orig, alias) = part.split_once(" as ")?;
            Some((split_path(orig).last()?.clone(), alias.trim().to_string()))
        })
        .collect();
    for path in plain {
        let Some(last) = path.last().cloned() else {
            continue;
        };
        let name = renames.get(&last).cloned().unwrap_or(last.clone());
        let path = if last == "*" {
            path[..path.len() - 1].to_vec()
        } else {
            path
        };
        out.push((path, name));
    }
}

/// The module a path leads to: its longest known prefix, followed through
/// re-exports of the item it names.
pub fn resolve(
    path: &[String],
    known: &BTreeSet<String>,
    reexports: &BTreeMap<String, BTreeMap<String, String>>,
) -> Option<String> {
    let mut path = path.to_vec();
    for _ in 0..8 {
        let cut = (0..=path.len())
            .rev()
            .find(|&n| known.contains(&path[..n].join("::")))?;
        let module = path[..cut].join("::");
        let Some(item) = path.get(cut) else {
            return Some(module);
        };
        match reexports.get(&module).and_then(|t| t.get(item)) {
            Some(origin) => {
                let mut next = split_path(origin);
                next.extend(path[cut + 1..].iter().cloned());
                path = next;
            }
            None => return Some(module),
        }
    }
    None
}

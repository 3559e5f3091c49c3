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
/// test modules removed (newlines are kept so line numbers still hold),
/// and the names of the test modules it declares.
pub fn strip(text: &str) -> (String, Vec<String>) {
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
        // The escaped character is at 2; the closing quote comes after it.
        let end = s.iter().skip(3).position(|&c| c == '\'')?;
        return Some(end + 4);
    }
    (s.get(2) == Some(&'\'')).then_some(3)
}

/// Skips whitespace from `j`.
fn skip_space(c: &[char], j: &mut usize) {
    while *j < c.len() && c[*j].is_whitespace() {
        *j += 1;
    }
}

/// The identifier at `j` (after whitespace), moving past it.
fn word(c: &[char], j: &mut usize) -> String {
    skip_space(c, j);
    let start = *j;
    while *j < c.len() && (c[*j].is_alphanumeric() || c[*j] == '_') {
        *j += 1;
    }
    c[start..*j].iter().collect()
}

/// The index just past the bracket group opening at `j` (`{`, `(` or `[`).
fn past_group(c: &[char], j: usize) -> usize {
    let (open, close) = match c.get(j) {
        Some('{') => ('{', '}'),
        Some('(') => ('(', ')'),
        Some('[') => ('[', ']'),
        _ => return j,
    };
    let mut depth = 0;
    for (k, &ch) in c.iter().enumerate().skip(j) {
        if ch == open {
            depth += 1;
        } else if ch == close {
            depth -= 1;
            if depth == 0 {
                return k + 1;
            }
        }
    }
    c.len()
}

/// If a `mod` item compiled only for tests starts at `i` (`#[cfg(test)]`
/// or `#[cfg(all(test, …))]`, other attributes and a visibility may
/// follow), its name and the index just past it.
fn test_module_at(c: &[char], i: usize) -> Option<(String, usize)> {
    let rest: String = c[i..c.len().min(i + 20)].iter().collect();
    if !(rest.starts_with("#[cfg(test)]") || rest.starts_with("#[cfg(all(test")) {
        return None;
    }
    let mut j = past_group(c, i + 1);
    loop {
        skip_space(c, &mut j);
        if c.get(j) == Some(&'#') {
            j = past_group(c, j + 1);
        } else {
            break;
        }
    }
    let mut w = word(c, &mut j);
    if w == "pub" {
        skip_space(c, &mut j);
        j = past_group(c, j);
        w = word(c, &mut j);
    }
    if w != "mod" {
        return None;
    }
    let name = word(c, &mut j);
    skip_space(c, &mut j);
    let end = if c.get(j) == Some(&'{') {
        past_group(c, j)
    } else {
        j + 1
    };
    Some((name, end.min(c.len())))
}

/// The text without its test modules (blanked, newlines kept), and the
/// names of the test modules declared here (`#[cfg(test)] mod tests;`),
/// whose files are left out too.
fn remove_test_modules(text: &str) -> (String, Vec<String>) {
    let mut out: Vec<char> = text.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < out.len() {
        if out[i] == '#' {
            if let Some((name, end)) = test_module_at(&out, i) {
                for ch in &mut out[i..end] {
                    if *ch != '\n' {
                        *ch = ' ';
                    }
                }
                names.push(name);
                i = end;
                continue;
            }
        }
        i += 1;
    }
    (out.into_iter().collect(), names)
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
    let starts = [
        "crate::".to_string(),
        "super::".to_string(),
        "self::".to_string(),
    ];
    for start in starts.iter().chain(&children) {
        for (pos, _) in text.match_indices(start.as_str()) {
            let before = text[..pos].chars().next_back();
            // `$crate::…` is a macro's path, resolved where the macro expands.
            if in_use[pos]
                || before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$')
            {
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

/// What a module makes nameable: the items it defines, the names it
/// re-exports (`pub use`, `pub(crate) use`) with the absolute path each
/// stands for, and the modules whose items it re-exports by glob.
#[derive(Debug, Default)]
pub struct Exports {
    defines: BTreeSet<String>,
    named: BTreeMap<String, String>,
    globs: Vec<String>,
}

/// The items `text` defines at any depth (fn, struct, enum, const, static,
/// type, trait, union, mod, macro): enough to tell a defined name from one
/// a glob brings.
fn definitions(text: &str) -> BTreeSet<String> {
    const KINDS: [&str; 10] = [
        "fn",
        "struct",
        "enum",
        "const",
        "static",
        "type",
        "trait",
        "union",
        "mod",
        "macro_rules",
    ];
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| KINDS.contains(&w[0]))
        .map(|w| w[1].to_string())
        .collect()
}

/// What `module` (its stripped `text`) makes nameable.
pub fn exports(module: &str, text: &str, known: &BTreeSet<String>) -> Exports {
    let mut out = Exports {
        defines: definitions(text),
        ..Exports::default()
    };
    for (pos, (tree, _)) in use_declarations(text) {
        let head = text[..pos].trim_end();
        if !(head.ends_with("pub") || head.ends_with(')')) {
            continue;
        }
        let mut leaves = Vec::new();
        expand_named(&tree, &[], &mut leaves);
        for (path, name) in leaves {
            if let Some(abs) = absolute(module, &path, known) {
                if name == "*" {
                    out.globs.push(abs.join("::"));
                } else {
                    out.named.insert(name, abs.join("::"));
                }
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
/// the re-exports (named, then by glob) of the item it names.
pub fn resolve(
    path: &[String],
    known: &BTreeSet<String>,
    exports: &BTreeMap<String, Exports>,
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
        let Some(here) = exports.get(&module) else {
            return Some(module);
        };
        let origin = if let Some(origin) = here.named.get(item) {
            origin.clone()
        } else if here.defines.contains(item) {
            return Some(module);
        } else {
            let from_glob = here.globs.iter().find(|g| {
                exports
                    .get(*g)
                    .is_some_and(|e| e.defines.contains(item) || e.named.contains_key(item))
            });
            match from_glob {
                Some(g) => format!("{g}::{item}"),
                None => return Some(module),
            }
        };
        let mut next = split_path(&origin);
        next.extend(path[cut + 1..].iter().cloned());
        path = next;
    }
    None
}

//! Import circles: the strongly connected parts of the module graph
//! (Tarjan's algorithm), each given as one circle through its modules.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::Module;

struct Tarjan<'g> {
    edges: &'g BTreeMap<&'g str, Vec<&'g str>>,
    index: BTreeMap<&'g str, usize>,
    low: BTreeMap<&'g str, usize>,
    stack: Vec<&'g str>,
    on_stack: BTreeSet<&'g str>,
    parts: Vec<Vec<&'g str>>,
}

impl<'g> Tarjan<'g> {
    fn visit(&mut self, v: &'g str) {
        let i = self.index.len();
        self.index.insert(v, i);
        self.low.insert(v, i);
        self.stack.push(v);
        self.on_stack.insert(v);
        for &w in self.edges.get(v).map(Vec::as_slice).unwrap_or(&[]) {
            if !self.index.contains_key(w) {
                self.visit(w);
                let lw = self.low[w];
                let lv = self.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if self.on_stack.contains(w) {
                let iw = self.index[w];
                let lv = self.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if self.low[v] == self.index[v] {
            let mut part = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack.remove(w);
                part.push(w);
                if w == v {
                    break;
                }
            }
            if part.len() > 1 {
                self.parts.push(part);
            }
        }
    }
}

/// Each group of modules that import each other: its members by name, and
/// one circle through them from the first member back to it.
pub fn circles(modules: &[Module]) -> Vec<(Vec<String>, Vec<String>)> {
    let edges: BTreeMap<&str, Vec<&str>> = modules
        .iter()
        .map(|m| {
            (
                m.path.as_str(),
                m.imports.keys().map(String::as_str).collect(),
            )
        })
        .collect();
    let mut t = Tarjan {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        parts: Vec::new(),
    };
    for &v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    let mut out: Vec<(Vec<String>, Vec<String>)> = t
        .parts
        .iter()
        .map(|part| {
            let members: BTreeSet<&str> = part.iter().copied().collect();
            let start = *members.iter().next().expect("a part has members");
            let names = members.iter().map(|m| m.to_string()).collect();
            (names, cycle_through(start, &members, &edges))
        })
        .collect();
    out.sort();
    out
}

/// The shortest circle from `start` back to it inside `members`.
fn cycle_through(
    start: &str,
    members: &BTreeSet<&str>,
    edges: &BTreeMap<&str, Vec<&str>>,
) -> Vec<String> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in edges.get(v).map(Vec::as_slice).unwrap_or(&[]) {
            if !members.contains(w) {
                continue;
            }
            if w == start {
                let mut back = vec![v];
                while let Some(&prev) = came_from.get(back[back.len() - 1]) {
                    back.push(prev);
                }
                let mut path: Vec<String> = back.iter().rev().map(|m| m.to_string()).collect();
                if path.first().map(String::as_str) != Some(start) {
                    path.insert(0, start.to_string());
                }
                path.push(start.to_string());
                return path;
            }
            if !came_from.contains_key(w) && w != start {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    members.iter().map(|m| m.to_string()).collect()
}

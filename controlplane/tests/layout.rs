//! The API server's modules depend on each other in one direction: no module reaches,
//! through the `crate::` paths of its code (tests and comments aside), back to itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file below `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without its comments and its test module.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// The modules `code` names as `crate::<module>`, including inside `use crate::{...}`.
fn uses(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or_default();
            out.extend(group.split(',').map(|p| ident(p.trim())).filter(|m| !m.is_empty()));
        } else {
            out.insert(ident(rest));
        }
    }
    out.remove("");
    out
}

#[test]
fn no_module_depends_on_itself_through_others() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let module = rel.iter().next().unwrap().to_string_lossy().trim_end_matches(".rs").to_string();
        if module == "lib" {
            continue;
        }
        let deps = uses(&code(&std::fs::read_to_string(f).unwrap()));
        graph.entry(module.clone()).or_default().extend(deps.into_iter().filter(|d| *d != module));
    }
    assert!(graph.len() > 10, "the modules were not found: {graph:?}");
    // A depth-first walk from each module; reaching a module on the current path is a cycle.
    fn walk(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            return Some(path[at..].iter().cloned().chain([m.to_string()]).collect());
        }
        if !done.insert(m.to_string()) {
            return None;
        }
        path.push(m.to_string());
        for d in graph.get(m).into_iter().flatten().filter(|d| graph.contains_key(*d)) {
            if let Some(cycle) = walk(d, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        if let Some(cycle) = walk(m, &graph, &mut Vec::new(), &mut done) {
            panic!("an import cycle between modules: {}", cycle.join(" -> "));
        }
    }
}

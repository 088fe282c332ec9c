//! A check, run with the unit tests, that no two files of this crate (or
//! of the `dlock` tool's) depend on each other, directly or around a loop:
//! every module can be read after the ones it uses.
//!
//! A file depends on a module when it names it in a path: `crate::a::b`,
//! `super::a`, `self::a`, or a child module's name (`math::quorum`), in a
//! `use` or in code, `pub use` re-exports included. A path names the
//! deepest module file it reaches (`crate::lease::Budget` is `lease`). The
//! crate root's `pub use` lines are left out: they are the crate's public
//! face, which the modules behind it may name (`crate::Result`). A folder's
//! files name their siblings directly (`super::budget::Budget`), not
//! through the folder's `mod.rs`, which uses them. Comments, strings and
//! the `#[cfg(test)]` module at the end of a file are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The module path of each file under `dir` (a crate's root folder), ""
/// for the root file; `skip`: a folder that is another crate.
fn modules(dir: &Path, root_file: &str, skip: Option<&str>) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, prefix)) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let join = |n: &str| match prefix.as_str() {
                "" => n.to_string(),
                _ => format!("{prefix}::{n}"),
            };
            if p.is_dir() {
                if prefix.is_empty() && Some(name) == skip {
                    continue;
                }
                stack.push((p.clone(), join(name)));
            } else if let Some(stem) = name.strip_suffix(".rs") {
                let module = match stem {
                    "mod" => prefix.clone(),
                    s if prefix.is_empty() && s == root_file => String::new(),
                    s => join(s),
                };
                out.insert(module, p);
            }
        }
    }
    out
}

/// The source without comments, string and char literals, and the test
/// module at the end.
fn code(src: &str) -> String {
    let src = match src.find("#[cfg(test)]\nmod tests") {
        Some(i) => &src[..i],
        None => src,
    };
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1).copied()) {
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            (b'"', _) => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            // A char literal ('x', '\n', '"'); a lifetime ('a) is kept.
            (b'\'', Some(b'\\')) => {
                i += 3;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            }
            (b'\'', Some(_)) if b.get(i + 2) == Some(&b'\'') => i += 3,
            (c, _) => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Every path in `code` that starts with `crate`, `super`, `self` or one of
/// `children`, as its segments (a `{...}` group gives one path per member).
fn paths(code: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts_word = is_ident(b[i]) && (i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == b':'));
        if !starts_word {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < b.len() && is_ident(b[end]) {
            end += 1;
        }
        let word = &code[i..end];
        let first = matches!(word, "crate" | "super" | "self") || children.contains(word);
        if first && code[end..].starts_with("::") {
            let (found, next) = path_from(code, i, Vec::new());
            out.extend(found);
            i = next;
        } else {
            i = end;
        }
    }
    out
}

/// The path(s) starting at `i`, after the segments in `prefix`; and where
/// they end.
fn path_from(code: &str, mut i: usize, mut prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let b = code.as_bytes();
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < b.len() && b[i] == b'{' {
            // A group: each member continues the prefix.
            let mut out = Vec::new();
            i += 1;
            loop {
                while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    return (out, i + 1);
                }
                let (found, next) = path_from(code, i, prefix.clone());
                out.extend(found);
                i = next.max(i + 1);
            }
        }
        let start = i;
        while i < b.len() && is_ident(b[i]) {
            i += 1;
        }
        if start == i {
            return (vec![prefix], i);
        }
        prefix.push(code[start..i].to_string());
        if !code[i..].starts_with("::") {
            return (vec![prefix], i);
        }
        i += 2;
    }
}

/// The module a path names, from the module `at`: the deepest module file
/// it reaches.
fn resolve(at: &str, path: &[String], known: &BTreeMap<String, PathBuf>) -> Option<String> {
    let mut here: Vec<&str> = if at.is_empty() {
        Vec::new()
    } else {
        at.split("::").collect()
    };
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            here.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        here.pop()?;
        rest = &rest[1..];
    }
    let mut found = here.join("::");
    for seg in rest {
        here.push(seg);
        let candidate = here.join("::");
        if !known.contains_key(&candidate) {
            break;
        }
        found = candidate;
    }
    Some(found)
}

/// Which modules each module depends on.
fn graph(known: &BTreeMap<String, PathBuf>) -> BTreeMap<String, BTreeSet<String>> {
    let mut g = BTreeMap::new();
    for (module, file) in known {
        let src =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut src = code(&src);
        if module.is_empty() {
            src = src
                .lines()
                .filter(|l| !l.trim_start().starts_with("pub use"))
                .collect::<Vec<_>>()
                .join("\n");
        }
        let child_prefix = match module.as_str() {
            "" => String::new(),
            m => format!("{m}::"),
        };
        let children: BTreeSet<String> = known
            .keys()
            .filter_map(|k| k.strip_prefix(&child_prefix))
            .filter(|k| !k.is_empty() && !k.contains("::"))
            .map(str::to_string)
            .collect();
        let uses: BTreeSet<String> = paths(&src, &children)
            .iter()
            .filter_map(|p| {
                let p = match p[0].as_str() {
                    "crate" | "super" | "self" => p.clone(),
                    _ => [vec!["self".to_string()], p.clone()].concat(),
                };
                resolve(module, &p, known)
            })
            .filter(|m| m != module)
            .collect();
        g.insert(module.clone(), uses);
    }
    g
}

/// A loop in `g`, if any, as the modules around it.
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // 0: unseen, 1: on the current path, 2: done.
    let mut state: BTreeMap<&str, u8> = BTreeMap::new();
    fn visit<'a>(
        m: &'a str,
        g: &'a BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<&'a str, u8>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        state.insert(m, 1);
        path.push(m);
        for next in g.get(m).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = path.iter().position(|p| *p == next)?;
                    let mut cycle: Vec<String> =
                        path[from..].iter().map(|s| s.to_string()).collect();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(next, g, state, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(m, 2);
        None
    }
    for m in g.keys() {
        if state.get(m.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(m, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn show(cycle: &[String]) -> String {
    let name = |m: &String| {
        if m.is_empty() {
            "(root)".to_string()
        } else {
            m.clone()
        }
    };
    cycle.iter().map(name).collect::<Vec<_>>().join(" -> ")
}

#[test]
fn no_file_of_the_library_depends_on_itself_around_a_loop() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let known = modules(&src, "lib", Some("bin"));
    assert!(known.contains_key("lease::budget"), "{known:?}");
    let g = graph(&known);
    assert!(
        g["guard"].contains("watchdog"),
        "the check sees uses: {g:?}"
    );
    if let Some(c) = find_cycle(&g) {
        panic!("an import cycle in the library: {}", show(&c));
    }
}

#[test]
fn no_file_of_the_dlock_tool_depends_on_itself_around_a_loop() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/dlock");
    let known = modules(&dir, "main", None);
    assert!(known.contains_key("exec"), "{known:?}");
    if let Some(c) = find_cycle(&graph(&known)) {
        panic!("an import cycle in the dlock tool: {}", show(&c));
    }
}

#[test]
fn the_check_finds_paths_groups_and_loops() {
    let children: BTreeSet<String> = ["math".to_string()].into();
    let src = code(
        "use crate::lease::{self, budget::Budget, Renewal};\n\
         // crate::comment::Ignored\n\
         let s = \"crate::string\"; let c = '\"'; let x = math::quorum(1);\n\
         use super::{conn::Server, AsyncLease};",
    );
    let found: Vec<String> = paths(&src, &children)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        found,
        [
            "crate::lease::self",
            "crate::lease::budget::Budget",
            "crate::lease::Renewal",
            "math::quorum",
            "super::conn::Server",
            "super::AsyncLease",
        ]
    );
    let known: BTreeMap<String, PathBuf> = ["", "a", "a::b", "c"]
        .iter()
        .map(|m| (m.to_string(), PathBuf::new()))
        .collect();
    let p = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        resolve("a::b", &p("super::Thing"), &known).as_deref(),
        Some("a")
    );
    assert_eq!(
        resolve("c", &p("crate::a::b::Thing"), &known).as_deref(),
        Some("a::b")
    );
    assert_eq!(
        resolve("a", &p("self::b::f"), &known).as_deref(),
        Some("a::b")
    );
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("a".into(), ["b".to_string()].into());
    g.insert("b".into(), ["c".to_string()].into());
    g.insert("c".into(), BTreeSet::new());
    assert_eq!(find_cycle(&g), None);
    g.insert("c".into(), ["a".to_string()].into());
    assert_eq!(
        show(&find_cycle(&g).unwrap_or_default()),
        "a -> b -> c -> a"
    );
}

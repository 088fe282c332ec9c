//! The module layering, read from the sources (no server needed):
//! - neither `src/lock` nor `src/server` has an import cycle between its
//!   files: a lower file never calls a higher one (work a lower file finds
//!   for a higher one is a job, `server/jobs.rs`, not a call);
//! - `src/lock` never uses `crate::server` (the rules stay free of the
//!   module API);
//! - every source file of both is in the README's Layout and in
//!   `docs/architecture.md`, and the Layout names no file that is gone.
//!
//! The graph has one node per module of a directory: `foo.rs` is `foo`, and a
//! file declared with `#[path]` inside another (`queue_sets.rs` is
//! `queue::sets`) belongs to its parent's node, being part of that module.
//! An edge A -> B is any path in A that names B: `use super::b::..`, grouped
//! `use super::{b, c::d}`, `super::b::x` in code, `crate::lock::b`,
//! `self::b` / `b::x` for modules declared in the file, and names brought in
//! by `use super::b;`. `mod.rs` is the directory's root: its `mod`
//! declarations are not edges, and a name it re-exports (`pub use
//! error::Error`) resolves to the file that defines it. Code under
//! `#[cfg(test)]` (test modules, inline or in `*_tests.rs` files) makes no
//! edges: tests may reach across the layering (the cross-layer check still
//! covers them). Comments and string literals are skipped by the tokenizer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

// ---------------------------------------------------------------------------
// Tokens

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
    /// Number, string, char literal or lifetime: never part of a path.
    Lit,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Skips a quoted literal starting at `i` (the opening `"`), with escapes
/// unless `raw`, closing on `"` followed by `hashes` `#`s.
fn skip_quoted(s: &[char], mut i: usize, raw: bool, hashes: usize, line: &mut usize) -> usize {
    i += 1;
    while i < s.len() {
        match s[i] {
            '\\' if !raw => {
                if s.get(i + 1) == Some(&'\n') {
                    *line += 1;
                }
                i += 2;
                continue;
            }
            '\n' => *line += 1,
            '"' if (1..=hashes).all(|k| s.get(i + k) == Some(&'#')) => return i + 1 + hashes,
            _ => {}
        }
        i += 1;
    }
    i
}

fn tokenize(src: &str) -> Vec<Token> {
    let s: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let push = |out: &mut Vec<Token>, tok, line| out.push(Token { tok, line });
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if s[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' {
            let start = line;
            i = skip_quoted(&s, i, false, 0, &mut line);
            push(&mut out, Tok::Lit, start);
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                // Past the quote, the backslash and the escaped char.
                i += 3;
                while i < s.len() && s[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if s.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < s.len() && is_ident_char(s[i]) {
                    i += 1;
                }
            }
            push(&mut out, Tok::Lit, line);
        } else if c.is_ascii_digit() {
            while i < s.len() && is_ident_char(s[i]) {
                i += 1;
            }
            push(&mut out, Tok::Lit, line);
        } else if is_ident_start(c) {
            let start = i;
            while i < s.len() && is_ident_char(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            // String prefixes: b"", c"", r"", r#""#, br"", cr#""#; b'x'.
            let raw = word == "r" || word == "br" || word == "cr";
            let plain = word == "b" || word == "c";
            let mut hashes = 0;
            while raw && s.get(i + hashes) == Some(&'#') {
                hashes += 1;
            }
            if (raw || plain) && s.get(i + hashes) == Some(&'"') {
                let start = line;
                i = skip_quoted(&s, i + hashes, raw, hashes, &mut line);
                push(&mut out, Tok::Lit, start);
            } else if word == "r" && hashes == 1 && s.get(i + 1).is_some_and(|c| is_ident_start(*c))
            {
                // A raw identifier (r#type) is just an identifier.
                i += 1;
            } else {
                push(&mut out, Tok::Ident(word), line);
            }
        } else if c == ':' && next == Some(':') {
            push(&mut out, Tok::PathSep, line);
            i += 2;
        } else {
            push(&mut out, Tok::Punct(c), line);
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Paths in one file

/// A path found in a file, before resolution.
#[derive(Clone, Debug)]
struct RawPath {
    segs: Vec<String>,
    line: usize,
    /// The module (absolute, from the crate root) the path was written in.
    scope: Vec<String>,
    in_test: bool,
    /// For `use`: the name it binds (`as` or the last segment).
    binds: Option<String>,
    /// Written as `pub use` (a re-export).
    reexport: bool,
}

/// A `mod name;` declaration (the module's body is another file).
#[derive(Clone, Debug)]
struct ModDecl {
    name: String,
    path_attr: Option<String>,
    test: bool,
}

#[derive(Debug, Default)]
struct FileScan {
    paths: Vec<RawPath>,
    mods: Vec<ModDecl>,
    /// `#![cfg(test)]` at the top.
    test_file: bool,
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t.map(|t| &t.tok) {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

fn punct(t: Option<&Token>, c: char) -> bool {
    matches!(t.map(|t| &t.tok), Some(Tok::Punct(p)) if *p == c)
}

fn path_sep(t: Option<&Token>) -> bool {
    matches!(t.map(|t| &t.tok), Some(Tok::PathSep))
}

/// The index after the bracket group opening at `i`.
fn skip_group(toks: &[Token], i: usize) -> usize {
    let mut depth = 0i32;
    let mut j = i;
    while j < toks.len() {
        match toks[j].tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    j
}

/// An attribute at `i`, `#[...]` or (`inner`) `#![...]`: its end and its
/// text (tokens joined).
fn attribute(toks: &[Token], i: usize, inner: bool) -> Option<(usize, String)> {
    let open = if inner { i + 2 } else { i + 1 };
    if !punct(toks.get(i), '#')
        || (inner && !punct(toks.get(i + 1), '!'))
        || !punct(toks.get(open), '[')
    {
        return None;
    }
    let end = skip_group(toks, open);
    let text = toks[open + 1..end.saturating_sub(1).max(open + 1)]
        .iter()
        .map(|t| match &t.tok {
            Tok::Ident(s) => s.clone(),
            Tok::PathSep => "::".into(),
            Tok::Punct(c) => c.to_string(),
            Tok::Lit => "<lit>".into(),
        })
        .collect::<String>();
    Some((end, text))
}

/// The index after the item starting at `i`: its `;` or its closing `}`.
fn item_end(toks: &[Token], i: usize) -> usize {
    let mut j = i;
    let mut semicolon_only = false;
    while j < toks.len() {
        match &toks[j].tok {
            Tok::Ident(w) if matches!(w.as_str(), "use" | "const" | "static" | "type" | "let") => {
                semicolon_only = true;
                j += 1;
            }
            Tok::Punct(';') => return j + 1,
            Tok::Punct('{') if !semicolon_only => return skip_group(toks, j),
            Tok::Punct('(' | '[' | '{') => j = skip_group(toks, j),
            _ => j += 1,
        }
    }
    j
}

/// The string of `#[path = "..."]`, read from the source text.
fn path_attr_value(src_line: &str) -> Option<String> {
    let start = src_line.find("path")?;
    let rest = &src_line[start..];
    let open = rest.find('"')?;
    let close = rest[open + 1..].find('"')?;
    Some(rest[open + 1..open + 1 + close].to_string())
}

/// Flattens the use tree at `i` (after `use`) into paths; returns the index
/// after the `;`.
fn use_tree(
    toks: &[Token],
    mut i: usize,
    prefix: &[String],
    out: &mut Vec<(Vec<String>, String, usize)>,
) -> usize {
    let mut segs = prefix.to_vec();
    let line = toks.get(i).map_or(0, |t| t.line);
    loop {
        if punct(toks.get(i), '{') {
            i += 1;
            loop {
                if punct(toks.get(i), '}') {
                    return i + 1;
                }
                i = use_tree(toks, i, &segs, out);
                if punct(toks.get(i), ',') {
                    i += 1;
                } else if punct(toks.get(i), '}') {
                    return i + 1;
                } else {
                    return i;
                }
            }
        }
        if punct(toks.get(i), '*') {
            segs.push("*".into());
            out.push((segs, "*".into(), line));
            return i + 1;
        }
        if punct(toks.get(i), '$') {
            i += 1;
            continue;
        }
        let Some(word) = ident(toks.get(i)) else {
            return i;
        };
        i += 1;
        if word == "self" && !segs.is_empty() && !path_sep(toks.get(i)) {
            // `use a::{self}` binds `a`.
        } else {
            segs.push(word.to_string());
        }
        if path_sep(toks.get(i)) {
            i += 1;
            continue;
        }
        let mut binds = segs.last().cloned().unwrap_or_default();
        if ident(toks.get(i)) == Some("as") {
            binds = ident(toks.get(i + 1)).unwrap_or("_").to_string();
            i += 2;
        }
        out.push((segs, binds, line));
        return i;
    }
}

fn scan_file(src: &str, module: &[String]) -> FileScan {
    let toks = tokenize(src);
    let lines: Vec<&str> = src.lines().collect();
    let mut scan = FileScan::default();

    // Ranges of tokens under #[cfg(test)].
    let mut test_ranges: Vec<(usize, usize)> = Vec::new();
    // Inline modules: (name, brace depth inside them).
    let mut inline: Vec<(String, i32)> = Vec::new();
    let mut depth = 0i32;
    let mut pending_path_attr: Option<String> = None;
    let mut pending_test = false;
    let in_test =
        |ranges: &[(usize, usize)], i: usize| ranges.iter().any(|(a, b)| (*a..*b).contains(&i));

    let mut i = 0;
    while i < toks.len() {
        if let Some((end, text)) = attribute(&toks, i, true) {
            if text == "cfg(test)" && inline.is_empty() {
                scan.test_file = true;
            }
            i = end;
            continue;
        }
        if let Some((end, text)) = attribute(&toks, i, false) {
            if text == "cfg(test)" {
                pending_test = true;
            } else if text.starts_with("path=") {
                let line = toks[i].line;
                pending_path_attr = lines.get(line - 1).and_then(|l| path_attr_value(l));
            }
            i = end;
            // The attributes apply to the item that follows them.
            if pending_test && attribute(&toks, i, false).is_none() {
                test_ranges.push((i, item_end(&toks, i)));
                pending_test = false;
            }
            continue;
        }
        let scope: Vec<String> = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        let tok = &toks[i];
        match &tok.tok {
            Tok::Punct('{') => {
                pending_path_attr = None;
                depth += 1;
                i += 1;
                continue;
            }
            Tok::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
                i += 1;
                continue;
            }
            Tok::Ident(w) if w == "mod" => {
                let path_attr = pending_path_attr.take();
                if let Some(name) = ident(toks.get(i + 1)) {
                    if punct(toks.get(i + 2), ';') {
                        if inline.is_empty() {
                            scan.mods.push(ModDecl {
                                name: name.to_string(),
                                path_attr,
                                test: in_test(&test_ranges, i),
                            });
                        }
                        i += 3;
                        continue;
                    }
                    if punct(toks.get(i + 2), '{') {
                        depth += 1;
                        inline.push((name.to_string(), depth));
                        i += 3;
                        continue;
                    }
                }
                i += 1;
                continue;
            }
            Tok::Ident(w) if w == "use" && !path_sep(toks.get(i + 1)) => {
                let reexport = i > 0
                    && (ident(toks.get(i - 1)) == Some("pub")
                        || (punct(toks.get(i - 1), ')')
                            && (1..=4)
                                .any(|k| i > k && ident(toks.get(i - 1 - k)) == Some("pub"))));
                let mut found = Vec::new();
                let end = use_tree(&toks, i + 1, &[], &mut found);
                let test = in_test(&test_ranges, i);
                for (segs, binds, line) in found {
                    scan.paths.push(RawPath {
                        segs,
                        line,
                        scope: scope.clone(),
                        in_test: test,
                        binds: Some(binds),
                        reexport,
                    });
                }
                i = end.max(i + 1);
                continue;
            }
            Tok::Ident(_) if !path_sep(i.checked_sub(1).and_then(|p| toks.get(p))) => {
                // A path in code: ident (:: ident)+, `$crate` included.
                let mut segs = Vec::new();
                let mut j = i;
                while let Some(word) = ident(toks.get(j)) {
                    segs.push(word.to_string());
                    if path_sep(toks.get(j + 1)) && ident(toks.get(j + 2)).is_some() {
                        j += 2;
                    } else {
                        break;
                    }
                }
                // `pub(in crate::x)` names a visibility, not a dependency.
                let visibility =
                    i >= 2 && ident(toks.get(i - 1)) == Some("in") && punct(toks.get(i - 2), '(');
                if segs.len() > 1 && !visibility {
                    scan.paths.push(RawPath {
                        segs,
                        line: tok.line,
                        scope,
                        in_test: in_test(&test_ranges, i),
                        binds: None,
                        reexport: false,
                    });
                }
                i = j + 1;
                continue;
            }
            _ => {}
        }
        if matches!(tok.tok, Tok::Punct(';')) {
            pending_path_attr = None;
        }
        i += 1;
    }
    scan
}

// ---------------------------------------------------------------------------
// The graph of one directory

/// The item of a use that names a module itself (`use super::x;`).
const MODULE: &str = "(module)";

/// One use of a module by a file: where, and what it names.
#[derive(Clone, Debug)]
struct Use {
    file: String,
    line: usize,
    item: String,
}

#[derive(Debug, Default)]
struct Graph {
    /// Node (the file of a directory-level module, `mod.rs` for the root) ->
    /// the files whose code it holds.
    nodes: BTreeMap<String, Vec<String>>,
    edges: BTreeMap<(String, String), Vec<Use>>,
    /// Paths into another top-level module of the crate (`crate::server`
    /// from `src/lock`): (top-level module, use).
    outside: Vec<(String, Use)>,
}

struct Module {
    file: String,
    node: String,
    scan: FileScan,
    test: bool,
}

/// Builds the graph of the directory `dir` (a top-level module of the crate,
/// e.g. "lock") from its files (name -> source). Every file must be reached
/// from `mod.rs`.
fn build_graph(dir: &str, files: &BTreeMap<String, String>) -> Result<Graph, String> {
    // Module path (absolute) -> module.
    let mut modules: BTreeMap<Vec<String>, Module> = BTreeMap::new();
    let mut todo = vec![(
        vec![dir.to_string()],
        "mod.rs".to_string(),
        "mod.rs".to_string(),
        false,
    )];
    while let Some((path, file, node, test)) = todo.pop() {
        let src = files
            .get(&file)
            .ok_or_else(|| format!("{dir}: module {} has no file {file}", path.join("::")))?;
        let scan = scan_file(src, &path);
        let test = test || scan.test_file;
        for m in &scan.mods {
            let child_file = match &m.path_attr {
                Some(p) => p.clone(),
                None if file == "mod.rs" => format!("{}.rs", m.name),
                None => {
                    return Err(format!(
                        "{dir}/{file}: mod {} without #[path] (nested directories are not read)",
                        m.name
                    ))
                }
            };
            let child_node = if file == "mod.rs" {
                child_file.clone()
            } else {
                node.clone()
            };
            let mut child_path = path.clone();
            child_path.push(m.name.clone());
            todo.push((child_path, child_file, child_node, test || m.test));
        }
        modules.insert(
            path,
            Module {
                file,
                node,
                scan,
                test,
            },
        );
    }
    let reached: BTreeSet<&String> = modules.values().map(|m| &m.file).collect();
    if let Some(orphan) = files.keys().find(|f| !reached.contains(f)) {
        return Err(format!("{dir}/{orphan} is not declared as a module"));
    }

    // Names `mod.rs` re-exports: name -> the path it stands for.
    let root = vec![dir.to_string()];
    let mut reexports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some(m) = modules.get(&root) {
        for p in m.scan.paths.iter().filter(|p| p.reexport) {
            if let (Some(name), Some(abs)) =
                (&p.binds, absolute(p, &m.scan, &root, &BTreeMap::new()))
            {
                reexports.insert(name.clone(), abs);
            }
        }
    }

    let mut graph = Graph::default();
    for m in modules.values() {
        if !m.test {
            graph
                .nodes
                .entry(m.node.clone())
                .or_default()
                .push(m.file.clone());
        }
    }
    for (path, m) in &modules {
        // Names bound to modules of this directory by `use` (`use super::x;`).
        let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for p in m.scan.paths.iter().filter(|p| p.binds.is_some()) {
            if let Some(abs) = absolute(p, &m.scan, path, &BTreeMap::new()) {
                if modules.contains_key(&abs) {
                    aliases.insert(p.binds.clone().unwrap_or_default(), abs);
                }
            }
        }
        for p in &m.scan.paths {
            let Some(mut abs) = absolute(p, &m.scan, path, &aliases) else {
                continue;
            };
            let at = Use {
                file: m.file.clone(),
                line: p.line,
                item: String::new(),
            };
            if abs.first() != Some(&dir.to_string()) {
                if matches!(abs.first().map(String::as_str), Some("lock" | "server")) {
                    let item = abs.join("::");
                    graph.outside.push((abs[0].clone(), Use { item, ..at }));
                }
                continue;
            }
            if m.test || p.in_test || (p.reexport && *path == root) {
                continue;
            }
            // Follow the root's re-exports (a few steps at most); a module's
            // own name comes first.
            for _ in 0..4 {
                if abs.get(..2).is_some_and(|m| modules.contains_key(m)) {
                    break;
                }
                match abs.get(1).and_then(|n| reexports.get(n)) {
                    Some(target) if target.get(..2) != abs.get(..2) => {
                        abs = target.iter().chain(abs.iter().skip(2)).cloned().collect();
                    }
                    _ => break,
                }
            }
            // The longest module path that prefixes the path.
            let Some((mpath, target)) = (1..=abs.len())
                .rev()
                .find_map(|n| modules.get_key_value(&abs[..n]))
            else {
                continue;
            };
            if target.test || target.node == m.node {
                continue;
            }
            let item = abs
                .get(mpath.len())
                .cloned()
                .unwrap_or_else(|| MODULE.into());
            graph
                .edges
                .entry((m.node.clone(), target.node.clone()))
                .or_default()
                .push(Use { item, ..at });
        }
    }
    Ok(graph)
}

/// The absolute path (from the crate root) `p` names, if it starts at
/// `crate`, `super`, `self`, a module declared in the file, or a name bound
/// to a module by `use`.
fn absolute(
    p: &RawPath,
    scan: &FileScan,
    file_module: &[String],
    aliases: &BTreeMap<String, Vec<String>>,
) -> Option<Vec<String>> {
    let first = p.segs.first()?.as_str();
    let mut segs = p.segs.iter().skip(1).peekable();
    let mut base: Vec<String> = match first {
        "crate" => Vec::new(),
        "self" => p.scope.clone(),
        "super" => {
            let mut b = p.scope.clone();
            b.pop()?;
            while segs.peek().map(|s| s.as_str()) == Some("super") {
                segs.next();
                b.pop()?;
            }
            b
        }
        name if p.scope.as_slice() == file_module && scan.mods.iter().any(|m| m.name == name) => {
            let mut b = file_module.to_vec();
            b.push(name.to_string());
            b
        }
        name => aliases.get(name)?.clone(),
    };
    base.extend(segs.cloned());
    Some(base)
}

// ---------------------------------------------------------------------------
// Strongly connected components (Tarjan)

fn tarjan(nodes: &[String], edges: &BTreeMap<(String, String), Vec<Use>>) -> Vec<Vec<String>> {
    struct State<'a> {
        succ: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(v: &'a str, s: &mut State<'a>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.succ.get(v).cloned().unwrap_or_default() {
            if !s.index.contains_key(w) {
                visit(w, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            comp.sort();
            s.out.push(comp);
        }
    }
    let mut s = State {
        succ: BTreeMap::new(),
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for (a, b) in edges.keys() {
        s.succ.entry(a.as_str()).or_default().push(b.as_str());
    }
    for v in nodes {
        if !s.index.contains_key(v.as_str()) {
            visit(v, &mut s);
        }
    }
    s.out
}

/// The cycles of a graph: its strongly connected components of more than one
/// node.
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    let nodes: Vec<String> = g.nodes.keys().cloned().collect();
    let mut c: Vec<Vec<String>> = tarjan(&nodes, &g.edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .collect();
    c.sort();
    c
}

/// A cycle, each of its files with its edges into the cycle and one use
/// for each.
fn describe(g: &Graph, cycle: &[String]) -> String {
    let mut s = format!("cycle of {} files: {}\n", cycle.len(), cycle.join(", "));
    for ((a, b), uses) in &g.edges {
        if cycle.contains(a) && cycle.contains(b) {
            // A use that names an item says more than `use super::x;`.
            let u = uses.iter().find(|u| u.item != MODULE).unwrap_or(&uses[0]);
            s += &format!("  {a} -> {b}: {} ({}:{})\n", u.item, u.file, u.line);
        }
    }
    s
}

/// Every edge of a cycle with every item it uses, for planning the cut.
fn describe_all(g: &Graph, cycle: &[String]) -> String {
    let mut s = String::new();
    for ((a, b), uses) in &g.edges {
        if cycle.contains(a) && cycle.contains(b) {
            let mut items: BTreeSet<&str> = uses.iter().map(|u| u.item.as_str()).collect();
            if items.len() > 1 {
                items.remove(MODULE);
            }
            s += &format!(
                "  {a} -> {b}: {}\n",
                items.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
    }
    s
}

/// The files in cycles that `allowed` does not list, and the listed files
/// in no cycle.
fn read_dir(dir: &str) -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            !entry.path().is_dir(),
            "src/{dir}/{name}: nested directories are not read by this check"
        );
        if name.ends_with(".rs") {
            files.insert(name, std::fs::read_to_string(entry.path()).unwrap());
        }
    }
    files
}

fn graph_of(dir: &str) -> Graph {
    build_graph(dir, &read_dir(dir)).unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------
// The checks on the sources

/// The cycles of `src/<dir>`, each with its edges and what they use.
fn cycles_of(dir: &str) -> Vec<String> {
    let g = graph_of(dir);
    assert!(
        g.nodes.len() > 10,
        "src/{dir} read as {} modules",
        g.nodes.len()
    );
    cycles(&g).iter().map(|c| describe_all(&g, c)).collect()
}

/// Fails with every cycle of `src/<dir>`, each with its edges.
fn assert_no_cycle(dir: &str) {
    let found = cycles_of(dir);
    assert!(
        found.is_empty(),
        "src/{dir} has import cycles (a lower file calls a higher one: make that work a job):\n{}",
        found.join("\n")
    );
}

#[test]
fn lock_has_no_import_cycle() {
    assert_no_cycle("lock");
}

#[test]
fn server_has_no_import_cycle() {
    assert_no_cycle("server");
}

#[test]
fn lock_never_uses_server() {
    let g = graph_of("lock");
    let uses: Vec<String> = g
        .outside
        .iter()
        .filter(|(top, _)| top == "server")
        .map(|(_, u)| format!("  {}:{}: {}", u.file, u.line, u.item))
        .collect();
    assert!(
        uses.is_empty(),
        "src/lock uses crate::server:\n{}",
        uses.join("\n")
    );
}

// ---------------------------------------------------------------------------
// The checker on planted sources

fn planted(files: &[(&str, &str)]) -> Graph {
    let files = files
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
    build_graph("lock", &files).unwrap()
}

fn edge_names(g: &Graph) -> Vec<String> {
    g.edges.keys().map(|(a, b)| format!("{a}->{b}")).collect()
}

#[test]
fn a_planted_cycle_is_caught() {
    let g = planted(&[
        ("mod.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a.rs", "use super::b::Thing;\npub struct Other;\n"),
        (
            "b.rs",
            "pub struct Thing;\nfn f() -> super::a::Other { todo!() }\n",
        ),
        ("c.rs", "use super::a::Other;\n"),
    ]);
    assert_eq!(
        cycles(&g),
        vec![vec!["a.rs".to_string(), "b.rs".to_string()]]
    );
    let text = describe(&g, &cycles(&g)[0]);
    assert!(text.contains("a.rs -> b.rs: Thing (a.rs:1)"), "{text}");
    assert!(text.contains("b.rs -> a.rs: Other (b.rs:2)"), "{text}");
}

#[test]
fn a_chain_is_not_a_cycle() {
    let g = planted(&[
        (
            "mod.rs",
            "pub mod a;\npub mod b;\npub mod c;\npub use c::Base;\n",
        ),
        (
            "a.rs",
            "use super::b::Thing;\nuse crate::lock::c;\nfn f(_: c::Base) {}\n",
        ),
        ("b.rs", "use super::Base;\npub struct Thing;\n"),
        ("c.rs", "pub struct Base;\n"),
    ]);
    assert_eq!(edge_names(&g), ["a.rs->b.rs", "a.rs->c.rs", "b.rs->c.rs"]);
    assert!(cycles(&g).is_empty());
}

#[test]
fn grouped_uses_re_exports_and_modules_bound_by_use_make_edges() {
    let g = planted(&[
        (
            "mod.rs",
            "pub mod a;\npub mod b;\npub mod c;\npub mod d;\npub use d::Error;\n",
        ),
        (
            "a.rs",
            "use super::{b, c::{X, Y as Z}};\nfn f() { b::go(); }\n",
        ),
        ("b.rs", "use super::Error;\npub fn go() {}\n"),
        ("c.rs", "pub struct X;\npub struct Y;\n"),
        ("d.rs", "pub enum Error {}\n"),
    ]);
    assert_eq!(edge_names(&g), ["a.rs->b.rs", "a.rs->c.rs", "b.rs->d.rs"]);
    let items: Vec<&str> = g.edges[&("a.rs".into(), "b.rs".into())]
        .iter()
        .map(|u| u.item.as_str())
        .collect();
    assert_eq!(items, ["(module)", "go"]);
}

#[test]
fn comments_strings_and_tests_make_no_edges() {
    let g = planted(&[
        ("mod.rs", "pub mod a;\npub mod b;\n"),
        (
            "a.rs",
            r####"//! See super::b::Thing.
/* use super::b; /* nested */ super::b::X */
const S: &str = "super::b::X";
const R: &str = r#"use super::b::X;"#;
const C: char = '"'; const L: &'static str = "x"; const Q: char = '\'';
const E: [char; 2] = ['\\', '\u{22}']; const B: u8 = b'"';
const CS: &std::ffi::CStr = c"super::b::Y";
pub struct Other;
#[cfg(test)]
mod tests {
    use super::super::b::Thing;
}
#[cfg(test)]
#[path = "a_tests.rs"]
mod more_tests;
"####,
        ),
        ("a_tests.rs", "use crate::lock::b::Thing;\n"),
        ("b.rs", "use super::a::Other;\npub struct Thing;\n"),
    ]);
    assert_eq!(edge_names(&g), ["b.rs->a.rs"]);
    assert!(cycles(&g).is_empty());
}

#[test]
fn a_test_module_still_may_not_use_server() {
    let g = planted(&[
        ("mod.rs", "pub mod a;\n"),
        (
            "a.rs",
            "#[cfg(test)]\nmod tests {\n    use crate::server::api::Ctx;\n}\n",
        ),
    ]);
    assert_eq!(g.outside.len(), 1);
    assert_eq!(g.outside[0].0, "server");
    assert_eq!(g.outside[0].1.line, 3);
}

#[test]
fn a_path_child_file_is_part_of_its_parent() {
    let g = planted(&[
        ("mod.rs", "pub mod q;\npub mod h;\n"),
        (
            "q.rs",
            "pub struct P;\n#[path = \"q_sets.rs\"]\nmod sets;\npub use sets::S;\n",
        ),
        (
            "q_sets.rs",
            "use super::P;\nuse crate::lock::h::Mode;\npub struct S;\n",
        ),
        ("h.rs", "pub enum Mode {}\nfn f(_: super::q::S) {}\n"),
    ]);
    assert_eq!(g.nodes["q.rs"], ["q.rs", "q_sets.rs"]);
    assert_eq!(
        cycles(&g),
        vec![vec!["h.rs".to_string(), "q.rs".to_string()]]
    );
}

#[test]
fn a_file_declared_nowhere_is_an_error() {
    let files = [("mod.rs", "pub mod a;\n"), ("a.rs", ""), ("stray.rs", "")]
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
    let err = build_graph("lock", &files).unwrap_err();
    assert!(err.contains("stray.rs"), "{err}");
}

// ---------------------------------------------------------------------------
// The maps of the code

/// Every source file of `src/<dir>` a reader should find in the maps: all
/// but `mod.rs` and the test files beside the code (`*_tests.rs`).
fn mapped_files(dir: &str) -> Vec<String> {
    read_dir(dir)
        .into_keys()
        .filter(|f| f != "mod.rs" && !f.ends_with("_tests.rs"))
        .collect()
}

/// The files of `src/lock` and `src/server` that `text` does not name
/// (`name.rs`, or `name` in backticks), and the names it gives to files
/// that do not exist.
fn unmapped(text: &str, dir: &str) -> Vec<String> {
    mapped_files(dir)
        .into_iter()
        .filter(|f| {
            let stem = f.trim_end_matches(".rs");
            !text.contains(f.as_str()) && !text.contains(&format!("`{stem}`"))
        })
        .map(|f| format!("src/{dir}/{f}"))
        .collect()
}

fn read_doc(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The README's Layout block: the text between `## Layout` and the next
/// heading.
fn readme_layout() -> String {
    let readme = read_doc("README.md");
    let start = readme
        .find("\n## Layout")
        .expect("README has a Layout section");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    rest[..end].to_string()
}

#[test]
fn every_source_file_is_in_the_readme_layout_and_the_architecture() {
    let layout = readme_layout();
    let architecture = read_doc("docs/architecture.md");
    let mut missing = Vec::new();
    for dir in ["lock", "server"] {
        for f in unmapped(&layout, dir) {
            missing.push(format!("README Layout: {f}"));
        }
        for f in unmapped(&architecture, dir) {
            missing.push(format!("docs/architecture.md: {f}"));
        }
    }
    assert!(
        missing.is_empty(),
        "files not in the maps:\n{}",
        missing.join("\n")
    );
    // Files the Layout names under src/server/ that are gone.
    let server_part = layout
        .split("src/server/")
        .nth(1)
        .and_then(|s| s.split("\ntests/").next())
        .unwrap_or_default();
    let files = mapped_files("server");
    let stale: Vec<&str> = server_part
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .flat_map(|w| w.split(','))
        .map(str::trim)
        .filter(|w| w.ends_with(".rs"))
        .filter(|w| !files.iter().any(|f| f == w))
        .collect();
    assert!(
        stale.is_empty(),
        "README Layout names files src/server does not have: {stale:?}"
    );
}

#[test]
fn a_file_missing_from_a_map_is_caught() {
    let map = "  commands.rs   handlers\n  `jobs`: the queue";
    let missing = unmapped(map, "server");
    assert!(!missing.contains(&"src/server/commands.rs".to_string()));
    assert!(!missing.contains(&"src/server/jobs.rs".to_string()));
    assert!(missing.contains(&"src/server/revoke.rs".to_string()));
}

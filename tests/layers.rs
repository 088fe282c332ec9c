//! No import cycle inside a folder, read from the sources (no server needed).
//!
//! The crate boundaries keep the big layers apart: `dlock-core` (`core/`)
//! cannot name the module crate, so the rules never reach the module API.
//! Inside a crate the compiler allows any module to use any other, so this
//! check keeps each folder layered: among the modules of one folder (its
//! files and subfolders), none depends on another that, directly or through
//! others, depends back on it. A lower module never calls a higher one (work
//! a lower module finds for a higher one is a job, `server/jobs/`, not a
//! call). It also checks that every source file is in
//! `docs/architecture.md` and every folder in the README's Layout.
//!
//! A folder's graph has one node per child module (a file, or a subfolder
//! with everything under it) and one for the folder's own file (`mod.rs` or
//! `lib.rs`). An edge A -> B is any path in A that names B: `use
//! super::b::..`, grouped `use super::{b, c::d}`, `crate::x::b` in code,
//! `self::b` / `b::x` for modules declared in the file, and names brought in
//! by `use`. `mod` declarations are not edges, and a name a module
//! re-exports (`pub use error::Error`) resolves to the module that defines
//! it. Code under `#[cfg(test)]` (test modules, inline or in their own files)
//! makes no edges: tests may reach across the layering. Comments and string
//! literals are skipped by the tokenizer. `#[path]` is refused: a module with
//! parts is a folder.

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
// The module tree of one crate

/// The item of a use that names a module itself (`use super::x;`).
const MODULE: &str = "(module)";

/// One use of a module by a file: where, and what it names.
#[derive(Clone, Debug)]
struct Use {
    file: String,
    line: usize,
    item: String,
}

struct Module {
    /// Its file, relative to the crate's `src/`.
    file: String,
    scan: FileScan,
    test: bool,
}

/// A crate's modules by absolute path (the root, `lib.rs`, is `[]`).
struct Tree {
    modules: BTreeMap<Vec<String>, Module>,
    /// (module, name it re-exports with `pub use`) -> the path it stands for.
    reexports: BTreeMap<(Vec<String>, String), Vec<String>>,
}

/// The folder a file's child modules live in: `a/` for `a/mod.rs`, `lib.rs`
/// and `a.rs`'s parent for those, `a/b/` for `a/b.rs`.
fn child_dir(file: &str) -> String {
    let (dir, name) = file.rsplit_once('/').unwrap_or(("", file));
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    if name == "mod.rs" || name == "lib.rs" {
        prefix
    } else {
        format!("{prefix}{}/", name.trim_end_matches(".rs"))
    }
}

/// Reads the module tree from `files` (path relative to `src/` -> source),
/// starting at `lib.rs`. Every file must be reached.
fn build_tree(files: &BTreeMap<String, String>) -> Result<Tree, String> {
    let mut modules: BTreeMap<Vec<String>, Module> = BTreeMap::new();
    let mut todo = vec![(Vec::<String>::new(), "lib.rs".to_string(), false)];
    while let Some((path, file, test)) = todo.pop() {
        let src = files
            .get(&file)
            .ok_or_else(|| format!("module {} has no file {file}", path.join("::")))?;
        let scan = scan_file(src, &path);
        let test = test || scan.test_file;
        for m in &scan.mods {
            if m.path_attr.is_some() {
                return Err(format!(
                    "{file}: mod {} has #[path]: a module with parts is a folder",
                    m.name
                ));
            }
            let dir = child_dir(&file);
            let flat = format!("{dir}{}.rs", m.name);
            let nested = format!("{dir}{}/mod.rs", m.name);
            let child = if files.contains_key(&flat) {
                flat
            } else {
                nested
            };
            let mut child_path = path.clone();
            child_path.push(m.name.clone());
            todo.push((child_path, child, test || m.test));
        }
        modules.insert(path, Module { file, scan, test });
    }
    let reached: BTreeSet<&String> = modules.values().map(|m| &m.file).collect();
    if let Some(orphan) = files.keys().find(|f| !reached.contains(f)) {
        return Err(format!("{orphan} is not declared as a module"));
    }
    let mut reexports = BTreeMap::new();
    for (path, m) in &modules {
        for p in m.scan.paths.iter().filter(|p| p.reexport) {
            if let (Some(name), Some(abs)) =
                (&p.binds, absolute(p, &m.scan, path, &BTreeMap::new()))
            {
                reexports.insert((path.clone(), name.clone()), abs);
            }
        }
    }
    Ok(Tree { modules, reexports })
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

impl Tree {
    /// The module `abs` lands in after following re-exports (a few steps at
    /// most), and the item it names there.
    fn resolve(&self, mut abs: Vec<String>) -> Option<(&Vec<String>, String)> {
        for _ in 0..4 {
            let (mpath, _) = (0..=abs.len())
                .rev()
                .find_map(|n| self.modules.get_key_value(&abs[..n]))?;
            let Some(next) = abs.get(mpath.len()) else {
                break;
            };
            match self.reexports.get(&(mpath.clone(), next.clone())) {
                Some(target) if target.as_slice() != &abs[..=mpath.len()] => {
                    abs = target
                        .iter()
                        .chain(abs.iter().skip(mpath.len() + 1))
                        .cloned()
                        .collect();
                }
                _ => break,
            }
        }
        let (mpath, _) = (0..=abs.len())
            .rev()
            .find_map(|n| self.modules.get_key_value(&abs[..n]))?;
        let item = abs
            .get(mpath.len())
            .cloned()
            .unwrap_or_else(|| MODULE.into());
        Some((mpath, item))
    }

    /// The folders: every module with child modules that are not tests.
    fn folders(&self) -> Vec<Vec<String>> {
        let mut out: Vec<Vec<String>> = self
            .modules
            .iter()
            .filter(|(p, m)| !p.is_empty() && !m.test)
            .map(|(p, _)| p[..p.len() - 1].to_vec())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The graph among the child modules of `folder`.
    fn graph(&self, folder: &[String]) -> Graph {
        let mut graph = Graph::default();
        // A module's node in this folder: the folder's own file, or the
        // file of the child module it is part of.
        let node_of = |path: &[String]| -> Option<String> {
            if !path.starts_with(folder) {
                return None;
            }
            let key = path.get(..=folder.len()).unwrap_or(folder);
            self.modules.get(key).map(|m| m.file.clone())
        };
        for (path, m) in &self.modules {
            if m.test {
                continue;
            }
            if let Some(node) = node_of(path) {
                graph.nodes.entry(node).or_default().push(m.file.clone());
            }
        }
        for (path, m) in &self.modules {
            let Some(from) = node_of(path).filter(|_| !m.test) else {
                continue;
            };
            // Names bound to modules by `use` (`use super::x;`).
            let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for p in m.scan.paths.iter().filter(|p| p.binds.is_some()) {
                if let Some(abs) = absolute(p, &m.scan, path, &BTreeMap::new()) {
                    if self.modules.contains_key(&abs) {
                        aliases.insert(p.binds.clone().unwrap_or_default(), abs);
                    }
                }
            }
            for p in &m.scan.paths {
                if p.in_test || p.reexport {
                    continue;
                }
                let Some(abs) = absolute(p, &m.scan, path, &aliases) else {
                    continue;
                };
                let Some((target, item)) = self.resolve(abs) else {
                    continue;
                };
                if self.modules[target].test {
                    continue;
                }
                let Some(to) = node_of(target).filter(|to| *to != from) else {
                    continue;
                };
                graph
                    .edges
                    .entry((from.clone(), to))
                    .or_default()
                    .push(Use {
                        file: m.file.clone(),
                        line: p.line,
                        item,
                    });
            }
        }
        graph
    }
}

#[derive(Debug, Default)]
struct Graph {
    /// Node (a child module's file, or the folder's own) -> the files whose
    /// code it holds.
    nodes: BTreeMap<String, Vec<String>>,
    edges: BTreeMap<(String, String), Vec<Use>>,
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

/// Every `.rs` file under `<crate>/src`, by path relative to it.
fn read_crate(krate: &str) -> BTreeMap<String, String> {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = format!("{rel}{name}");
            if entry.path().is_dir() {
                walk(&entry.path(), &format!("{rel}/"), out);
            } else if name.ends_with(".rs") {
                out.insert(rel, std::fs::read_to_string(entry.path()).unwrap());
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(krate)
        .join("src");
    let mut files = BTreeMap::new();
    walk(&src, "", &mut files);
    // A crate's binaries have their own roots; only the library is read.
    files.retain(|f, _| !f.starts_with("bin/") && f != "main.rs");
    files
}

fn tree_of(krate: &str) -> Tree {
    build_tree(&read_crate(krate)).unwrap_or_else(|e| panic!("{krate}/src/{e}"))
}

/// The cycles of every folder of a crate, each with its edges and what they
/// use.
fn cycles_of(krate: &str) -> Vec<String> {
    let tree = tree_of(krate);
    let mut found = Vec::new();
    for folder in tree.folders() {
        let g = tree.graph(&folder);
        for c in cycles(&g) {
            found.push(format!(
                "in {krate}/src/{}:\n{}",
                child_dir(&tree.modules[&folder].file),
                describe_all(&g, &c)
            ));
        }
    }
    found
}

/// Fails with every cycle of a crate's folders, each with its edges.
fn assert_no_cycle(krate: &str, at_least_folders: usize) {
    let folders = tree_of(krate).folders().len();
    assert!(
        folders >= at_least_folders,
        "{krate}/src read as {folders} folders"
    );
    let found = cycles_of(krate);
    assert!(
        found.is_empty(),
        "{krate}/src has import cycles (a lower module calls a higher one: make that work a job):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_rules_have_no_import_cycle_in_a_folder() {
    assert_no_cycle("core", 6);
}

#[test]
fn the_module_has_no_import_cycle_in_a_folder() {
    assert_no_cycle(".", 8);
}

// ---------------------------------------------------------------------------
// The checker on planted sources

fn planted(files: &[(&str, &str)]) -> Tree {
    let files = files
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
    build_tree(&files).unwrap()
}

fn edge_names(g: &Graph) -> Vec<String> {
    g.edges.keys().map(|(a, b)| format!("{a}->{b}")).collect()
}

#[test]
fn a_planted_cycle_is_caught() {
    let t = planted(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a.rs", "use super::b::Thing;\npub struct Other;\n"),
        (
            "b.rs",
            "pub struct Thing;\nfn f() -> super::a::Other { todo!() }\n",
        ),
        ("c.rs", "use super::a::Other;\n"),
    ]);
    let g = t.graph(&[]);
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
    let t = planted(&[
        (
            "lib.rs",
            "pub mod a;\npub mod b;\npub mod c;\npub use c::Base;\n",
        ),
        (
            "a.rs",
            "use super::b::Thing;\nuse crate::c;\nfn f(_: c::Base) {}\n",
        ),
        ("b.rs", "use super::Base;\npub struct Thing;\n"),
        ("c.rs", "pub struct Base;\n"),
    ]);
    let g = t.graph(&[]);
    assert_eq!(edge_names(&g), ["a.rs->b.rs", "a.rs->c.rs", "b.rs->c.rs"]);
    assert!(cycles(&g).is_empty());
}

#[test]
fn grouped_uses_re_exports_and_modules_bound_by_use_make_edges() {
    let t = planted(&[
        (
            "lib.rs",
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
    let g = t.graph(&[]);
    assert_eq!(edge_names(&g), ["a.rs->b.rs", "a.rs->c.rs", "b.rs->d.rs"]);
    let items: Vec<&str> = g.edges[&("a.rs".into(), "b.rs".into())]
        .iter()
        .map(|u| u.item.as_str())
        .collect();
    assert_eq!(items, ["(module)", "go"]);
}

#[test]
fn comments_strings_and_tests_make_no_edges() {
    let t = planted(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
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
mod more_tests;
"####,
        ),
        ("a/more_tests.rs", "use crate::b::Thing;\n"),
        ("b.rs", "use super::a::Other;\npub struct Thing;\n"),
    ]);
    let g = t.graph(&[]);
    assert_eq!(edge_names(&g), ["b.rs->a.rs"]);
    assert!(cycles(&g).is_empty());
}

#[test]
fn a_folder_is_one_node_of_its_parent_and_has_a_graph_of_its_own() {
    let t = planted(&[
        ("lib.rs", "pub mod q;\npub mod h;\n"),
        (
            "q/mod.rs",
            "pub mod sets;\npub mod fifo;\npub struct P;\npub use sets::S;\n",
        ),
        (
            "q/sets.rs",
            "use super::fifo::F;\nuse crate::h::Mode;\npub struct S;\n",
        ),
        ("q/fifo.rs", "pub struct F;\nfn f(_: super::sets::S) {}\n"),
        ("h.rs", "pub enum Mode {}\nfn f(_: crate::q::S) {}\n"),
    ]);
    let top = t.graph(&[]);
    assert_eq!(
        top.nodes["q/mod.rs"],
        ["q/mod.rs", "q/fifo.rs", "q/sets.rs"]
    );
    // `crate::q::S` is a re-export: it reaches q's folder all the same.
    assert_eq!(
        cycles(&top),
        vec![vec!["h.rs".to_string(), "q/mod.rs".to_string()]]
    );
    let inner = t.graph(&["q".to_string()]);
    assert_eq!(
        cycles(&inner),
        vec![vec!["q/fifo.rs".to_string(), "q/sets.rs".to_string()]]
    );
    assert_eq!(t.folders(), [vec![], vec!["q".to_string()]]);
}

#[test]
fn a_path_attribute_and_a_file_declared_nowhere_are_errors() {
    let read = |files: &[(&str, &str)]| {
        build_tree(
            &files
                .iter()
                .map(|(n, s)| (n.to_string(), s.to_string()))
                .collect(),
        )
        .err()
        .unwrap_or_default()
    };
    let stray = read(&[("lib.rs", "pub mod a;\n"), ("a.rs", ""), ("stray.rs", "")]);
    assert!(stray.contains("stray.rs"), "{stray}");
    let path = read(&[
        ("lib.rs", "#[path = \"a_part.rs\"]\nmod a;\n"),
        ("a_part.rs", ""),
    ]);
    assert!(path.contains("#[path]"), "{path}");
}

// ---------------------------------------------------------------------------
// The maps of the code

/// The crates whose files `docs/architecture.md` maps, and what the README's
/// Layout names them by.
const MAPPED: [(&str, &str); 2] = [("core", "core/"), (".", "src/")];

/// Every source file of a crate a reader should find in the architecture:
/// all but a folder's own file and the test files beside the code.
fn mapped_files(krate: &str) -> Vec<String> {
    let tree = tree_of(krate);
    tree.modules
        .values()
        .filter(|m| !m.test)
        .map(|m| m.file.clone())
        .filter(|f| !f.ends_with("mod.rs") && f != "lib.rs")
        .collect()
}

/// The files of `files` that `text` does not name by their path in the
/// crate's `src/` (`queue/fifo.rs`), prefixed with `shown`.
fn unmapped(text: &str, files: &[String], shown: &str) -> Vec<String> {
    files
        .iter()
        .filter(|f| !text.contains(f.as_str()))
        .map(|f| format!("{shown}{f}"))
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
fn every_source_file_is_in_the_architecture_and_every_folder_in_the_readme() {
    let layout = readme_layout();
    let architecture = read_doc("docs/architecture.md");
    let mut missing = Vec::new();
    for (krate, shown) in MAPPED {
        let files = mapped_files(krate);
        missing.extend(unmapped(&architecture, &files, shown));
        let tree = tree_of(krate);
        // The role folders: the crate's own, and the module's `server/`'s.
        let roles = tree.folders().into_iter().filter(|f| match f.as_slice() {
            [] => false,
            [_] => true,
            [top, _] => top == "server",
            _ => false,
        });
        for folder in roles {
            let name = format!("{}/", folder.last().map_or("", String::as_str));
            if !layout.contains(&name) {
                missing.push(format!(
                    "README Layout: {shown}{}",
                    child_dir(&tree.modules[&folder].file)
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in the maps (docs/architecture.md names every file by its path under src/, the README's Layout every role folder):\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_file_missing_from_a_map_is_caught() {
    let files = mapped_files(".");
    assert!(files.contains(&"server/execute/revoke.rs".to_string()));
    let map = "| `server/commands/lock.rs` | handlers |\n`server/jobs/queue.rs`: the queue";
    let missing = unmapped(map, &files, "src/");
    assert!(!missing.contains(&"src/server/commands/lock.rs".to_string()));
    assert!(!missing.contains(&"src/server/jobs/queue.rs".to_string()));
    assert!(missing.contains(&"src/server/execute/revoke.rs".to_string()));
}

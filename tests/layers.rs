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
//! literals are never paths (the sources are parsed with `syn`). `#[path]` is
//! refused: a module with parts is a folder.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

// ---------------------------------------------------------------------------
// Paths in one file, read with `syn` (comments and literals never are paths)

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
    /// It has a `#[path]` attribute.
    path_attr: bool,
    test: bool,
}

#[derive(Debug, Default)]
struct FileScan {
    paths: Vec<RawPath>,
    mods: Vec<ModDecl>,
    /// `#![cfg(test)]` at the top.
    test_file: bool,
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

/// The attributes of an item, whatever its kind.
fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

struct Scanner {
    scan: FileScan,
    /// The file's module, then the inline modules around the current item.
    scope: Vec<String>,
    /// Depth of inline modules: only the file's own `mod x;` name files.
    inline: usize,
    in_test: bool,
}

impl Scanner {
    fn push(&mut self, segs: Vec<String>, line: usize, binds: Option<String>, reexport: bool) {
        self.scan.paths.push(RawPath {
            segs,
            line,
            scope: self.scope.clone(),
            in_test: self.in_test,
            binds,
            reexport,
        });
    }

    /// Flattens a use tree into paths, each with the name it binds.
    fn use_tree(&mut self, tree: &syn::UseTree, prefix: &mut Vec<String>, reexport: bool) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(&p.tree, prefix, reexport);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let line = n.ident.span().start().line;
                // `use a::{self}` binds `a`.
                let (segs, binds) = if n.ident == "self" {
                    (prefix.clone(), prefix.last().cloned().unwrap_or_default())
                } else {
                    let mut segs = prefix.clone();
                    segs.push(n.ident.to_string());
                    (segs, n.ident.to_string())
                };
                self.push(segs, line, Some(binds), reexport);
            }
            syn::UseTree::Rename(r) => {
                let mut segs = prefix.clone();
                segs.push(r.ident.to_string());
                let line = r.ident.span().start().line;
                self.push(segs, line, Some(r.rename.to_string()), reexport);
            }
            syn::UseTree::Glob(g) => {
                let mut segs = prefix.clone();
                segs.push("*".into());
                self.push(
                    segs,
                    g.star_token.span.start().line,
                    Some("*".into()),
                    reexport,
                );
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(t, prefix, reexport);
                }
            }
        }
    }

    /// Paths in a macro's tokens (`ident (:: ident)+`, `$crate` as `crate`),
    /// which `syn` leaves unparsed.
    fn tokens(&mut self, tokens: proc_macro2::TokenStream) {
        use proc_macro2::TokenTree;
        let flat: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < flat.len() {
            match &flat[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(first) => {
                    let mut segs = vec![first.to_string()];
                    let mut j = i;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(next)),
                    ) = (flat.get(j + 1), flat.get(j + 2), flat.get(j + 3))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segs.push(next.to_string());
                        j += 3;
                    }
                    if segs.len() > 1 {
                        self.push(segs, first.span().start().line, None, false);
                    }
                    i = j;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> syn::visit::Visit<'ast> for Scanner {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let was = self.in_test;
        self.in_test |= is_cfg_test(item_attrs(item));
        syn::visit::visit_item(self, item);
        self.in_test = was;
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        match &m.content {
            None => {
                if self.inline == 0 {
                    self.scan.mods.push(ModDecl {
                        name: m.ident.to_string(),
                        path_attr: m.attrs.iter().any(|a| a.path().is_ident("path")),
                        test: self.in_test,
                    });
                }
            }
            Some((_, items)) => {
                self.scope.push(m.ident.to_string());
                self.inline += 1;
                for item in items {
                    self.visit_item(item);
                }
                self.inline -= 1;
                self.scope.pop();
            }
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let reexport = !matches!(u.vis, syn::Visibility::Inherited);
        self.use_tree(&u.tree, &mut Vec::new(), reexport);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.segments.len() > 1 {
            let segs = p.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = p.segments[0].ident.span().start().line;
            self.push(segs, line, None, false);
        }
        syn::visit::visit_path(self, p);
    }

    // `pub(in crate::x)` names a visibility, not a dependency.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }
}

fn scan_file(src: &str, module: &[String]) -> FileScan {
    let file = syn::parse_file(src).unwrap_or_else(|e| panic!("{}: {e}", module.join("::")));
    let mut scanner = Scanner {
        scan: FileScan {
            test_file: is_cfg_test(&file.attrs),
            ..FileScan::default()
        },
        scope: module.to_vec(),
        inline: 0,
        in_test: false,
    };
    syn::visit::Visit::visit_file(&mut scanner, &file);
    scanner.scan
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

/// The folder a file's child modules live in: `a/` for `a/mod.rs`, the
/// root's for the root (`lib.rs`, `main.rs`), `a/b/` for `a/b.rs`.
fn child_dir(file: &str) -> String {
    let (dir, name) = file.rsplit_once('/').unwrap_or(("", file));
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    if name == "mod.rs" || (dir.is_empty() && (name == "lib.rs" || name == "main.rs")) {
        prefix
    } else {
        format!("{prefix}{}/", name.trim_end_matches(".rs"))
    }
}

/// Reads the module tree from `files` (path relative to the root's folder
/// -> source), starting at `root` (`lib.rs`, `main.rs`). Every file must be
/// reached.
fn build_tree(files: &BTreeMap<String, String>, root: &str) -> Result<Tree, String> {
    let mut modules: BTreeMap<Vec<String>, Module> = BTreeMap::new();
    let mut todo = vec![(Vec::<String>::new(), root.to_string(), false)];
    while let Some((path, file, test)) = todo.pop() {
        let src = files
            .get(&file)
            .ok_or_else(|| format!("module {} has no file {file}", path.join("::")))?;
        let scan = scan_file(src, &path);
        let test = test || scan.test_file;
        for m in &scan.mods {
            if m.path_attr {
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

/// Every `.rs` file under the folder `dir` of the repository, by path
/// relative to it; a library's binaries (`bin/`) have roots of their own.
fn read_crate(dir: &str) -> BTreeMap<String, String> {
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
    let mut files = BTreeMap::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(dir),
        "",
        &mut files,
    );
    if files.contains_key("lib.rs") {
        files.retain(|f, _| !f.starts_with("bin/") && f != "main.rs");
    }
    files
}

/// The module tree under `dir`, from its `lib.rs` (else its `main.rs`).
fn tree_of(dir: &str) -> Tree {
    let files = read_crate(dir);
    let root = if files.contains_key("lib.rs") {
        "lib.rs"
    } else {
        "main.rs"
    };
    build_tree(&files, root).unwrap_or_else(|e| panic!("{dir}/{e}"))
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
                "in {krate}/{}:\n{}",
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
        "{krate} read as {folders} folders"
    );
    let found = cycles_of(krate);
    assert!(
        found.is_empty(),
        "{krate} has import cycles (a lower module calls a higher one: make that work a job):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_rules_have_no_import_cycle_in_a_folder() {
    assert_no_cycle("core/src", 6);
}

#[test]
fn the_module_has_no_import_cycle_in_a_folder() {
    assert_no_cycle("src", 8);
}

#[test]
fn the_rust_client_has_no_import_cycle_in_a_folder() {
    assert_no_cycle("clients/rust/src", 3);
}

#[test]
fn the_dlock_tool_has_no_import_cycle() {
    assert_no_cycle("clients/rust/src/bin/dlock", 1);
}

// ---------------------------------------------------------------------------
// The checker on planted sources

fn planted(files: &[(&str, &str)]) -> Tree {
    let files = files
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
    build_tree(&files, "lib.rs").unwrap()
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
            "lib.rs",
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
const MAPPED: [(&str, &str); 2] = [("core/src", "core/"), ("src", "src/")];

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
    let files = mapped_files("src");
    assert!(files.contains(&"server/execute/revoke.rs".to_string()));
    let map = "| `server/commands/lock.rs` | handlers |\n`server/jobs/queue.rs`: the queue";
    let missing = unmapped(map, &files, "src/");
    assert!(!missing.contains(&"src/server/commands/lock.rs".to_string()));
    assert!(!missing.contains(&"src/server/jobs/queue.rs".to_string()));
    assert!(missing.contains(&"src/server/execute/revoke.rs".to_string()));
}

//! The manual (README.md and docs/) checked against the module and itself:
//! - every `redis-cli` session runs against a real server with the replies
//!   the page shows (`transcript.rs` says how fences and TTLs match);
//! - every relative link resolves, and every `#anchor` names a heading of
//!   the page it points to;
//! - every command the module registers has its page, whose syntax line and
//!   summary are what `COMMAND DOCS` says and whose flags are what
//!   `COMMAND INFO` says; the internal effect commands share one page;
//! - every error text a page quotes (a code span that starts with an error
//!   prefix) is one the module can return, or the server's own;
//! - every page opens with one sentence under its title, and no page speaks
//!   of the project's history ("issue N", "today's").
//!
//! Each checker returns what it found wrong, so the tests at the end can
//! plant a fault and see it caught.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::markdown::{self, Page};
use super::transcript;
use super::{docs, list, map, text, texts, Server, INTERNAL_SUMMARY};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The benchmark's own reports: written by `make bench`, not by hand.
fn generated(page: &Page) -> bool {
    page.path.starts_with("docs/bench-") && page.path.ends_with("-latest.md")
}

fn fail_if_any(what: &str, problems: Vec<String>) {
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

// ---------------------------------------------------------------- links

/// Relative links that name no file, and anchors that name no heading.
pub fn broken_links(pages: &[Page], exists: impl Fn(&Path) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for page in pages {
        for (line, target) in page.links() {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                PathBuf::from(&page.path)
            } else {
                markdown::resolve(&page.path, file)
            };
            if !exists(&path) {
                out.push(format!("{}:{line}: {target}: no such file", page.path));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            let rel = path.to_string_lossy().replace('\\', "/");
            match pages.iter().find(|p| p.path == rel) {
                Some(p) if p.anchors().iter().any(|a| a == anchor) => {}
                Some(_) => out.push(format!(
                    "{}:{line}: {target}: {rel} has no heading #{anchor}",
                    page.path
                )),
                None => out.push(format!(
                    "{}:{line}: {target}: an anchor into a file that is not a page",
                    page.path
                )),
            }
        }
    }
    out
}

// ---------------------------------------------------------------- openings and wording

/// Sentences in a paragraph: a `.`, `?` or `!` followed by a space and a
/// capital letter starts another (code spans do not count).
fn sentences(para: &str) -> usize {
    let mut plain = para.to_string();
    for span in markdown::code_spans(para) {
        plain = plain.replacen(&format!("`{span}`"), "code", 1);
    }
    let chars: Vec<char> = plain.chars().collect();
    1 + chars
        .windows(3)
        .filter(|w| matches!(w[0], '.' | '?' | '!') && w[1] == ' ' && w[2].is_uppercase())
        .count()
}

/// Pages that do not start with a title and one sentence saying what they answer.
pub fn bad_openings(pages: &[Page]) -> Vec<String> {
    let mut out = Vec::new();
    for page in pages.iter().filter(|p| !generated(p)) {
        if !page.text.starts_with("# ") {
            out.push(format!("{}: does not start with a `# ` title", page.path));
            continue;
        }
        match page.opening() {
            None => out.push(format!("{}: nothing under the title", page.path)),
            Some(para) => {
                let first = para.chars().next().unwrap_or(' ');
                let prose = first.is_alphanumeric() || first == '`' || first == '*';
                let ends = para.ends_with('.') || para.ends_with(':') || para.ends_with('?');
                if !prose || !ends || sentences(&para) != 1 {
                    out.push(format!(
                        "{}: the paragraph under the title is not one sentence: {para:?}",
                        page.path
                    ));
                }
            }
        }
    }
    out
}

/// Words that tell the project's history instead of what is.
pub fn history_words(pages: &[Page]) -> Vec<String> {
    let mut out = Vec::new();
    for page in pages {
        for (n, line) in page.text.lines().enumerate() {
            let lower = line.to_lowercase();
            let issue = lower.match_indices("issue ").any(|(i, m)| {
                lower[i + m.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit())
            });
            if issue || lower.contains("today's") {
                out.push(format!("{}:{}: {}", page.path, n + 1, line.trim()));
            }
        }
    }
    out
}

// ---------------------------------------------------------------- error texts

/// The prefixes of error replies: a code span starting with one of these
/// and a space quotes an error.
const ERROR_PREFIXES: [&str; 10] = [
    "ERR",
    "WRONGTYPE",
    "READONLY",
    "TRYAGAIN",
    "QUARANTINE",
    "UNBLOCKED",
    "CROSSSLOT",
    "NOPERM",
    "MOVED",
    "LOADING",
];

/// Error texts the manual quotes that come from the server, not the module
/// (`*` matches anything).
const SERVER_ERRORS: [&str; 7] = [
    "ERR wrong number of arguments for '*' command",
    "CROSSSLOT Keys in request don't hash to the same slot",
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
    "UNBLOCKED client unblocked via CLIENT UNBLOCK",
    "NOPERM *",
    "MOVED *",
    "LOADING *",
];

/// String literals in `text`, escapes resolved (`\` + newline joins lines).
fn literals(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut lit = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('\n') => {
                        while chars.peek().is_some_and(|c| c.is_whitespace()) {
                            chars.next();
                        }
                    }
                    Some('n') => lit.push('\n'),
                    Some(other) => lit.push(other),
                    None => {}
                },
                c => lit.push(c),
            }
        }
        out.push(lit);
    }
    out
}

/// The module's error texts: each format string of `Display for Error` in
/// `core/src/error.rs` (`error_rs`), its `{...}` as `*`. A text that is all
/// placeholder after its prefix (`ERR {what}`, the configuration errors) is
/// replaced by the texts the sources (`sources`) give it.
pub fn module_errors(error_rs: &str, sources: &[String]) -> Vec<String> {
    let start = error_rs
        .find("impl fmt::Display for Error")
        .expect("core/src/error.rs has `impl fmt::Display for Error`");
    let body = &error_rs[start..];
    let body = &body[..body.find("\nimpl ").unwrap_or(body.len())];
    let mut out = Vec::new();
    for lit in literals(body) {
        let glob = format_as_glob(&lit);
        if glob.split_once(' ').is_some_and(|(_, rest)| rest == "*") {
            continue;
        }
        out.push(glob);
    }
    for source in sources {
        let mut rest = source.as_str();
        while let Some(at) = rest.find("Error::BadConfig(") {
            rest = &rest[at + "Error::BadConfig(".len()..];
            let arg = &rest[..rest.find(')').unwrap_or(rest.len())];
            if let Some(text) = literals(arg).into_iter().next() {
                out.push(format!("ERR {text}"));
            }
        }
    }
    out
}

/// A format string as a glob: each `{...}` is `*`.
pub fn format_as_glob(format: &str) -> String {
    let mut out = String::new();
    let mut in_brace = false;
    for c in format.chars() {
        match c {
            '{' => in_brace = true,
            '}' if in_brace => {
                in_brace = false;
                out.push('*');
            }
            _ if in_brace => {}
            c => out.push(c),
        }
    }
    out
}

/// Every `.rs` file under `src/`, as one text per file.
pub fn sources() -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root().join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    out
}

/// Whether some text matches both patterns (`*` matches anything).
pub fn globs_meet(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut memo = vec![vec![None; b.len() + 1]; a.len() + 1];
    fn go(a: &[char], b: &[char], i: usize, j: usize, memo: &mut Vec<Vec<Option<bool>>>) -> bool {
        if let Some(v) = memo[i][j] {
            return v;
        }
        let v = if i == a.len() && j == b.len() {
            true
        } else if i < a.len() && a[i] == '*' {
            go(a, b, i + 1, j, memo) || (j < b.len() && go(a, b, i, j + 1, memo))
        } else if j < b.len() && b[j] == '*' {
            go(a, b, i, j + 1, memo) || (i < a.len() && go(a, b, i + 1, j, memo))
        } else {
            i < a.len() && j < b.len() && a[i] == b[j] && go(a, b, i + 1, j + 1, memo)
        };
        memo[i][j] = Some(v);
        v
    }
    go(&a, &b, 0, 0, &mut memo)
}

/// A quoted error as a pattern: `...` (left out) matches anything, and so
/// does `N` standing for a number.
fn quote_pattern(quote: &str) -> String {
    let q = quote.replace("...", "*").replace('…', "*");
    q.split(' ')
        .map(|w| {
            let core = w.trim_matches(|c: char| "(),:;".contains(c));
            if core == "N" {
                w.replace('N', "*")
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Quoted error texts that neither the module nor the server returns.
pub fn unknown_errors(pages: &[Page], module: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for page in pages {
        for (line, span) in page.code_spans() {
            let Some((prefix, _)) = span.split_once(' ') else {
                continue;
            };
            if !ERROR_PREFIXES.contains(&prefix) {
                continue;
            }
            let quote = quote_pattern(&span);
            let known = module
                .iter()
                .map(String::as_str)
                .chain(SERVER_ERRORS)
                .any(|e| globs_meet(e, &quote));
            if !known {
                out.push(format!(
                    "{}:{line}: `{span}` is no error the module (core/src/error.rs) or the server returns",
                    page.path
                ));
            }
        }
    }
    out
}

// ---------------------------------------------------------------- command pages

/// `COMMAND DOCS` arguments as a syntax line: `DLOCK.X a [B b] [c [c ...]]`.
fn syntax(name: &str, args: &[redis::Value]) -> String {
    let mut out = name.to_uppercase();
    for a in args {
        let a = map(a);
        let arg_name = text(&a["name"]);
        let kind = text(&a["type"]);
        let flags = a.get("flags").map(texts).unwrap_or_default();
        let mut s = match (a.get("token").map(text), kind.as_str()) {
            (_, "oneof") => {
                let choices: Vec<String> = list(&a["arguments"])
                    .iter()
                    .map(|c| syntax("", std::slice::from_ref(c)).trim().to_string())
                    .collect();
                format!("<{}>", choices.join(" | "))
            }
            (Some(t), "pure-token") => t,
            (Some(t), _) => format!("{t} {arg_name}"),
            (None, _) => arg_name,
        };
        if flags.iter().any(|f| f == "multiple") {
            s = format!("{s} [{s} ...]");
        }
        if flags.iter().any(|f| f == "optional") {
            s = format!("[{s}]");
        }
        out.push(' ');
        out.push_str(&s);
    }
    out
}

/// What the server says of one command, for checking its page.
pub struct Described {
    pub name: String,
    pub syntax: String,
    pub summary: String,
    /// `COMMAND INFO`'s flags, but `module`.
    pub flags: Vec<String>,
}

/// The flags a page's `| Command flags |` row names: its code spans before
/// any `(` or `:` that explains them.
fn page_flags(page: &Page) -> Option<Vec<String>> {
    let row = page
        .text
        .lines()
        .find(|l| l.starts_with("| Command flags |"))?;
    let cell = row.trim_start_matches("| Command flags |");
    let cell = &cell[..cell.find(['(', ':']).unwrap_or(cell.len())];
    let mut flags = markdown::code_spans(cell);
    flags.sort();
    Some(flags)
}

/// The flags a container page's subcommand row names (`| \`SUB\` | flags
/// |`): the code spans of its second cell.
fn subcommand_flags(page: &Page, sub: &str) -> Option<Vec<String>> {
    let start = format!("| `{}` |", sub.to_uppercase());
    let row = page.text.lines().find(|l| l.starts_with(&start))?;
    let cell = row.trim_start_matches(&start).split('|').next()?;
    let mut flags = markdown::code_spans(cell);
    flags.sort();
    Some(flags)
}

/// The pages of `docs/commands/` that do not say what the server says.
pub fn command_page_problems(pages: &[Page], commands: &[Described]) -> Vec<String> {
    let mut out = Vec::new();
    let page_of = |path: &str| pages.iter().find(|p| p.path == path);
    let internal_path = "docs/commands/internal.md";
    // A container's subcommands are on its page: each one's syntax is a
    // line of a code block and its summary a `> ` line there; the
    // container's own syntax is theirs.
    let is_container = |name: &str| {
        let prefix = format!("{name}|");
        commands.iter().any(|c| c.name.starts_with(&prefix))
    };
    for c in commands {
        let internal = c.summary == INTERNAL_SUMMARY;
        let (parent, sub) = match c.name.split_once('|') {
            Some((p, s)) => (p, Some(s)),
            None => (c.name.as_str(), None),
        };
        let path = if internal {
            internal_path.to_string()
        } else {
            format!("docs/commands/{parent}.md")
        };
        let Some(page) = page_of(&path) else {
            out.push(format!("{}: no page ({path})", c.name));
            continue;
        };
        let syntaxes: Vec<String> = page
            .blocks()
            .iter()
            .flat_map(|b| {
                let lines = if sub.is_some() {
                    &b.lines[..]
                } else {
                    b.lines.get(..1).unwrap_or_default()
                };
                lines
                    .iter()
                    .map(|l| l.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        let syntax = match sub {
            Some(sub) => c.syntax.replacen(
                &c.name.to_uppercase(),
                &format!("{} {}", parent.to_uppercase(), sub.to_uppercase()),
                1,
            ),
            None => c.syntax.clone(),
        };
        if !is_container(&c.name) && !syntaxes.contains(&syntax) {
            out.push(format!(
                "{path}: no code block starts with the syntax `COMMAND DOCS` gives: {syntax}"
            ));
        }
        let quoted = format!("> {}", c.summary);
        if !page.text.lines().any(|l| l.trim_end() == quoted) {
            out.push(format!(
                "{path}: does not quote the summary of `COMMAND DOCS {}` as a `> ` line: {}",
                c.name, c.summary
            ));
        }
        if let Some(sub) = sub {
            let mut want = c.flags.clone();
            want.sort();
            match subcommand_flags(page, sub) {
                Some(got) if got == want => {}
                got => out.push(format!(
                    "{path}: the flags of its `{}` row say {got:?}, `COMMAND INFO` {want:?}",
                    sub.to_uppercase()
                )),
            }
        } else if !internal {
            let mut want = c.flags.clone();
            want.sort();
            match page_flags(page) {
                Some(got) if got == want => {}
                got => out.push(format!(
                    "{path}: its `| Command flags |` row says {got:?}, `COMMAND INFO` {want:?}"
                )),
            }
            if let Some(first_quote) = page.text.lines().find(|l| l.starts_with("> ")) {
                if first_quote.trim_end() != quoted {
                    out.push(format!(
                        "{path}: its first `> ` line is not the summary: {first_quote}"
                    ));
                }
            }
        }
    }
    // No page for a command the server does not have.
    let known: BTreeSet<String> = commands
        .iter()
        .filter(|c| c.summary != INTERNAL_SUMMARY)
        .map(|c| {
            format!(
                "docs/commands/{}.md",
                c.name.split('|').next().unwrap_or_default()
            )
        })
        .chain([internal_path.to_string()])
        .collect();
    for page in pages
        .iter()
        .filter(|p| p.path.starts_with("docs/commands/"))
    {
        if !known.contains(&page.path) {
            out.push(format!("{}: no such command", page.path));
        }
    }
    out
}

/// Every dlock command, as `COMMAND DOCS` describes it.
fn described(c: &mut redis::Connection) -> Vec<Described> {
    let names: Vec<String> = redis::cmd("COMMAND")
        .arg(&["LIST", "FILTERBY", "MODULE", "dlock"])
        .query(c)
        .unwrap();
    assert!(names.len() >= 7, "dlock commands: {names:?}");
    let mut out: Vec<Described> = names
        .iter()
        .map(|n| {
            let name = n.to_lowercase();
            let doc = docs(c, &name);
            let args = doc
                .get("arguments")
                .map(|a| list(a).to_vec())
                .unwrap_or_default();
            let info: redis::Value = redis::cmd("COMMAND")
                .arg("INFO")
                .arg(&name)
                .query(c)
                .unwrap();
            let entry = list(&list(&info)[0]).to_vec();
            let flags = texts(&entry[2])
                .into_iter()
                .filter(|f| f != "module")
                .collect();
            Described {
                syntax: syntax(&name, &args),
                summary: text(&doc["summary"]),
                name,
                flags,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

// ---------------------------------------------------------------- the tests

fn exists(p: &Path) -> bool {
    root().join(p).exists()
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let pages = markdown::manual(&root());
    fail_if_any("broken links", broken_links(&pages, exists));
}

#[test]
fn every_page_opens_with_one_sentence() {
    let pages = markdown::manual(&root());
    fail_if_any("pages without a one-sentence opening", bad_openings(&pages));
}

#[test]
fn no_page_tells_the_projects_history() {
    let pages = markdown::manual(&root());
    fail_if_any("history in the manual", history_words(&pages));
}

#[test]
fn every_quoted_error_is_one_the_module_or_server_returns() {
    let pages = markdown::manual(&root());
    let source = std::fs::read_to_string(root().join("core/src/error.rs")).unwrap();
    let module = module_errors(&source, &sources());
    assert!(module.len() > 20, "error texts read: {module:?}");
    fail_if_any("unknown error texts", unknown_errors(&pages, &module));
}

#[test]
fn every_command_has_its_page_with_the_command_docs_syntax_and_summary() {
    let s = Server::start();
    let mut c = s.conn();
    let commands = described(&mut c);
    let pages = markdown::manual(&root());
    fail_if_any("command pages", command_page_problems(&pages, &commands));
}

#[test]
fn every_redis_cli_session_replies_as_the_page_shows() {
    let pages = markdown::manual(&root());
    let mut failures = Vec::new();
    let mut sessions_run = 0;
    for page in &pages {
        let mut sessions = Vec::new();
        for block in page.blocks().iter().filter(|b| transcript::is_session(b)) {
            match transcript::parse(block) {
                Ok(steps) => sessions.push(steps),
                Err(e) => failures.push(format!("{}: {e}", page.path)),
            }
        }
        if sessions.is_empty() {
            continue;
        }
        sessions_run += sessions.len();
        let s = Server::start();
        let mut probe = s.conn();
        let blocked = || -> i64 {
            super::info_field(&mut probe, "clients", "blocked_clients")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        failures.extend(transcript::run_page(
            &page.path,
            &sessions,
            &super::cli_binary(),
            s.port(),
            blocked,
        ));
    }
    assert!(sessions_run >= 10, "only {sessions_run} sessions found");
    fail_if_any("sessions that do not reply as shown", failures);
}

// ---------------------------------------------------------------- the checkers can fail

fn page(path: &str, text: &str) -> Page {
    Page::new(path, text)
}

#[test]
fn a_broken_link_or_anchor_is_caught() {
    let pages = [
        page(
            "docs/a.md",
            "# A\n\nWhat A answers.\n\n## Two words\n\n[ok](b.md) [ok](#two-words) [ok](b.md#b-1)\n\
             [bad](c.md) [bad](b.md#nope) `[not a link](c.md)`\n",
        ),
        page("docs/b.md", "# B\n\n## B\n\n## B\n"),
    ];
    let exists = |p: &Path| p == Path::new("docs/b.md") || p == Path::new("docs/a.md");
    let found = broken_links(&pages, exists);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("c.md: no such file"), "{found:?}");
    assert!(found[1].contains("no heading #nope"), "{found:?}");
}

#[test]
fn a_page_without_its_opening_sentence_or_with_history_is_caught() {
    let pages = [
        page("docs/ok.md", "# Ok\n\nWhat `DLOCK.X` answers, e.g. this.\n"),
        page("docs/two.md", "# Two\n\nOne sentence. Another one.\n"),
        page("docs/none.md", "# None\n\n| a | b |\n"),
        page("docs/old.md", "# Old\n\nWhat it answers since issue 12.\n"),
    ];
    let found = bad_openings(&pages);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("docs/two.md"), "{found:?}");
    assert!(found[1].starts_with("docs/none.md"), "{found:?}");
    let found = history_words(&pages);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("docs/old.md:3"), "{found:?}");
}

#[test]
fn an_error_text_the_module_cannot_return_is_caught() {
    let source = std::fs::read_to_string(root().join("core/src/error.rs")).unwrap();
    let module = module_errors(&source, &sources());
    assert!(module
        .iter()
        .any(|e| e == "ERR ttl_ms is above dlock.max-ttl (*)"));
    assert!(module.iter().any(|e| e == "ERR unknown module argument"));
    assert!(!module.iter().any(|e| e == "ERR *"));
    let pages = [page(
        "docs/e.md",
        "# E\n\nErrors.\n\n`ERR ttl_ms is above dlock.max-ttl (N)`, `ERR upgrade refused: ...`,\n\
         `ERR LIMIT must be an integer from 1 to 1048576`, `ERR syntax error`,\n\
         `ERR wrong number of arguments for 'dlock.info' command`, `ERR token is too long`,\n\
         `QUARANTINE dlock: grants are refused`\n",
    )];
    let found = unknown_errors(&pages, &module);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("ERR token is too long"), "{found:?}");
    assert!(found[1].contains("QUARANTINE dlock: grants"), "{found:?}");
}

#[test]
fn a_command_page_that_differs_from_command_docs_is_caught() {
    let commands = [
        Described {
            name: "dlock.x".into(),
            syntax: "DLOCK.X resource [WAIT timeout_ms]".into(),
            summary: "Does x.".into(),
            flags: vec!["write".into(), "denyoom".into()],
        },
        Described {
            name: "dlock.y".into(),
            syntax: "DLOCK.Y resource".into(),
            summary: "Does y.".into(),
            flags: vec!["readonly".into()],
        },
        Described {
            name: "dlock.apply".into(),
            syntax: "DLOCK.APPLY resource".into(),
            summary: INTERNAL_SUMMARY.into(),
            flags: vec!["write".into(), "noscript".into()],
        },
    ];
    let pages = [
        page(
            "docs/commands/dlock.x.md",
            "# DLOCK.X\n\nWhat it does.\n\n```\nDLOCK.X resource [WAIT timeout_ms]\n```\n\n> Does x.\n\n\
             | Command flags | `denyoom`, `write`: so it is |\n",
        ),
        page(
            "docs/commands/dlock.y.md",
            "# DLOCK.Y\n\nWhat it does.\n\n```\nDLOCK.Y resource token\n```\n\n> Does y, differently.\n\n\
             | Command flags | `write` |\n",
        ),
        page(
            "docs/commands/internal.md",
            &format!("# Internal\n\nWhat.\n\n> {INTERNAL_SUMMARY}\n\n```\nDLOCK.APPLY resource\n```\n"),
        ),
        page("docs/commands/dlock.gone.md", "# DLOCK.GONE\n\nWhat.\n"),
    ];
    let found = command_page_problems(&pages, &commands);
    assert_eq!(found.len(), 5, "{found:?}");
    assert!(found[0].contains("dlock.y.md: no code block"), "{found:?}");
    assert!(found[1].contains("dlock.y.md: does not quote"), "{found:?}");
    assert!(
        found[2].contains("dlock.y.md: its `| Command flags |`"),
        "{found:?}"
    );
    assert!(found[3].contains("dlock.y.md: its first"), "{found:?}");
    assert!(
        found[4].contains("dlock.gone.md: no such command"),
        "{found:?}"
    );
}

#[test]
fn a_session_is_read_as_commands_replies_and_clients() {
    let block = markdown::Block {
        line: 10,
        lines: [
            "# client A",
            "127.0.0.1:6380> DLOCK.ACQUIRE r a 30000",
            "(integer) 1795366516365313",
            "# client B waits",
            "127.0.0.1:6380> DLOCK.ACQUIRE r b 30000 WAIT 0   # blocks",
            "# client A",
            "127.0.0.1:6380> DLOCK.RELEASE r a",
            "(integer) 1                 # handed over",
            "# client B's reply",
            "(integer) 1795366516365314",
        ]
        .map(String::from)
        .to_vec(),
    };
    let steps = transcript::parse(&block).unwrap();
    assert_eq!(steps.len(), 4, "{steps:?}");
    assert!(
        matches!(&steps[1], transcript::Step::Run { client, command, expect, .. }
        if client == "B" && command == "DLOCK.ACQUIRE r b 30000 WAIT 0" && expect.is_empty())
    );
    assert!(
        matches!(&steps[2], transcript::Step::Run { expect, .. } if expect == &["(integer) 1"])
    );
    assert!(matches!(&steps[3], transcript::Step::Later { client, .. } if client == "B"));
}

#[test]
fn a_reply_that_differs_from_the_page_is_caught() {
    let v = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    let mut f = transcript::Fences::default();
    let ok = |r: Result<(), String>| r.map_err(|e| panic!("{e}")).ok();
    // A fence matches any fence, a TTL any TTL near it.
    ok(transcript::compare(
        "X",
        &v(&["(integer) 1795366516365313"]),
        &v(&["(integer) 1800000000000001"]),
        &mut f,
    ));
    ok(transcript::compare(
        "DLOCK.INFO r",
        &v(&["5) \"ttl\"", "6) (integer) 29980"]),
        &v(&["5) \"ttl\"", "6) (integer) 29999"]),
        &mut f,
    ));
    // The same documented fence must be the same real one, in order.
    assert!(transcript::compare(
        "X",
        &v(&["(integer) 1795366516365313"]),
        &v(&["(integer) 1800000000000002"]),
        &mut f
    )
    .is_err());
    assert!(transcript::compare(
        "X",
        &v(&["(integer) 1795366516365314"]),
        &v(&["(integer) 1800000000000000"]),
        &mut f
    )
    .is_err());
    // Anything else exactly.
    assert!(transcript::compare("X", &v(&["(integer) 1"]), &v(&["(integer) 0"]), &mut f).is_err());
    assert!(transcript::compare("X", &v(&["(nil)"]), &v(&["(integer) 0"]), &mut f).is_err());
    assert!(transcript::compare(
        "PTTL r",
        &v(&["(integer) 9000"]),
        &v(&["(integer) 29999"]),
        &mut f
    )
    .is_err());
    // An observe version matches any version, one to one; a free one
    // (all zeros) only itself.
    ok(transcript::compare(
        "X",
        &v(&["1) \"5f0d2c1e9a7b3341\""]),
        &v(&["1) \"aa5d2233df148801\""]),
        &mut f,
    ));
    assert!(transcript::compare(
        "X",
        &v(&["1) \"5f0d2c1e9a7b3341\""]),
        &v(&["1) \"0123456789abcdef\""]),
        &mut f
    )
    .is_err());
    assert!(transcript::compare(
        "X",
        &v(&["1) \"77a1e0c4b2d95f13\""]),
        &v(&["1) \"aa5d2233df148801\""]),
        &mut f
    )
    .is_err());
    assert!(transcript::compare(
        "X",
        &v(&["1) \"0000000000000000\""]),
        &v(&["1) \"aa5d2233df148801\""]),
        &mut f
    )
    .is_err());
}

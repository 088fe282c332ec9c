//! The "Log messages" section of docs/operations.md against the module's
//! sources: every message a log call in `src/` writes (its format string,
//! each `{...}` read as "anything") is listed in the first column of that
//! section's table, and every message listed there is one a log call can
//! write. A new log call without its row fails the test, and so does a row
//! whose message the module no longer writes.

use super::manual::{format_as_glob, globs_meet, root, sources};
use super::markdown;

/// The functions that write to the server's log, each called with the
/// message (a literal, or `&format!("...")`) among its arguments.
const LOG_CALLS: [&str; 3] = ["log_warning", "log", "log_io"];

/// The arguments of the call whose `(` is at `open` in `text`, up to its
/// matching `)`, string and char literals skipped.
fn call_arguments(text: &str, open: usize) -> &str {
    let bytes = text.as_bytes();
    let (mut depth, mut i, mut in_string) = (0usize, open, false);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'(' if !in_string => depth += 1,
            b')' if !in_string => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..i];
                }
            }
            _ => {}
        }
        i += 1;
    }
    &text[open + 1..]
}

/// The first string literal of `args` that is not a C string (`c"warning"`
/// is a log level), escapes resolved (`\` + newline joins lines).
fn first_message(args: &str) -> Option<String> {
    let bytes = args.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'"' {
            let c_string = i > 0 && bytes[i - 1] == b'c';
            let mut lit = String::new();
            let mut chars = args[i + 1..].char_indices().peekable();
            let mut end = args.len();
            while let Some((at, c)) = chars.next() {
                match c {
                    '"' => {
                        end = i + 1 + at;
                        break;
                    }
                    '\\' => match chars.next() {
                        Some((_, '\n')) => {
                            while chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
                                chars.next();
                            }
                        }
                        Some((_, 'n')) => lit.push('\n'),
                        Some((_, other)) => lit.push(other),
                        None => {}
                    },
                    c => lit.push(c),
                }
            }
            if !c_string {
                return Some(lit);
            }
            i = end + 1;
            continue;
        }
        i += 1;
    }
    None
}

/// Every message the log calls of `source` write, as patterns. A call
/// without a literal of its own (a wrapper passing its `msg` on) writes
/// what its callers give it, found at their call sites.
pub fn messages(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for name in LOG_CALLS {
        let needle = format!("{name}(");
        let mut from = 0;
        while let Some(at) = source[from..].find(&needle) {
            let start = from + at;
            from = start + needle.len();
            let before = source[..start].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                || source[..start].ends_with("fn ")
            {
                continue;
            }
            let args = call_arguments(source, start + name.len());
            if let Some(lit) = first_message(args) {
                out.push(format_as_glob(&lit));
            }
        }
    }
    out
}

/// The messages the section lists: the code span that opens the first cell
/// of each table row (`…` stands for what varies), as patterns.
pub fn documented(operations_md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in operations_md.lines() {
        if let Some(title) = markdown::heading(line) {
            if !line.starts_with("###") {
                inside = title == "Log messages";
            }
            continue;
        }
        if !inside || !line.starts_with("| `") {
            continue;
        }
        let first_cell = line[1..].split(" | ").next().unwrap_or("");
        if let Some(span) = markdown::code_spans(first_cell).into_iter().next() {
            out.push(span.replace('…', "*"));
        }
    }
    out
}

/// Messages written but not listed, and listed but not written.
pub fn problems(written: &[String], listed: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for w in written {
        if !listed.iter().any(|l| globs_meet(w, l)) {
            out.push(format!("not in docs/operations.md#log-messages: {w:?}"));
        }
    }
    for l in listed {
        if !written.iter().any(|w| globs_meet(w, l)) {
            out.push(format!("listed, but no log call writes it: {l:?}"));
        }
    }
    out
}

#[test]
fn every_log_message_is_in_the_operations_page() {
    let written: Vec<String> = sources().iter().flat_map(|s| messages(s)).collect();
    assert!(written.len() > 20, "log messages read: {written:?}");
    let page = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let listed = documented(&page);
    let found = problems(&written, &listed);
    assert!(found.is_empty(), "log messages:\n  {}", found.join("\n  "));
}

#[test]
fn an_undocumented_or_stale_log_message_is_caught() {
    let source = r#"
        pub fn log_warning(self, msg: &str) { log(self.0, c"warning", msg); }
        fn f(ctx: Ctx) {
            ctx.log_warning(&format!("handoff failed: {e}"));
            api::log(ctx, c"warning", &format!(
                "lock '{key}' (fence {}) evicted: \
                 use noeviction",
                fence
            ));
            ctx.log_warning("quarantine over");
        }
    "#;
    let written = messages(source);
    assert_eq!(
        written,
        [
            "handoff failed: *",
            "quarantine over",
            "lock '*' (fence *) evicted: use noeviction",
        ]
    );
    let page = "# Operations\n\n## Log messages\n\n| message | meaning |\n| --- | --- |\n\
                | `handoff failed: …` | a |\n| `lock 'orders:42' (fence …) evicted: use noeviction` | b |\n\
                | `gone: …` | c |\n\n## Next\n\n| `quarantine over` | elsewhere |\n";
    let listed = documented(page);
    assert_eq!(
        listed,
        [
            "handoff failed: *",
            "lock 'orders:42' (fence *) evicted: use noeviction",
            "gone: *"
        ]
    );
    assert_eq!(
        problems(&written, &listed),
        [
            "not in docs/operations.md#log-messages: \"quarantine over\"",
            "listed, but no log call writes it: \"gone: *\"",
        ]
    );
}

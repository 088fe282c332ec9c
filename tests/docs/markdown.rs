//! Just enough Markdown for the manual's checks: the pages (README.md and
//! every `docs/**/*.md`), their fenced code blocks, headings and the
//! anchors GitHub gives them, inline code spans and relative links.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One Markdown file, read whole.
pub struct Page {
    /// Relative to the repository root, with `/` separators.
    pub path: String,
    pub text: String,
}

/// A fenced code block: where it starts and its lines.
pub struct Block {
    /// 1-based line number of the first line inside the fence.
    pub line: usize,
    pub lines: Vec<String>,
}

impl Page {
    pub fn new(path: &str, text: &str) -> Page {
        Page {
            path: path.to_string(),
            text: text.to_string(),
        }
    }

    /// Every fenced code block (``` or ~~~), in order.
    pub fn blocks(&self) -> Vec<Block> {
        let mut out = Vec::new();
        let mut open: Option<(String, Block)> = None;
        for (i, line) in self.text.lines().enumerate() {
            let trimmed = line.trim_start();
            match &mut open {
                None => {
                    if let Some(fence) = fence_of(trimmed) {
                        let block = Block {
                            line: i + 2,
                            lines: Vec::new(),
                        };
                        open = Some((fence, block));
                    }
                }
                Some((fence, block)) => {
                    if trimmed.starts_with(fence.as_str()) && trimmed.trim() == fence.as_str() {
                        out.push(open.take().unwrap().1);
                    } else {
                        block.lines.push(line.to_string());
                    }
                }
            }
        }
        out
    }

    /// The lines outside fenced code blocks, with their 1-based numbers.
    pub fn prose(&self) -> Vec<(usize, &str)> {
        let mut out = Vec::new();
        let mut fence: Option<String> = None;
        for (i, line) in self.text.lines().enumerate() {
            let trimmed = line.trim_start();
            match &fence {
                None => match fence_of(trimmed) {
                    Some(f) => fence = Some(f),
                    None => out.push((i + 1, line)),
                },
                Some(f) => {
                    if trimmed.trim() == f.as_str() {
                        fence = None;
                    }
                }
            }
        }
        out
    }

    /// The headings' anchors, as GitHub makes them (a repeated heading gets
    /// `-1`, `-2`, ...).
    pub fn anchors(&self) -> Vec<String> {
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut out = Vec::new();
        for (_, line) in self.prose() {
            let Some(title) = heading(line) else { continue };
            let slug = slug(title);
            let n = seen.entry(slug.clone()).or_insert(0);
            out.push(if *n == 0 {
                slug.clone()
            } else {
                format!("{slug}-{n}")
            });
            *n += 1;
        }
        out
    }

    /// Every inline code span outside code blocks, with its line number.
    pub fn code_spans(&self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (n, line) in self.prose() {
            for span in code_spans(line) {
                out.push((n, span));
            }
        }
        out
    }

    /// Every link and image target outside code blocks and code spans:
    /// `[text](target)`, with its line number.
    pub fn links(&self) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        for (n, line) in self.prose() {
            let line = blank_code_spans(line);
            let mut rest = line.as_str();
            while let Some(i) = rest.find("](") {
                let after = &rest[i + 2..];
                let end = after.find(')').unwrap_or(after.len());
                let target = after[..end].split_whitespace().next().unwrap_or("");
                out.push((n, target.to_string()));
                rest = &after[end.min(after.len())..];
            }
        }
        out
    }

    /// The first paragraph after the page's `# ` title, joined into one line.
    pub fn opening(&self) -> Option<String> {
        let mut lines = self.prose().into_iter().map(|(_, l)| l.trim());
        lines.by_ref().find(|l| l.starts_with("# "))?;
        let para: Vec<&str> = lines
            .skip_while(|l| l.is_empty())
            .take_while(|l| !l.is_empty())
            .collect();
        (!para.is_empty()).then(|| para.join(" "))
    }
}

fn fence_of(trimmed: &str) -> Option<String> {
    for ch in ['`', '~'] {
        let n = trimmed.chars().take_while(|&c| c == ch).count();
        if n >= 3 {
            return Some(ch.to_string().repeat(n));
        }
    }
    None
}

/// The text of a `#`..`######` heading line.
pub fn heading(line: &str) -> Option<&str> {
    let hashes = line.chars().take_while(|&c| c == '#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    rest.starts_with(' ').then(|| rest.trim())
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (but `-`
/// and `_`), spaces to `-`.
pub fn slug(title: &str) -> String {
    title
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The contents of a line's code spans (single or multiple backticks).
pub fn code_spans(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let n = b[i..].iter().take_while(|&&c| c == b'`').count();
        let fence = &line[i..i + n];
        let start = i + n;
        match line[start..].find(fence) {
            Some(len) => {
                out.push(line[start..start + len].trim().to_string());
                i = start + len + n;
            }
            None => break,
        }
    }
    out
}

/// The line with every code span replaced by spaces.
fn blank_code_spans(line: &str) -> String {
    let mut out = line.to_string();
    for span in code_spans(line) {
        if let Some(at) = out.find(&format!("`{span}`")) {
            out.replace_range(at..at + span.len() + 2, &" ".repeat(span.len() + 2));
        }
    }
    out
}

/// README.md and every Markdown file under docs/, sorted.
pub fn manual(root: &Path) -> Vec<Page> {
    let mut paths = vec![root.join("README.md")];
    let mut stack = vec![root.join("docs")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "md") {
                paths.push(p);
            }
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            Page { path: rel, text }
        })
        .collect()
}

/// `target` of a link on `from`, as a repository path (`..` resolved).
pub fn resolve(from: &str, target: &str) -> PathBuf {
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.iter().collect()
}

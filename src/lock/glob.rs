//! Glob patterns as `SCAN ... MATCH` and `PUBSUB CHANNELS` read them
//! (`*`, `?`, `[abc]`, `[^a-z]`, `\x`), so `DLOCK.QUEUED pattern` and
//! `SCAN MATCH pattern` select the same names. The module API offers no
//! matcher.
//!
//! Without recursion: a mismatch resumes after the last `*` seen, one byte
//! further into the name, which is enough because every other token
//! matches exactly one byte. A match costs O(pattern × name) at worst,
//! where the server's recursive matcher can take exponential time on
//! patterns like `a*a*a*a*b`.

/// Whether `name` matches `pattern`.
pub fn matches(pattern: &[u8], name: &[u8]) -> bool {
    // The server's matcher never enters its loop for an empty name, so
    // only an empty pattern matches it there; `SCAN` skips matching for
    // the pattern `*` alone, which therefore matches it too.
    if name.is_empty() {
        return pattern.is_empty() || pattern == b"*";
    }
    let (mut p, mut s) = (0, 0);
    // Where the pattern resumes after the last `*`, and the name byte that
    // star would swallow next.
    let mut resume: Option<(usize, usize)> = None;
    while let Some(&c) = name.get(s) {
        if pattern.get(p) == Some(&b'*') {
            while pattern.get(p) == Some(&b'*') {
                p += 1;
            }
            if p == pattern.len() {
                return true;
            }
            resume = Some((p, s));
            continue;
        }
        if let Some(next) = one(pattern, p, c) {
            p = next;
            s += 1;
            continue;
        }
        match resume {
            Some((after_star, from)) => {
                p = after_star;
                s = from + 1;
                resume = Some((after_star, s));
            }
            None => return false,
        }
    }
    pattern.iter().skip(p).all(|&b| b == b'*')
}

/// Whether the token at `pattern[p]` (not `*`) matches byte `c`; if so,
/// where the next token starts.
fn one(pattern: &[u8], p: usize, c: u8) -> Option<usize> {
    let at = |i: usize| pattern.get(i).copied();
    match (at(p)?, at(p + 1)) {
        (b'?', _) => Some(p + 1),
        (b'[', _) => class(pattern, p + 1, c),
        // A trailing backslash stands for itself.
        (b'\\', Some(quoted)) => (quoted == c).then_some(p + 2),
        (b, _) => (b == c).then_some(p + 1),
    }
}

/// A class whose body starts at `pattern[p]`, read as the server reads it:
/// `\x` is `x`, `a-z` is a range (its ends in either order), the first
/// `]` ends it (`[]` matches nothing), and an unclosed class runs to the
/// pattern's end.
fn class(pattern: &[u8], mut p: usize, c: u8) -> Option<usize> {
    let negated = pattern.get(p) == Some(&b'^');
    if negated {
        p += 1;
    }
    let mut hit = false;
    let at = |i: usize| pattern.get(i).copied();
    let end = loop {
        let Some(b) = at(p) else {
            break pattern.len();
        };
        match (b, at(p + 1), at(p + 2)) {
            (b'\\', Some(quoted), _) => {
                hit |= quoted == c;
                p += 1;
            }
            (b']', _, _) => break p + 1,
            (from, Some(b'-'), Some(to)) => {
                hit |= (from.min(to)..=from.max(to)).contains(&c);
                p += 2;
            }
            _ => hit |= b == c,
        }
        p += 1;
    };
    (hit != negated).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::matches;

    fn m(pattern: &str, name: &str) -> bool {
        matches(pattern.as_bytes(), name.as_bytes())
    }

    #[test]
    fn literals_stars_and_question_marks() {
        assert!(m("job:1", "job:1"));
        assert!(!m("job:1", "job:12"));
        assert!(!m("job:12", "job:1"));
        assert!(m("job:*", "job:"));
        assert!(m("job:*", "job:42"));
        assert!(!m("job:*", "jo"));
        assert!(m("*", "anything"));
        assert!(m("*:*:*", "a:b:c"));
        assert!(!m("*:*:*", "a:b"));
        assert!(m("a*b*c", "aXbYc"));
        assert!(m("a*b*c", "abbbc"));
        assert!(!m("a*b*c", "acb"));
        assert!(m("*abc", "ababc"));
        assert!(m("?", "x"));
        assert!(!m("?", "xy"));
        assert!(m("j?b*", "job:1"));
        assert!(m("a**", "a"));
        assert!(m("{order:42}*", "{order:42}:items"));
    }

    #[test]
    fn classes_ranges_negation_and_escapes() {
        assert!(m("[abc]x", "bx"));
        assert!(!m("[abc]x", "dx"));
        assert!(m("[^abc]x", "dx"));
        assert!(!m("[^abc]x", "ax"));
        assert!(m("r[0-9]", "r7"));
        assert!(m("r[9-0]", "r7"), "a range's ends in either order");
        assert!(!m("r[0-9]", "ra"));
        assert!(m("[\\]]", "]"));
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "x"));
        assert!(m("a\\", "a\\"), "a trailing backslash is itself");
        assert!(!m("[]a", "a"), "the first ] closes an empty class");
        assert!(m("[ab", "b"), "an unclosed class runs to the end");
        assert!(!m("[ab", "bc"));
        assert!(m("x[a-]", "x]"), "the server reads a-] as a range");
        assert!(m("[\\-]", "-"));
    }

    #[test]
    fn the_empty_name_and_binary_names() {
        assert!(m("", ""));
        assert!(m("*", ""));
        assert!(!m("**", ""));
        assert!(!m("?", ""));
        assert!(!m("", "a"));
        assert!(matches(b"b\xff*", b"b\xff\x00z"));
        assert!(matches(b"[\x80-\xff]", b"\xc3"));
    }

    #[test]
    fn many_stars_cost_no_more_than_the_pattern_times_the_name() {
        let name = "a".repeat(5000);
        let pattern = format!("{}b", "a*".repeat(40));
        let t = std::time::Instant::now();
        assert!(!m(&pattern, &name));
        assert!(m(&format!("{}a", "a*".repeat(40)), &name));
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
    }

    /// Against a plain recursive reading of the same rules, on every short
    /// pattern and name over a small alphabet.
    #[test]
    fn agrees_with_a_recursive_matcher() {
        fn slow(p: &[u8], s: &[u8]) -> bool {
            match p.first() {
                None => s.is_empty(),
                Some(b'*') => (0..=s.len()).any(|i| slow(&p[1..], &s[i..])),
                Some(_) => match s.first() {
                    None => false,
                    Some(&c) => super::one(p, 0, c).is_some_and(|n| slow(&p[n..], &s[1..])),
                },
            }
        }
        let alphabet = [b'a', b'b', b'*', b'?', b'[', b']', b'^', b'-', b'\\'];
        let mut patterns: Vec<Vec<u8>> = vec![vec![]];
        let mut level = patterns.clone();
        for _ in 0..4 {
            level = level
                .iter()
                .flat_map(|p| {
                    alphabet.iter().map(move |&c| {
                        let mut q = p.clone();
                        q.push(c);
                        q
                    })
                })
                .collect();
            patterns.extend(level.iter().cloned());
        }
        let names: Vec<Vec<u8>> = (1..=4)
            .flat_map(|n| {
                (0..3usize.pow(n)).map(move |mut i| {
                    (0..n)
                        .map(|_| {
                            let c = [b'a', b'b', b']'][i % 3];
                            i /= 3;
                            c
                        })
                        .collect()
                })
            })
            .collect();
        for p in &patterns {
            for s in &names {
                assert_eq!(matches(p, s), slow(p, s), "{:?} {:?}", p, s);
            }
        }
    }
}

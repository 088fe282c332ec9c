//! Glob patterns as `SCAN ... MATCH` and `PUBSUB CHANNELS` read them
//! (`*`, `?`, `[abc]`, `[^a-z]`, `\x`), so `DLOCK.QUEUED pattern` and
//! `SCAN MATCH pattern` select the same names. The module API offers no
//! matcher.
//!
//! A pattern is read once into tokens (a run of `*`, or a set of bytes for
//! every other token, which matches exactly one byte), then run as a
//! bit-parallel automaton: one bit per token boundary, every name byte
//! costs a few operations on ⌈(tokens + 1) / 64⌉ words, whatever the
//! pattern. The server's recursive matcher backtracks instead and bounds
//! its recursion at 1000 nested stars (`stringmatchlen`, no match past
//! it); a pattern of at most [`MAX_PATTERN`] bytes has at most 128 runs of
//! stars, so that bound never applies and both answer alike.

use crate::Error;

/// Longest pattern `DLOCK.QUEUED` accepts: reading it costs microseconds,
/// matching a name costs a few operations on at most 5 words per name byte,
/// and no run of stars reaches the server's nesting bound.
pub const MAX_PATTERN: usize = 256;

/// Words of state for the longest pattern: one bit per token boundary.
const MAX_WORDS: usize = (MAX_PATTERN + 1).div_ceil(64);

/// A pattern read once, to match many names.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// The answer for the empty name (see [`Pattern::matches`]).
    empty_name: bool,
    /// Words per state set: ⌈(tokens + 1) / 64⌉.
    words: usize,
    /// For every byte value, the boundaries `j` whose token `j` (not a star)
    /// matches that byte: `words` words per byte value.
    accepts: Vec<u64>,
    /// The boundaries whose token is a run of stars.
    stars: [u64; MAX_WORDS],
    /// The boundary after the last token: reached, the name matches.
    end: usize,
}

/// One token: a run of stars, or the bytes a one-byte token matches.
enum Token {
    Stars,
    Bytes([u64; 4]),
}

impl Pattern {
    pub fn new(pattern: &[u8]) -> Result<Pattern, Error> {
        if pattern.len() > MAX_PATTERN {
            return Err(Error::PatternTooLong { max: MAX_PATTERN });
        }
        let tokens = tokens(pattern);
        let words = (tokens.len() + 1).div_ceil(64);
        let mut accepts = vec![0u64; 256 * words];
        let mut stars = [0u64; MAX_WORDS];
        for (j, token) in tokens.iter().enumerate() {
            let (word, bit) = (j / 64, 1u64 << (j % 64));
            match token {
                Token::Stars => {
                    if let Some(w) = stars.get_mut(word) {
                        *w |= bit;
                    }
                }
                Token::Bytes(set) => {
                    for c in 0..256usize {
                        let member = set.get(c / 64).is_some_and(|w| w & (1 << (c % 64)) != 0);
                        if let (true, Some(w)) = (member, accepts.get_mut(c * words + word)) {
                            *w |= bit;
                        }
                    }
                }
            }
        }
        Ok(Pattern {
            // The server's matcher never enters its loop for an empty name,
            // so only an empty pattern matches it there; `SCAN` skips
            // matching for the pattern `*` alone, which therefore matches
            // it too.
            empty_name: pattern.is_empty() || pattern == b"*",
            words,
            accepts,
            stars,
            end: tokens.len(),
        })
    }

    /// Whether `name` matches: O(name × ⌈(tokens + 1) / 64⌉) word operations.
    pub fn matches(&self, name: &[u8]) -> bool {
        if name.is_empty() {
            return self.empty_name;
        }
        let w = self.words;
        // Bit j: the name read so far can be matched by the first j tokens.
        let mut state = [0u64; MAX_WORDS];
        state[0] = 1;
        // Words past the last one holding a bit stay empty but for the
        // bit a step may carry into the next word.
        let mut live = close(&mut state, &self.stars, 1);
        let mut next = [0u64; MAX_WORDS];
        for &c in name {
            let row = usize::from(c) * w;
            let accepts = self.accepts.get(row..row + w).unwrap_or(&[]);
            let upto = (live + 1).min(w);
            let (mut carry, mut last) = (0, 0);
            let words = next.iter_mut().zip(&state).zip(accepts).zip(&self.stars);
            for (i, (((n, &s), &a), &st)) in words.take(upto).enumerate() {
                // A one-byte token moves the boundary on; a star keeps it.
                let moved = s & a;
                *n = (moved << 1) | carry | (s & st);
                carry = moved >> 63;
                if *n != 0 {
                    last = i + 1;
                }
            }
            if last == 0 {
                return false;
            }
            live = close(&mut next, &self.stars, (last + 1).min(w)).max(last);
            state = next;
        }
        state
            .get(self.end / 64)
            .is_some_and(|word| word & (1 << (self.end % 64)) != 0)
    }
}

/// Adds the boundaries after every star run reached in the first `upto`
/// words: a run also matches nothing. Runs are never adjacent, so one
/// pass reaches them all. Returns how many words up to the last holding a
/// bit.
fn close(state: &mut [u64; MAX_WORDS], stars: &[u64; MAX_WORDS], upto: usize) -> usize {
    let (mut carry, mut last) = (0, 0);
    for (i, (s, &st)) in state.iter_mut().zip(stars).take(upto).enumerate() {
        let at_star = *s & st;
        *s |= (at_star << 1) | carry;
        carry = at_star >> 63;
        if *s != 0 {
            last = i + 1;
        }
    }
    last
}

/// The pattern's tokens, read as the server reads them.
fn tokens(pattern: &[u8]) -> Vec<Token> {
    let at = |i: usize| pattern.get(i).copied();
    let mut out = Vec::new();
    let mut p = 0;
    while let Some(b) = at(p) {
        let mut set = [0u64; 4];
        let mut add = |c: u8| {
            if let Some(w) = set.get_mut(usize::from(c) / 64) {
                *w |= 1 << (c % 64);
            }
        };
        p = match (b, at(p + 1)) {
            (b'*', _) => {
                while at(p) == Some(b'*') {
                    p += 1;
                }
                out.push(Token::Stars);
                continue;
            }
            (b'?', _) => {
                set = [u64::MAX; 4];
                p + 1
            }
            (b'[', _) => class(pattern, p + 1, &mut set),
            // A trailing backslash stands for itself.
            (b'\\', Some(quoted)) => {
                add(quoted);
                p + 2
            }
            (b, _) => {
                add(b);
                p + 1
            }
        };
        out.push(Token::Bytes(set));
    }
    out
}

/// A class whose body starts at `pattern[p]`, read as the server reads it:
/// `\x` is `x`, `a-z` is a range (its ends in either order), the first
/// `]` ends it (`[]` matches nothing), and an unclosed class runs to the
/// pattern's end. Fills `set` with the bytes it matches; returns where the
/// next token starts.
fn class(pattern: &[u8], mut p: usize, set: &mut [u64; 4]) -> usize {
    let negated = pattern.get(p) == Some(&b'^');
    if negated {
        p += 1;
    }
    let mut add = |from: u8, to: u8| {
        for c in from..=to {
            if let Some(w) = set.get_mut(usize::from(c) / 64) {
                *w |= 1 << (c % 64);
            }
        }
    };
    let at = |i: usize| pattern.get(i).copied();
    let end = loop {
        let Some(b) = at(p) else {
            break pattern.len();
        };
        match (b, at(p + 1), at(p + 2)) {
            (b'\\', Some(quoted), _) => {
                add(quoted, quoted);
                p += 1;
            }
            (b']', _, _) => break p + 1,
            (from, Some(b'-'), Some(to)) => {
                add(from.min(to), from.max(to));
                p += 2;
            }
            _ => add(b, b),
        }
        p += 1;
    };
    if negated {
        for w in set.iter_mut() {
            *w = !*w;
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &[u8], name: &[u8]) -> bool {
        Pattern::new(pattern).unwrap().matches(name)
    }

    fn m(pattern: &str, name: &str) -> bool {
        matches(pattern.as_bytes(), name.as_bytes())
    }

    /// The reference reading of one token, byte by byte, for the
    /// recursive matcher below: whether the token at `pattern[p]` (not
    /// `*`) matches byte `c`; if so, where the next token starts.
    fn one(pattern: &[u8], p: usize, c: u8) -> Option<usize> {
        let at = |i: usize| pattern.get(i).copied();
        match (at(p)?, at(p + 1)) {
            (b'?', _) => Some(p + 1),
            (b'[', _) => reference_class(pattern, p + 1, c),
            (b'\\', Some(quoted)) => (quoted == c).then_some(p + 2),
            (b, _) => (b == c).then_some(p + 1),
        }
    }

    fn reference_class(pattern: &[u8], mut p: usize, c: u8) -> Option<usize> {
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
    fn the_longest_patterns_answer_like_short_ones() {
        let name = "a".repeat(5000);
        let stars = "a*".repeat(MAX_PATTERN / 2 - 1);
        assert!(!m(&format!("{stars}b"), &name));
        assert!(m(&format!("{stars}a"), &name));
        assert!(m(&format!("{stars}?"), &name));
        let class = format!("[{}]", "b".repeat(MAX_PATTERN - 2));
        assert_eq!(class.len(), MAX_PATTERN);
        assert!(!m(&class, "a"));
        assert!(m(&class, "b"));
        let long = "?".repeat(MAX_PATTERN);
        assert!(m(&long, &name[..MAX_PATTERN]));
        assert!(!m(&long, &name[..MAX_PATTERN - 1]));
        assert!(!m(&long, &name[..MAX_PATTERN + 1]));
    }

    #[test]
    fn a_longer_pattern_is_refused() {
        let e = Pattern::new("*".repeat(MAX_PATTERN + 1).as_bytes()).unwrap_err();
        assert_eq!(e.to_string(), "ERR pattern is longer than 256 bytes");
        assert!(Pattern::new(b"").is_ok());
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
                    Some(&c) => one(p, 0, c).is_some_and(|n| slow(&p[n..], &s[1..])),
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

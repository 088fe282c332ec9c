//! `DLOCK.GUARD resource (TOKEN token | FENCE fence) command [arg ...]`,
//! `DLOCK.GUARD resource (TOKEN token | FENCE fence) BATCH count argc
//! command [arg ...] [argc command [arg ...] ...]` and `DLOCK.CHECK
//! resource (TOKEN token | FENCE fence)`. The inner commands are handed
//! back as ranges of argv, for the server to look up and run.

use std::ops::Range;

use crate::error::Error;
use crate::fence::MAX_FENCE;
use crate::guard::Proof;
use crate::limits::MAX_STORED_TOKEN;
use crate::request::args::parse_u64;

/// Most commands one `BATCH` may carry: a guard runs them all inside one
/// event-loop turn, checked and saved for undoing first.
pub const MAX_BATCH: usize = 1000;

/// Where the inner commands start: after the name, resource and proof.
const FIRST_INNER: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard<'a> {
    pub proof: Proof<'a>,
    /// Each inner command's arguments (its name first), as argv ranges.
    pub commands: Vec<Range<usize>>,
    /// `BATCH`: the reply is an array, and a failed command undoes the
    /// ones before it.
    pub batch: bool,
}

/// `DLOCK.GUARD`'s arguments.
pub fn guard<'a>(argv: &[&'a [u8]]) -> Result<Guard<'a>, Error> {
    let proof = proof(argv)?;
    let rest = argv.get(FIRST_INNER..).unwrap_or(&[]);
    let Some((first, after)) = rest.split_first() else {
        return Err(Error::WrongArity);
    };
    if !first.eq_ignore_ascii_case(b"BATCH") {
        return Ok(Guard {
            proof,
            commands: std::iter::once(FIRST_INNER..argv.len()).collect(),
            batch: false,
        });
    }
    let (count, mut rest) = after.split_first().ok_or(Error::WrongArity)?;
    let count = parse_u64(count)
        .and_then(|c| usize::try_from(c).ok())
        .filter(|c| (1..=MAX_BATCH).contains(c))
        .ok_or(Error::InvalidInteger {
            arg: "count",
            min: 1,
            max: MAX_BATCH as u64,
        })?;
    let mut at = FIRST_INNER + 2;
    let mut commands = Vec::with_capacity(count);
    for _ in 0..count {
        let (argc, after) = rest.split_first().ok_or(Error::WrongArity)?;
        let argc = parse_u64(argc)
            .and_then(|c| usize::try_from(c).ok())
            .filter(|c| (1..=after.len()).contains(c))
            .ok_or(Error::BatchArgc)?;
        commands.push(at + 1..at + 1 + argc);
        at += 1 + argc;
        rest = after.get(argc..).unwrap_or(&[]);
    }
    if !rest.is_empty() {
        return Err(Error::BatchArgc);
    }
    Ok(Guard {
        proof,
        commands,
        batch: true,
    })
}

/// `DLOCK.CHECK`'s arguments: the proof, nothing after it.
pub fn check<'a>(argv: &[&'a [u8]]) -> Result<Proof<'a>, Error> {
    if argv.len() != FIRST_INNER {
        return Err(Error::WrongArity);
    }
    proof(argv)
}

/// `TOKEN token` or `FENCE fence` at argv 2 and 3. Any token a hold can
/// store is accepted: the guard never creates one.
fn proof<'a>(argv: &[&'a [u8]]) -> Result<Proof<'a>, Error> {
    let (Some(kind), Some(value)) = (argv.get(2), argv.get(3)) else {
        return Err(Error::WrongArity);
    };
    if kind.eq_ignore_ascii_case(b"TOKEN") {
        if value.is_empty() {
            return Err(Error::EmptyToken);
        }
        if value.len() > MAX_STORED_TOKEN {
            return Err(Error::TokenTooLong {
                max: MAX_STORED_TOKEN,
            });
        }
        return Ok(Proof::Token(value));
    }
    if kind.eq_ignore_ascii_case(b"FENCE") {
        return parse_u64(value)
            .filter(|f| (1..=MAX_FENCE).contains(f))
            .map(Proof::Fence)
            .ok_or(Error::InvalidInteger {
                arg: "fence",
                min: 1,
                max: MAX_FENCE,
            });
    }
    Err(Error::Syntax)
}

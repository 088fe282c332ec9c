//! The command contract of dlock, one test per rule and per bad input.
//!
//! Every test starts its own server, so tests are independent and can run in
//! parallel. Bad-input tests first set up a held lock (or a key of another
//! type), send the bad command, check the exact error text and then check
//! that nothing changed.
use crate::common;

use common::lock::*;
use common::*;
use redis::{Connection, Value};
use std::time::Duration;

const MAX_TTL: u64 = 1 << 47;
const LONG_TTL: u64 = 60_000;
const TTL_ERR: &str = "ERR ttl_ms must be an integer from 1 to 140737488355328";
const EMPTY_TOKEN_ERR: &str = "ERR token must not be empty";
const LONG_TOKEN_ERR: &str = "ERR token is longer than 512 bytes";
/// Above what a lock can store (1 MiB): refused by every command.
const STORED_TOKEN_ERR: &str = "ERR token is longer than 1048576 bytes";
const SYNTAX_ERR: &str = "ERR syntax error";
const WRONGTYPE_ERR: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

// ---------------------------------------------------------------- helpers

fn arity_err(cmd: &str) -> String {
    format!("ERR wrong number of arguments for '{cmd}' command")
}

fn cmd_of(args: &[&[u8]]) -> redis::Cmd {
    let mut c = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

/// Sends a command that must fail; returns the error text.
fn expect_err(c: &mut Connection, args: &[&[u8]]) -> String {
    match cmd_of(args).query::<Value>(c) {
        Ok(v) => panic!("{:?}: expected an error, got {v:?}", show(args)),
        Err(e) => err_text(&e),
    }
}

/// The arguments as text for a failure message (long ones cut short).
fn show(args: &[&[u8]]) -> Vec<String> {
    args.iter()
        .map(|a| match a.get(..64).filter(|_| a.len() > 80) {
            Some(head) => format!("{}... ({} bytes)", String::from_utf8_lossy(head), a.len()),
            None => String::from_utf8_lossy(a).into_owned(),
        })
        .collect()
}

/// A held lock to compare against after a command that must change nothing.
struct Held {
    res: Vec<u8>,
    token: Vec<u8>,
    fence: i64,
    pttl: i64,
}

fn hold(c: &mut Connection, res: &[u8], tok: &[u8]) -> Held {
    let fence = acquire(c, res, tok, LONG_TTL).expect("free lock must be granted");
    let pttl = pttl(c, res);
    assert!(pttl > 0 && pttl <= LONG_TTL as i64, "PTTL {pttl}");
    Held {
        res: res.to_vec(),
        token: tok.to_vec(),
        fence,
        pttl,
    }
}

impl Held {
    /// Same owner, same fence, TTL neither raised nor cut.
    fn assert_unchanged(&self, c: &mut Connection) {
        let i = info(c, &self.res).expect("lock must still be held");
        assert_eq!(i.token, self.token, "owner changed");
        assert_eq!(i.fence, self.fence, "fence changed");
        let now = pttl(c, &self.res);
        assert!(
            now > 0 && now <= self.pttl,
            "PTTL must stay positive and not increase: was {}, now {now}",
            self.pttl
        );
        // Generous margin for a loaded machine; a bad command that reset the
        // TTL to a short value would land far below it.
        assert!(
            now > self.pttl - 20_000,
            "PTTL cut: was {}, now {now}",
            self.pttl
        );
        let size: i64 = redis::cmd("DBSIZE").query(c).unwrap();
        assert_eq!(size, 1, "no other key may appear");
    }

    /// Same owner and fence, TTL not raised, other keys allowed.
    fn assert_unchanged_ttl_only(&self, c: &mut Connection) {
        let i = info(c, &self.res).expect("lock must still be held");
        assert_eq!((i.token.as_slice(), i.fence), (&self.token[..], self.fence));
        let now = pttl(c, &self.res);
        assert!(now > 0 && now <= self.pttl, "{} -> {now}", self.pttl);
    }
}

/// Holds `res` as `owner`, sends `args`, expects exactly `expected`, and
/// checks that the lock is untouched.
fn check_bad_input(args: &[Vec<u8>], expected: &str) {
    let s = Server::start();
    let mut c = s.conn();
    let held = hold(&mut c, b"res", b"owner");
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    assert_eq!(expect_err(&mut c, &args), expected, "{:?}", show(&args));
    held.assert_unchanged(&mut c);
    // The lock still works normally afterwards.
    assert_eq!(release(&mut c, b"res", b"owner"), 1);
}

/// Over `dlock.max-token-length` (512 by default).
fn long_token() -> Vec<u8> {
    vec![b'x'; 513]
}

/// Over what a lock can store.
fn unstorable_token() -> Vec<u8> {
    vec![b'x'; (1 << 20) + 1]
}

macro_rules! bad_input {
    ($($name:ident: [$($arg:expr),+] => $err:expr;)+) => {
        $(
            #[test]
            fn $name() {
                let args: Vec<Vec<u8>> = vec![$(AsRef::<[u8]>::as_ref(&$arg).to_vec()),+];
                check_bad_input(&args, &$err);
            }
        )+
    };
}

// The topic modules come after `bad_input!`, which they use.
mod access;
mod acquire;
mod extend;
mod failures;
mod info;
mod keyspace;
mod queued;
mod release;
mod transactions;
mod wrongtype;

//! The commands a guard runs for its caller: which it refuses before any
//! runs, and what a `BATCH` saves so that a command failing part-way
//! undoes the ones before it (all or none).

/// What the server's command table says of a command (`COMMAND INFO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Like `COMMAND INFO`: `n` exactly n arguments (name included), `-n`
    /// at least n.
    pub arity: i64,
    pub flags: u32,
}

/// The command flags the rules look at.
pub mod flag {
    pub const WRITE: u32 = 1;
    pub const DENY_OOM: u32 = 1 << 1;
    pub const NO_SCRIPT: u32 = 1 << 2;
    pub const BLOCKING: u32 = 1 << 3;
    pub const NO_MULTI: u32 = 1 << 4;
    pub const PUBSUB: u32 = 1 << 5;
    pub const ADMIN: u32 = 1 << 6;

    /// A flag's bit from its `COMMAND INFO` name (0: not one of ours).
    pub fn of(name: &[u8]) -> u32 {
        match name {
            b"write" => WRITE,
            b"denyoom" => DENY_OOM,
            b"noscript" => NO_SCRIPT,
            b"blocking" => BLOCKING,
            b"no_multi" => NO_MULTI,
            b"pubsub" => PUBSUB,
            b"admin" => ADMIN,
            _ => 0,
        }
    }
}

impl Facts {
    pub fn has(&self, f: u32) -> bool {
        self.flags & f != 0
    }

    pub fn arity_fits(&self, argc: usize) -> bool {
        let argc = i64::try_from(argc).unwrap_or(i64::MAX);
        if self.arity >= 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }
}

/// Commands that change the server rather than data, whatever their flags
/// (`CLUSTER`'s subcommands include slot assignments and failovers).
const OPERATOR: [&[u8]; 3] = [b"cluster", b"memory", b"slowlog"];

/// Commands that act outside the resource's database, whatever their flags.
const OTHER_DATABASES: [&[u8]; 5] = [b"select", b"move", b"swapdb", b"flushall", b"flushdb"];

/// Why a guard must not run `args` (the inner command, its name first;
/// `facts` as the command table has them, `None` for no such command), or
/// `None` when it may. `keys`: how many keys the command names.
pub fn refusal(
    args: &[&[u8]],
    facts: Option<&Facts>,
    keys: usize,
    batch: bool,
) -> Option<&'static str> {
    let name = args.first().copied().unwrap_or_default();
    let Some(facts) = facts else {
        return Some("is not a command this server knows");
    };
    if name.len() >= 6
        && name
            .get(..6)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"dlock."))
    {
        return Some("is a dlock command: a guard runs writes to data, never lock commands");
    }
    if !facts.arity_fits(args.len()) {
        return Some("has the wrong number of arguments");
    }
    if facts.has(flag::BLOCKING) {
        return Some("can block: a guard runs only commands that answer at once");
    }
    if facts.has(flag::NO_SCRIPT | flag::NO_MULTI) {
        return Some("is not allowed inside a script or a transaction");
    }
    let lower = name.to_ascii_lowercase();
    if facts.has(flag::ADMIN) || OPERATOR.contains(&lower.as_slice()) {
        return Some("changes the server, not data");
    }
    if lower == b"migrate" {
        return Some("writes to another server, waiting for it");
    }
    if lower == b"restore" || lower == b"restore-asking" {
        return Some(
            "may create a value only lock commands may make (a lock); write the data instead",
        );
    }
    let copies_to_db =
        lower == b"copy" && args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"DB"));
    if OTHER_DATABASES.contains(&lower.as_slice()) || copies_to_db {
        return Some("reaches outside the resource's database");
    }
    if facts.has(flag::WRITE) && keys == 0 {
        return Some("writes without naming its keys");
    }
    if batch && facts.has(flag::PUBSUB) {
        return Some("publishes, which a failed BATCH could not take back; guard it alone");
    }
    None
}

/// Whether a `BATCH`'s command `index` (0-based, of `count`) must have its
/// keys saved before it runs: a later command may fail and undo it. The
/// last command needs none (a command that fails changes nothing), nor
/// does a command that writes nothing.
pub fn saves_keys(batch: bool, index: usize, count: usize, facts: &Facts) -> bool {
    batch && index + 1 < count && facts.has(flag::WRITE)
}

pub use crate::limits::{MAX_SAVED_BYTES, MAX_SAVED_ELEMENTS, MAX_SAVED_KEYS};

/// The size of a value to save, as the server tells it cheaply: its bytes
/// (a string's length, else its `MEMORY USAGE`) and, for a collection, its
/// elements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Size {
    pub bytes: u64,
    pub elements: u64,
}

/// What a batch has saved so far, against the bounds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Saved {
    keys: u64,
    bytes: u64,
    elements: u64,
}

impl Saved {
    /// Counts one more key to save (`None`: it does not exist, so undoing
    /// deletes it); false (and nothing counted) when it would pass a bound.
    pub fn admit(&mut self, size: Option<Size>) -> bool {
        let size = size.unwrap_or_default();
        let next = Saved {
            keys: self.keys + 1,
            bytes: self.bytes.saturating_add(size.bytes),
            elements: self.elements.saturating_add(size.elements),
        };
        if next.keys > MAX_SAVED_KEYS
            || next.bytes > MAX_SAVED_BYTES
            || next.elements > MAX_SAVED_ELEMENTS
        {
            return false;
        }
        *self = next;
        true
    }
}

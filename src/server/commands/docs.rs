//! Command metadata: what `COMMAND DOCS` and `COMMAND INFO` show for every
//! dlock command (summary, arity, arguments) and the key specs that ACL key
//! permissions and cluster routing read.
//!
//! Set through `RedisModule_GetCommand` + `RedisModule_SetCommandInfo` (Redis
//! 7.0). The server copies every string and array during the call, so the
//! arrays built here only live for it; the strings are `'static` anyway.
//!
//! A server without the API (6.x) still runs the module with the legacy
//! `1,1,1` key position from registration: a warning, not a failed load.
//!
//! Longer than 400 lines because it is a table: one entry per command and
//! argument, as `COMMAND DOCS` shows them.

use std::ffi::{c_int, CStr};
use std::mem::size_of;
use std::ptr;

use redis_module::raw;

use crate::server::edge::api::{self, Ctx};
use crate::server::persistence::{effects, hold_effects, session_effects};
use dlock_core::Error;

const SINCE: &CStr = c"0.1.0";
/// Every command's but `DLOCK.QUEUED`'s.
const COMPLEXITY: &CStr = c"O(1)";
const INTERNAL: &CStr = c"Applies a replicated lock effect; refused from clients.";
/// A session's id, as its subcommands take it.
const ID: Arg = arg(c"id", Kind::String);

const fn optional(a: Arg) -> Arg {
    Arg {
        optional: true,
        ..a
    }
}

/// Version 1 with our bindgen sizes, like C's `REDISMODULE_COMMAND_INFO_VERSION`
/// (the C header's `RedisModule_CurrentCommandInfoVersion` is a `static` of
/// the header, not a symbol the server exports). The server steps through our
/// arrays by these sizes and reads only the fields its version knows, so a
/// field a newer header appended (`display_text`) is simply not read by 7.0.
static VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
};

// Key-spec flags (7.0 semantics). ACL key permissions follow them: ACCESS
// needs read permission, UPDATE/INSERT/DELETE need write permission. 7.0
// requires exactly one of RO/RW/OW/RM and at most one of UPDATE/INSERT/DELETE.
const RO: u32 = raw::REDISMODULE_CMD_KEY_RO;
const RW: u32 = raw::REDISMODULE_CMD_KEY_RW;
const OW: u32 = raw::REDISMODULE_CMD_KEY_OW;
const ACCESS: u32 = raw::REDISMODULE_CMD_KEY_ACCESS;
const UPDATE: u32 = raw::REDISMODULE_CMD_KEY_UPDATE;
const DELETE: u32 = raw::REDISMODULE_CMD_KEY_DELETE;

#[derive(Clone, Copy)]
enum Kind {
    Key,
    String,
    Integer,
    UnixTime,
    /// A glob pattern, as `SCAN ... MATCH` reads it.
    Pattern,
    /// A keyword alone (`SHARED`).
    PureToken,
    /// One of several arguments (`Arg::choices`).
    OneOf,
}

impl Kind {
    fn raw(self) -> raw::RedisModuleCommandArgType {
        match self {
            Kind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
            Kind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
            Kind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
            Kind::UnixTime => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
            Kind::Pattern => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PATTERN,
            Kind::PureToken => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
            Kind::OneOf => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
        }
    }
}

struct Arg {
    name: &'static CStr,
    kind: Kind,
    /// The keyword before the value (`WAIT timeout_ms`).
    token: Option<&'static CStr>,
    optional: bool,
    /// Repeated (a set's resources).
    multiple: bool,
    /// A `OneOf`'s choices.
    choices: &'static [Arg],
}

const fn arg(name: &'static CStr, kind: Kind) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
        choices: &[],
    }
}

/// Every command's only key is argument 1, described by key spec 0.
const RESOURCE: Arg = arg(c"resource", Kind::Key);

struct Doc {
    name: &'static CStr,
    summary: &'static CStr,
    /// As `COMMAND DOCS` shows it.
    complexity: &'static CStr,
    /// As in the command table: negative is "at least". 0 keeps the arity
    /// of the registration (-1: the handler checks it).
    arity: c_int,
    keys: Keys,
    args: &'static [Arg],
}

/// A command's keys, with their key-spec flags.
#[derive(Clone, Copy)]
enum Keys {
    None,
    /// The key at argument 1.
    One(u32),
    /// `numkeys` at argument 1 and that many resources after it.
    Numbered(u32),
    /// The key at argument 1 and the keys of the commands after it, which
    /// only the handler can find (`getkeys-api`): the spec says so
    /// (`VARIABLE_FLAGS`, `INCOMPLETE`), and the server asks the handler.
    Guarded(u32),
}

const fn option(name: &'static CStr, kind: Kind, token: &'static CStr) -> Arg {
    Arg {
        name,
        kind,
        token: Some(token),
        optional: true,
        multiple: false,
        choices: &[],
    }
}

/// One of `choices` (`<TOKEN token | FENCE fence>`).
const fn one_of(name: &'static CStr, choices: &'static [Arg]) -> Arg {
    Arg {
        choices,
        ..arg(name, Kind::OneOf)
    }
}

/// A keyword and its value, as one choice of a `OneOf`.
const fn keyword(name: &'static CStr, kind: Kind, token: &'static CStr) -> Arg {
    Arg {
        token: Some(token),
        ..arg(name, kind)
    }
}

/// The set commands' keys: `numkeys resource [resource ...]`.
const NUMKEYS: Arg = arg(c"numkeys", Kind::Integer);
const RESOURCES: Arg = Arg {
    multiple: true,
    ..arg(c"resource", Kind::Key)
};

const TOKEN: Arg = arg(c"token", Kind::String);

/// What proves a hold: its token or its fence.
const PROOF: Arg = one_of(
    c"proof",
    &[
        keyword(c"token", Kind::String, c"TOKEN"),
        keyword(c"fence", Kind::Integer, c"FENCE"),
    ],
);
/// A command's arguments.
const ARGS: Arg = Arg {
    optional: true,
    multiple: true,
    ..arg(c"arg", Kind::String)
};

static DOCS: [Doc; 34] = [
    Doc {
        name: c"dlock.acquire",
        summary: c"Acquires a hold (exclusive, SHARED, one or PERMITS k of LIMIT n permits, \
reentrant under OWNER) and returns its fencing token, or nil while others hold the resource. With WAIT, blocks \
in queue order (FIFO within a PRIORITY) until granted or until timeout_ms passes.",
        complexity: COMPLEXITY,
        arity: -4,
        // Reads the holder (a refresh replies with its fence) and grants or
        // refreshes the lease.
        keys: Keys::One(RW | ACCESS | UPDATE),
        args: &[
            RESOURCE,
            arg(c"token", Kind::String),
            arg(c"ttl_ms", Kind::Integer),
            option(c"shared", Kind::PureToken, c"SHARED"),
            option(c"n", Kind::Integer, c"LIMIT"),
            option(c"k", Kind::Integer, c"PERMITS"),
            option(c"owner", Kind::String, c"OWNER"),
            option(c"timeout_ms", Kind::Integer, c"WAIT"),
            option(c"id", Kind::String, c"SESSION"),
            option(c"ms", Kind::Integer, c"MAXHOLD"),
            option(c"p", Kind::Integer, c"PRIORITY"),
        ],
    },
    Doc {
        name: c"dlock.release",
        summary: c"Releases a lock held by token and returns 1, else returns 0. A queued waiter \
gets the lock next; with TO, the queued waiter_token gets it out of turn in the same step, or an \
error changes nothing.",
        complexity: COMPLEXITY,
        arity: -3,
        keys: Keys::One(RW | ACCESS | DELETE),
        args: &[
            RESOURCE,
            arg(c"token", Kind::String),
            option(c"waiter_token", Kind::String, c"TO"),
        ],
    },
    Doc {
        name: c"dlock.resize",
        summary: c"Sets the limit of a held semaphore to n and returns the previous limit, or nil \
when nothing holds the resource. Up: waiters are granted in the same command; down: holds stay, \
and nobody is granted until the holds fit.",
        complexity: COMPLEXITY,
        arity: 3,
        keys: Keys::One(RW | ACCESS | UPDATE),
        args: &[RESOURCE, arg(c"n", Kind::Integer)],
    },
    Doc {
        name: c"dlock.extend",
        summary: c"Makes the lease of a lock held by token end ttl_ms from now and returns 1, \
else returns 0. With WANTED, returns a map of extended (1 or 0), waiters (the requests \
queued on the resource) and, when above 0, priority (the highest queued).",
        complexity: COMPLEXITY,
        arity: -4,
        keys: Keys::One(RW | ACCESS | UPDATE),
        args: &[
            RESOURCE,
            arg(c"token", Kind::String),
            arg(c"ttl_ms", Kind::Integer),
            option(c"wanted", Kind::PureToken, c"WANTED"),
        ],
    },
    Doc {
        name: c"dlock.info",
        summary: c"Returns the holder's token, fencing token, remaining TTL in ms and number of \
waiters (and, when above 0, the highest priority queued), or nil when the lock is free.",
        complexity: COMPLEXITY,
        arity: 2,
        keys: Keys::One(RO | ACCESS),
        args: &[RESOURCE],
    },
    Doc {
        name: c"dlock.guard",
        summary: c"Runs command (or a BATCH of commands, all or none) and returns its reply only \
if token, or the hold with fencing token fence, holds the resource now; else runs nothing and \
returns a NOTHELD error.",
        complexity: c"O(1) for the check, plus the commands' own; a BATCH also copies the keys \
its commands write, within a bound",
        arity: -5,
        keys: Keys::Guarded(RW | ACCESS),
        args: &[RESOURCE, PROOF, arg(c"command", Kind::String), ARGS],
    },
    Doc {
        name: c"dlock.check",
        summary: c"Returns 1 when token, or the hold with fencing token fence, is a live hold on \
the resource now, else 0.",
        complexity: COMPLEXITY,
        arity: 4,
        keys: Keys::One(RO | ACCESS),
        args: &[RESOURCE, PROOF],
    },
    Doc {
        name: c"dlock.observe",
        summary: c"Returns a version of the resource's holders and what DLOCK.INFO shows. With \
SINCE, the version last seen, and WAIT, blocks until the holders differ from that version or \
until timeout_ms passes (nil).",
        complexity: COMPLEXITY,
        arity: -2,
        keys: Keys::One(RO | ACCESS),
        args: &[
            RESOURCE,
            option(c"version", Kind::String, c"SINCE"),
            option(c"timeout_ms", Kind::Integer, c"WAIT"),
        ],
    },
    Doc {
        name: c"dlock.queued",
        summary: c"Returns the resources of the current database that clients wait for, held or \
not (a resource reserved for its queue often has no key), optionally only those whose name \
matches pattern.",
        complexity:
            c"O(N) with N the resources with waiters on the server, for names and a pattern \
of limited length",
        arity: -1,
        keys: Keys::None,
        args: &[Arg {
            optional: true,
            ..arg(c"pattern", Kind::Pattern)
        }],
    },
    Doc {
        name: c"dlock.stats",
        summary: c"Returns the statistics of the server's locks since the last reset: waits and \
holds (p50, p90, p99, max) overall and per kind, grants, timeouts, expirations, releases; HOT: \
the hottest resources by contention, wait time or expirations; RESET: starts them again.",
        complexity: c"O(1); HOT O(k log k) with k the tracked resources (at most 32)",
        arity: -1,
        keys: Keys::None,
        args: &[Arg {
            optional: true,
            ..one_of(
                c"subcommand",
                &[
                    Arg {
                        token: Some(c"HOT"),
                        ..arg(c"hot", Kind::PureToken)
                    },
                    Arg {
                        token: Some(c"RESET"),
                        ..arg(c"reset", Kind::PureToken)
                    },
                ],
            )
        }],
    },
    Doc {
        name: c"dlock.position",
        summary: c"Returns where token waits in the resource's queue (1: served next), or nil \
when it does not wait there.",
        complexity: c"O(log N) with N the requests queued on the resource",
        arity: 3,
        keys: Keys::One(RO | ACCESS),
        args: &[RESOURCE, TOKEN],
    },
    Doc {
        name: c"dlock.waiters",
        summary: c"Returns the requests queued on the resource in the order they are served, \
from position k + 1 on, at most n (10 unless COUNT says): position, token, owner, mode, limit, \
permits, priority, set, session, waited and timeout of each.",
        complexity: c"O(log N + M) with N the requests queued on the resource and M the ones \
returned",
        arity: -2,
        keys: Keys::One(RO | ACCESS),
        args: &[
            RESOURCE,
            option(c"k", Kind::Integer, c"OFFSET"),
            option(c"n", Kind::Integer, c"COUNT"),
        ],
    },
    Doc {
        name: c"dlock.macquire",
        summary: c"Acquires every resource of a set for token, all or nothing, under one fencing \
token and one deadline, or returns nil. With WAIT, queues on every member at once and is granted \
in queue order (FIFO within a PRIORITY) when all of them are free for it.",
        complexity: COMPLEXITY,
        // `numkeys` alone reaches the handler, which checks it before
        // counting the arguments after it: a bad `numkeys` gets its own
        // error whatever follows.
        arity: -2,
        keys: Keys::Numbered(RW | ACCESS | UPDATE),
        args: &[
            NUMKEYS,
            RESOURCES,
            TOKEN,
            arg(c"ttl_ms", Kind::Integer),
            option(c"shared", Kind::PureToken, c"SHARED"),
            option(c"timeout_ms", Kind::Integer, c"WAIT"),
            option(c"id", Kind::String, c"SESSION"),
            option(c"ms", Kind::Integer, c"MAXHOLD"),
            option(c"p", Kind::Integer, c"PRIORITY"),
        ],
    },
    Doc {
        name: c"dlock.mrelease",
        summary: c"Releases token's hold on every resource of a set and returns how many it \
released.",
        complexity: COMPLEXITY,
        // `numkeys` alone reaches the handler, which checks it before
        // counting the arguments after it: a bad `numkeys` gets its own
        // error whatever follows.
        arity: -2,
        keys: Keys::Numbered(RW | ACCESS | DELETE),
        args: &[NUMKEYS, RESOURCES, TOKEN],
    },
    Doc {
        name: c"dlock.mextend",
        summary: c"Makes token's holds on every resource of a set end ttl_ms from now and \
returns 1, or returns 0 and changes nothing when token no longer holds all of them. With \
WANTED, returns a map of extended (1 or 0), waiters (per member, the requests queued) and, \
when any is above 0, priority (per member, the highest queued).",
        complexity: COMPLEXITY,
        // `numkeys` alone reaches the handler, which checks it before
        // counting the arguments after it: a bad `numkeys` gets its own
        // error whatever follows.
        arity: -2,
        keys: Keys::Numbered(RW | ACCESS | UPDATE),
        args: &[
            NUMKEYS,
            RESOURCES,
            TOKEN,
            arg(c"ttl_ms", Kind::Integer),
            option(c"wanted", Kind::PureToken, c"WANTED"),
        ],
    },
    Doc {
        name: c"dlock.session",
        summary: c"Opens, keeps alive, closes, kills, lists and shows sessions: one liveness \
lease for the holds and waits bound to it.",
        complexity: c"Depends on the subcommand",
        arity: -2,
        keys: Keys::None,
        args: &[],
    },
    Doc {
        name: c"dlock.session|waits",
        summary: c"Returns a page of a session's waiting requests (token, and the database \
and resource of each member), oldest first, and the cursor to continue after.",
        complexity: c"O(W log W) with W the session's waiting requests",
        arity: -3,
        keys: Keys::None,
        args: &[
            ID,
            option(c"cursor", Kind::Integer, c"AFTER"),
            option(c"n", Kind::Integer, c"COUNT"),
        ],
    },
    Doc {
        name: c"dlock.session|help",
        summary: c"Returns the subcommands of DLOCK.SESSION, a line each.",
        complexity: COMPLEXITY,
        arity: 2,
        keys: Keys::None,
        args: &[],
    },
    Doc {
        name: c"dlock.session|open",
        summary: c"Opens a session (one liveness lease for the holds and waits bound to \
it with SESSION id) or keeps a live one alive; returns 1 when new, 0 when it existed.",
        complexity: c"O(log S) with S the sessions",
        arity: -4,
        keys: Keys::None,
        args: &[
            ID,
            arg(c"ttl_ms", Kind::Integer),
            option(c"bind", Kind::PureToken, c"BIND"),
            option(c"ms", Kind::Integer, c"LOCKDELAY"),
        ],
    },
    Doc {
        name: c"dlock.session|keepalive",
        summary: c"Keeps a session alive for ttl_ms (or its own ttl) whatever the number \
of its holds; returns the ms it has left.",
        complexity: c"O(log S) with S the sessions",
        arity: -3,
        keys: Keys::None,
        args: &[ID, optional(arg(c"ttl_ms", Kind::Integer))],
    },
    Doc {
        name: c"dlock.session|close",
        summary: c"Ends a session: its holds are released (no lock-delay) and its waiters \
answered; returns 1 if it existed.",
        complexity: c"O(log S) in the command; the holds are released in later \
event-loop turns",
        arity: 3,
        keys: Keys::None,
        args: &[ID],
    },
    Doc {
        name: c"dlock.session|kill",
        summary: c"Ends a session as an operator: its holds are released after its \
lock-delay and its waiters answered; returns 1 if it existed.",
        complexity: c"O(log S) in the command; the holds are released in later \
event-loop turns",
        arity: 3,
        keys: Keys::None,
        args: &[ID],
    },
    Doc {
        name: c"dlock.session|info",
        summary: c"Returns a session's ttl, deadline, settings and numbers of holds and \
waits, or nil.",
        complexity: COMPLEXITY,
        arity: 3,
        keys: Keys::None,
        args: &[ID],
    },
    Doc {
        name: c"dlock.session|list",
        summary: c"Returns a page of the ids of live sessions, in order, optionally only \
those matching pattern, and the id to continue after.",
        complexity: c"O(log S + COUNT)",
        arity: -2,
        keys: Keys::None,
        args: &[
            option(c"id", Kind::String, c"AFTER"),
            option(c"pattern", Kind::Pattern, c"MATCH"),
            option(c"n", Kind::Integer, c"COUNT"),
        ],
    },
    Doc {
        name: c"dlock.session|holds",
        summary: c"Returns a page of a session's holds (database, resource, token) in \
the order they were granted, and the cursor to continue after.",
        complexity: c"O(log H + COUNT) with H the session's holds",
        arity: -3,
        keys: Keys::None,
        args: &[
            ID,
            option(c"cursor", Kind::Integer, c"AFTER"),
            option(c"n", Kind::Integer, c"COUNT"),
        ],
    },
    Doc {
        name: session_effects::SESSIONSET,
        summary: INTERNAL,
        complexity: COMPLEXITY,
        arity: 0,
        keys: Keys::None,
        args: &[
            ID,
            arg(c"deadline_ms", Kind::UnixTime),
            arg(c"ttl_ms", Kind::Integer),
            arg(c"lock_delay_ms", Kind::Integer),
        ],
    },
    Doc {
        name: session_effects::SESSIONEND,
        summary: INTERNAL,
        complexity: COMPLEXITY,
        arity: 0,
        keys: Keys::None,
        args: &[ID, arg(c"until_ms", Kind::String)],
    },
    Doc {
        name: effects::APPLY,
        summary: INTERNAL,
        // Any arity reaches the handler, which refuses a client before
        // parsing anything (a forged effect gets the same error either way).
        complexity: COMPLEXITY,
        arity: 0,
        // Replaces the lease whatever it was.
        keys: Keys::One(OW | UPDATE),
        args: &[
            RESOURCE,
            arg(c"token", Kind::String),
            arg(c"fence", Kind::Integer),
            arg(c"deadline_ms", Kind::UnixTime),
            Arg {
                optional: true,
                ..arg(c"last_fence", Kind::Integer)
            },
        ],
    },
    Doc {
        name: hold_effects::ADDHOLD,
        summary: INTERNAL,
        complexity: COMPLEXITY,
        arity: 0,
        keys: Keys::One(RW | UPDATE),
        args: &[
            RESOURCE,
            TOKEN,
            arg(c"owner", Kind::String),
            arg(c"fence", Kind::Integer),
            arg(c"mode", Kind::String),
            arg(c"limit", Kind::Integer),
            arg(c"deadline_ms", Kind::UnixTime),
            arg(c"last_fence", Kind::Integer),
            // A bound hold's session, or a capped hold's `MAXHOLD cap_ms`
            // followed by the `max_hold_ms` it was granted with.
            optional(one_of(
                c"bound-or-capped",
                &[
                    arg(c"session", Kind::String),
                    keyword(c"cap_ms", Kind::UnixTime, c"MAXHOLD"),
                ],
            )),
            optional(arg(c"max_hold_ms", Kind::Integer)),
            // A hold counting as k > 1 of a semaphore's permits.
            option(c"k", Kind::Integer, c"PERMITS"),
        ],
    },
    Doc {
        name: hold_effects::MOVEHOLD,
        summary: INTERNAL,
        complexity: COMPLEXITY,
        arity: 0,
        keys: Keys::One(RW | UPDATE),
        args: &[RESOURCE, TOKEN, arg(c"deadline_ms", Kind::UnixTime)],
    },
    Doc {
        name: hold_effects::DROPHOLD,
        summary: INTERNAL,
        complexity: COMPLEXITY,
        arity: 0,
        keys: Keys::One(RW | DELETE),
        args: &[RESOURCE, TOKEN],
    },
    Doc {
        name: hold_effects::SETLIMIT,
        summary: INTERNAL,
        complexity: COMPLEXITY,
        arity: 0,
        keys: Keys::One(RW | UPDATE),
        args: &[RESOURCE, arg(c"n", Kind::Integer)],
    },
    Doc {
        name: hold_effects::SETHOLDS,
        summary: INTERNAL,
        complexity: COMPLEXITY,
        arity: 0,
        keys: Keys::One(OW | UPDATE),
        args: &[
            RESOURCE,
            arg(c"value", Kind::String),
            arg(c"last_fence", Kind::Integer),
        ],
    },
    Doc {
        name: effects::META,
        summary: INTERNAL,
        complexity: COMPLEXITY,
        arity: 0,
        // Registered with the key triple 1,1,1 like every command, but its
        // first argument is a number: an empty key-spec list drops that.
        keys: Keys::None,
        args: &[
            arg(c"longest_ttl_ms", Kind::Integer),
            arg(c"lossy", Kind::Integer),
            // Sent only while a quarantine runs: without it, releases that
            // do not know the argument read the effect too.
            Arg {
                optional: true,
                ..arg(c"quarantine_until_ms", Kind::UnixTime)
            },
        ],
    },
];

/// Sets the metadata of every registered command. Never fails the load: the
/// commands work the same without it.
pub fn describe(ctx: Ctx) -> Result<(), Error> {
    // SAFETY: reading the API pointers filled in at load time.
    let api = unsafe { (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo) };
    let (Some(get), Some(set)) = api else {
        ctx.log_warning(
            "dlock: this server has no RedisModule_SetCommandInfo (Redis 7.0+): \
             COMMAND DOCS will not describe dlock commands",
        );
        return Ok(());
    };
    for doc in &DOCS {
        let name = doc.name.to_string_lossy();
        // SAFETY: a valid context during OnLoad and a NUL-terminated name.
        let command = unsafe { get(ctx.0, doc.name.as_ptr()) };
        if command.is_null() {
            ctx.log_warning(&format!("dlock: {name} is not registered: no docs set"));
            continue;
        }
        // A `OneOf`'s choices live in `choices` until the call returns.
        let mut choices: Vec<Vec<raw::RedisModuleCommandArg>> = Vec::new();
        let mut args: Vec<raw::RedisModuleCommandArg> = doc
            .args
            .iter()
            .map(|a| {
                let mut arg = raw_arg(a);
                if !a.choices.is_empty() {
                    let mut subs: Vec<_> = a.choices.iter().map(raw_arg).collect();
                    subs.push(arg_end());
                    arg.subargs = subs.as_mut_ptr();
                    choices.push(subs);
                }
                arg
            })
            .collect();
        args.push(arg_end());
        let mut specs: Vec<raw::RedisModuleCommandKeySpec> = match doc.keys {
            Keys::None => Vec::new(),
            Keys::One(flags) => vec![key_spec(flags)],
            Keys::Numbered(flags) => vec![numbered_spec(flags)],
            Keys::Guarded(flags) => vec![key_spec(
                flags
                    | raw::REDISMODULE_CMD_KEY_VARIABLE_FLAGS
                    | raw::REDISMODULE_CMD_KEY_INCOMPLETE,
            )],
        };
        specs.push(spec_end());
        let info = raw::RedisModuleCommandInfo {
            version: &VERSION,
            summary: doc.summary.as_ptr(),
            complexity: doc.complexity.as_ptr(),
            since: SINCE.as_ptr(),
            history: ptr::null_mut(),
            tips: ptr::null(),
            arity: doc.arity,
            key_specs: specs.as_mut_ptr(),
            args: args.as_mut_ptr(),
        };
        // SAFETY: `info` and the zero-terminated arrays it points to outlive
        // the call, their layout is the one `VERSION` announces, and the
        // server copies everything it keeps.
        if unsafe { set(command, &info) } != api::OK {
            if matches!(doc.keys, Keys::Numbered(_)) {
                // Registered without keys: without its key spec no ACL key
                // pattern or cluster routing would see a set's resources.
                return Err(Error::Internal("the set commands' key specs were refused"));
            }
            ctx.log_warning(&format!(
                "dlock: SetCommandInfo refused the docs of {name} (see the warning above)"
            ));
        }
    }
    Ok(())
}

fn raw_arg(a: &Arg) -> raw::RedisModuleCommandArg {
    let key = matches!(a.kind, Kind::Key);
    raw::RedisModuleCommandArg {
        name: a.name.as_ptr(),
        type_: a.kind.raw(),
        key_spec_index: if key { 0 } else { -1 },
        token: a.token.map_or(ptr::null(), CStr::as_ptr),
        summary: ptr::null(),
        since: ptr::null(),
        flags: (if a.optional {
            raw::REDISMODULE_CMD_ARG_OPTIONAL
        } else {
            raw::REDISMODULE_CMD_ARG_NONE
        } | if a.multiple {
            raw::REDISMODULE_CMD_ARG_MULTIPLE
        } else {
            raw::REDISMODULE_CMD_ARG_NONE
        }) as c_int,
        deprecated_since: ptr::null(),
        subargs: ptr::null_mut(),
        display_text: ptr::null(),
    }
}

/// The all-zero entry that ends an argument array (its `name` is NULL).
fn arg_end() -> raw::RedisModuleCommandArg {
    raw::RedisModuleCommandArg {
        name: ptr::null(),
        type_: 0,
        key_spec_index: 0,
        token: ptr::null(),
        summary: ptr::null(),
        since: ptr::null(),
        flags: 0,
        deprecated_since: ptr::null(),
        subargs: ptr::null_mut(),
        display_text: ptr::null(),
    }
}

/// The all-zero entry that ends a key-spec array (`begin_search_type` 0).
/// The union members written are the largest ones, so no byte is left
/// uninitialised.
fn spec_end() -> raw::RedisModuleCommandKeySpec {
    raw::RedisModuleCommandKeySpec {
        notes: ptr::null(),
        flags: 0,
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INVALID,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            keyword: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_2 {
                keyword: ptr::null(),
                startfrom: 0,
            },
        },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_OMITTED,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                lastkey: 0,
                keystep: 0,
                limit: 0,
            },
        },
    }
}

/// One key at argument 1: begin search at index 1, a range of one key.
fn key_spec(flags: u32) -> raw::RedisModuleCommandKeySpec {
    let mut spec = spec_end();
    spec.flags = u64::from(flags);
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index = raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 };
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    spec.fk.range = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
        lastkey: 0,
        keystep: 1,
        limit: 0,
    };
    spec
}

/// `numkeys` at argument 1 and that many keys after it.
fn numbered_spec(flags: u32) -> raw::RedisModuleCommandKeySpec {
    let mut spec = key_spec(flags);
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
    spec.fk.keynum = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
        keynumidx: 0,
        firstkey: 1,
        keystep: 1,
    };
    spec
}

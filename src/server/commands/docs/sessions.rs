//! The docs of `DLOCK.SESSION`'s subcommands and of the session effects.

use super::{arg, option, Arg, Doc, Keys, Kind, COMPLEXITY, INTERNAL};
use crate::server::persistence::session_effects;

const ID: Arg = arg(c"id", Kind::String);

const fn optional(a: Arg) -> Arg {
    Arg {
        optional: true,
        ..a
    }
}

pub(super) const DOCS: [Doc; 9] = [
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
            option(c"lock_delay_ms", Kind::Integer, c"LOCKDELAY"),
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
            option(c"after", Kind::String, c"AFTER"),
            option(c"pattern", Kind::Pattern, c"MATCH"),
            option(c"count", Kind::Integer, c"COUNT"),
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
            option(c"after", Kind::Integer, c"AFTER"),
            option(c"count", Kind::Integer, c"COUNT"),
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
];

//! `dlock --help` and `dlock COMMAND --help`.

use crate::codes;

const MAIN: &str = "\
dlock - distributed locks on Redis servers running the dlock module

USAGE
    dlock [--url URL] COMMAND [OPTIONS] ARGS...
    dlock COMMAND --help        a command's options
    dlock help [COMMAND]
    dlock --version             the release and the git commit it was built from

COMMANDS
    exec RESOURCE -- CMD...     run CMD while holding the lock on RESOURCE,
                                renewed while it runs, released after it exits
    elect NAME -- CMD...        run CMD while this process leads the election
                                NAME (waits to lead; DLOCK_TERM is the term)
    observe NAME                print who leads NAME (holds its lock), one line
                                now and one per change, without polling
    status RESOURCE             holders, fences, TTLs and waiters
    list [PATTERN]              every lock on the server (or on every master
                                of its cluster), with holders and waiters
    sessions list|info|kill     the sessions on the server (or on every master
                                of its cluster): list them, show one, end one
    top                         the hottest resources (most contended, longest
                                waits, most expired leases) with their holders
                                and waiters, live, on the server or its cluster
    metrics                     lock statistics in the Prometheus text format,
                                printed once or served (--listen ADDR)
    acquire RESOURCE            take the lock, print \"TOKEN FENCE\", keep it
    extend RESOURCE TOKEN       extend a lease by its token
    release RESOURCE TOKEN      release a lease by its token
    check RESOURCE FENCE        the sequencer check: exit 0 if FENCE is a live
                                hold on RESOURCE now, 1 if not
    resize RESOURCE LIMIT       change a held semaphore's limit; print the
                                previous and the new one

SERVER
    --url URL    the server, before or after COMMAND (default: $DLOCK_URL, else
                 redis://127.0.0.1:6379/). Given several times: Redlock over
                 those independent servers (granted by a majority; DLOCK_FENCE
                 is the largest of the servers' fences; status reports each
                 server; extend and release need a majority; no --token).
                 Forms: redis://[user:password@]host[:port][/db],
                 rediss://[user:password@]host[:port][/db] (TLS),
                 unix:///path/to/socket[?db=N]. One server named twice (a
                 host name and its address) is refused.
                 Through Redis Sentinel (alone, not for Redlock):
                 redis+sentinel://[user:password@]host1[:port],host2[:port]/
                 MASTER-NAME[/db][?sentinel_password=P]: the master the
                 sentinels name now, checked with ROLE, asked again on
                 every new connection (docs/high-availability.md).
    --tls-ca FILE      rediss:// servers: trust only the CA certificate(s) in
                       this PEM file (default: the public roots built in).
                       The server's certificate must name the URL's host (DNS
                       name or IP address), which is also sent as SNI.
    --tls-cert FILE    this client's certificate (PEM) for servers that ask
                       for one (tls-auth-clients); with --tls-key
    --tls-key FILE     that certificate's private key (PEM)
                       The TLS options apply to every --url (which must then
                       all be rediss://), before or after COMMAND.

ENVIRONMENT
    DLOCK_URL    the server when no --url is given, e.g.
                 DLOCK_URL=redis://127.0.0.1:6380/ dlock status job
    DLOCK_TLS_CA, DLOCK_TLS_CERT, DLOCK_TLS_KEY
                 the files when --tls-ca, --tls-cert, --tls-key are not given

PERMISSIONS
    With Redis ACLs, the URL's user needs these commands (Redis 7.4+ and
    Valkey 8: +@dlock grants them all; older: by name, e.g.
    +dlock.acquire +dlock.release):
    exec, acquire    dlock.acquire and dlock.release (a grant given up on
                     is released); waiting (the default, or --wait) also
                     dlock.extend (the lease is refreshed once granted);
                     exec also dlock.extend for its renewals, and
                     dlock.info for the status line shown on a terminal
                     while it waits (without it the line says so)
    extend           dlock.extend
    release          dlock.release
    check            dlock.check
    resize           dlock.resize
    guarded writes   dlock.guard, and every command it runs (redis-cli in
                     exec's command, or the library)
    status           dlock.info
    observe          dlock.observe
    elect            as exec
    list             scan, dlock.info, and cluster|shards (CLUSTER SHARDS
                     tells a cluster node, whose masters are all listed, from
                     a server); locks outside the user's key patterns are
                     left out, and counted on stderr (exit 77)
    sessions         dlock.session (list: its list and info, info: info,
                     kill: kill)
    top              dlock.stats, dlock.info, info, time, cluster|shards
                     (as list), and select for resources of a database
                     other than the URL's
    metrics          dlock.stats, info (INFO dlock), and cluster|shards
    On a server with sessions, exec and elect also use dlock.session (open,
    keepalive, close) instead of dlock.extend; without it they fall back to
    dlock.extend.
    A refused login or command exits 77.

DURATIONS
    500ms, 30s, 1.5s, 2m, 1h. A number needs a unit (Redis counts
    milliseconds, flock(1) seconds: a bare `30` is refused); `0` alone is
    allowed (`--wait 0` is `--no-wait`).

EXAMPLES
    # one nightly backup at a time, whichever host starts it
    dlock exec --no-wait backup:nightly -- /usr/local/bin/backup.sh

    # wait up to 2 minutes; a 10 s lease renewed while deploy.sh runs
    dlock exec --wait 2m --ttl 10s deploy:prod -- ./deploy.sh

    # at most 3 trainings at once; readers share, writers exclude
    dlock exec --limit 3 gpu -- python train.py
    dlock exec --shared config -- ./read-config.sh

    # the fence, for the storage the command writes to (it refuses writes
    # with a fence lower than one it has seen)
    dlock exec orders:42 -- sh -c 'curl -H \"X-Fence: $DLOCK_FENCE\" -d @order.json $API'

    # a write to the same Redis that only the holder can make (NOTHELD,
    # nothing written, once the lease is gone)
    dlock exec job -- sh -c 'redis-cli -u \"$DLOCK_URL\" DLOCK.GUARD \"$DLOCK_RESOURCE\" FENCE \"$DLOCK_FENCE\" SET k v'

    # cron: exit 0 (not 75) when another host is running it
    dlock exec --no-wait --conflict-exit-code 0 report:daily -- ./report.sh

    # a script holding a lease itself
    read -r token fence <<EOF
    $(dlock acquire --ttl 1m --no-wait job:42)
    EOF
    dlock extend job:42 \"$token\" --ttl 1m
    dlock release job:42 \"$token\"
    dlock status --json job:42

    # the locks of the jobs, the longest held first
    dlock list --sort fence 'job:*'

    # the resources clients wait for longest, live; then once, for a script
    dlock top --by wait
    dlock top --once --json --count 5
";

const ELECT: &str = "\
dlock elect [OPTIONS] NAME [--] COMMAND [ARGS...]

Leader election: waits (in the server's FIFO queue of candidates) until this
process leads NAME, then runs COMMAND as `dlock exec` does, with DLOCK_TERM
(the leadership's term: its lock's fence, higher than every earlier term)
besides DLOCK_RESOURCE, DLOCK_TOKEN and DLOCK_FENCE. The leadership is
renewed every ttl/3 while the command's process group runs; if it is lost
(an admin's DEL, renewals that do not get through before the lease could
end), the group gets SIGTERM, then SIGKILL after --grace, and dlock exits
79. When the command exits, dlock resigns: the next candidate leads at once.

OPTIONS
    --url URL               the server (one: a term is one server's fence)
    --id ID                 the id observers see (`dlock observe`), before the
                            '/' of the lease's token; no '/' in it
    --ttl DURATION          the leadership's lease, renewed every ttl/3
                            (default 30s): a leader that stops renewing
                            (crashed, cut off) is replaced within it
    --wait DURATION         campaign up to DURATION (default: until leading)
    --no-wait               lead now or not at all (exit 75)
    --retry-for DURATION    as for exec
    --priority P            as for exec: a candidate of a higher priority
                            leads before those of a lower one waiting less
                            than (difference) x dlock.priority-aging-ms
    --grace DURATION        as for exec
    --no-session            as for exec
    --on-wanted SIGNAL      as for exec: a candidate waits to lead
    --prefer ID             hand the lead to the candidate with --id ID as
                            soon as it waits (checked at the start of the lead
                            and every ttl/3): the command is stopped as for a
                            lost lead, and dlock exits 0
    --conflict-exit-code N  exit status when another leads when the wait ends
                            (default 75)
    -h, --help

Exit status as for exec (see dlock --help).

EXAMPLE
    # one scheduler across the fleet; a standby takes over within 10 s
    dlock elect --id \"$(hostname)\" --ttl 10s scheduler -- ./scheduler
";

const OBSERVE: &str = "\
dlock observe [OPTIONS] NAME

Prints who leads the election NAME (who holds the lock on NAME) now, then
one line each time that changes, until interrupted or --count lines are
printed. The server answers when the holder changes (DLOCK.OBSERVE): nothing
is polled. A line is a state, not an event: a leadership that came and went
between two lines may not be shown; the latest always is.

    leader ID term N      ID leads (the id its candidate gave, else its
                          token) in term N
    nobody                nobody leads
    handing-over          the leadership is being handed to the next
                          candidate

OPTIONS
    --url URL     the server (one)
    --json        one JSON object per line: {\"leader\":\"ID\",\"term\":N,
                  \"token\":\"...\"}, {\"leader\":null}, or
                  {\"leader\":null,\"handing_over\":true}
    --count N     exit 0 after N lines
    -h, --help

A lock that one process holds (a semaphore held once, a shared lock with
one reader) shows that holder as the leader; one that several hold names
no leader: dlock says so and exits 70. A server that cannot be reached is
retried for 5 s in a row, then dlock exits 69. Needs dlock.observe (and
+@dlock grants it).
";

const EXEC: &str = "\
dlock exec [OPTIONS] RESOURCE [--] COMMAND [ARGS...]

Takes the lock on RESOURCE, runs COMMAND with DLOCK_RESOURCE, DLOCK_TOKEN,
DLOCK_FENCE and the server (see GUARDED WRITES) in its environment
(replacing inherited values), renews the
lease while the command's process group runs, releases it once the whole
group has exited, and exits with the command's status (128+N if it died of
signal N). The first word after RESOURCE starts COMMAND; `--` makes it
explicit.

OPTIONS
    --url URL               the server (default: $DLOCK_URL, else
                            redis://127.0.0.1:6379/)
    --ttl DURATION          the lease, renewed every ttl/3 (default 30s)
    --wait DURATION         wait up to DURATION in the server's FIFO queue
                            (default: until granted)
    --no-wait               one attempt (same as --wait 0)
    --retry-for DURATION    how long an unreachable server is retried, waiting
                            or not, before exit 69 (default 5s); each new
                            reason is said on stderr
    --shared                a shared hold: excludes exclusive holders only
    --limit N               one of N permits (a semaphore; N at most 1048576)
    --permits K             with --limit N above 1: hold K of the N permits,
                            granted all at once (K from 1 to N)
    --priority P            wait at priority P, 0 (default) to 1000: higher
                            is served first, FIFO within one priority; a
                            waiter gains a level per dlock.priority-aging-ms
                            waited (the server's, default 1s), so none
                            starves
    --grace DURATION        time between SIGTERM and SIGKILL when the lease
                            ends (default 5s, or ttl/4 if less); must be below
                            ttl/3
    --no-session            renew the lease itself (DLOCK.EXTEND) even where
                            the server has sessions (see SESSIONS below)
    --on-wanted SIGNAL      send SIGNAL (USR1, TERM, ..., or a number) to the
                            command's group when someone starts waiting for
                            the lock, seen by the next renewal (one --url;
                            the lease is then renewed by DLOCK.EXTEND, not a
                            session): the command may yield by exiting
    --conflict-exit-code N  exit status when the lock is busy or the wait ran
                            out (default 75)
    -h, --help

THE COMMAND
    It runs in a process group of its own; when dlock has the terminal, that
    group gets it (the command can read input) and dlock takes it back
    afterwards. If dlock dies (kill -9 of dlock or of its process group),
    a helper started before the command (dlock-reaper, in a session of its
    own) sends SIGKILL to the command's whole group at once, long before
    the lease could pass on. Out of its reach: processes that left the
    group, a kill -9 of both dlock and the helper, and a stopped dlock
    (SIGSTOP). In a cgroup of its own (systemd-run --scope), whoever kills
    dlock can kill all it started.
    SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to dlock go to the command's
    group; the lease is renewed until the group has exited, then released.
    While dlock waits for the lock, those signals end dlock (nothing stays
    queued on the server). Processes of the group that outlive the command
    (its background jobs) are waited for too; a process that leaves the
    group (setsid, a shell's job control) is not. Stopping the command
    (Ctrl-Z) is not job control: dlock keeps waiting and renewing; each
    signal it forwards is followed by SIGCONT, so a stopped command acts on
    it.

WHEN THE LEASE ENDS
    Renewals failing (server unreachable): SIGTERM to the group when the
    lease has --grace left, SIGKILL when it ends, so the command never runs
    past its lease. The server saying the lease is gone (expired, deleted,
    taken over): SIGTERM at once, SIGKILL --grace later (or at the lease's
    end if sooner). dlock then exits 79, whatever the command's status; so
    it does when the final release finds the lease gone.

GUARDED WRITES
    The command also gets the server: DLOCK_URL (the URL dlock used, login
    included), and DLOCK_HOST and DLOCK_PORT (or DLOCK_SOCKET for a unix
    socket). A write that the server runs only while this lock is held,
    one line with redis-cli (its reply printed; NOTHELD and nothing written
    once the lease is gone):
        redis-cli -u \"$DLOCK_URL\" DLOCK.GUARD \"$DLOCK_RESOURCE\" FENCE \"$DLOCK_FENCE\" SET k v
    redis-cli exits 0 after an error reply too: compare its output
    ([ \"$(redis-cli ...)\" = OK ]). Over TLS add redis-cli's --tls
    --cacert FILE. Through Sentinel DLOCK_URL is the sentinel URL
    (redis-cli cannot use it; no HOST/PORT).
    With several --url (Redlock) none of these is set: a write on one of
    its servers is not protected by a majority.

SESSIONS
    Where the server has sessions (DLOCK.SESSION), the lock is held in a
    session of --ttl, kept alive every ttl/3 instead of renewed (one per
    dlock process; see dlock sessions). Its loss is the session's end: its
    ttl passed, or an admin's `dlock sessions kill ID`. A DEL of the lock's
    key is not seen until the release (exit 79 then); with --no-session the
    next renewal sees it. A server without sessions: renewed as above.

WAITING ON A TERMINAL
    After a second of waiting, one status line on stderr (time waited, the
    holder's fence, requests queued), erased when the lock is granted.
    Nothing when stderr is not a terminal.

EXIT STATUS
    the command's; 75 busy (--conflict-exit-code); 79 lease lost; 69 server
    unreachable; 64 usage; 126 not executable; 127 not found (dlock --help)
";

const STATUS: &str = "\
dlock status [--url URL] [--json] RESOURCE

Who holds RESOURCE: its state (free, held, or reserved: free but kept for
the first waiter), kind (lock, rwlock, semaphore), and per hold its mode,
fence, TTL, token and owner; how many requests are queued.

    --json    one line of JSON:
              {\"resource\":\"r\",\"state\":\"held\",\"kind\":\"lock\",\"limit\":1,
               \"waiters\":0,\"holds\":[{\"token\":\"...\",\"owner\":null,
               \"fence\":1795309961824769,\"ttl_ms\":29980,\"mode\":\"exclusive\"}]}
              (ttl_ms -1: no deadline; owner null for a plain lock; a
              token or owner that is not UTF-8 as with dlock list --json)

Exit status 0 whatever the state; 69 server unreachable.
";

const LIST: &str = "\
dlock list [--url URL]... [--sort KEY] [--json] [PATTERN]

Every lock on the server, or, on a node of a Redis Cluster, on every master
of the cluster; with PATTERN (a glob, as SCAN MATCH takes it: job:*,
{order:42}*) those whose name matches. Per lock: its resource, kind (lock,
read-write, reentrant, semaphore), state (held, or reserved: nobody holds
it, it is kept for the first waiter), holders (of the limit, for a
semaphore), waiters, NEXT (the token its queue serves next, - when
nobody waits) and PRIORITY (the priority NEXT waits with); per holder its mode (exclusive, shared, permit), fence, TTL,
token and owner, one line each. Read with SCAN ... TYPE dlocklock,
DLOCK.QUEUED (the resources clients wait for, which have no key while
nobody holds them), pipelined DLOCK.INFO and DLOCK.WAITERS ... COUNT 1, never
KEYS: the servers keep serving meanwhile, and a lock taken, released or
moved while it runs may be missing or shown as it was.

    --sort KEY    resource (the default: by name), ttl (the lease that ends
                  first, first), fence (the lowest first: held longest),
                  waiters (the most first)
    --json        one JSON document, an array with one object per lock:
                  {\"server\":\"127.0.0.1:6379\",\"resource\":\"r\",\"state\":\"held\",
                   \"kind\":\"lock\",\"limit\":1,\"waiters\":0,\"holds\":[...],
                   \"next\":null,\"next_priority\":null}
                  (holds as dlock status --json shows them; kind and mode
                  as DLOCK.INFO says them: rwlock for read-write and
                  reentrant alike, exclusive for a permit)
    --url URL     the server; given several times, each one (SERVER column)

Names, tokens and owners that are not UTF-8 show each such byte as \\xNN
in the table, control characters too. In JSON each such byte is the
character of that number (\\u00NN), and the field gets a twin with every
byte in hex: \"resource\":\"b\\u00ff\",\"resource_hex\":\"62ff\" (also
token_hex, owner_hex). The bytes are the _hex field when there is one, else
the string's UTF-8.

Exit status 0 listed; 69 a server or master could not be listed (what
could be is printed); 77 a command or key refused; 64 usage.
";

const METRICS: &str = "\
dlock metrics [--url URL]... [--listen ADDR]

The server's lock statistics (DLOCK.STATS and its HOT tables) and its
INFO dlock gauges, in the Prometheus text format (version 0.0.4); on a node
of a Redis Cluster, those of every master, each series labelled
node=\"host:port\". docs/operations.md lists the metrics.

Without --listen: printed once on stdout (for node_exporter's textfile
collector, or cron).

    --listen ADDR   serve them over HTTP at ADDR (e.g. 127.0.0.1:9487; port
                    0: one the system picks): GET /metrics reads the servers
                    at each request; \"dlock: metrics: listening on
                    HOST:PORT\" on stderr once ready. SIGINT or SIGTERM stop
                    it (exit 0).
    --url URL       the server; given several times, each one

A server that cannot be read (each within a few seconds) is reported as
dlock_up{node=...} 0, the others as usual, and named on stderr.

Exit status (without --listen) 0 every server read; 69 a server or master
could not be read (the others are printed), or the module is missing; 77 a
command refused; 70 an unexpected reply; 64 usage.
";

const TOP: &str = "\
dlock top [--url URL]... [--by ORDER] [--interval D] [--count N]
dlock top [--url URL]... [--by ORDER] [--count N] --once [--json]

The hottest resources of the server, or, on a node of a Redis Cluster, of
every master of the cluster (DLOCK.STATS HOT on each, merged by score), with
who holds them and how many wait now (DLOCK.INFO), under a totals line:
grants (and per second since the previous refresh), the highest wait p99
and max of the nodes (percentiles of several nodes cannot be merged),
leases that ran out, waits that timed out, clients waiting now (INFO dlock
dlock_waiters). Per resource: HOLDERS (a plain lock: its token's first 8
characters and how long it has been held, by the server's clock; else how
many hold it; reserved: kept for its queue), WAITERS, CONTENDED, WAITED
(grants after a wait), WAIT-P50/P99/MAX, EXPIRED, TIMEOUTS; NODE when
several nodes are read. The figures count from when the resource entered
the server's hot table (docs/commands/dlock.stats.md).

A full-screen view refreshed every interval, on the alternate screen; the
terminal is given back as it was on q, Ctrl-C, SIGTERM or SIGHUP. Keys:
    c, w, e    order by contended, wait, expired
    r          refresh now
    q          quit (exit 0)

    --by ORDER      contended (the default: requests that found it taken),
                    wait (the total time requests waited for it), expired
                    (leases on it that ran out)
    --interval D    between refreshes (default 2s, at least 100ms)
    --count N       resources shown, 1 to 32 (default 10)
    --once          print one snapshot as a table and exit (needed when
                    stdout is not a terminal)
    --json          with --once: one JSON document, {\"by\":..,\"nodes\":[..],
                    \"totals\":{..},\"resources\":[..]} (docs/cli.md lists
                    the fields)

A node that cannot be read is shown as such (the others are); --once names
it on stderr after the snapshot.

Exit status 0; 69 a server or master unreachable, or without DLOCK.STATS
(--once: what could be read is printed); 77 a command refused; 64 usage
(the live view without a terminal: use --once).
";

const SESSIONS: &str = "\
dlock sessions list [--url URL]... [--match PATTERN]
dlock sessions info [--url URL]... ID
dlock sessions kill [--url URL]... ID

Sessions (DLOCK.SESSION) keep many locks alive with one keep-alive; exec and
elect hold their lock in one where the server has them. Sessions belong to
a server: on a node of a Redis Cluster, every master of the cluster is
read.

    list     one line per session: its id, time left (TTL), holds, waits,
             and whether it ends with its connection (BOUND); read page by
             page with DLOCK.SESSION LIST and INFO (a session that ends
             meanwhile is left out)
    --match PATTERN
             only the ids that match this glob (as SCAN MATCH takes it)
    info     the session's fields as DLOCK.SESSION INFO gives them
    kill     ends the session as if its ttl had passed: every lock it holds
             is released (after its LOCKDELAY), every wait is answered
             NOSESSION, and the client that kept it finds its locks lost
    --url URL     the server; given several times, each one (SERVER column)

Ids that are not UTF-8 show each such byte as \\xNN, control characters
too.

Exit status 0 done; 79 info, kill: no such session; 69 a server could not
be read, or its dlock has no sessions; 77 a command refused; 64 usage.
";

const ACQUIRE: &str = "\
dlock acquire [OPTIONS] RESOURCE

Takes the lock and prints \"TOKEN FENCE\" on one line. The lock stays held
after dlock exits, until its TTL passes or `dlock release RESOURCE TOKEN`;
`dlock extend` renews it (nothing renews it by itself).

    --url URL               the server
    --ttl DURATION          the lease (default 30s)
    --wait DURATION         wait up to DURATION in the queue (default: until
                            granted)
    --no-wait               one attempt (same as --wait 0)
    --retry-for DURATION    how long an unreachable server is retried
                            (default 5s)
    --shared                a shared hold
    --limit N               one of N permits (a semaphore; N at most 1048576)
    --permits K             hold K of the N permits (as for exec)
    --priority P            wait at priority P (0 to 1000, as for exec)
    --token TOKEN           use TOKEN instead of a random one (an acquire
                            with the token that holds the lock is a retry:
                            granted again, same fence)
    --conflict-exit-code N  exit status when busy (default 75)

Example:
    read -r token fence <<EOF
    $(dlock acquire --no-wait --ttl 2m job:42)
    EOF

Exit status 0 granted; 75 busy; 69 server unreachable; 64 usage.
";

const EXTEND: &str = "\
dlock extend [--url URL] [--ttl DURATION] RESOURCE TOKEN

Sets the lease of TOKEN's hold on RESOURCE to DURATION from now (default
30s). Exit status 0 extended; 79 TOKEN holds nothing there (expired,
released or taken over); 69 server unreachable.
";

const RELEASE: &str = "\
dlock release [--url URL] RESOURCE TOKEN

Releases TOKEN's hold on RESOURCE. Exit status 0 released; 79 TOKEN held
nothing there (expired, already released or taken over); 69 server
unreachable.
";

const CHECK: &str = "\
dlock check [--url URL] RESOURCE FENCE

The sequencer check (DLOCK.CHECK): whether FENCE is a live hold on RESOURCE
now, for a service that is handed a fence (DLOCK_FENCE of dlock exec) and
cannot store it. Exit status 0 live; 1 not live (expired, released, taken
over); 69 server unreachable; 64 usage (FENCE is 1 to 2^63-1; one --url: a
fence is one server's). Racy by nature: the hold can end right after the
answer. A storage that keeps the highest fence it saw and refuses lower
ones is the real protection; a write to the lock's own Redis is
DLOCK.GUARD (dlock exec --help, GUARDED WRITES).
";

/// The help of `topic` ("" for dlock itself) on stdout; exit 0.
pub fn print(topic: &str) -> i32 {
    match text(topic) {
        Some(t) => {
            print!("{t}");
            if topic.is_empty() {
                print!("\n{}", codes::TABLE);
            }
            codes::OK
        }
        None => crate::codes::usage_error(
            crate::args::Usage(format!("no help on {topic:?}: not a command")),
            "",
        ),
    }
}

const RESIZE: &str = "\
dlock resize [--url URL] [--json] RESOURCE LIMIT

Sets the limit of the semaphore RESOURCE to LIMIT (2 to 1048576) while its
permits are held (DLOCK.RESIZE), and prints the previous and the new limit:
    pool: limit 2 -> 3
Up: the waiters that fit now are granted at once, in queue order. Down:
every hold stays, and nobody new is granted until the holds fit. The new
limit lasts while some permit is held: once the last one ends, the next
request's --limit sets it again.

    --json    one line of JSON: {\"resource\":\"pool\",\"previous\":2,\"limit\":3}
              (nothing held: \"previous\" and \"limit\" null)

Exit status 0 resized; 1 nothing holds RESOURCE (nothing changed); 70 the
server refused it (RESOURCE is not a semaphore: a lock, a read-write lock,
OWNER holds); 69 server unreachable; 64 usage (LIMIT not from 2 to 1048576;
one --url: a semaphore lives on one server).
";

fn text(topic: &str) -> Option<&'static str> {
    Some(match topic {
        "" => MAIN,
        "exec" => EXEC,
        "elect" => ELECT,
        "observe" => OBSERVE,
        "status" => STATUS,
        "list" => LIST,
        "sessions" => SESSIONS,
        "top" => TOP,
        "metrics" => METRICS,
        "acquire" => ACQUIRE,
        "extend" => EXTEND,
        "release" => RELEASE,
        "check" => CHECK,
        "resize" => RESIZE,
        _ => return None,
    })
}

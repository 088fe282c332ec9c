//! What dlock says when it cannot do its job: bad URLs, the same server
//! named twice, a server without the module, a refused login or command,
//! a limit beyond the server's, an unreachable server. Each message names
//! the URL or server at fault, and none echoes a token or a password.

use crate::cli::{dead_url, dlock, run, Dir, SEC};
use crate::common::Server;

/// The forms `--url` takes, as the usage error lists them.
const FORMS: &str = "redis://[user:password@]host[:port][/db]";

#[test]
fn bad_urls_are_usage_errors_naming_the_url_and_the_accepted_forms() {
    let dir = Dir::new();
    for url in ["nonsense://x", "redis://h:notaport", "redis://u:sekret@h:x"] {
        for cmd in [
            dlock(&dead_url()).args(["--url", url, "status", "r"]),
            dlock(url).args(["acquire", "--no-wait", "r"]),
        ] {
            let (code, _, err) = run(cmd, &dir, 20 * SEC);
            assert_eq!(code, 64, "{url}: {err}");
            assert!(err.contains(FORMS), "{url}: {err}");
            assert!(err.contains("unix:///"), "{url}: {err}");
            assert!(!err.contains("InvalidClientConfig"), "{url}: {err}");
            assert!(!err.contains("sekret"), "{url}: the password shown: {err}");
            let shown = url.replace("sekret", "***");
            assert!(err.contains(&shown), "{url}: {err}");
        }
    }
}

#[test]
fn the_same_server_under_two_names_is_refused() {
    let dir = Dir::new();
    let (a, b) = (dead_url(), dead_url());
    let port = a
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    let alias = format!("redis://localhost:{port}/");
    let (code, _, err) = run(
        dlock(&a).args(["--url", &a, "--url", &alias, "--url", &b, "status", "r"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("same server"), "{err}");
    assert!(err.contains(&format!("localhost:{port}")), "{err}");
    // Another database on the same server is another lock space.
    let other_db = format!("redis://localhost:{port}/1");
    let (code, _, err) = run(
        dlock(&a).args(["--url", &a, "--url", &other_db, "--url", &b, "status", "r"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 69, "{err}");
}

/// A server without the module cannot serve locks: 69, with how to load
/// it, never the token.
#[test]
fn a_server_without_the_module_is_unavailable_and_says_how_to_load_it() {
    let server = Server::builder().without_module().start();
    let dir = Dir::new();
    let url = server.url();
    let addr = format!("127.0.0.1:{}", server.port());
    let token = "sekret-token-4711";
    for args in [
        &["acquire", "--no-wait", "--token", token, "r"][..],
        &["acquire", "--wait", "1s", "--token", token, "r"],
        &["exec", "--no-wait", "r", "--", "true"],
        &["extend", "r", token],
        &["release", "r", token],
        &["status", "r"],
    ] {
        let (code, _, err) = run(dlock(&url).args(args), &dir, 20 * SEC);
        assert_eq!(code, 69, "{args:?}: {err}");
        assert!(err.contains("module is not loaded"), "{args:?}: {err}");
        assert!(err.contains(&addr), "{args:?}: {err}");
        assert!(err.contains("loadmodule"), "{args:?}: {err}");
        assert!(err.contains("MODULE LOAD"), "{args:?}: {err}");
        assert!(!err.contains(token), "{args:?}: the token shown: {err}");
    }
}

/// A wrong password and an ACL that denies a dlock command: 77
/// (EX_NOPERM), naming the server, never the password.
#[test]
fn refused_logins_and_commands_exit_77() {
    let server = Server::start();
    let dir = Dir::new();
    let addr = format!("127.0.0.1:{}", server.port());
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "reader", "on", ">pw", "~*", "&*", "+@all"][..])
        .arg(&["-dlock.acquire", "-dlock.macquire"][..])
        .query(&mut server.conn())
        .unwrap();
    let wrong = format!("redis://reader:badpass@{addr}/");
    for args in [&["status", "r"][..], &["acquire", "--no-wait", "r"]] {
        let (code, _, err) = run(dlock(&wrong).args(args), &dir, 20 * SEC);
        assert_eq!(code, 77, "{args:?}: {err}");
        assert!(
            err.contains(&format!("authentication failed on {addr}")),
            "{args:?}: {err}"
        );
        assert!(err.contains("password"), "{args:?}: {err}");
        assert!(
            !err.contains("badpass"),
            "{args:?}: the password shown: {err}"
        );
    }
    let reader = format!("redis://reader:pw@{addr}/");
    let (code, _, err) = run(dlock(&reader).args(["status", "r"]), &dir, 20 * SEC);
    assert_eq!(code, 0, "{err}");
    for args in [
        &["acquire", "--no-wait", "r"][..],
        &["exec", "--no-wait", "r", "--", "true"],
    ] {
        let (code, _, err) = run(dlock(&reader).args(args), &dir, 20 * SEC);
        assert_eq!(code, 77, "{args:?}: {err}");
        assert!(err.contains(&addr), "{args:?}: {err}");
        assert!(
            err.to_lowercase().contains("dlock.acquire"),
            "{args:?}: {err}"
        );
    }
    // As `dlock --help` documents: a waiting acquire refreshes the grant
    // with DLOCK.EXTEND; it needs no DLOCK.INFO.
    for (user, denied) in [("noinfo", "dlock.info"), ("noextend", "dlock.extend")] {
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", user, "on", ">pw", "~*", "&*", "+@all"][..])
            .arg(format!("-{denied}"))
            .query(&mut server.conn())
            .unwrap();
        let url = format!("redis://{user}:pw@{addr}/");
        let (code, out, err) = run(
            dlock(&url).args(["acquire", "--no-wait", user]),
            &dir,
            20 * SEC,
        );
        assert_eq!(code, 0, "{user}: {err}");
        let token = out.split_whitespace().next().unwrap().to_string();
        let (code, _, err) = run(dlock(&url).args(["release", user, &token]), &dir, 20 * SEC);
        assert_eq!(code, 0, "{user}: {err}");
        let (code, _, err) = run(
            dlock(&url).args(["acquire", "--wait", "1s", user]),
            &dir,
            20 * SEC,
        );
        if user == "noinfo" {
            assert_eq!(code, 0, "{user}: waiting needs no DLOCK.INFO: {err}");
        } else {
            assert_eq!(code, 77, "{user}: {err}");
            assert!(err.to_lowercase().contains(denied), "{user}: {err}");
        }
    }
}

/// A server that is down while dlock waits (the default: forever) is
/// retried for `--retry-for`, saying so on stderr (not a terminal here),
/// then dlock exits 69: a cron job never piles up behind a silent retry.
#[test]
fn an_unreachable_server_is_retried_for_retry_for_and_said() {
    let dir = Dir::new();
    let url = dead_url();
    let port = url
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    for (args, bound) in [
        (&["exec", "r", "--", "true"][..], 5 * SEC),
        (&["exec", "--retry-for", "1s", "r", "--", "true"], SEC),
        (&["acquire", "--wait", "1h", "--retry-for=2s", "r"], 2 * SEC),
    ] {
        let t = std::time::Instant::now();
        let (code, _, err) = run(dlock(&url).args(args), &dir, 30 * SEC);
        let took = t.elapsed();
        assert_eq!(code, 69, "{args:?}: {err}");
        assert!(took >= bound - crate::common::ms(300), "{args:?}: {took:?}");
        assert!(took < bound + 2 * SEC, "{args:?}: {took:?}");
        assert!(err.contains("retrying for up to"), "{args:?}: {err}");
        assert!(
            err.contains(&format!("127.0.0.1:{port}")),
            "{args:?}: {err}"
        );
        // Said once per reason, not on every retry.
        assert_eq!(err.matches("retrying for up to").count(), 1, "{err}");
    }
}

/// The server takes LIMIT up to 2^20: above that is a usage error before
/// any server is asked.
#[test]
fn a_limit_above_the_servers_maximum_is_a_usage_error() {
    let dir = Dir::new();
    let url = dead_url();
    for args in [
        &["acquire", "--limit", "2000000", "r"][..],
        &["acquire", "--limit=1048577", "--no-wait", "r"],
        &["exec", "--limit", "2000000", "r", "--", "true"],
    ] {
        let (code, _, err) = run(dlock(&url).args(args), &dir, 20 * SEC);
        assert_eq!(code, 64, "{args:?}: {err}");
        assert!(err.contains("1048576"), "{args:?}: {err}");
    }
    let (code, _, err) = run(
        dlock(&url).args(["acquire", "--limit", "1048576", "--no-wait", "r"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 69, "the maximum itself is taken: {err}");
}

/// Every connection error names the server it could not reach.
#[test]
fn connection_errors_name_the_server() {
    let dir = Dir::new();
    let url = dead_url();
    let addr = url.trim_start_matches("redis://").trim_end_matches('/');
    for args in [
        &["acquire", "--no-wait", "r"][..],
        &["acquire", "r"],
        &["exec", "--no-wait", "r", "--", "true"],
        &["exec", "r", "--", "true"],
        &["extend", "r", "t"],
        &["release", "r", "t"],
        &["status", "r"],
    ] {
        let (code, _, err) = run(dlock(&url).args(args), &dir, 20 * SEC);
        assert_eq!(code, 69, "{args:?}: {err}");
        assert!(
            err.contains(&format!("server {addr} unavailable")),
            "{args:?}: {err}"
        );
    }
}

/// `dlock --help` documents `DLOCK_URL`, exit 77 and the ACL permissions
/// each command needs.
#[test]
fn help_documents_dlock_url_77_and_permissions() {
    let dir = Dir::new();
    let (code, out, err) = run(dlock(&dead_url()).args(["--help"]), &dir, 20 * SEC);
    assert_eq!(code, 0, "{err}");
    for s in [
        "DLOCK_URL",
        "77",
        "PERMISSIONS",
        "dlock.acquire",
        "dlock.extend",
        "dlock.release",
        "dlock.info",
        "+@dlock",
    ] {
        assert!(out.contains(s), "dlock --help lacks {s}");
    }
}

/// A server that answers every attempt with an error reply worth retrying
/// (here `READONLY`: it was demoted to a replica) is an outage too: its
/// answers are no connection that worked, and dlock exits 69 after
/// `--retry-for` instead of retrying forever.
#[test]
fn a_server_that_answers_only_readonly_is_retried_for_retry_for() {
    let dir = Dir::new();
    let master = Server::start();
    let demoted = Server::start();
    demoted.replica_of(&master);
    demoted.wait_for_sync(10 * SEC);
    let t = std::time::Instant::now();
    let (code, _, err) = run(
        dlock(&demoted.url()).args(["exec", "--retry-for", "1s", "r", "--", "true"]),
        &dir,
        15 * SEC,
    );
    let took = t.elapsed();
    assert_eq!(code, 69, "{err}");
    assert!(took < 4 * SEC, "{took:?}");
    assert!(err.contains("read only replica"), "{err}");
}

/// After a connection error dlock says which server it tried, where that
/// came from (`--url`, `DLOCK_URL`, or the default when neither is given)
/// and how to name another: the first run of `dlock elect` on a machine
/// without a server on the default port says what to do.
#[test]
fn a_connection_error_says_where_the_url_came_from_and_how_to_name_another() {
    let dir = Dir::new();
    let url = dead_url();
    let addr = url.trim_start_matches("redis://").trim_end_matches('/');
    let (code, _, err) = run(dlock(&url).args(["status", "r"]), &dir, 20 * SEC);
    assert_eq!(code, 69, "{err}");
    assert!(err.contains(&format!("server {addr} unavailable")), "{err}");
    assert!(
        err.contains("named by DLOCK_URL; name another with --url or DLOCK_URL"),
        "{err}"
    );
    let (code, _, err) = run(
        dlock("redis://unused/").args(["--url", &url, "release", "r", "t"]),
        &dir,
        20 * SEC,
    );
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("named by --url"), "{err}");
    let (code, _, err) = run(dlock(&url).args(["observe", "r"]), &dir, 30 * SEC);
    assert_eq!(code, 69, "{err}");
    assert!(
        err.contains(&format!("cannot observe r: server {addr} unavailable")),
        "{err}"
    );
    assert!(err.contains("--url or DLOCK_URL"), "{err}");

    // Neither given: the default, if nothing listens there on this machine.
    if std::net::TcpStream::connect("127.0.0.1:6379").is_ok() {
        eprintln!("something listens on 127.0.0.1:6379: the default's message not checked");
        return;
    }
    let mut cmd = dlock(&url);
    cmd.env_remove("DLOCK_URL").args(["status", "r"]);
    let (code, _, err) = run(&mut cmd, &dir, 20 * SEC);
    assert_eq!(code, 69, "{err}");
    assert!(
        err.contains(
            "no --url or DLOCK_URL was given, so dlock tried the default redis://127.0.0.1:6379/; \
             name the server with --url redis://host:port/ or DLOCK_URL"
        ),
        "{err}"
    );
}

//! Several `--url`s: Redlock mode over 3 independent servers.

use crate::cli::{dlock, holder, run, spans, timed_script, Dir, Dlock, Server, SEC};

fn urls(servers: &[Server]) -> Vec<String> {
    servers
        .iter()
        .flat_map(|s| ["--url".to_string(), s.url()])
        .collect()
}

/// Two runs over 3 servers serialize (their commands never overlap), the
/// command sees the largest fence, every server is free afterwards; a busy
/// lock exits 75; `status` reports each server; `--token` is refused.
#[test]
fn exec_over_three_servers_takes_a_majority_lock() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let dir = Dir::new();
    let mut runs: Vec<Dlock> = (0..2)
        .map(|n| {
            Dlock::spawn(
                dlock(&servers[0].url())
                    .args(urls(&servers))
                    .args(["exec", "--wait", "30s", "--ttl", "5s", "job", "--"])
                    .args(["sh", "-c", &timed_script(&dir, n, "0.4")]),
                &dir,
                &format!("r{n}"),
            )
        })
        .collect();
    for r in &mut runs {
        assert_eq!(r.wait(60 * SEC), 0, "{}", r.stderr());
    }
    let spans = spans(&dir, 2);
    assert!(spans[0].1 < spans[1].0, "commands overlapped: {spans:?}");
    assert!(spans.iter().all(|s| s.2 > 0));
    for s in &servers {
        assert_eq!(
            holder(&mut s.conn(), "job"),
            None,
            "released on every server"
        );
    }

    // Busy on a majority: 75 without waiting.
    let held = dlock_client::Redlock::new(&servers.iter().map(|s| s.url()).collect::<Vec<_>>())
        .unwrap()
        .try_lock("busy", 60 * SEC)
        .unwrap()
        .unwrap();
    let (code, _, err) = run(
        dlock(&servers[0].url())
            .args(urls(&servers))
            .args(["exec", "--no-wait", "busy", "true"]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 75, "{err}");

    // status: one report per server, named by its URL.
    let (code, out, err) = run(
        dlock(&servers[0].url())
            .args(urls(&servers))
            .args(["status", "busy"]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    for s in &servers {
        assert!(out.contains(&format!("{}: busy: held", s.url())), "{out}");
    }
    // extend/release by token need a majority.
    let (code, _, err) = run(
        dlock(&servers[0].url())
            .args(urls(&servers))
            .args(["release", "busy", held.token()]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    for s in &servers {
        assert_eq!(holder(&mut s.conn(), "busy"), None);
    }
    assert!(!held.release().unwrap(), "already released by the tool");

    let (code, _, err) = run(
        dlock(&servers[0].url())
            .args(urls(&servers))
            .args(["acquire", "--token", "t", "r"]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 64, "{err}");
}

/// One of 3 servers down: still granted (a majority); two down: 69.
#[test]
fn exec_over_three_servers_survives_one_down_not_two() {
    let mut servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let dir = Dir::new();
    let all = urls(&servers);
    servers[2].kill9();
    let (code, _, err) = run(
        dlock(&servers[0].url())
            .args(&all)
            .args(["exec", "--no-wait", "r", "true"]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 0, "{err}");
    servers[1].kill9();
    let (code, _, err) = run(
        dlock(&servers[0].url())
            .args(&all)
            .args(["exec", "--no-wait", "r", "true"]),
        &dir,
        30 * SEC,
    );
    assert_eq!(code, 69, "{err}");
    assert_eq!(
        holder(&mut servers[0].conn(), "r"),
        None,
        "the lone grant was undone"
    );
}

/// `status` over several servers names each by its URL, never with the
/// password in it.
#[test]
fn redlock_status_never_shows_a_password() {
    let dir = crate::cli::Dir::new();
    let urls: Vec<String> = (0..3)
        .map(|_| crate::cli::dead_url().replace("redis://", "redis://:s3cret@"))
        .collect();
    let mut cmd = crate::cli::dlock(&urls[0]);
    for u in &urls {
        cmd.args(["--url", u]);
    }
    let (code, out, err) = crate::cli::run(cmd.args(["status", "r"]), &dir, 30 * crate::cli::SEC);
    assert_eq!(code, 69, "{out}{err}");
    assert!(out.contains(":***@"), "{out}");
    assert!(
        !out.contains("s3cret") && !err.contains("s3cret"),
        "{out}{err}"
    );
}

/// By-token `extend` and `release` over 3 servers report the servers' own
/// refusal as acquire does: a majority without the module is 69 saying how
/// to load it, a majority whose ACL denies the command is 77, never a bare
/// "no quorum".
#[test]
fn extend_and_release_over_three_servers_report_the_servers_refusal() {
    let dir = Dir::new();
    let bare: Vec<Server> = (0..3)
        .map(|_| Server::builder().without_module().start())
        .collect();
    for cmd in ["extend", "release"] {
        let (code, _, err) = run(
            dlock(&bare[0].url())
                .args(urls(&bare))
                .args([cmd, "r", "some-token"]),
            &dir,
            30 * SEC,
        );
        assert_eq!(code, 69, "{cmd}: {err}");
        assert!(err.contains("module is not loaded"), "{cmd}: {err}");
    }
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    for s in &servers {
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", "ro", "on", ">pw", "~*", "&*", "+@all"][..])
            .arg(&["-dlock.extend", "-dlock.release"][..])
            .query(&mut s.conn())
            .unwrap();
    }
    let ro: Vec<String> = servers
        .iter()
        .flat_map(|s| {
            [
                "--url".to_string(),
                format!("redis://ro:pw@127.0.0.1:{}/", s.port()),
            ]
        })
        .collect();
    for cmd in ["extend", "release"] {
        let (code, _, err) = run(
            dlock(&servers[0].url())
                .args(&ro)
                .args([cmd, "r", "some-token"]),
            &dir,
            30 * SEC,
        );
        assert_eq!(code, 77, "{cmd}: {err}");
        assert!(
            err.to_lowercase().contains(&format!("dlock.{cmd}")),
            "{cmd}: {err}"
        );
    }
}

//! `dlock top`'s live view end to end, in a real terminal: tmux, on a
//! private socket, 160x40. The view shows a contended resource, the keys
//! change its ordering; `q` ends it with exit 0, Ctrl-C with 130, SIGTERM
//! with 143, and each way gives the terminal back: the main screen (the
//! view's lines gone with the alternate screen) and the same `stty`
//! settings.

use crate::cli::{acquire, kill, wait_until, SEC};
use crate::common::Server;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

static N: AtomicU64 = AtomicU64::new(0);

/// A tmux server of the test's own, with one session running `script`;
/// killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(script: &str) -> Tmux {
        match Command::new("tmux").arg("-V").output() {
            Ok(o) if o.status.success() => {}
            _ => panic!(
                "tmux is not installed: the live view of dlock top is tested in it \
                 (apt-get install tmux; `make test` installs it with .ci/deps.sh)"
            ),
        }
        let t = Tmux {
            socket: format!(
                "dlock-top-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ),
        };
        let o = t.tmux(&["new-session", "-d", "-x", "160", "-y", "40", script]);
        assert!(o.status.success(), "tmux new-session: {o:?}");
        t
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// The pane's text now.
    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p"]).stdout).into_owned()
    }

    /// The pid of the pane's process's child (`dlock top` under the
    /// script's shell), once it runs.
    fn dlock_pid(&self) -> i32 {
        let o = self.tmux(&["list-panes", "-F", "#{pane_pid}"]);
        let shell = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let children = format!("/proc/{shell}/task/{shell}/children");
        let mut pid = None;
        wait_until(20 * SEC, "dlock top started", || {
            pid = std::fs::read_to_string(&children)
                .ok()
                .and_then(|c| c.split_whitespace().next()?.parse().ok());
            pid.is_some()
        });
        pid.unwrap()
    }

    fn keys(&self, keys: &str) {
        let o = self.tmux(&["send-keys", keys]);
        assert!(o.status.success(), "send-keys {keys}: {o:?}");
    }

    /// Waits (at most 20 s) until the pane shows `what`; the pane's text.
    fn wait_for(&self, what: &str) -> String {
        let mut screen = String::new();
        wait_until(20 * SEC, &format!("the pane to show {what:?}"), || {
            screen = self.screen();
            screen.contains(what)
        });
        screen
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// The pane's script: the terminal's settings before and after `dlock top`,
/// compared, and its exit code; SIGINT ignored by the shell itself so that
/// it outlives a Ctrl-C to report.
fn script(url: &str) -> String {
    format!(
        "trap '' INT; a=$(stty -g); {} top --url {url} --interval 300ms; echo \"exit=$?\"; \
         if [ \"$a\" = \"$(stty -g)\" ]; then echo tty-restored; else echo tty-changed; fi; \
         sleep 120",
        env!("CARGO_BIN_EXE_dlock")
    )
}

fn contended(server: &Server, res: &str) {
    let mut c = server.conn();
    assert!(acquire(&mut c, res.as_bytes(), b"holder-live", 60_000, &[]).is_some());
    for i in 0..3 {
        let token = format!("t{i}");
        assert_eq!(
            acquire(&mut c, res.as_bytes(), token.as_bytes(), 60_000, &[]),
            None
        );
    }
}

/// Once the view ended: its exit code in the pane, the main screen back
/// (the view's lines gone with the alternate screen), the same `stty`.
fn given_back(t: &Tmux, exit: i32) {
    let screen = t.wait_for("tty-");
    assert!(screen.contains(&format!("exit={exit}")), "{screen}");
    assert!(screen.contains("tty-restored"), "{screen}");
    assert!(
        !screen.contains("dlock top - by"),
        "the view's screen left: {screen}"
    );
}

#[test]
fn keys_change_the_ordering_and_q_gives_the_terminal_back() {
    let server = Server::start();
    contended(&server, "live:res");
    let t = Tmux::start(&script(&server.url()));
    let screen = t.wait_for("live:res");
    assert!(screen.contains("dlock top - by contended"), "{screen}");
    assert!(screen.contains("holder-l"), "{screen}");
    assert!(screen.contains("RESOURCE"), "{screen}");
    t.keys("e");
    t.wait_for("dlock top - by expired");
    t.keys("w");
    t.wait_for("dlock top - by wait");
    t.keys("c");
    t.wait_for("dlock top - by contended");
    t.keys("q");
    given_back(&t, 0);
}

#[test]
fn ctrl_c_gives_the_terminal_back() {
    let server = Server::start();
    contended(&server, "live:int");
    let t = Tmux::start(&script(&server.url()));
    t.wait_for("live:int");
    t.keys("C-c");
    given_back(&t, 130);
}

#[test]
fn sigterm_gives_the_terminal_back() {
    let server = Server::start();
    contended(&server, "live:term");
    let t = Tmux::start(&script(&server.url()));
    t.wait_for("live:term");
    assert!(kill(t.dlock_pid(), libc::SIGTERM));
    given_back(&t, 143);
}

//! The command under the lock: started in a process group of its own (the
//! terminal's foreground group when dlock had the terminal), which the
//! reaper kills if dlock dies (the kernel kills its leader too), and
//! watched until the whole group has exited.

use crate::codes;
use crate::reaper;
use crate::signals;
use crate::wanted::OnWanted;
use dlock_client::Guard;
use libc::{c_int, pid_t};
use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// How often the supervisor looks at the group, the signals and the lease.
const TICK: Duration = Duration::from_millis(10);

pub struct Child {
    /// The leader's pid, also the group's id.
    pub pid: pid_t,
    /// The terminal whose foreground group the command's group became.
    tty: Option<c_int>,
}

/// Makes dlock the reaper of its orphaned descendants, so that a
/// grandchild whose parent exited is reparented to dlock and reaped, not
/// left a zombie that keeps the group alive.
pub fn become_subreaper() {
    // SAFETY: a plain prctl on this process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// The terminal on stdin, if dlock's group is its foreground group.
fn foreground_tty() -> Option<c_int> {
    // SAFETY: plain queries of descriptor 0 and of this process.
    unsafe { (libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp()).then_some(0) }
}

/// Starts `argv` with `env` added (overriding inherited values; a value
/// of None removes an inherited one); the new
/// group announces itself on `reaper_end` before the command runs. The
/// error's exit code: 127 not found, 126 not executable, 71 otherwise.
pub fn spawn(
    argv: &[OsString],
    env: &[(&str, Option<String>)],
    mask: libc::sigset_t,
    reaper_end: c_int,
) -> Result<Child, (io::Error, i32)> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let tty = foreground_tty();
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let ttou = signals::set_of(&[libc::SIGTTOU]);
    // SAFETY: only async-signal-safe calls between fork and exec, no
    // allocation (`last_os_error` builds the error from errno alone).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(fd) = tty {
                // From a background group, tcsetpgrp raises SIGTTOU unless
                // it is blocked (dlock's mask, inherited here, blocks it;
                // again in case the runtime reset the mask after the fork).
                libc::pthread_sigmask(libc::SIG_BLOCK, &ttou, std::ptr::null_mut());
                libc::tcsetpgrp(fd, libc::getpid());
            }
            // Before the check below: if dlock is already dead, the reaper
            // still learns which group to kill.
            reaper::announce_group(reaper_end)?;
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // dlock died before the prctl: the kernel would not kill us.
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
            Ok(())
        });
    }
    match cmd.spawn() {
        Ok(c) => Ok(Child {
            pid: c.id() as pid_t,
            tty,
        }),
        Err(e) => {
            let code = match e.raw_os_error() {
                Some(libc::ENOENT) => codes::NOT_FOUND,
                Some(
                    libc::EACCES
                    | libc::ENOEXEC
                    | libc::EISDIR
                    | libc::ETXTBSY
                    | libc::ENOTDIR
                    | libc::ELOOP
                    | libc::ENAMETOOLONG
                    | libc::E2BIG
                    | libc::EPERM,
                ) => codes::CANNOT_EXECUTE,
                _ => codes::OSERR,
            };
            Err((e, code))
        }
    }
}

/// Why dlock ended the command because of its lease.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cut {
    /// The lease is known lost: a renewal answered 0, or its budget passed.
    Lost,
    /// Renewals kept failing until the lease had `--grace` left: dlock
    /// ended the command before the lease could end under it.
    Failing,
}

/// How the command ended.
pub struct Ended {
    /// The leader's wait status.
    pub status: c_int,
    /// Set when the lease, not the command, decided the end: the status
    /// is then often the signal dlock itself sent (SIGTERM, SIGKILL),
    /// which must not pass for the command's own.
    pub cut: Option<Cut>,
}

fn signal_group(pgid: pid_t, sig: c_int) {
    // SAFETY: a plain kill of our child's group.
    unsafe {
        libc::kill(-pgid, sig);
    }
}

/// True once no process is left in the group.
fn group_gone(pgid: pid_t) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe {
        libc::kill(-pgid, 0) == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }
}

impl Child {
    /// Waits until the leader and every process of its group have exited,
    /// meanwhile forwarding dlock's signals to the group and ending it when
    /// the lease ends: `SIGTERM` when the guard is lost (at once) or when
    /// the lease budget is within `grace` of its end (renewals failing),
    /// `SIGKILL` at the budget's end, or `grace` after a loss. With
    /// `--on-wanted`, its signal when someone starts waiting.
    pub fn supervise(
        &self,
        resource: &str,
        guard: &Guard,
        grace: Duration,
        signals: &signals::Signals,
        on_wanted: Option<&OnWanted>,
    ) -> Ended {
        let pgid = self.pid;
        let mut leader: Option<c_int> = None;
        let mut termed = false;
        let mut killed = false;
        let mut lost_at: Option<Instant> = None;
        let mut expired = false;
        loop {
            self.reap(&mut leader);
            if leader.is_some() && group_gone(pgid) {
                break;
            }
            for sig in signals.pending() {
                signal_group(pgid, sig);
                // A stopped process acts on it only once continued (as a
                // shell's `kill` does for a stopped job).
                signal_group(pgid, libc::SIGCONT);
            }
            if let Some(w) = on_wanted.filter(|w| w.take()) {
                signal_group(pgid, w.signal);
            }
            let now = Instant::now();
            let until = guard.valid_until();
            if lost_at.is_none() && guard.is_lost() {
                lost_at = Some(now);
            }
            let left = until.saturating_duration_since(now);
            if !termed && (lost_at.is_some() || left <= grace) {
                termed = true;
                if lost_at.is_some() {
                    eprintln!(
                        "dlock: the lease on {resource} was lost: SIGTERM to the command, SIGKILL in {}",
                        crate::args::show(grace.min(left))
                    );
                } else {
                    eprintln!(
                        "dlock: renewing {resource} keeps failing and the lease ends in {}: SIGTERM to the command",
                        crate::args::show(left)
                    );
                }
                signal_group(pgid, libc::SIGTERM);
                signal_group(pgid, libc::SIGCONT);
            }
            let past_grace = lost_at.is_some_and(|t| now >= t + grace);
            if left.is_zero() || past_grace {
                expired |= left.is_zero();
                if !killed {
                    killed = true;
                    eprintln!("dlock: SIGKILL to the command: its lease on {resource} has ended");
                }
                // Again on every tick: the group may still be forking.
                signal_group(pgid, libc::SIGKILL);
            }
            std::thread::sleep(TICK);
        }
        self.take_back_terminal();
        let cut = if lost_at.is_some() || expired || guard.is_lost() {
            Some(Cut::Lost)
        } else if termed {
            Some(Cut::Failing)
        } else {
            None
        };
        Ended {
            status: leader.unwrap_or(0),
            cut,
        }
    }

    /// Reaps every exited child (the leader, grandchildren reparented to
    /// dlock as their subreaper, a reaper killed early); records the
    /// leader's status.
    fn reap(&self, leader: &mut Option<c_int>) {
        loop {
            let mut status: c_int = 0;
            // SAFETY: waitpid writes the status of a child it reaps.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            if pid == self.pid {
                *leader = Some(status);
            }
        }
    }

    /// The terminal goes back to dlock's group once the command's is gone.
    fn take_back_terminal(&self) {
        if let Some(fd) = self.tty {
            // SAFETY: SIGTTOU is blocked, so this works from the background.
            unsafe {
                libc::tcsetpgrp(fd, libc::getpgrp());
            }
        }
    }
}

/// `status` as a phrase: "exited with 3", "died of SIGKILL".
pub fn describe(status: c_int) -> String {
    if libc::WIFSIGNALED(status) {
        format!("died of {}", signals::name(libc::WTERMSIG(status)))
    } else {
        format!("exited with {}", libc::WEXITSTATUS(status))
    }
}

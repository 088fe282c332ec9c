//! The reaper: a small process, forked before the command starts, that
//! kills the command's whole process group when dlock dies first, however
//! it dies (`kill -9` of dlock or of dlock's process group included).
//! `PR_SET_PDEATHSIG` reaches only the group's leader; its jobs and their
//! children (a `pg_dump` under `backup.sh`) would keep running past the
//! lease while the next holder runs.
//!
//! dlock and the reaper share a socket pair. The reaper says `READY` once
//! it has left dlock's session and closed everything else. The command,
//! between fork and exec, sends its pid (its group's id) on dlock's end
//! itself, so that the reaper knows the group even if dlock dies right
//! after the fork. dlock sends `DONE` once the group has exited. The end of
//! the stream without `DONE` means dlock is gone: the reaper sends SIGKILL
//! to the group until it is empty (or for [`KILL_TRIES`] ticks), then exits.

use libc::{c_int, c_void, pid_t};
use std::io;
use std::time::{Duration, Instant};

/// The reaper is set up.
const READY: u8 = b'R';
/// The command's group id follows (a native-endian `pid_t`).
const GROUP: u8 = b'G';
/// The group has exited: end without killing anything.
const DONE: u8 = b'D';

/// How long dlock waits for `READY`, and then for the reaper to exit.
const PATIENCE: Duration = Duration::from_secs(5);

/// Between two SIGKILLs to a group that is not empty yet.
const KILL_TICK_NS: libc::c_long = 10_000_000;
/// SIGKILLs before giving up (about 2 s): under an init that does not
/// reap, the group's zombies keep it non-empty forever.
const KILL_TRIES: u32 = 200;

/// The reaper, from dlock's side.
pub struct Reaper {
    pid: pid_t,
    /// dlock's end of the socket pair (close-on-exec).
    end: c_int,
}

fn errno() -> Option<i32> {
    io::Error::last_os_error().raw_os_error()
}

/// Forks the reaper and waits until it is ready.
pub fn start() -> io::Result<Reaper> {
    let mut ends = [0 as c_int; 2];
    // SAFETY: socketpair writes two descriptors into `ends`.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            ends.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let [ours, theirs] = ends;
    // SAFETY: the child runs only `run`, which makes async-signal-safe
    // calls and never returns (dlock has other threads).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the forked child, see above.
        unsafe { run(theirs) }
    }
    // SAFETY: closing descriptors this function opened.
    unsafe {
        libc::close(theirs);
        if pid < 0 {
            let e = io::Error::last_os_error();
            libc::close(ours);
            return Err(e);
        }
    }
    let reaper = Reaper { pid, end: ours };
    match reaper.receive_ready() {
        Ok(()) => Ok(reaper),
        Err(e) => {
            // SAFETY: our own child, not reaped yet.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
                libc::close(ours);
            }
            Err(e)
        }
    }
}

/// Sends the calling process's pid, its group's id, to the reaper on
/// `end`. Async-signal-safe: for the command between fork and exec.
pub fn announce_group(end: c_int) -> io::Result<()> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() }.to_ne_bytes();
    let msg = [GROUP, pid[0], pid[1], pid[2], pid[3]];
    // SAFETY: sends from a live buffer; MSG_NOSIGNAL: an error, not
    // SIGPIPE, if the reaper is gone.
    let sent = unsafe {
        libc::send(
            end,
            msg.as_ptr() as *const c_void,
            msg.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if sent == msg.len() as isize {
        Ok(())
    } else if sent < 0 {
        Err(io::Error::last_os_error())
    } else {
        Err(io::Error::from_raw_os_error(libc::EPIPE))
    }
}

impl Reaper {
    /// The end the command announces its group on ([`announce_group`]).
    pub fn end(&self) -> c_int {
        self.end
    }

    fn receive_ready(&self) -> io::Result<()> {
        let mut pfd = libc::pollfd {
            fd: self.end,
            events: libc::POLLIN,
            revents: 0,
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            // SAFETY: polls one live descriptor.
            let rc = unsafe { libc::poll(&mut pfd, 1, left.as_millis() as c_int) };
            if rc < 0 && errno() == Some(libc::EINTR) {
                continue;
            }
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            if rc == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the reaper did not start",
                ));
            }
            let mut b = 0u8;
            // SAFETY: reads one byte into `b`.
            let n = unsafe { libc::read(self.end, &mut b as *mut u8 as *mut c_void, 1) };
            if n < 0 && errno() == Some(libc::EINTR) {
                continue;
            }
            return match (n, b) {
                (1, READY) => Ok(()),
                (n, _) if n < 0 => Err(io::Error::last_os_error()),
                _ => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the reaper ended at its start",
                )),
            };
        }
    }

    /// The command's group has exited: the reaper ends without killing
    /// anything (the group's id may be reused from now on), and is reaped.
    pub fn dismiss(self) {
        // SAFETY: sends one byte on our end, then closes it.
        unsafe {
            libc::send(
                self.end,
                &DONE as *const u8 as *const c_void,
                1,
                libc::MSG_NOSIGNAL,
            );
            libc::close(self.end);
        }
        // Bounded: a reaper that someone stopped must not keep dlock.
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            // SAFETY: waits for our own child, without blocking. It may
            // already have been reaped (see `Child::supervise`): ECHILD.
            let rc = unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), libc::WNOHANG) };
            if rc != 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The reaper's life. Only async-signal-safe calls: it is a fork of a
/// multithreaded process, whose locks (the allocator's) may be held by
/// threads that do not exist here.
unsafe fn run(end: c_int) -> ! {
    // Its own session: out of reach of signals to dlock's process group
    // and of the terminal's (hangup, Ctrl-C, Ctrl-Z).
    libc::setsid();
    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGPIPE,
    ] {
        libc::signal(sig, libc::SIG_IGN);
    }
    libc::prctl(libc::PR_SET_NAME, c"dlock-reaper".as_ptr(), 0, 0, 0);
    libc::chdir(c"/".as_ptr());
    // Nothing of dlock's stays open here (its stdout would not reach EOF
    // while the reaper lives: `x=$(dlock exec ...)`): /dev/null on 0, 1
    // and 2, the socket on 3, nothing else.
    const END: c_int = 3;
    if end != END {
        libc::dup2(end, END);
    }
    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
    for fd in 0..END {
        if null >= 0 {
            libc::dup2(null, fd);
        } else {
            libc::close(fd);
        }
    }
    if libc::syscall(libc::SYS_close_range, END + 1, c_int::MAX, 0) != 0 {
        let mut lim = std::mem::zeroed::<libc::rlimit>();
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(c_int::MAX as libc::rlim_t) as c_int
        } else {
            1024
        };
        for fd in END + 1..max {
            libc::close(fd);
        }
    }
    let ready = READY;
    libc::send(
        END,
        &ready as *const u8 as *const c_void,
        1,
        libc::MSG_NOSIGNAL,
    );
    let mut group: pid_t = 0;
    // Bytes of the group's id still to come after GROUP, and those read.
    let mut pending = 0usize;
    let mut id = [0u8; 4];
    let mut buf = [0u8; 64];
    loop {
        let n = libc::read(END, buf.as_mut_ptr() as *mut c_void, buf.len());
        if n < 0 && errno() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        for &b in &buf[..n as usize] {
            if pending > 0 {
                id[4 - pending] = b;
                pending -= 1;
                if pending == 0 {
                    group = pid_t::from_ne_bytes(id);
                }
            } else if b == GROUP {
                pending = 4;
            } else if b == DONE {
                libc::_exit(0);
            }
        }
    }
    // dlock is gone. Never `kill(0)` (our own group) or `kill(-1)` (every
    // process).
    if group > 1 {
        kill_group(group);
    }
    libc::_exit(0)
}

/// SIGKILL to the group until it is empty (it may still be forking), at
/// most [`KILL_TRIES`] times.
unsafe fn kill_group(group: pid_t) {
    let tick = libc::timespec {
        tv_sec: 0,
        tv_nsec: KILL_TICK_NS,
    };
    for _ in 0..KILL_TRIES {
        if libc::kill(-group, libc::SIGKILL) != 0 && errno() == Some(libc::ESRCH) {
            return;
        }
        libc::nanosleep(&tick, std::ptr::null_mut());
    }
}

//! `DLOCK.ACQUIRE`/`DLOCK.MACQUIRE` requests, maybe bound to a session,
//! sent at once or on a thread of their own; `DLOCK.INFO` parsed, with a
//! bound hold's `session`.
use super::*;
// ---------------------------------------------------------------- ACQUIRE

/// One `DLOCK.ACQUIRE` (or, with `set`, `DLOCK.MACQUIRE`), maybe bound.
#[derive(Clone, Debug)]
pub(super) struct Req {
    pub(super) set: Vec<String>,
    pub(super) token: String,
    pub(super) ttl: String,
    pub(super) shared: bool,
    pub(super) limit: Option<u32>,
    pub(super) owner: Option<String>,
    pub(super) wait: Option<u64>,
    pub(super) session: Option<String>,
}

/// `DLOCK.ACQUIRE res token 0`: add `.session(id)`.
pub(super) fn req(res: &str, token: &str) -> Req {
    mreq(&[res], token)
}

/// `DLOCK.MACQUIRE n res... token 0` (one resource: `DLOCK.ACQUIRE`).
pub(super) fn mreq(set: &[&str], token: &str) -> Req {
    Req {
        set: set.iter().map(|s| s.to_string()).collect(),
        token: token.into(),
        ttl: "0".into(),
        shared: false,
        limit: None,
        owner: None,
        wait: None,
        session: None,
    }
}

impl Req {
    pub(super) fn session(mut self, id: &str) -> Self {
        self.session = Some(id.into());
        self
    }
    pub(super) fn ttl(mut self, ttl: &str) -> Self {
        self.ttl = ttl.into();
        self
    }
    pub(super) fn shared(mut self) -> Self {
        self.shared = true;
        self
    }
    pub(super) fn limit(mut self, n: u32) -> Self {
        self.limit = Some(n);
        self
    }
    pub(super) fn owner(mut self, o: &str) -> Self {
        self.owner = Some(o.into());
        self
    }
    pub(super) fn wait(mut self, ms: u64) -> Self {
        self.wait = Some(ms);
        self
    }
    /// A set of more than one resource goes as `MACQUIRE`.
    pub(super) fn cmd(&self) -> redis::Cmd {
        let mut c = if self.set.len() == 1 {
            let mut c = redis::cmd("DLOCK.ACQUIRE");
            c.arg(&self.set[0]);
            c
        } else {
            let mut c = redis::cmd("DLOCK.MACQUIRE");
            c.arg(self.set.len()).arg(&self.set);
            c
        };
        c.arg(&self.token).arg(&self.ttl);
        if self.shared {
            c.arg("SHARED");
        }
        if let Some(n) = self.limit {
            c.arg("LIMIT").arg(n);
        }
        if let Some(o) = &self.owner {
            c.arg("OWNER").arg(o);
        }
        if let Some(w) = self.wait {
            c.arg("WAIT").arg(w);
        }
        if let Some(s) = &self.session {
            c.arg("SESSION").arg(s);
        }
        c
    }
    pub(super) fn send(&self, c: &mut impl ConnectionLike) -> RedisResult<Option<i64>> {
        self.cmd().query(c)
    }
    pub(super) fn grant(&self, c: &mut impl ConnectionLike) -> i64 {
        match self.send(c) {
            Ok(Some(f)) => f,
            other => panic!("{self:?}: expected a grant, got {other:?}"),
        }
    }
    pub(super) fn busy(&self, c: &mut impl ConnectionLike) {
        match self.send(c) {
            Ok(None) => {}
            other => panic!("{self:?}: expected nil, got {other:?}"),
        }
    }
    pub(super) fn error(&self, c: &mut impl ConnectionLike) -> String {
        match self.send(c) {
            Err(e) => err_text(&e),
            other => panic!("{self:?}: expected an error, got {other:?}"),
        }
    }
    /// Sends on a new connection of its own thread (it may block).
    pub(super) fn spawn(&self, s: &Server) -> Blocked {
        Blocked::send(connect(&s.url()), self.cmd(), format!("{self:?}"))
    }
}

/// A command sent on its own thread and connection, its reply collected.
pub(super) struct Blocked {
    pub(super) what: String,
    /// Its connection's `CLIENT ID`.
    pub(super) id: i64,
    pub(super) rx: Receiver<(RedisResult<Option<i64>>, Instant, Connection)>,
}

impl Blocked {
    /// Sends `cmd` on `conn` (which may own a `BIND` session).
    pub(super) fn send(mut conn: Connection, cmd: redis::Cmd, what: String) -> Blocked {
        conn.set_read_timeout(Some(Duration::from_secs(90)))
            .unwrap();
        let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut conn).unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let r = cmd.query(&mut conn);
            let _ = tx.send((r, Instant::now(), conn));
        });
        Blocked { what, id, rx }
    }
    /// The reply, when it arrived, and the connection (a `BIND` session
    /// on it ends when it is dropped).
    pub(super) fn outcome(
        &self,
        within: Duration,
    ) -> (RedisResult<Option<i64>>, Instant, Connection) {
        self.rx
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("{}: no reply within {within:?}: {e:?}", self.what))
    }
    /// Granted within `within`: the fence and when the reply arrived.
    pub(super) fn granted_within(&self, within: Duration) -> (i64, Instant) {
        match self.outcome(within) {
            (Ok(Some(f)), at, _) => (f, at),
            (other, ..) => panic!("{}: expected a grant, got {other:?}", self.what),
        }
    }
    pub(super) fn granted(&self) -> i64 {
        self.granted_within(RELEASED).0
    }
    /// Answered with an error within `RELEASED`: its text.
    pub(super) fn error(&self) -> String {
        match self.outcome(RELEASED) {
            (Err(e), ..) => err_text(&e),
            (other, ..) => panic!("{}: expected an error, got {other:?}", self.what),
        }
    }
    pub(super) fn assert_pending(&self) {
        match self.rx.try_recv() {
            Err(TryRecvError::Empty) => {}
            Ok((r, ..)) => panic!("{} must still wait, got {r:?}", self.what),
            Err(e) => panic!("{}: thread gone: {e:?}", self.what),
        }
    }
}

// ---------------------------------------------------------------- DLOCK.INFO

/// One hold as the list form of `DLOCK.INFO` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HoldShown {
    pub(super) token: String,
    pub(super) owner: String,
    pub(super) fence: i64,
    pub(super) ttl: i64,
    pub(super) mode: String,
    pub(super) session: Option<String>,
}

/// What `DLOCK.INFO` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Shown {
    Free,
    /// Nobody holds it; its handoff to the queue (of this many) waits.
    Reserved(i64),
    Plain(LockInfo),
    List {
        kind: String,
        limit: i64,
        waiters: i64,
        holds: Vec<HoldShown>,
    },
}

impl Shown {
    /// The holds, whatever the form (a plain lock is one exclusive hold).
    pub(super) fn holds(&self) -> Vec<HoldShown> {
        match self {
            Shown::Free | Shown::Reserved(_) => vec![],
            Shown::Plain(i) => vec![HoldShown {
                token: String::from_utf8_lossy(&i.token).into_owned(),
                owner: String::from_utf8_lossy(&i.token).into_owned(),
                fence: i.fence,
                ttl: i.ttl,
                mode: "exclusive".into(),
                session: None,
            }],
            Shown::List { holds, .. } => holds.clone(),
        }
    }
    pub(super) fn hold(&self, token: &str) -> HoldShown {
        let h = self.holds().into_iter().find(|h| h.token == token);
        h.unwrap_or_else(|| panic!("no hold of {token} in {self:?}"))
    }
    pub(super) fn tokens(&self) -> Vec<String> {
        self.holds().into_iter().map(|h| h.token).collect()
    }
}

pub(super) fn parse_hold(v: &Value) -> HoldShown {
    let p = pairs(v);
    let keys = keys_of(&p);
    let base = ["token", "owner", "fence", "ttl", "mode"];
    let session = if keys.len() == 6 {
        assert_eq!(keys, [&base[..], &["session"]].concat(), "hold fields");
        Some(text(&p[5].1))
    } else {
        assert_eq!(keys, base, "hold fields");
        None
    };
    HoldShown {
        token: text(&p[0].1),
        owner: text(&p[1].1),
        fence: as_int(&p[2].1),
        ttl: as_int(&p[3].1),
        mode: text(&p[4].1),
        session,
    }
}

pub(super) fn parse_shown(v: Value) -> Shown {
    if v == Value::Nil {
        return Shown::Free;
    }
    let p = pairs(&v);
    if keys_of(&p).first().map(String::as_str) == Some("token") && p[0].1 == Value::Nil {
        assert_eq!(keys_of(&p), ["token", "fence", "ttl", "waiters"]);
        return Shown::Reserved(as_int(&p[3].1));
    }
    if keys_of(&p).first().map(String::as_str) == Some("token") {
        return Shown::Plain(parse_pairs(&p));
    }
    assert_eq!(keys_of(&p), ["kind", "limit", "waiters", "holds"]);
    let holds = match &p[3].1 {
        Value::Array(hs) => hs.iter().map(parse_hold).collect(),
        other => panic!("holds must be an array, got {other:?}"),
    };
    Shown::List {
        kind: text(&p[0].1),
        limit: as_int(&p[1].1),
        waiters: as_int(&p[2].1),
        holds,
    }
}

pub(super) fn shown(c: &mut impl ConnectionLike, res: &str) -> Shown {
    let v: Value = redis::cmd("DLOCK.INFO")
        .arg(res)
        .query(c)
        .unwrap_or_else(|e| panic!("DLOCK.INFO {res}: {e}"));
    parse_shown(v)
}

/// `res` holds `token`'s hold bound to `id`, shown as the contract says:
/// the list form, ttl -1, the session named, and no TTL on the key.
pub(super) fn assert_bound(
    c: &mut impl ConnectionLike,
    res: &str,
    token: &str,
    id: &str,
) -> HoldShown {
    let s = shown(c, res);
    assert!(
        matches!(s, Shown::List { .. }),
        "{res}: the list form: {s:?}"
    );
    let h = s.hold(token);
    assert_eq!(h.session.as_deref(), Some(id), "{res}: {h:?}");
    assert_eq!(h.ttl, -1, "{res}: a bound hold has no deadline: {h:?}");
    assert_eq!(pttl(c, res), -1, "{res}: no TTL on the key of a bound hold");
    h
}

/// Requests queued on `res`, whatever the form.
pub(super) fn queued(c: &mut impl ConnectionLike, res: &str) -> i64 {
    match shown(c, res) {
        Shown::Free => 0,
        Shown::Reserved(n) => n,
        Shown::Plain(i) => i.waiters,
        Shown::List { waiters, .. } => waiters,
    }
}

pub(super) fn wait_queued(c: &mut impl ConnectionLike, res: &str, n: i64) {
    wait_until(SOON, &format!("{n} queued on {res}"), || {
        queued(c, res) == n
    });
}

//! The sequential specification of one resource on `lin`: plain locks,
//! read-write locks with owners and semaphores follow one rule book in the
//! server (`core/src/resource/admission.rs`, docs/lock-kinds.md), so one model
//! serves every kind. Nothing expires on
//! `lin` (leases outlive the run), so time, TTLs and deadlines are left out;
//! no `WAIT` is used there, so the queue is always empty.
//!
//! Fences are checked by order, not by value: a fresh fence is any value
//! above every fence granted before (`last`). A grant whose reply was lost
//! has an unknown fence, bounded by what was granted around it; a later
//! reply that shows it (a retry, the owner's next hold, `INFO`) must fall
//! within those bounds and makes it known.
use super::wgl::Model;

/// A hold's fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fence {
    Known(u64),
    /// Granted fresh by an operation whose reply was lost: above `above`
    /// (the highest fence known when it was drawn) and below `below` (the
    /// first fresh fence known to be drawn after it; `u64::MAX`: none yet).
    Unknown {
        above: u64,
        below: u64,
    },
}

/// One hold. Tokens and owners are interned names (one namespace: without
/// `OWNER` the token is its own owner).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hold {
    pub token: u32,
    pub owner: u32,
    pub shared: bool,
    pub fence: Fence,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// Sorted by token (tokens are unique).
    pub holds: Vec<Hold>,
    /// The resource's limit while held (0 when free: a free resource takes
    /// the limit of its next grant).
    pub limit: u32,
    /// The highest fence known to be granted.
    pub last: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Acquire {
        token: u32,
        owner: Option<u32>,
        shared: bool,
        limit: Option<u32>,
    },
    Release {
        token: u32,
    },
    Extend {
        token: u32,
    },
    Info,
}

/// The errors the lock logic answers (docs/commands/dlock.acquire.md#errors
/// and the other command pages); any other error changed nothing whatever
/// the state and its operation is left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrKind {
    /// `ERR token already holds this resource with another mode, LIMIT or OWNER`
    TokenInUse,
    /// `ERR the resource is held with LIMIT n: ...`
    LimitMismatch,
    /// `ERR SHARED cannot be combined with LIMIT above 1`
    SharedSemaphore,
    /// `ERR OWNER cannot be combined with LIMIT above 1`
    OwnerSemaphore,
    /// `ERR upgrade refused: ...`
    UpgradeRefused,
}

impl ErrKind {
    /// The lock-logic error an error reply is, if it is one.
    pub fn of(error: &str) -> Option<ErrKind> {
        const KINDS: [(&str, ErrKind); 5] = [
            ("ERR token already holds this resource", ErrKind::TokenInUse),
            (
                "ERR the resource is held with LIMIT",
                ErrKind::LimitMismatch,
            ),
            (
                "ERR SHARED cannot be combined with LIMIT",
                ErrKind::SharedSemaphore,
            ),
            (
                "ERR OWNER cannot be combined with LIMIT",
                ErrKind::OwnerSemaphore,
            ),
            ("ERR upgrade refused", ErrKind::UpgradeRefused),
        ];
        KINDS
            .iter()
            .find(|(prefix, _)| error.starts_with(prefix))
            .map(|&(_, k)| k)
    }
}

/// A hold as `INFO` shows it (ttl ignored).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Shown {
    pub token: u32,
    pub owner: u32,
    pub fence: u64,
    pub shared: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// A grant (also a durable grant no replica acknowledged: it was granted).
    Fence(u64),
    Nil,
    Int(i64),
    /// `INFO` of a held resource, sorted by token (`Nil` is no holds).
    Holds(Vec<Shown>),
    Error(ErrKind),
    /// The reply was lost: the operation took effect or did not.
    Unknown,
}

/// What `ACQUIRE` does in a state (docs/lock-kinds.md; `admission.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Error(ErrKind),
    /// The token's identical hold: its fence back, nothing added.
    Retry(Fence),
    /// Does not fit: nil (no `WAIT`).
    Busy,
    /// A new hold, with its owner's fence when the owner holds (limit 1),
    /// else a fresh one.
    Grant(Option<Fence>),
}

pub struct LockModel;

impl State {
    fn hold(&self, token: u32) -> Option<&Hold> {
        self.holds.iter().find(|h| h.token == token)
    }

    pub fn decide(
        &self,
        token: u32,
        owner: Option<u32>,
        shared: bool,
        limit: Option<u32>,
    ) -> Decision {
        let lim = limit.unwrap_or(1);
        // Refused when parsed, whatever the state.
        if shared && lim > 1 {
            return Decision::Error(ErrKind::SharedSemaphore);
        }
        if owner.is_some() && lim > 1 {
            return Decision::Error(ErrKind::OwnerSemaphore);
        }
        let owner = owner.unwrap_or(token);
        if let Some(h) = self.hold(token) {
            return if h.shared == shared && h.owner == owner && self.limit == lim {
                Decision::Retry(h.fence)
            } else {
                Decision::Error(ErrKind::TokenInUse)
            };
        }
        if !self.holds.is_empty() && self.limit != lim {
            return Decision::Error(ErrKind::LimitMismatch);
        }
        let mine: Vec<&Hold> = self.holds.iter().filter(|h| h.owner == owner).collect();
        let my_exclusive = mine.iter().any(|h| !h.shared);
        let fits = if lim > 1 {
            self.holds.len() < lim as usize
        } else if !shared {
            self.holds.len() == mine.len()
        } else {
            !self.holds.iter().any(|h| !h.shared && h.owner != owner)
        };
        let upgrade = !mine.is_empty() && !shared && lim == 1 && !my_exclusive;
        if upgrade && !fits {
            return Decision::Error(ErrKind::UpgradeRefused);
        }
        if !fits {
            return Decision::Busy;
        }
        Decision::Grant(mine.first().filter(|_| lim == 1).map(|h| h.fence))
    }

    /// `owner`'s holds shown with fence `f`: every one must allow it; they
    /// all become known. `None`: impossible.
    fn bind(mut self, owner: u32, f: u64) -> Option<State> {
        for h in self.holds.iter_mut().filter(|h| h.owner == owner) {
            match h.fence {
                Fence::Known(x) if x != f => return None,
                Fence::Unknown { above, below } if !(above < f && f < below) => return None,
                _ => h.fence = Fence::Known(f),
            }
        }
        self.last = self.last.max(f);
        Some(self)
    }

    fn add(mut self, token: u32, owner: u32, shared: bool, limit: u32, fence: Fence) -> State {
        if self.holds.is_empty() {
            self.limit = limit;
        }
        let at = self.holds.partition_point(|h| h.token < token);
        self.holds.insert(
            at,
            Hold {
                token,
                owner,
                shared,
                fence,
            },
        );
        self
    }

    fn release(mut self, token: u32) -> State {
        self.holds.retain(|h| h.token != token);
        if self.holds.is_empty() {
            self.limit = 0;
        }
        self
    }

    /// A fresh fence `f` drawn: above every fence before it.
    fn draw(mut self, f: u64) -> Option<State> {
        if f <= self.last {
            return None;
        }
        self.last = f;
        for h in &mut self.holds {
            if let Fence::Unknown { below, .. } = &mut h.fence {
                if *below == u64::MAX {
                    *below = f;
                }
            }
        }
        Some(self)
    }

    fn acquire(&self, input: &Input, output: &Output) -> Vec<State> {
        let Input::Acquire {
            token,
            owner,
            shared,
            limit,
        } = *input
        else {
            return Vec::new();
        };
        let who = owner.unwrap_or(token);
        let lim = limit.unwrap_or(1);
        let d = self.decide(token, owner, shared, limit);
        let s = self.clone();
        match (d, output) {
            (_, Output::Unknown) => {
                let mut out = vec![s.clone()];
                match d {
                    Decision::Grant(Some(fence)) => out.push(s.add(token, who, shared, lim, fence)),
                    Decision::Grant(None) => {
                        let fence = Fence::Unknown {
                            above: self.last,
                            below: u64::MAX,
                        };
                        out.push(s.add(token, who, shared, lim, fence));
                    }
                    _ => {}
                }
                out
            }
            (Decision::Retry(_), &Output::Fence(f)) => {
                let owner = self.hold(token).map_or(who, |h| h.owner);
                s.bind(owner, f).into_iter().collect()
            }
            (Decision::Grant(Some(_)), &Output::Fence(f)) => s
                .bind(who, f)
                .map(|s| s.add(token, who, shared, lim, Fence::Known(f)))
                .into_iter()
                .collect(),
            (Decision::Grant(None), &Output::Fence(f)) => s
                .draw(f)
                .map(|s| s.add(token, who, shared, lim, Fence::Known(f)))
                .into_iter()
                .collect(),
            (Decision::Busy, Output::Nil) => vec![s],
            (Decision::Error(e), Output::Error(got)) if e == *got => vec![s],
            _ => Vec::new(),
        }
    }

    fn info(&self, shown: &[Shown]) -> Option<State> {
        if shown.len() != self.holds.len() {
            return None;
        }
        let mut s = self.clone();
        for (h, v) in self.holds.iter().zip(shown) {
            if h.token != v.token || h.owner != v.owner || h.shared != v.shared {
                return None;
            }
            s = s.bind(h.owner, v.fence)?;
        }
        Some(s)
    }
}

impl Model for LockModel {
    type State = State;
    type Input = Input;
    type Output = Output;

    fn init(&self) -> State {
        State::default()
    }

    fn step(&self, s: &State, input: &Input, output: &Output) -> Vec<State> {
        match (input, output) {
            (Input::Acquire { .. }, _) => s.acquire(input, output),
            (&Input::Release { token }, out) => {
                let held = s.hold(token).is_some();
                match out {
                    Output::Unknown if held => vec![s.clone(), s.clone().release(token)],
                    Output::Unknown => vec![s.clone()],
                    Output::Int(1) if held => vec![s.clone().release(token)],
                    Output::Int(0) if !held => vec![s.clone()],
                    _ => Vec::new(),
                }
            }
            (&Input::Extend { token }, out) => {
                let held = s.hold(token).is_some();
                match out {
                    Output::Unknown => vec![s.clone()],
                    Output::Int(1) if held => vec![s.clone()],
                    Output::Int(0) if !held => vec![s.clone()],
                    _ => Vec::new(),
                }
            }
            (Input::Info, Output::Unknown) => vec![s.clone()],
            (Input::Info, Output::Nil) if s.holds.is_empty() => vec![s.clone()],
            (Input::Info, Output::Holds(shown)) => s.info(shown).into_iter().collect(),
            (Input::Info, _) => Vec::new(),
        }
    }
}

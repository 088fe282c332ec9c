//! The resources one step decides together, opened once: the command's
//! own resources first, then (when the step serves the queues) every
//! resource reachable through the set requests queued on them, each key
//! open for writing with its holds loaded and the dead ones pruned.

use std::ffi::c_char;

use redis_module::raw;

use crate::server::edge::api::{rm, Ctx};
use crate::server::edge::cluster;
use crate::server::execute::hold_work::{Deadlines, Work};
use crate::server::keyspace::keys::LockKey;
use crate::server::waiting::blocking::{self, Resource};
use dlock_core::queue::{Component, Frontier};
use dlock_core::Error;

/// A key name the module created, freed on drop.
pub struct Name {
    ctx: Ctx,
    pub ptr: *mut raw::RedisModuleString,
}

impl Name {
    pub fn new(ctx: Ctx, key: &[u8]) -> Result<Self, Error> {
        let create = rm!(RedisModule_CreateString);
        let ptr = unsafe { create(ctx.0, key.as_ptr().cast::<c_char>(), key.len()) };
        if ptr.is_null() {
            return Err(Error::Internal("cannot create a key name"));
        }
        Ok(Name { ctx, ptr })
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        if let Some(free) = unsafe { raw::RedisModule_FreeString } {
            unsafe { free(self.ctx.0, self.ptr) };
        }
    }
}

/// One resource of a group, its key open for writing. Fields drop in
/// order: the key is closed before its name is freed; before either, a
/// work that did not finish puts its holds back (see `Work`).
pub struct Opened {
    pub work: Work,
    key: LockKey,
    pub name: Name,
}

impl Drop for Opened {
    fn drop(&mut self) {
        self.work.abandon(&mut self.key);
    }
}

impl Opened {
    /// Writes the holds back with their effects (see `Work::finish`).
    pub fn finish(&mut self, ctx: Ctx) -> Result<Deadlines, Error> {
        self.work.finish(ctx, &mut self.key, self.name.ptr)
    }
}

/// The resources of one step with every key open.
pub struct Group {
    /// How many of the resources are the step's own: the command's, or the
    /// ones a timer or an event serves (the first ones).
    pub own: usize,
    /// The resources (its own first) and the requests this step serves
    /// (none when it leaves the queues as they are): the part of their
    /// component that `frontier` decides.
    pub component: Component<Resource>,
    /// One per resource of `component`, in its order.
    pub members: Vec<Opened>,
    /// Whether the step serves the queues.
    pub serves_queues: bool,
    pub now_us: u64,
    frontier: Frontier<Resource>,
}

/// What widening a group found.
pub enum Widened {
    /// Nothing left out can be decided differently.
    Done,
    /// More requests and resources are open: decide again.
    Grew,
    /// A resource found is of another type: its waiters were answered with
    /// the error; open the group again.
    FoundOtherType,
}

impl Group {
    /// Owners looked at so far to find the requests of owners that hold
    /// (see `Frontier::scanned`).
    pub fn scanned(&self) -> usize {
        self.frontier.scanned()
    }

    /// Where a step that stops after deciding its requests at `decided`
    /// leaves requests it uncovered (see `Frontier::grown`): none when
    /// nothing left out could be decided differently.
    pub fn left_over(&self, decided: &[usize]) -> Vec<Resource> {
        if !self.serves_queues || decided.is_empty() {
            return Vec::new();
        }
        let mut frontier = self.frontier.clone();
        if !blocking::widen(&mut frontier, &self.component, decided) {
            return Vec::new();
        }
        frontier.grown().cloned().collect()
    }

    /// Grows the group after a decision that granted or refused its
    /// requests at `decided` (see `WaitQueues::widen`), opening the
    /// resources found.
    pub fn widen(&mut self, ctx: Ctx, decided: &[usize]) -> Result<Widened, Error> {
        if !self.serves_queues {
            return Ok(Widened::Done);
        }
        if !blocking::widen(&mut self.frontier, &self.component, decided) {
            return Ok(Widened::Done);
        }
        self.component = part(&mut self.frontier, &self.members);
        let mut wrong = Vec::new();
        for res in self.component.resources.iter().skip(self.members.len()) {
            match open_one(ctx, res, self.now_us)? {
                Some(m) => self.members.push(m),
                None => wrong.push(res.clone()),
            }
        }
        if wrong.is_empty() {
            return Ok(Widened::Grew);
        }
        for res in &wrong {
            blocking::fail(Some(res), Error::WrongType);
        }
        Ok(Widened::FoundOtherType)
    }
}

/// Opens `starts` and, if the step serves the queues (`serves` says so of
/// a start's holds, or a set waits on a start), their component, at
/// `now_us`; its part decides the requests `chosen` too, however deep they
/// wait (a handover's target, see `Frontier::with`). A start of another type is an error when
/// `refuses_other_types`; otherwise
/// (and for every other resource) its waiters are answered with the error
/// and the group is opened again without it. `None`: no start is left.
pub fn open(
    ctx: Ctx,
    starts: &[Resource],
    serves: impl Fn(&Work) -> bool,
    refuses_other_types: bool,
    chosen: &[u64],
    now_us: u64,
) -> Result<Option<Group>, Error> {
    let mut starts = starts.to_vec();
    // Each pass drops a start of another type, or the waiters of another
    // resource of another type: it ends, at the latest once no start or no
    // queue is left.
    loop {
        let mut members = Vec::with_capacity(starts.len());
        let mut wrong = Vec::new();
        for res in &starts {
            match open_one(ctx, res, now_us)? {
                Some(m) => members.push(m),
                None if refuses_other_types => return Err(Error::WrongType),
                None => wrong.push(res.clone()),
            }
        }
        if !wrong.is_empty() {
            drop(members);
            for res in &wrong {
                blocking::fail(Some(res), Error::WrongType);
            }
            starts.retain(|r| !wrong.contains(r));
            if starts.is_empty() {
                return Ok(None);
            }
            continue;
        }
        let waited = starts.iter().any(|r| blocking::waiters_on(r) > 0);
        let serves_queues = waited
            && (members.iter().any(|m| serves(&m.work)) || starts.iter().any(blocking::has_sets));
        let (frontier, component) = if serves_queues {
            gather(ctx, &starts, &members, chosen)?
        } else {
            let component = Component {
                resources: starts.clone(),
                requests: Vec::new(),
                reserved_from: vec![None; starts.len()],
                reserved_rank: vec![None; starts.len()],
            };
            (Frontier::around(&[]), component)
        };
        for res in component.resources.iter().skip(starts.len()) {
            match open_one(ctx, res, now_us)? {
                Some(m) => members.push(m),
                None => wrong.push(res.clone()),
            }
        }
        if wrong.is_empty() {
            return Ok(Some(Group {
                own: starts.len(),
                component,
                members,
                serves_queues,
                now_us,
                frontier,
            }));
        }
        drop(members);
        for res in &wrong {
            blocking::fail(Some(res), Error::WrongType);
        }
    }
}

/// `res` opened with its holds loaded, or `None` if it holds something
/// that is not a lock.
fn open_one(ctx: Ctx, res: &Resource, now_us: u64) -> Result<Option<Opened>, Error> {
    let name = Name::new(ctx, &res.key)?;
    let mut key = LockKey::open_write(ctx, name.ptr)?;
    match Work::load_at(&mut key, now_us) {
        Ok(work) => Ok(Some(Opened { work, key, name })),
        Err(Error::WrongType) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The part of the component of `starts` this step decides (see
/// `dlock_core::queue::Frontier`), after its given-up waiters left and, when it
/// holds a set request and this node may not grant the slot (one slot: a
/// set's members share it), the component's waiters were sent away: a set
/// must not be granted in part by two nodes, so they retry and follow the
/// redirect. Other queues are sent away only when a grant is due
/// (`send_away`).
fn gather(
    ctx: Ctx,
    starts: &[Resource],
    opened: &[Opened],
    chosen: &[u64],
) -> Result<(Frontier<Resource>, Component<Resource>), Error> {
    let mut frontier = Frontier::around(starts).with(chosen);
    let comp = part(&mut frontier, opened);
    let sets = comp.requests.iter().any(|r| r.members.len() > 1);
    if sets && !may_grant(ctx, &comp)? {
        send_away(starts);
        let mut frontier = Frontier::around(starts).with(chosen);
        let comp = part(&mut frontier, opened);
        return Ok((frontier, comp));
    }
    Ok((frontier, comp))
}

/// The part `frontier` decides, once the waiters of its resources whose
/// `WAIT` ran out have left. `opened`: the resources open so far, in the
/// frontier's order. (`WAIT`s are reckoned on their own clock: see
/// `blocking`.)
fn part(frontier: &mut Frontier<Resource>, opened: &[Opened]) -> Component<Resource> {
    let holds = |i: usize| opened.get(i).map(|m| &m.work.holds);
    for res in frontier.resources() {
        blocking::time_out_given_up(res);
    }
    let known = frontier.resources().len();
    let comp = blocking::part(frontier, holds);
    if comp.resources.len() == known {
        return comp;
    }
    // Members found by this part: their given-up waiters leave too, and
    // the part is read again without them.
    for res in comp.resources.iter().skip(known) {
        blocking::time_out_given_up(res);
    }
    blocking::part(frontier, holds)
}

/// Whether this node may grant the slot of `comp` now.
pub fn may_grant(ctx: Ctx, comp: &Component<Resource>) -> Result<bool, Error> {
    let first = comp.resources.first().map(|r| &*r.key).unwrap_or_default();
    cluster::may_grant(ctx, first)
}

/// The slot is moving or gone: every waiter of the component of `starts`
/// retries and follows the redirect.
pub fn send_away(starts: &[Resource]) {
    for res in &blocking::component(starts).resources {
        blocking::fail(Some(res), Error::SlotMoved);
    }
}

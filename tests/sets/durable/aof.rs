//! Reading what a server wrote to its AOF: the commands of its incremental
//! files (RESP, `aof-use-rdb-preamble` either way), grouped into the units
//! a replica or a replay applies atomically: a `MULTI` ... `EXEC` block, or
//! one command on its own.
use super::*;

pub use crate::common::aof::commands;

/// What is applied at once: a transaction's commands, or one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    pub transaction: bool,
    pub cmds: Vec<Vec<String>>,
}

/// `cmds` grouped into units; a `MULTI` must be closed by its `EXEC`.
pub fn units(cmds: &[Vec<String>]) -> Vec<Unit> {
    let mut out = Vec::new();
    let mut open: Option<Vec<Vec<String>>> = None;
    for c in cmds {
        let name = c[0].to_ascii_uppercase();
        match (name.as_str(), open.as_mut()) {
            ("MULTI", None) => open = Some(Vec::new()),
            ("MULTI", Some(_)) => panic!("MULTI inside MULTI: {cmds:?}"),
            ("EXEC", Some(_)) => out.push(Unit {
                transaction: true,
                cmds: open.take().unwrap(),
            }),
            ("EXEC", None) => panic!("EXEC without MULTI: {cmds:?}"),
            (_, Some(t)) => t.push(c.clone()),
            (_, None) => out.push(Unit {
                transaction: false,
                cmds: vec![c.clone()],
            }),
        }
    }
    assert!(open.is_none(), "a MULTI without its EXEC: {cmds:?}");
    out
}

/// The incremental AOF of a server, read as it grows: `fresh` returns the
/// units written since the previous call (`appendfsync always`: a reply
/// comes after its effects are written).
pub struct Tail<'a> {
    server: &'a Server,
    seen: usize,
}

impl<'a> Tail<'a> {
    pub fn new(server: &'a Server) -> Self {
        let mut t = Tail { server, seen: 0 };
        t.fresh();
        t
    }

    pub fn fresh(&mut self) -> Vec<Unit> {
        let all = units(&commands(self.server, ".incr.aof"));
        let new = all[self.seen.min(all.len())..].to_vec();
        self.seen = all.len();
        new
    }
}

/// The effect commands a grant of `members` to `tok` under `fence` wrote:
/// `DLOCK.APPLY key tok fence deadline` (a plain lock) or `DLOCK.ADDHOLD key
/// tok owner fence mode limit deadline mark`; as (key, deadline).
pub fn grant_effects(unit: &Unit, tok: &str, fence: i64) -> Vec<(String, String)> {
    let f = fence.to_string();
    unit.cmds
        .iter()
        .filter_map(|c| match c[0].as_str() {
            "DLOCK.APPLY" if c[2] == tok && c[3] == f => Some((c[1].clone(), c[4].clone())),
            "DLOCK.ADDHOLD" if c[2] == tok && c[4] == f => Some((c[1].clone(), c[7].clone())),
            _ => None,
        })
        .collect()
}

/// The unit holding the grant of `members` to `tok` under `fence`: exactly
/// one unit has any of its effects, it is a transaction, and it grants
/// every member once, all with one deadline. Returns that unit.
pub fn one_grant<'u>(units: &'u [Unit], members: &[&str], tok: &str, fence: i64) -> &'u Unit {
    let with: Vec<&Unit> = units
        .iter()
        .filter(|u| !grant_effects(u, tok, fence).is_empty())
        .collect();
    assert_eq!(
        with.len(),
        1,
        "the grant of {members:?} to {tok} (fence {fence}) is spread over {} units: {units:#?}",
        with.len()
    );
    let u = with[0];
    assert!(u.transaction, "not a MULTI/EXEC: {u:#?}");
    let effects = grant_effects(u, tok, fence);
    let mut keys: Vec<&str> = effects.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    let mut want = members.to_vec();
    want.sort_unstable();
    assert_eq!(keys, want, "every member granted once: {u:#?}");
    assert!(
        effects.iter().all(|(_, d)| *d == effects[0].1),
        "one absolute deadline for every member: {u:#?}"
    );
    u
}

/// Whether `c` is an effect on `key` that removes `tok`'s hold: `DEL key`
/// (a plain lock) or `DLOCK.DROPHOLD key tok`.
pub fn drops(c: &[String], key: &str, tok: &str) -> bool {
    match c[0].as_str() {
        "DEL" => c[1] == key,
        "DLOCK.DROPHOLD" => c[1] == key && c[2] == tok,
        _ => false,
    }
}

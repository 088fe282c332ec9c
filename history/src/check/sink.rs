//! `sink`: every write made while its holder believed it held was accepted,
//! and each sink's accepted fences never went down.
use super::prep::Prepared;
use super::Violation;
use std::collections::HashMap;

/// A refused write is a violation when its (client, token, resource) had a
/// believed hold with `start <= t < end` at the write's time; it names the
/// grant of the fence the sink had (`highest`) when one is found. Each
/// sink's accepted writes, in time order, must never lower the fence.
pub fn check(p: &Prepared) -> Vec<Violation> {
    // The op that granted each (resource, fence).
    let mut granted: HashMap<(u32, u64), usize> = HashMap::new();
    for g in &p.grants {
        granted.entry((g.res, g.fence)).or_insert(g.op);
    }
    let mut out = Vec::new();
    let mut last: Vec<Option<u64>> = vec![None; p.resources.len()];
    for w in &p.writes {
        let name = p.resources[w.res as usize].name;
        if w.accepted {
            let l = &mut last[w.res as usize];
            if let Some(prev) = *l {
                if w.fence < prev {
                    let mut ops: Vec<u64> = [prev, w.fence]
                        .iter()
                        .filter_map(|f| granted.get(&(w.res, *f)))
                        .map(|&i| p.ops[i].id)
                        .collect();
                    ops.sort_unstable();
                    out.push(Violation {
                        checker: "sink",
                        what: format!(
                            "{name}: the sink accepted fence {} from {} at {} after accepting fence {prev}",
                            w.fence, w.token_name, w.t
                        ),
                        ops,
                    });
                }
            }
            *l = Some(l.map_or(w.fence, |x| x.max(w.fence)));
            continue;
        }
        let Some(hold) = believed(p, w.client, w.token, w.res, w.t) else {
            continue;
        };
        let h = &p.holds[hold];
        let by = granted.get(&(w.res, w.highest)).copied();
        let mut ops = vec![p.ops[h.op].id];
        ops.extend(by.map(|i| p.ops[i].id));
        ops.sort_unstable();
        ops.dedup();
        out.push(Violation {
            checker: "sink",
            what: format!(
                "{name}: acknowledged write refused: sink had {} (granted by {}); client {} wrote fence {} at {} while it believed its hold of token {} (op {}, fence {}, believed {}..{})",
                w.highest,
                by.map_or("no recorded grant".to_string(), |i| format!("op {}", p.ops[i].id)),
                w.client,
                w.fence,
                w.t,
                w.token_name,
                p.ops[h.op].id,
                h.fence,
                h.start,
                h.end
            ),
            ops,
        });
    }
    out
}

/// The believed hold of (client, token, res) at `t`, if any.
pub fn believed(p: &Prepared, client: u32, token: u32, res: u32, t: u64) -> Option<usize> {
    let list = p.holds_by_key.get(&(client, token, res))?;
    let n = list.partition_point(|&h| p.holds[h].start <= t);
    list[..n]
        .iter()
        .rev()
        .copied()
        .find(|&h| t < p.holds[h].end)
}

//! Redis Cluster facts the lock rules need: which slot a resource lives in,
//! and whether this node serves that slot stably. A node must never grant a
//! lock on a slot that is moving or gone: the key would be created where
//! clients will no longer look, splitting ownership.

/// The hash slot of a key, as Redis computes it (CRC16/XMODEM mod 16384,
/// honouring `{hash tags}`).
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key
            .get(open + 1..)
            .and_then(|rest| rest.iter().position(|&b| b == b'}').map(|len| (rest, len)))
        {
            Some((rest, len)) if len > 0 => rest.get(..len).unwrap_or(key),
            _ => key,
        },
        None => key,
    };
    crc16(hashed) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |mut crc, &b| {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
        crc
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// Assigned to this node and not moving: grants are safe.
    Stable,
    /// This node is handing the slot to another node.
    Migrating,
    /// This node is receiving the slot.
    Importing,
    /// Another node serves it.
    NotOwned,
}

/// This node's view of `slot`, read from `CLUSTER NODES` output (the line
/// flagged `myself`).
pub fn slot_state(cluster_nodes: &str, slot: u16) -> SlotState {
    match myself(cluster_nodes) {
        Some(me) => line_state(me, slot),
        None => SlotState::NotOwned,
    }
}

/// Whether this node answers reads of `slot` as the cluster routes them
/// now, for a key that `exists` here or not: a master serves its stable
/// slots, the keys still here of a slot it is handing over, and (to
/// clients sent with `ASKING`) a slot it is receiving; a replica serves
/// its master's slots (to `READONLY` clients). The same rule as the
/// server's own for a client blocked on a key.
pub fn reads_here(cluster_nodes: &str, slot: u16, exists: bool) -> bool {
    let Some(me) = myself(cluster_nodes) else {
        return false;
    };
    let state = match replica_of(me) {
        Some(master) => cluster_nodes
            .lines()
            .find(|line| line.split(' ').next() == Some(master))
            .map_or(SlotState::NotOwned, |line| owner_state(line, slot)),
        None => line_state(me, slot),
    };
    match state {
        SlotState::Stable | SlotState::Importing => true,
        SlotState::Migrating => exists,
        SlotState::NotOwned => false,
    }
}

/// The line flagged `myself`.
fn myself(cluster_nodes: &str) -> Option<&str> {
    cluster_nodes.lines().find(|line| {
        line.split(' ')
            .nth(2)
            .is_some_and(|flags| flags.split(',').any(|f| f == "myself"))
    })
}

/// The master's id, if `line` is a replica's.
fn replica_of(line: &str) -> Option<&str> {
    let mut fields = line.split(' ');
    let flags = fields.nth(2)?;
    let master = fields.next()?;
    let replica = flags.split(',').any(|f| f == "slave" || f == "replica");
    (replica && master != "-").then_some(master)
}

/// Whether `line`'s node owns `slot` (another node's line shows no
/// migrations).
fn owner_state(line: &str, slot: u16) -> SlotState {
    match line_state(line, slot) {
        SlotState::Stable => SlotState::Stable,
        _ => SlotState::NotOwned,
    }
}

/// `slot` as one line of `CLUSTER NODES` shows it.
fn line_state(me: &str, slot: u16) -> SlotState {
    let mut owned = false;
    for field in me.split(' ').skip(8) {
        if let Some(moving) = field.strip_prefix('[').and_then(|f| f.strip_suffix(']')) {
            // "[slot->-node]" migrating, "[slot-<-node]" importing.
            let (n, state) = match (moving.split_once("->-"), moving.split_once("-<-")) {
                (Some((n, _)), _) => (n, SlotState::Migrating),
                (_, Some((n, _))) => (n, SlotState::Importing),
                _ => continue,
            };
            if n.parse::<u16>() == Ok(slot) {
                return state;
            }
        } else if let Some((lo, hi)) = field.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (lo.parse::<u16>(), hi.parse::<u16>()) {
                owned |= (lo..=hi).contains(&slot);
            }
        } else if field.parse::<u16>() == Ok(slot) {
            owned = true;
        }
    }
    if owned {
        SlotState::Stable
    } else {
        SlotState::NotOwned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.0.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(
            key_slot(b"foo{}{bar}"),
            key_slot(b"foo{}{bar}"),
            "empty tag: whole key"
        );
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b""), 0);
    }

    const NODES: &str = "\
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 7000 [5461->-b2f0] [9000-<-c3a1]
b2f0 127.0.0.1:30002@40002 master - 0 1 2 connected 5461-10922
c3a1 127.0.0.1:30003@40003 master - 0 1 3 connected 10923-16383
";

    #[test]
    fn reads_this_nodes_slots() {
        assert_eq!(slot_state(NODES, 0), SlotState::Stable);
        assert_eq!(slot_state(NODES, 5460), SlotState::Stable);
        assert_eq!(slot_state(NODES, 7000), SlotState::Stable);
        assert_eq!(slot_state(NODES, 5461), SlotState::Migrating);
        assert_eq!(slot_state(NODES, 9000), SlotState::Importing);
        assert_eq!(slot_state(NODES, 12000), SlotState::NotOwned);
        assert_eq!(slot_state("", 1), SlotState::NotOwned);
    }

    #[test]
    fn reads_follow_the_clusters_routing() {
        for exists in [true, false] {
            assert!(reads_here(NODES, 0, exists), "stable");
            assert!(reads_here(NODES, 9000, exists), "importing, asked");
            assert!(!reads_here(NODES, 12000, exists), "another node's");
        }
        assert!(reads_here(NODES, 5461, true), "still here while migrating");
        assert!(!reads_here(NODES, 5461, false), "gone: asked elsewhere");
        assert!(!reads_here("", 0, true));
    }

    #[test]
    fn a_replica_reads_its_masters_slots() {
        let replica = "\
e7d1 127.0.0.1:30001@40001 master - 0 0 1 connected 0-5460
b2f0 127.0.0.1:30002@40002 master - 0 1 2 connected 5461-10922
f4d2 127.0.0.1:30004@40004 myself,slave e7d1 0 0 1 connected
";
        assert!(reads_here(replica, 100, false));
        assert!(!reads_here(replica, 6000, true), "another master's");
        assert_eq!(
            slot_state(replica, 100),
            SlotState::NotOwned,
            "grants: never"
        );
    }
}

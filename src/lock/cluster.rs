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
    let Some(me) = cluster_nodes.lines().find(|line| {
        line.split(' ')
            .nth(2)
            .is_some_and(|flags| flags.split(',').any(|f| f == "myself"))
    }) else {
        return SlotState::NotOwned;
    };
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
}

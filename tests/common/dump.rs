//! DUMP payloads: Redis's CRC-64, splitting a payload into body and footer,
//! re-sealing a crafted body, and re-fencing a dumped lock. Used by the
//! persistence, replication and fault-injection tests.
use super::lock::held;
use redis::RedisResult;

/// Redis's CRC-64 (Jones polynomial, reflected, init 0), as used by DUMP.
pub fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// A DUMP payload is `body | rdb version (2 bytes) | crc64 (8 bytes)`.
pub fn split_payload(p: &[u8]) -> (Vec<u8>, [u8; 2]) {
    assert!(p.len() > 10, "payload too short: {p:?}");
    let n = p.len() - 10;
    (p[..n].to_vec(), [p[n], p[n + 1]])
}

/// Builds a payload whose footer (version + CRC) is valid for `body`, so the
/// server hands the body to the module's loader.
pub fn seal(body: &[u8], version: [u8; 2]) -> Vec<u8> {
    let mut p = body.to_vec();
    p.extend_from_slice(&version);
    let crc = crc64(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    p
}

pub fn dump(c: &mut redis::Connection, key: &str) -> Vec<u8> {
    let v: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(c).unwrap();
    v.unwrap_or_else(|| panic!("DUMP {key}: nil"))
}

/// `RESTORE key ttl payload`.
pub fn restore(c: &mut redis::Connection, key: &str, ttl: u64, payload: &[u8]) -> RedisResult<()> {
    redis::cmd("RESTORE")
        .arg(key)
        .arg(ttl)
        .arg(payload)
        .query(c)
}

/// `RESTORE key ttl payload REPLACE`.
pub fn restore_replace(
    c: &mut redis::Connection,
    key: &str,
    ttl: u64,
    payload: &[u8],
) -> RedisResult<()> {
    redis::cmd("RESTORE")
        .arg(key)
        .arg(ttl)
        .arg(payload)
        .arg("REPLACE")
        .query(c)
}

/// Position of the fence (8 bytes LE) in a payload body; exactly one match.
pub fn fence_pos(body: &[u8], fence: i64) -> usize {
    let needle = (fence as u64).to_le_bytes();
    let hits: Vec<usize> = body
        .windows(8)
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(hits.len(), 1, "fence {fence} in {body:?}");
    hits[0]
}

/// A payload for `key` (a held lock) with its fence replaced: simulates a
/// lock migrated from a server whose fences are ahead of ours.
pub fn payload_with_fence(c: &mut redis::Connection, key: &str, new_fence: i64) -> Vec<u8> {
    let old = held(c, key).fence;
    let p = dump(c, key);
    let (mut body, ver) = split_payload(&p);
    assert_eq!(seal(&body, ver), p, "CRC-64 helper disagrees with DUMP");
    let at = fence_pos(&body, old);
    body[at..at + 8].copy_from_slice(&(new_fence as u64).to_le_bytes());
    seal(&body, ver)
}

/// `DEBUG DIGEST-VALUE` of `key`: equal values (and expiries) give equal
/// digests.
pub fn digest(c: &mut redis::Connection, key: &str) -> String {
    let v: Vec<String> = redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query(c)
        .unwrap();
    v.into_iter()
        .next()
        .expect("DEBUG DIGEST-VALUE answered nothing")
}

//! What a lock key holds, read two ways: its stored value, decoded from a
//! `DUMP` payload (exact per-hold deadlines, dead holds included), and its
//! `DLOCK.INFO` reply (what clients see). Also crafts `DUMP` payloads around
//! a given multi-hold value, for the corrupt-`RESTORE` tests.
//!
//! The multi-hold layout (core/src/resource/layout.rs): `[0; 8]`, version u8, limit
//! u32, count u32, then per hold fence u64, deadline_ms u64, mode u8 (0
//! exclusive, 1 shared), u32 token length + token, u32 owner length (0: the
//! token) + owner; little-endian. A plain lock is fence u64 + token.
use super::*;

/// One stored hold, exactly as the value holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub token: Vec<u8>,
    pub owner: Vec<u8>,
    pub fence: i64,
    pub shared: bool,
    pub deadline_ms: i64,
}

/// A stored lock value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    Plain { token: Vec<u8>, fence: i64 },
    Multi { limit: u32, holds: Vec<Hold> },
}

impl Stored {
    pub fn holds(&self) -> &[Hold] {
        match self {
            Stored::Multi { holds, .. } => holds,
            Stored::Plain { .. } => panic!("a plain lock, not holds: {self:?}"),
        }
    }
    /// The latest hold deadline: what the key's TTL must be.
    pub fn latest_deadline(&self) -> i64 {
        self.holds().iter().map(|h| h.deadline_ms).max().unwrap()
    }
}

// ---------------------------------------------------------------- DUMP payloads

/// The module value's bytes inside a DUMP payload, and where the value's
/// string starts (after the type byte, the module id and the string opcode).
/// Handles LZF-compressed strings (`rdbcompression yes`, the default).
pub fn module_bytes(payload: &[u8]) -> Vec<u8> {
    let (body, _) = split_payload(payload);
    assert_eq!(body[0], 7, "RDB_TYPE_MODULE_2");
    assert_eq!(body[1], 0x81, "64-bit module id");
    assert_eq!(body[10], 5, "RDB_MODULE_OPCODE_STRING");
    let mut at = 11;
    let bytes = if body[at] == 0xc3 {
        at += 1;
        let clen = rdb_len(&body, &mut at);
        let ulen = rdb_len(&body, &mut at);
        let out = lzf(&body[at..at + clen], ulen);
        at += clen;
        out
    } else {
        let n = rdb_len(&body, &mut at);
        at += n;
        body[at - n..at].to_vec()
    };
    assert_eq!(&body[at..], [0], "RDB_MODULE_OPCODE_EOF ends the value");
    bytes
}

fn rdb_len(b: &[u8], at: &mut usize) -> usize {
    let first = b[*at];
    *at += 1;
    match first >> 6 {
        0 => usize::from(first & 0x3f),
        1 => {
            *at += 1;
            (usize::from(first & 0x3f) << 8) | usize::from(b[*at - 1])
        }
        _ if first == 0x80 => {
            *at += 4;
            u32::from_be_bytes(b[*at - 4..*at].try_into().unwrap()) as usize
        }
        _ => panic!("unexpected RDB length byte {first:#x}"),
    }
}

/// LZF decompression, as Redis's `lzf_decompress`.
fn lzf(input: &[u8], ulen: usize) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::with_capacity(ulen);
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(input[i]);
        i += 1;
        if ctrl < 32 {
            out.extend_from_slice(&input[i..i + ctrl + 1]);
            i += ctrl + 1;
            continue;
        }
        let mut len = ctrl >> 5;
        if len == 7 {
            len += usize::from(input[i]);
            i += 1;
        }
        let back = ((ctrl & 0x1f) << 8) + usize::from(input[i]) + 1;
        i += 1;
        let start = out.len() - back;
        for k in 0..len + 2 {
            out.push(out[start + k]);
        }
    }
    assert_eq!(out.len(), ulen, "LZF length");
    out
}

/// A DUMP payload holding `value` as the module's string (uncompressed),
/// with the type byte and module id of `template` (any lock's DUMP) and a
/// valid footer: the server hands `value` to the module's loader as is.
pub fn payload_with(template: &[u8], value: &[u8]) -> Vec<u8> {
    let (body, ver) = split_payload(template);
    let mut b = body[..11].to_vec();
    let n = value.len();
    if n < 64 {
        b.push(n as u8);
    } else if n < 16_384 {
        b.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
    } else {
        b.push(0x80);
        b.extend_from_slice(&(n as u32).to_be_bytes());
    }
    b.extend_from_slice(value);
    b.push(0);
    seal(&b, ver)
}

// ---------------------------------------------------------------- layout

/// Where each field of a multi-hold value sits (offsets into its bytes).
#[derive(Debug, Default)]
pub struct Fields {
    pub fence: Vec<usize>,
    pub deadline: Vec<usize>,
    pub mode: Vec<usize>,
    pub token_len: Vec<usize>,
    pub token: Vec<(usize, usize)>,
    pub owner_len: Vec<usize>,
    pub owner: Vec<(usize, usize)>,
}

pub const LIMIT_AT: usize = 9;
pub const COUNT_AT: usize = 13;

/// Decodes a value as the module stores it (test-side, from the format's
/// description), with the offsets of its fields.
pub fn decode(v: &[u8]) -> (Stored, Fields) {
    let u32_at = |at: usize| u32::from_le_bytes(v[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(v[at..at + 8].try_into().unwrap()) as i64;
    let mut f = Fields::default();
    if v[..8] != [0; 8] {
        let stored = Stored::Plain {
            token: v[8..].to_vec(),
            fence: u64_at(0),
        };
        return (stored, f);
    }
    assert_eq!(v[8], 1, "layout version");
    let limit = u32_at(LIMIT_AT);
    let count = u32_at(COUNT_AT) as usize;
    let mut at = 17;
    let mut holds = Vec::with_capacity(count);
    for _ in 0..count {
        f.fence.push(at);
        f.deadline.push(at + 8);
        f.mode.push(at + 16);
        let (fence, deadline_ms, mode) = (u64_at(at), u64_at(at + 8), v[at + 16]);
        at += 17;
        f.token_len.push(at);
        let n = u32_at(at) as usize;
        f.token.push((at + 4, n));
        let token = v[at + 4..at + 4 + n].to_vec();
        at += 4 + n;
        f.owner_len.push(at);
        let n = u32_at(at) as usize;
        f.owner.push((at + 4, n));
        let owner = v[at + 4..at + 4 + n].to_vec();
        at += 4 + n;
        holds.push(Hold {
            owner: if owner.is_empty() {
                token.clone()
            } else {
                owner
            },
            token,
            fence,
            shared: mode == 1,
            deadline_ms,
        });
    }
    assert_eq!(at, v.len(), "trailing bytes");
    (Stored::Multi { limit, holds }, f)
}

/// Encodes holds in the layout (test-side), owners equal to their token
/// stored as empty, as the module does.
pub fn encode(limit: u32, holds: &[Hold]) -> Vec<u8> {
    let mut v = vec![0u8; 8];
    v.push(1);
    v.extend_from_slice(&limit.to_le_bytes());
    v.extend_from_slice(&(holds.len() as u32).to_le_bytes());
    for h in holds {
        v.extend_from_slice(&(h.fence as u64).to_le_bytes());
        v.extend_from_slice(&(h.deadline_ms as u64).to_le_bytes());
        v.push(u8::from(h.shared));
        v.extend_from_slice(&(h.token.len() as u32).to_le_bytes());
        v.extend_from_slice(&h.token);
        let owner: &[u8] = if h.owner == h.token { &[] } else { &h.owner };
        v.extend_from_slice(&(owner.len() as u32).to_le_bytes());
        v.extend_from_slice(owner);
    }
    v
}

/// The stored value of `key` (None: no key), from its DUMP.
pub fn stored(c: &mut Connection, key: &str) -> Option<Stored> {
    let p: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(c).unwrap();
    p.map(|p| decode(&module_bytes(&p)).0)
}

pub fn must_store(c: &mut Connection, key: &str) -> Stored {
    stored(c, key).unwrap_or_else(|| panic!("{key}: no value"))
}

// ---------------------------------------------------------------- DLOCK.INFO

/// One hold as `DLOCK.INFO` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub token: Vec<u8>,
    pub owner: Vec<u8>,
    pub fence: i64,
    pub ttl: i64,
    pub shared: bool,
}

/// The list form of `DLOCK.INFO` (RESP2 flat array).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListInfo {
    pub kind: String,
    pub limit: i64,
    pub waiters: i64,
    pub holds: Vec<Shown>,
}

fn pairs(v: &Value) -> Vec<(String, Value)> {
    let Value::Array(items) = v else {
        panic!("expected a flat array, got {v:?}")
    };
    items
        .chunks(2)
        .map(|p| (String::from_utf8(as_bytes(&p[0])).unwrap(), p[1].clone()))
        .collect()
}

/// `DLOCK.INFO key` in list form; None when free. Panics on the plain form.
pub fn list_info(c: &mut impl ConnectionLike, key: &str) -> Option<ListInfo> {
    let v: Value = redis::cmd("DLOCK.INFO").arg(key).query(c).unwrap();
    if v == Value::Nil {
        return None;
    }
    let p = pairs(&v);
    let names: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["kind", "limit", "waiters", "holds"], "{key}: {v:?}");
    let Value::Array(hs) = &p[3].1 else {
        panic!("holds: {v:?}")
    };
    let holds = hs
        .iter()
        .map(|h| {
            let f = pairs(h);
            let names: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(names, ["token", "owner", "fence", "ttl", "mode"], "{h:?}");
            let mode = as_bytes(&f[4].1);
            assert!(mode == b"shared" || mode == b"exclusive", "{h:?}");
            Shown {
                token: as_bytes(&f[0].1),
                owner: as_bytes(&f[1].1),
                fence: as_int(&f[2].1),
                ttl: as_int(&f[3].1),
                shared: mode == b"shared",
            }
        })
        .collect();
    Some(ListInfo {
        kind: String::from_utf8(as_bytes(&p[0].1)).unwrap(),
        limit: as_int(&p[1].1),
        waiters: as_int(&p[2].1),
        holds,
    })
}

/// `DLOCK.INFO` agrees with the stored value: the same holds (token, owner,
/// fence, mode) less those past their deadline, each ttl its deadline less
/// the time of the reply (-1 for a hold without one). Returns the INFO.
pub fn info_agrees(c: &mut Connection, key: &str) -> ListInfo {
    let s = must_store(c, key);
    let t0 = now_ms();
    let i = list_info(c, key).unwrap_or_else(|| panic!("{key}: INFO nil"));
    let t1 = now_ms();
    let live: Vec<&Hold> = s.holds().iter().filter(|h| h.deadline_ms >= t1).collect();
    let shown: Vec<(&[u8], &[u8], i64, bool)> = i
        .holds
        .iter()
        .map(|h| (&h.token[..], &h.owner[..], h.fence, h.shared))
        .collect();
    let want: Vec<(&[u8], &[u8], i64, bool)> = live
        .iter()
        .map(|h| (&h.token[..], &h.owner[..], h.fence, h.shared))
        .collect();
    assert_eq!(shown, want, "{key}: INFO vs stored value {s:?}");
    for (h, x) in i.holds.iter().zip(&live) {
        if x.deadline_ms == i64::MAX {
            assert_eq!(h.ttl, -1, "{key}: a hold without a deadline");
            continue;
        }
        let range = x.deadline_ms - t1..=x.deadline_ms - t0;
        assert!(
            range.contains(&h.ttl),
            "{key}: ttl {} not in {range:?}",
            h.ttl
        );
    }
    i
}

/// Clients queued on `key`, from `DLOCK.INFO` in either form (0: free).
pub fn waiters_of(c: &mut Connection, key: &str) -> i64 {
    let v: Value = redis::cmd("DLOCK.INFO").arg(key).query(c).unwrap();
    if v == Value::Nil {
        return 0;
    }
    let p = pairs(&v);
    let (_, n) = p
        .iter()
        .find(|(k, _)| k == "waiters")
        .unwrap_or_else(|| panic!("{key}: no waiters in {v:?}"));
    as_int(n)
}

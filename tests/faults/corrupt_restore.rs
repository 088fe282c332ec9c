//! Corrupt DUMP payloads handed to the loader (valid envelope and CRC):
//! every one is refused and changes nothing, the fence clock included.
use super::*;

const MAX_FENCE: u64 = i64::MAX as u64;
const RDB_TYPE_MODULE_2: u8 = 7;
const OPCODE_STRING: u8 = 5;
const OPCODE_EOF: u8 = 0;
/// 10 = type byte, then the 64-bit module id (0x81 + 8 bytes big endian).
const HEADER: usize = 10;

/// The DUMP of a lock, checked against the layout the crafted payloads
/// assume: `07 | 81 id(8) | 05 len fence(8 LE) token | 00`.
struct Layout {
    body: Vec<u8>,
    ver: [u8; 2],
}

impl Layout {
    fn of(c: &mut redis::Connection, res: &str, tok: &str, fence: i64) -> Layout {
        let p: Vec<u8> = redis::cmd("DUMP").arg(res).query(c).unwrap();
        let (body, ver) = split_payload(&p);
        assert_eq!(seal(&body, ver), p, "CRC-64 helper disagrees with DUMP");
        let mut want = vec![RDB_TYPE_MODULE_2];
        want.extend_from_slice(&body[1..HEADER]);
        want.extend_from_slice(&[OPCODE_STRING, 8 + tok.len() as u8]);
        want.extend_from_slice(&(fence as u64).to_le_bytes());
        want.extend_from_slice(tok.as_bytes());
        want.push(OPCODE_EOF);
        assert_eq!(body, want, "unexpected DUMP layout");
        assert_eq!(body[1], 0x81, "module id as a 64-bit length");
        Layout { body, ver }
    }
    fn header(&self) -> Vec<u8> {
        self.body[..HEADER].to_vec()
    }
    /// Header, then a string opcode with `len` encoded as given, then rest.
    fn with(&self, len_enc: &[u8], rest: &[u8]) -> Vec<u8> {
        let mut b = self.header();
        b.push(OPCODE_STRING);
        b.extend_from_slice(len_enc);
        b.extend_from_slice(rest);
        b
    }
    /// A complete, well-formed value for (fence, token), then `tail`.
    fn value(&self, fence: u64, tok: &[u8], tail: &[u8]) -> Vec<u8> {
        let mut s = fence.to_le_bytes().to_vec();
        s.extend_from_slice(tok);
        assert!(s.len() < 64);
        let mut b = self.with(&[s.len() as u8], &s);
        b.extend_from_slice(tail);
        b
    }
}

/// Bodies (valid envelope and CRC) that must all be refused.
fn corrupt_bodies(l: &Layout, rng: &mut Rng) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = vec![];
    // Truncated so that even the bytes of the footer (RESTORE parses the
    // whole payload) cannot complete the value: certain short reads.
    let string_end = l.body.len() - 1;
    for cut in 1..l.body.len() {
        if cut + 10 < string_end {
            v.push((format!("truncated to {cut} bytes"), l.body[..cut].to_vec()));
        }
    }
    // Header, then garbage where an opcode should be.
    for op in [0u8, 1, 2, 3, 4, 6, 0x3f, 0x80, 0xc0, 0xff] {
        let mut b = l.header();
        b.push(op);
        let mut g = rng.bytes(24);
        g[0] |= 1; // after 80 (32-bit length): never 5
        b.extend(g);
        v.push((format!("opcode {op:#x} then garbage"), b));
    }
    // Lengths that overrun the payload.
    let g = rng.bytes(20);
    v.push(("length 60, 20 bytes".into(), l.with(&[60], &g)));
    v.push((
        "length 2^24 (32-bit encoding), 20 bytes".into(),
        l.with(&[0x80, 0x01, 0, 0, 0], &g),
    ));
    v.push((
        "length 2^64-1 (64-bit encoding)".into(),
        l.with(&[0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], &g),
    ));
    v.push((
        "length 16383 (14-bit encoding), 20 bytes".into(),
        l.with(&[0x7f, 0xff], &g),
    ));
    // Strings that arrive whole but do not decode to a lease.
    v.push(("empty string".into(), l.with(&[0], &[OPCODE_EOF])));
    v.push((
        "7 bytes (fence cut)".into(),
        l.with(&[7], &[1, 2, 3, 4, 5, 6, 7, 0]),
    ));
    v.push((
        "fence only, no token".into(),
        l.with(&[8], &[1, 0, 0, 0, 0, 0, 0, 0, 0]),
    ));
    v.push(("fence 0".into(), l.value(0, b"garbage", &[OPCODE_EOF])));
    v.push((
        "fence 2^63".into(),
        l.value(MAX_FENCE + 1, b"garbage", &[OPCODE_EOF]),
    ));
    v.push((
        "fence 2^64-1".into(),
        l.value(u64::MAX, b"garbage", &[OPCODE_EOF]),
    ));
    for i in 0..8 {
        // Random fence with the top bit set, random token.
        let n = 8 + 1 + rng.below(40) as usize;
        let mut s = rng.bytes(n);
        s[7] |= 0x80;
        let mut b = l.with(&[s.len() as u8], &s);
        b.push(OPCODE_EOF);
        v.push((format!("random fence >= 2^63 #{i}"), b));
    }
    // A token above the stored-token cap (1 MiB): 32-bit length encoding.
    let big = 8 + (1 << 20) + 1;
    let mut s = 1u64.to_le_bytes().to_vec();
    s.resize(big, b'x');
    let mut b = l.with(&[0x80], &(big as u32).to_be_bytes());
    b.extend_from_slice(&s);
    b.push(OPCODE_EOF);
    v.push(("token of 1 MiB + 1".into(), b));
    // Encoding versions the module cannot know (low 10 bits of the module
    // id): 0, and anything above the newest it reads (3; it writes an older
    // one wherever nothing new is used).
    const NEWEST_READ: u16 = 3;
    let written = u16::from_be_bytes([l.body[8] & 0x03, l.body[9]]);
    assert!(written <= NEWEST_READ, "writes version {written}");
    for encver in [0u16, NEWEST_READ + 1, 1023] {
        let mut b = l.body.clone();
        b[8] = (b[8] & !0x03) | (encver >> 8) as u8;
        b[9] = encver as u8;
        v.push((format!("encoding version {encver}"), b));
    }
    // A module id no loaded module has.
    let mut b = l.body.clone();
    b[3] ^= 0x40;
    v.push(("unknown module id".into(), b));
    // A whole value, then no proper EOF marker.
    for tail in [&[0x05u8, 0x01, 0x41][..], &[0x02, 0x00], &[0xff; 6]] {
        v.push((
            format!("valid value, then {tail:02x?} instead of EOF"),
            l.value(1_000, b"tok", tail),
        ));
    }
    v.push((
        "valid value, no EOF marker (payload ends)".into(),
        l.value(1_000, b"tok", &[]),
    ));
    // Pure garbage after the header.
    for i in 0..8 {
        let mut b = l.header();
        let n = 1 + rng.below(60) as usize;
        let mut g = rng.bytes(n);
        // Never a length-encoded 5 (the string opcode): 05, 40 05, C5, ...
        if matches!(g[0], 0x05 | 0x40 | 0x80 | 0x81 | 0xc5) {
            g[0] = 0x17;
        }
        b.extend(g);
        v.push((format!("garbage body #{i}"), b));
    }
    v
}

fn last_fence(c: &mut redis::Connection) -> u64 {
    info_field(c, "dlock", "dlock_last_fence")
        .and_then(|v| v.parse().ok())
        .expect("INFO dlock: dlock_last_fence")
}

#[test]
fn corrupt_restore_payloads_are_refused_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = try_acquire(&mut c, "res", "tok-A", 600_000)
        .unwrap()
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let l = Layout::of(&mut c, "res", "tok-A", fence);
    let before = info(&mut c, "res").unwrap();
    let size = dbsize(&mut c);
    let mut rng = Rng::new(seed(4));
    let cases = corrupt_bodies(&l, &mut rng);
    let mut accepted = vec![];
    for (i, (what, body)) in cases.iter().enumerate() {
        let payload = seal(body, l.ver);
        let key = format!("bad{i}");
        let r = restore(&mut c, &key, 0, &payload);
        ping(&mut c);
        if r.is_ok() {
            accepted.push(format!("{what}: {key} = {:?}", info(&mut c, &key)));
            let _: i64 = redis::cmd("DEL").arg(&key).query(&mut c).unwrap();
            continue;
        }
        // Over the existing lock, with REPLACE: the lock must survive.
        let r2 = restore_replace(&mut c, "res", 0, &payload);
        if r2.is_ok() {
            accepted.push(format!("{what} (REPLACE)"));
        }
        let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut c).unwrap();
        assert_eq!(exists, 0, "{what}: refused, yet {key} exists");
        assert_eq!(dbsize(&mut c), size, "{what}: DBSIZE changed");
        let now = info(&mut c, "res").expect("the existing lock vanished");
        assert_eq!(
            (&now.token, now.fence),
            (&before.token, before.fence),
            "{what}: the existing lock changed"
        );
    }
    assert!(
        accepted.is_empty(),
        "corrupt payloads accepted:\n{}",
        accepted.join("\n")
    );
    let v: String = redis::cmd("GET").arg("plain").query(&mut c).unwrap();
    assert_eq!(v, "v");
    assert_eq!(
        try_release(&mut c, "res", "tok-A").unwrap(),
        1,
        "owner still owns it"
    );
    let log = s.log();
    for bad in ["crashed", "panicked", "ASSERTION"] {
        assert!(!log.contains(bad), "server log mentions {bad:?}:\n{log}");
    }
    eprintln!(
        "corrupt payloads (seed {:#x}): {} refused (each also with REPLACE over a held lock)",
        seed(4),
        cases.len()
    );
}

/// A refused payload must not leave anything behind, the fence clock
/// included: a value the loader decoded but the server then refused (no EOF
/// marker) must not raise `dlock_last_fence`. Otherwise one refused RESTORE
/// carrying fence 2^63-2 leaves a single fence before every ACQUIRE of a new
/// owner fails with fence exhaustion.
#[test]
fn refused_restore_does_not_move_the_fence_clock() {
    let s = Server::start();
    let mut c = s.conn();
    let fence = try_acquire(&mut c, "res", "tok-A", 600_000)
        .unwrap()
        .unwrap();
    let l = Layout::of(&mut c, "res", "tok-A", fence);
    let mut moved = vec![];
    let cases = [
        ("opcode 05 instead of EOF", &[0x05u8, 0x01, 0x41][..]),
        ("opcode 02 instead of EOF", &[0x02, 0x00][..]),
        ("payload ends before EOF", &[][..]),
    ];
    for (i, (what, tail)) in cases.into_iter().enumerate() {
        // Rising values, so each case shows whether it moves the clock.
        let far = MAX_FENCE - 3 + i as u64;
        let before = last_fence(&mut c);
        let r = restore(&mut c, "bad", 0, &seal(&l.value(far, b"tok", tail), l.ver));
        assert!(r.is_err(), "{what}: accepted");
        ping(&mut c);
        let exists: i64 = redis::cmd("EXISTS").arg("bad").query(&mut c).unwrap();
        assert_eq!(exists, 0, "{what}: refused, yet the key exists");
        let after = last_fence(&mut c);
        if after != before {
            moved.push(format!(
                "{what} (fence {far}): dlock_last_fence {before} -> {after}"
            ));
        }
    }
    // What a client sees next (the clock may already be at the bad value).
    let next = try_acquire(&mut c, "fresh", "tok-B", 60_000);
    let then = try_acquire(&mut c, "fresh2", "tok-C", 60_000).map_err(|e| e.to_string());
    assert!(
        moved.is_empty(),
        "refused RESTOREs moved the fence clock:\n{}\nnext grants: {next:?}, then {then:?} \
         (wall clock {} us)",
        moved.join("\n"),
        now_us()
    );
    let next = next.unwrap().unwrap();
    assert!(
        next > fence && next < now_us() + 60_000_000,
        "next fence {next}"
    );
}

//! `dlock status RESOURCE [--json]`: who holds a resource, with which
//! fences and TTLs, and how many wait.

use crate::args::{self, usage, Args, Item, Parsed};
use crate::backend::{Backend, Bytes, Hold, Info};
use crate::codes;
use crate::lockopts::url_option;

struct Opts {
    urls: Vec<String>,
    json: bool,
    resource: String,
}

/// `None`: `--help` was asked for.
fn parse(mut a: Args, mut urls: Vec<String>) -> Parsed<Option<Opts>> {
    let mut json = false;
    let mut resource = None;
    while let Some(item) = a.next_item()? {
        match item {
            Item::Opt { name, inline } => {
                if url_option(&mut urls, &name, inline.clone(), &mut a)? {
                    continue;
                }
                match name.as_str() {
                    "help" => return Ok(None),
                    "json" => {
                        args::flag(&name, inline)?;
                        json = true;
                    }
                    _ => return usage(format!("status: unknown option --{name}")),
                }
            }
            Item::Pos(p) if resource.is_none() => resource = Some(args::text("RESOURCE", p)?),
            _ => return usage("status takes one RESOURCE"),
        }
    }
    let Some(resource) = resource else {
        return usage("status: RESOURCE is missing");
    };
    Ok(Some(Opts {
        urls,
        json,
        resource,
    }))
}

pub fn main(a: Args, urls: Vec<String>) -> i32 {
    let o = match parse(a, urls) {
        Ok(Some(o)) => o,
        Ok(None) => return crate::help::print("status"),
        Err(u) => return crate::codes::usage_error(u, "status"),
    };
    let backend = match Backend::from_urls(&o.urls) {
        Ok(b) => b,
        Err(e) => return crate::codes::fail(&e.0, e.1),
    };
    let resource = &o.resource;
    if let Some(per_server) = backend.info_by_server(resource) {
        return redlock_status(resource, per_server, o.json);
    }
    let infos = match backend.info(resource) {
        Ok(i) => i,
        Err(e) => {
            let msg = format!("status of {resource}: {}", backend.explain(&e));
            return crate::codes::fail(&msg, codes::of(&e));
        }
    };
    // One report from the single server (Redlock returned above).
    for info in &infos {
        if o.json {
            println!("{}", to_json(&resource.as_str().into(), info));
        } else {
            print!("{}", to_text(resource, info));
        }
    }
    codes::OK
}

/// Redlock (several `--url`s): one report per server, named by its URL;
/// exit 69 unless a majority answered.
fn redlock_status(
    resource: &str,
    per_server: Vec<(String, dlock_client::Result<Info>)>,
    json: bool,
) -> i32 {
    let answered = per_server.iter().filter(|(_, i)| i.is_ok()).count();
    for (url, info) in &per_server {
        match (info, json) {
            (Ok(i), true) => println!(
                "{{\"server\":{},{}",
                quote(url),
                &to_json(&resource.into(), i)[1..]
            ),
            (Ok(i), false) => print!("{url}: {}", to_text(resource, i)),
            (Err(e), true) => println!(
                "{{\"server\":{},\"error\":{}}}",
                quote(url),
                quote(&e.to_string())
            ),
            (Err(e), false) => println!("{url}: unreachable ({e})"),
        }
    }
    if answered > per_server.len() / 2 {
        codes::OK
    } else {
        codes::UNAVAILABLE
    }
}

/// `free`, `held` or `reserved` (free, but kept for its queue).
pub fn state(info: &Info) -> &'static str {
    match info {
        Info::Free => "free",
        Info::Lock { token: None, .. } => "reserved",
        Info::Lock { .. } => "held",
        Info::Holds { holds, .. } if holds.is_empty() => "reserved",
        Info::Holds { .. } => "held",
    }
}

/// The holds, the kind and the limit, the same way for every kind.
pub fn holds(info: &Info) -> (String, i64, Vec<Hold>) {
    match info {
        Info::Free => ("lock".into(), 1, vec![]),
        Info::Lock { token: None, .. } => ("lock".into(), 1, vec![]),
        Info::Lock {
            token: Some(t),
            fence,
            ttl_ms,
            ..
        } => (
            "lock".into(),
            1,
            vec![Hold {
                token: t.clone(),
                owner: None,
                fence: *fence,
                ttl_ms: *ttl_ms,
                mode: "exclusive".into(),
            }],
        ),
        Info::Holds {
            kind, limit, holds, ..
        } => (
            kind.clone(),
            *limit,
            holds
                .iter()
                .map(|h| Hold {
                    token: h.token.clone(),
                    owner: h.owner.clone(),
                    fence: h.fence,
                    ttl_ms: h.ttl_ms,
                    mode: h.mode.clone(),
                })
                .collect(),
        ),
    }
}

pub fn ttl(ms: i64) -> String {
    if ms < 0 {
        "none".into()
    } else {
        format!("{:.3}s", ms as f64 / 1000.0)
    }
}

pub fn to_text(resource: &str, info: &Info) -> String {
    let state = state(info);
    if state == "free" {
        return format!("{resource}: free\n");
    }
    let (kind, limit, holds) = holds(info);
    let mut out = format!(
        "{resource}: {state}, {kind}{}, {} waiting\n",
        if kind == "semaphore" {
            format!(" (limit {limit})")
        } else {
            String::new()
        },
        info.waiters()
    );
    if state == "reserved" {
        out.push_str("  nobody holds it: it is handed to the first waiter\n");
    }
    if !holds.is_empty() {
        out.push_str(&format!(
            "  {:<9}  {:<20}  {:<10}  {:<32}  OWNER\n",
            "MODE", "FENCE", "TTL", "TOKEN"
        ));
    }
    for h in holds {
        out.push_str(&format!(
            "  {:<9}  {:<20}  {:<10}  {:<32}  {}\n",
            h.mode,
            h.fence,
            ttl(h.ttl_ms),
            h.token,
            h.owner.as_ref().map_or("-".into(), Bytes::text)
        ));
    }
    out
}

/// A JSON string literal.
pub fn quote(s: &str) -> String {
    let mut q = String::from("\"");
    push_quoted(&mut q, s);
    q.push('"');
    q
}

fn push_quoted(q: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c if (c as u32) < 0x20 => q.push_str(&format!("\\u{:04x}", c as u32)),
            c => q.push(c),
        }
    }
}

/// `"name":"..."`, the bytes as a JSON string: UTF-8 as it is, each byte
/// that is not UTF-8 as the character of that number (`\u00NN`), so the
/// string stays readable and valid JSON. That alone would make the byte
/// 0xff and a real `ÿ` the same string, so bytes that are not UTF-8 also
/// get `"name_hex":"..."`, every byte as two lowercase hex digits: the
/// bytes are `name_hex` when present, else the string's UTF-8.
pub fn json_field(name: &str, b: &Bytes) -> String {
    let mut q = format!("\"{name}\":\"");
    let mut utf8 = true;
    for chunk in b.0.utf8_chunks() {
        push_quoted(&mut q, chunk.valid());
        for byte in chunk.invalid() {
            utf8 = false;
            q.push_str(&format!("\\u{byte:04x}"));
        }
    }
    q.push('"');
    if !utf8 {
        q.push_str(&format!(",\"{name}_hex\":\""));
        for byte in &b.0 {
            q.push_str(&format!("{byte:02x}"));
        }
        q.push('"');
    }
    q
}

/// One line: `{"resource":..,"state":..,"kind":..,"limit":..,"waiters":..,
/// "holds":[{"token":..,"owner":..,"fence":..,"ttl_ms":..,"mode":..}]}`.
/// `ttl_ms` is -1 for a hold without deadline; `owner` null for a plain lock.
pub fn to_json(resource: &Bytes, info: &Info) -> String {
    let (kind, limit, holds) = holds(info);
    let holds: Vec<String> = holds
        .iter()
        .map(|h| {
            format!(
                "{{{},{},\"fence\":{},\"ttl_ms\":{},\"mode\":{}}}",
                json_field("token", &h.token),
                h.owner
                    .as_ref()
                    .map_or("\"owner\":null".into(), |o| json_field("owner", o)),
                h.fence,
                h.ttl_ms,
                quote(&h.mode)
            )
        })
        .collect();
    format!(
        "{{{},\"state\":{},\"kind\":{},\"limit\":{limit},\"waiters\":{},\"holds\":[{}]}}",
        json_field("resource", resource),
        quote(state(info)),
        quote(&kind),
        info.waiters(),
        holds.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_text_show_every_hold() {
        let lock = Info::Lock {
            token: Some("t\"1".into()),
            fence: 7,
            ttl_ms: 1500,
            waiters: 2,
        };
        assert_eq!(
            to_json(&"r".into(), &lock),
            r#"{"resource":"r","state":"held","kind":"lock","limit":1,"waiters":2,"holds":[{"token":"t\"1","owner":null,"fence":7,"ttl_ms":1500,"mode":"exclusive"}]}"#
        );
        let text = to_text("r", &lock);
        assert!(text.starts_with("r: held, lock, 2 waiting\n"), "{text}");
        assert!(text.contains("1.500s"), "{text}");
        assert_eq!(to_text("r", &Info::Free), "r: free\n");
        assert_eq!(
            to_json(&"r".into(), &Info::Free),
            r#"{"resource":"r","state":"free","kind":"lock","limit":1,"waiters":0,"holds":[]}"#
        );
        let reserved = Info::Lock {
            token: None,
            fence: 0,
            ttl_ms: -2,
            waiters: 1,
        };
        assert!(to_json(&"r".into(), &reserved).contains(r#""state":"reserved""#));
    }

    #[test]
    fn json_strings_give_every_byte_back() {
        assert_eq!(json_field("k", &"a\"\\\n".into()), r#""k":"a\"\\\n""#);
        assert_eq!(json_field("k", &"\u{ff}".into()), "\"k\":\"\u{ff}\"");
        assert_eq!(
            json_field("k", &Bytes(vec![b'b', 0xff, 0xc3])),
            r#""k":"b\u00ff\u00c3","k_hex":"62ffc3""#
        );
        assert_eq!(json_field("k", &Bytes(vec![])), r#""k":"""#);
        let hold = Info::Holds {
            kind: "rwlock".into(),
            limit: 1,
            waiters: 0,
            holds: vec![Hold {
                token: Bytes(vec![0x80]),
                owner: Some(Bytes(vec![0xfe])),
                fence: 1,
                ttl_ms: 10,
                mode: "shared".into(),
            }],
        };
        let j = to_json(&Bytes(vec![0xff]), &hold);
        assert!(
            j.starts_with(r#"{"resource":"\u00ff","resource_hex":"ff","state""#)
                && j.contains(
                    r#""token":"\u0080","token_hex":"80","owner":"\u00fe","owner_hex":"fe","fence""#
                ),
            "{j}"
        );
    }
}

//! Reading a history file: what is not a history is an error naming its
//! line, never a report (nor a panic).
use crate::history::read;

const META: &str = r#"{"type":"meta","seed":1,"secs":1,"clients":2,"server":"t","broken":null,"resources":[{"name":"m0","group":"main","kind":"plain"},{"name":"m1","group":"main","kind":"plain"}]}"#;

fn invoke(id: u64, command: &str, resources: &str) -> String {
    format!(
        r#"{{"type":"invoke","t":1,"process":1,"client":1,"id":{id},"op":{{"command":"{command}","resources":[{resources}],"token":"x","ttl_ms":5,"wait_ms":10}}}}"#
    )
}

fn err(lines: &[&str]) -> String {
    let text = lines.join("\n");
    match read(text.as_bytes()) {
        Ok(e) => panic!("read {} events from {text:?}", e.len()),
        Err(e) => e,
    }
}

#[test]
fn what_is_not_a_history_is_an_error_naming_its_line() {
    assert!(err(&[]).contains("empty"));
    assert!(err(&["", "  "]).contains("empty"));
    let acquire = invoke(1, "acquire", r#""m0""#);
    assert!(err(&[&acquire]).starts_with("line 1: the first line is not the meta line"));
    assert!(err(&[META, "", META]).starts_with("line 3: a second meta line"));
    assert!(err(&[META, &acquire, &acquire]).starts_with("line 3: operation 1 invoked twice"));
    let none = invoke(1, "acquire", "");
    assert!(err(&[META, &none]).starts_with("line 2: operation 1: 0 resources"));
    let two = invoke(1, "release", r#""m0","m1""#);
    assert!(err(&[META, &two]).starts_with("line 2: operation 1: 2 resources"));
    let empty_set = invoke(1, "macquire", "");
    assert!(err(&[META, &empty_set]).contains("0 resources"));
    let unknown = invoke(1, "acquire", r#""zz""#);
    assert!(err(&[META, &unknown]).contains(r#"resource "zz" is not in the meta line"#));
    let write = r#"{"type":"write","t":1,"client":1,"resource":"zz","token":"x","fence":1,"accepted":true,"highest":1}"#;
    assert!(err(&[META, write]).starts_with("line 2: resource \"zz\""));
    // A history cut inside a line.
    assert!(err(&[META, &acquire[..40]]).starts_with("line 2: "));
    // What is a history reads.
    let set = invoke(2, "macquire", r#""m0","m1""#);
    assert_eq!(
        read([META, &acquire, &set].join("\n").as_bytes())
            .unwrap()
            .len(),
        3
    );
}

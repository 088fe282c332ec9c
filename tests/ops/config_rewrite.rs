//! `CONFIG SET dlock.*` persisted by `CONFIG REWRITE` (docs/cluster.md#setting-up-a-cluster,
//! docs/operations.md#configuration): a server started from a config file
//! that loads the module keeps, after `CONFIG REWRITE` and a restart, every
//! `dlock.*` value set at runtime; the rewritten file loads the module, so a
//! server also given `--loadmodule` does not start.
use crate::common;

use common::*;
use redis::Connection;

/// Each setting and a value other than its default.
const SET: [(&str, &str); 4] = [
    ("dlock.max-ttl", "60000"),
    ("dlock.max-token-length", "100"),
    ("dlock.observe-rate", "500"),
    ("dlock.restart-quarantine", "1234"),
];

/// The test's folder, removed however the test ends (declared before the
/// servers, so dropped after them).
struct Folder(std::path::PathBuf);

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn get(c: &mut Connection, name: &str) -> String {
    let (_, v): (String, String) = redis::cmd("CONFIG").arg("GET").arg(name).query(c).unwrap();
    v
}

#[test]
fn config_rewrite_keeps_dlock_settings_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("dlock-config-rewrite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _folder = Folder(dir.clone());
    let conf = dir.join("redis.conf");
    std::fs::write(&conf, format!("loadmodule {}\n", module_path().display())).unwrap();
    let mut s = Server::builder()
        .without_module()
        .config_file(&conf)
        .start();
    let mut c = s.conn();
    for (name, value) in SET {
        assert_ne!(get(&mut c, name), value, "{name} is already {value}");
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut c).unwrap();
    let written = std::fs::read_to_string(&conf).unwrap();
    for (name, value) in SET {
        assert!(
            // String configs are written quoted.
            written
                .lines()
                .any(|l| l.strip_prefix(name).map(|v| v.trim().trim_matches('"')) == Some(value)),
            "{name} {value} not in the rewritten file:\n{written}"
        );
    }

    s.restart();
    let mut c = s.conn();
    for (name, value) in SET {
        assert_eq!(get(&mut c, name), value, "{name} after the restart");
    }

    // The rewritten file loads the module itself: a server also given
    // `--loadmodule` loads it twice and does not start (the page says to
    // load the module from the config file for that reason). Started while
    // the first one runs: the file names its data directory.
    let twice = Server::builder().config_file(&conf).try_start();
    drop(s);
    let err = twice
        .err()
        .expect("a server loading the module twice started");
    assert!(err.contains("initialization failed"), "{err}");
}

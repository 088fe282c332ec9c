//! Which build is running: `INFO dlock` names the release and the git
//! commit, `MODULE LIST` the release as one number, and the module, the Rust
//! client and the Python package are one release.
use crate::common;

use common::*;
use std::process::Command;

#[test]
fn info_names_the_release_and_the_commit() {
    let server = Server::start();
    let mut c = server.conn();
    let version = info_field(&mut c, "dlock", "dlock_version").expect("no dlock_version in INFO");
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let sha = info_field(&mut c, "dlock", "dlock_git_sha").expect("no dlock_git_sha in INFO");
    match checked_out_commit() {
        Some(head) => assert_eq!(sha, head, "the module was built from another commit"),
        None => assert!(
            sha == "unknown" || sha.chars().all(|c| c.is_ascii_hexdigit()),
            "dlock_git_sha:{sha}"
        ),
    }
}

#[test]
fn module_list_shows_the_release_as_one_number() {
    let server = Server::start();
    let mut c = server.conn();
    let modules: Vec<redis::Value> = redis::cmd("MODULE").arg("LIST").query(&mut c).unwrap();
    let mut ver = None;
    for m in modules {
        let fields: Vec<(String, redis::Value)> = match m {
            redis::Value::Map(pairs) => pairs
                .into_iter()
                .map(|(k, v)| (redis::from_redis_value(&k).unwrap(), v))
                .collect(),
            other => {
                let flat: Vec<redis::Value> = redis::from_redis_value(&other).unwrap();
                flat.chunks(2)
                    .map(|p| (redis::from_redis_value(&p[0]).unwrap(), p[1].clone()))
                    .collect()
            }
        };
        let named_dlock = fields
            .iter()
            .any(|(k, v)| k == "name" && redis::from_redis_value::<String>(v).unwrap() == "dlock");
        if named_dlock {
            let (_, v) = fields.iter().find(|(k, _)| k == "ver").expect("no ver");
            ver = Some(redis::from_redis_value::<i64>(v).unwrap());
        }
    }
    let parts: Vec<i64> = env!("CARGO_PKG_VERSION")
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(
        ver,
        Some(parts[0] * 10_000 + parts[1] * 100 + parts[2]),
        "MODULE LIST's ver for dlock"
    );
}

/// The value of `key = "..."` on the first line that sets it.
fn quoted_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
    })
}

#[test]
fn the_module_the_rust_client_and_the_python_package_are_one_release() {
    let root = workspace_root();
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let module = quoted_value(&read("Cargo.toml"), "version");
    let client = quoted_value(&read("clients/rust/Cargo.toml"), "version");
    let core = quoted_value(&read("core/Cargo.toml"), "version");
    let python = quoted_value(&read("clients/python/src/dlock/_version.py"), "__version__");
    assert_eq!(module.as_deref(), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(client, module, "clients/rust/Cargo.toml");
    assert_eq!(core, module, "core/Cargo.toml");
    assert_eq!(python, module, "clients/python/src/dlock/_version.py");
    let heading = format!("## [{}]", env!("CARGO_PKG_VERSION"));
    assert!(
        read("CHANGELOG.md").contains(&heading),
        "CHANGELOG.md has no section {heading}"
    );
}

/// `build.rs` in a crate of its own in a new git repository whose branch is
/// packed (as `git gc` leaves it): a commit writes the branch anew as a
/// loose ref, leaving HEAD and packed-refs as they were, and the next build
/// must still see the new commit.
#[test]
fn the_commit_is_seen_after_a_commit_on_a_packed_branch() {
    struct TempDir(std::path::PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let temp =
        TempDir(std::env::temp_dir().join(format!("dlock-build-sha-{}", std::process::id())));
    let dir = temp.0.clone();
    let _ = std::fs::remove_dir_all(&dir);
    let krate = dir.join("stamp");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::copy(workspace_root().join("build.rs"), krate.join("build.rs")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        "[package]\nname = \"stamp\"\nversion = \"0.0.0\"\nedition = \"2021\"\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        krate.join("src/main.rs"),
        "fn main() { print!(\"{}\", env!(\"DLOCK_GIT_SHA\")); }\n",
    )
    .unwrap();
    std::fs::write(dir.join(".gitignore"), "target\n").unwrap();
    let run = |cmd: &str, args: &[&str], at: &std::path::Path| {
        let out = Command::new(cmd)
            .args(args)
            .current_dir(at)
            .env_remove("DLOCK_GIT_SHA")
            .env("CARGO_TARGET_DIR", dir.join("target"))
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let git = |args: &[&str]| run("git", args, &dir);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let stamped = || run(&cargo, &["run", "-q", "--offline"], &krate);
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "one"]);
    git(&["pack-refs", "--all"]);
    assert_eq!(stamped(), git(&["rev-parse", "--short=12", "HEAD"]));
    git(&["commit", "-q", "--allow-empty", "-m", "two"]);
    assert_eq!(
        stamped(),
        git(&["rev-parse", "--short=12", "HEAD"]),
        "the build kept the commit before"
    );
}

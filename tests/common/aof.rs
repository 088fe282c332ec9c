//! The commands of an AOF file (RESP), for tests that read what a server
//! wrote.
use super::Server;

/// The commands in a RESP (AOF) file, each as its arguments.
pub fn parse(bytes: &[u8]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut at = 0;
    let line = |at: &mut usize| -> String {
        let end = *at + bytes[*at..].windows(2).position(|w| w == b"\r\n").unwrap();
        let s = String::from_utf8_lossy(&bytes[*at..end]).into_owned();
        *at = end + 2;
        s
    };
    while at < bytes.len() {
        let head = line(&mut at);
        let n: usize = head.strip_prefix('*').expect("an array").parse().unwrap();
        let mut cmd = Vec::with_capacity(n);
        for _ in 0..n {
            let len: usize = line(&mut at)[1..].parse().unwrap();
            cmd.push(String::from_utf8_lossy(&bytes[at..at + len]).into_owned());
            at += len + 2;
        }
        out.push(cmd);
    }
    out
}

/// The commands of `s`'s AOF files whose names end with `suffix`, in file
/// order.
pub fn commands(s: &Server, suffix: &str) -> Vec<Vec<String>> {
    files(s, suffix)
        .iter()
        .flat_map(|f| parse(&std::fs::read(f).unwrap()))
        .collect()
}

/// `s`'s AOF files whose names end with `suffix`, in name order.
pub fn files(s: &Server, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(s.dir().join("appendonlydir"))
        .expect("appendonlydir")
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

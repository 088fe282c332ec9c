//! `dlock`: run a command under a distributed lock (after flock(1) and
//! `consul lock`), and the lock commands for scripts. See `dlock --help`.

mod args;
mod backend;
mod child;
mod codes;
mod exec;
mod help;
mod list;
mod lockopts;
mod metrics;
mod metrics_http;
mod metrics_read;
mod metrics_text;
mod observe;
mod prom;
mod reaper;
mod resize;
mod scan;
mod scripts;
mod sessions;
mod signals;
mod status;
mod status_line;
mod tlsopts;
mod top;
mod waitline;
mod wanted;

use args::{Args, Item, Usage};
use codes::usage_error;

fn run() -> i32 {
    let mut a = Args::new(std::env::args_os().skip(1));
    let mut urls = Vec::new();
    loop {
        let item = match a.next_item() {
            Ok(Some(i)) => i,
            Ok(None) => return usage_error(Usage("a COMMAND is needed".into()), ""),
            Err(u) => return usage_error(u, ""),
        };
        match item {
            Item::Opt { name, inline } => match name.as_str() {
                "help" => return help::print(""),
                "version" => {
                    println!(
                        "dlock {} ({})",
                        dlock_client::VERSION,
                        env!("DLOCK_GIT_SHA")
                    );
                    return codes::OK;
                }
                "url" => match a.value(&name, inline) {
                    Ok(u) => urls.push(u),
                    Err(u) => return usage_error(u, ""),
                },
                _ if name.starts_with("tls-") => match tlsopts::option(&name, inline, &mut a) {
                    Ok(true) => {}
                    Ok(false) => return usage_error(Usage(format!("unknown option --{name}")), ""),
                    Err(u) => return usage_error(u, ""),
                },
                _ => {
                    return usage_error(
                        Usage(format!("unknown option --{name} before COMMAND")),
                        "",
                    )
                }
            },
            Item::Pos(cmd) => {
                let cmd = cmd.to_string_lossy().into_owned();
                return match cmd.as_str() {
                    "exec" => exec::main(a, urls, exec::Mode::Exec),
                    "elect" => exec::main(a, urls, exec::Mode::Elect),
                    "observe" => observe::main(a, urls),
                    "status" => status::main(a, urls),
                    "list" => list::main(a, urls),
                    "sessions" => sessions::main(a, urls),
                    "top" => top::main(a, urls),
                    "metrics" => metrics::main(a, urls),
                    "acquire" => scripts::acquire(a, urls),
                    "extend" => scripts::by_token(a, urls, "extend"),
                    "release" => scripts::by_token(a, urls, "release"),
                    "check" => scripts::check(a, urls),
                    "resize" => resize::main(a, urls),
                    "help" => match a.take_rest().first() {
                        Some(t) => help::print(&t.to_string_lossy()),
                        None => help::print(""),
                    },
                    _ => usage_error(Usage(format!("unknown command {cmd:?}")), ""),
                };
            }
            Item::DashDash => return usage_error(Usage("a COMMAND is needed".into()), ""),
        }
    }
}

fn main() {
    let code = run();
    // Flush what was printed; `exit` skips no destructor that matters here
    // (the guard, if any, was released or forgotten on purpose).
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

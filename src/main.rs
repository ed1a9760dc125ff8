//! The `flotilla` command: runs the control plane and manages workspaces.

mod cli;
mod cmd;
mod logging;

use clap::Parser;

/// mimalloc instead of glibc malloc: the server parses and drops many short-lived
/// JSON trees across its worker threads, and glibc's per-thread arenas keep that
/// memory (a simulated cluster with 1,000 pods held 134 MiB with glibc, 99 MiB with
/// a single arena).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Opts this process out of transparent huge pages (docs/benchmarks.md has the runs).
/// - The control plane: mimalloc asks for huge pages on its arenas and returns freed
///   memory to the OS a second after a burst, and each 2 MiB page touched again is
///   faulted back in whole and zeroed by the kernel: 7% of the control plane's samples
///   while it placed 10,000 Deployments. Without huge pages it used about 7% less CPU.
/// - A simulated cluster: partly used 2 MiB pages count in full towards RSS, and a
///   simulated cluster is meant to be cheap to run many of. With 100 nodes and 5,000
///   running pods its steady RSS fell from 363-396 MiB to 203-232 MiB. With huge
///   pages off, mimalloc's default delay before it returns freed memory (a second)
///   leaves the same steady RSS as returning it at once, at less CPU.
///
/// A kernel or a seccomp filter that refuses the call changes only speed and memory,
/// so it is not reported: logging is not set up yet, and a warning on stderr would
/// follow every command, `kubectl flotilla status` included.
fn without_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
}

/// Raises the soft limit on open files to the hard limit, as Go programs do at start
/// (Go's os package, since 1.19). The soft limit of 1,024 that many systems still set
/// protects programs that use select(2), which Flotilla does not; the server holds a
/// file per connection, and at 1,024 it cannot accept its thousandth client. A refusal
/// leaves the limit as it was and is not reported, for the reasons given at
/// [`without_huge_pages`]; the server bounds the connections that have not sent a
/// request anyway (controlplane/src/listener.rs).
fn raise_open_files_limit() {
    #[cfg(unix)]
    {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
            if soft < hard {
                let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
            }
        }
    }
}

fn main() -> std::process::ExitCode {
    without_huge_pages();
    raise_open_files_limit();
    // As a kubectl plugin, help and errors name the command the user typed.
    let cli = if cmd::is_kubectl_plugin() {
        let matches = <cli::Cli as clap::CommandFactory>::command().bin_name("kubectl flotilla").get_matches();
        match <cli::Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
            Ok(cli) => cli,
            Err(e) => e.exit(),
        }
    } else {
        cli::Cli::parse()
    };
    let log_file = match logging::init(&cli) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            return std::process::ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(cmd::run(cli, log_file)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, `what: why: root cause`, as anyhow's `{:#}`
/// prints them, except that a cause the text already holds is left out. Many errors
/// print their source in their own message and also return it from `source()` (a
/// definition file's I/O error, and many of kube's and hyper's), and `{:#}` prints
/// such a cause twice.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

#[cfg(test)]
mod tests {
    use anyhow::Context;

    /// A source error, and an error that prints it in its message and returns it.
    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "demo.yaml: {}", self.0)
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_error_prints_each_cause_once() {
        let missing = || std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let e = Err::<(), _>(Outer(missing())).context("reading the cluster definitions").unwrap_err();
        assert_eq!(
            format!("{e:#}"),
            "reading the cluster definitions: demo.yaml: No such file or directory (os error 2): No such file or directory (os error 2)"
        );
        assert_eq!(super::error_text(&e), "reading the cluster definitions: demo.yaml: No such file or directory (os error 2)");
        // Causes that their errors do not print are all there.
        let e = Err::<(), _>(missing()).context("opening the log").context("starting").unwrap_err();
        assert_eq!(super::error_text(&e), "starting: opening the log: No such file or directory (os error 2)");
    }
}

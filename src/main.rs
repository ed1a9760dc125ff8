//! The `flotilla` command: runs the control plane and manages workspaces.

mod cli;
mod cmd;

use clap::Parser;

/// mimalloc instead of glibc malloc: the server parses and drops many short-lived
/// JSON trees across its worker threads, and glibc's per-thread arenas keep that
/// memory (a simulated cluster with 1,000 pods held 134 MiB with glibc, 99 MiB with
/// a single arena).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
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
    cli::init_logging(&cli);
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(cmd::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

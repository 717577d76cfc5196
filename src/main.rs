//! The walrelay command: parses the flags, sets up logging and the async
//! runtime, and runs one subcommand. Everything else lives in the library.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{error, info, warn};

use walrelay::config::{Cli, Command};
use walrelay::postgres::state::recovery::describe;
use walrelay::{check, completions, lifecycle, logging, migrate, redrive, relay, status};

// jemalloc and its options (src/allocator.rs).
walrelay::process_allocator!();

/// How long walrelay's exit waits for blocking tasks still running.
const EXIT_GRACE: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    let cli = Cli::parse_naming_env();
    let kafka_debug = cli
        .command
        .kafka_properties()
        .iter()
        .any(|(k, _)| k == "debug");
    logging::init(cli.log_format, cli.command.secrets(), kafka_debug);
    // Before any Kafka client exists: Cyrus SASL loads its plugins once.
    walrelay::kafka::cyrus::load_plugins_only_for_kerberos(&cli.command.kafka_properties());

    // `run` on one thread: the apply loop is one task, and on a runtime of
    // worker threads every replication message cost two context switches
    // (a worker woken by epoll, then the main thread woken by it): at 2,000
    // one-event transactions a second most of walrelay's CPU went to the
    // scheduler (docs/benchmarks.md, issue 21). Blocking calls go to the
    // blocking pool there too. The other commands keep worker threads
    // (audit reads Kafka with block_in_place).
    let mut builder = match cli.command {
        Command::Run(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => {
                let shutdown = shutdown_signal();
                let result = relay::run(*args, shutdown).await;
                if result.is_ok() {
                    info!("walrelay stopped");
                }
                result
            }
            Command::Check(args) => check::run(*args).await,
            Command::Status(args) => status::run(args).await,
            Command::Redrive(args) => redrive::run(*args, shutdown_signal()).await,
            Command::Replay(args) => lifecycle::replay::run(*args).await,
            Command::Audit(args) => lifecycle::audit::run(*args).await,
            Command::MigrateFromDebezium { config, reuse_slot } => {
                migrate::run(&config, migrate::Options { reuse_slot })
            }
            Command::Completions { shell } => completions::completions(shell),
            Command::Man { subcommand } => completions::man(subcommand.as_deref()),
            Command::Tail {
                kafka_brokers,
                count,
                timeout,
                topics,
            } => walrelay::kafka::tail::run(&kafka_brokers, count, timeout, &topics).await,
        }
    });
    // Dropping the runtime would wait for every blocking task, e.g. a Kafka
    // metadata lookup that a refused login leaves waiting out its 30 s
    // timeout: nothing left there matters once the command has ended.
    runtime.shutdown_timeout(EXIT_GRACE);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.stop_cause() {
            Some(cause) => {
                match e.at_risk() {
                    Some(risk) => error!(
                        cause = cause.name(),
                        at_risk = %describe(risk),
                        "{}",
                        e.report()
                    ),
                    None => error!(cause = cause.name(), "{}", e.report()),
                }
                ExitCode::from(cause.exit_code())
            }
            None => {
                error!("{}", e.report());
                ExitCode::FAILURE
            }
        },
    }
}

/// Fires on the first SIGTERM or SIGINT; a second one exits at once.
/// SIGHUP is ignored with a log line: walrelay reloads nothing, and the
/// default action (exit at once, no final status update) would cut a
/// stream short because a terminal closed or a tool asked for a reload.
fn shutdown_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hangup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hangup.recv().await.is_some() {
            warn!(
                "SIGHUP received and ignored: walrelay reloads nothing; restart it to change \
                 its settings (SIGTERM stops it cleanly)"
            );
        }
    });
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            warn!("cannot install signal handlers; stop walrelay with SIGKILL");
            return;
        };
        tokio::select! {
            _ = term.recv() => info!("SIGTERM received"),
            _ = int.recv() => info!("SIGINT received"),
        }
        let _ = tx.send(true);
        let first = Instant::now();
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            // Tools like `timeout` signal the process and its group at once:
            // only a deliberate second signal forces the exit.
            if first.elapsed() > Duration::from_secs(1) {
                break;
            }
        }
        warn!("second signal: exiting without waiting for deliveries");
        std::process::exit(130);
    });
    rx
}

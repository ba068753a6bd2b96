use bizrq::config::{init_tracing, Cli, Command};
use clap::Parser;
use std::io::Write;

/// jemalloc rather than glibc's malloc. Under admission load glibc's
/// allocator spends much of the server's CPU consolidating its fast bins
/// whenever a TLS record or a review body asks for a large block; jemalloc
/// does not, so the same load costs less CPU per admission
/// (docs/benchmarks.md, "The allocator and kept sums"). Only the binary:
/// the library and its tests keep the system allocator.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => print!("{}", bizrq::cluster::crd::crd_yaml()),
        Command::Repair(args) => {
            let store = bizrq::store::sql::SqlStore::connect(&args.database_url).await?;
            let repaired = bizrq::repair::repair_all(&store, args.dry_run).await?;
            let verb = if args.dry_run {
                "would repair"
            } else {
                "repaired"
            };
            for r in &repaired {
                for change in &r.changes {
                    println!("bizrq repair: {}: {change}", r.quota);
                }
            }
            println!("bizrq repair: {} {} quotas", verb, repaired.len());
        }
        Command::Serve(args) => {
            init_tracing(args.log_format);
            let running = bizrq::start(&args).await?;
            if let Some(token) = &running.generated_token {
                eprintln!("bizrq: generated an admin token for the JSON API (shown once, store it): {token}");
            }
            if let Some(password) = &running.generated_admin_password {
                // On stdout, before the ready line, like a first-start banner.
                println!("bizrq: created user 'admin' with a generated password (shown once, store it): {password}");
            }
            match &running.demo {
                Some(bizrq::demo::Outcome::AlreadyPopulated(n)) => {
                    println!("bizrq: --demo: the database already holds {n} quotas; nothing seeded")
                }
                Some(bizrq::demo::Outcome::Seeded(s)) => {
                    println!(
                        "bizrq: --demo seeded {} quotas, {} workloads, {} usage samples, transfer #{} (pending) and {} queued jobs in nlp",
                        s.quotas, s.workloads, s.samples, s.transfer_id, s.queued
                    );
                    let users: Vec<&str> = s.users.iter().map(|(u, ..)| u.as_str()).collect();
                    println!("bizrq: demo users: {}", users.join(", "));
                    match &s.generated_password {
                        Some(p) => println!(
                            "bizrq: every demo user's password (shown once, or set BIZRQ_DEMO_PASSWORD): {p}"
                        ),
                        None => println!("bizrq: demo users log in with BIZRQ_DEMO_PASSWORD"),
                    }
                }
                None => {}
            }
            if running.self_signed_cert.is_some() {
                tracing::info!("webhook uses a self-signed certificate (pass --tls-cert/--tls-key for a real one)");
            }
            tracing::info!(http = %running.http_addr, webhook = %running.webhook_addr, database = %bizrq::store::sql::redacted_url(&args.database_url), "bizrq serving");
            // One machine-readable line for scripts and tests.
            println!(
                "{}",
                bizrq::ready_line(running.http_addr, running.webhook_addr)
            );
            std::io::stdout().flush()?;
            shutdown_signal().await;
            tracing::info!("shutting down");
            running.shutdown().await;
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

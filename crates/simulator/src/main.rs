//! `gluesync-simulator`: Core Hub's API and the version catalog on one port, its admin API on another.

use std::net::SocketAddr;

use clap::Parser;
use gluesync_simulator::{CatalogEntry, Options, Simulator, admin_router};

#[derive(Parser)]
#[command(
    name = "gluesync-simulator",
    about = "Simulates Core Hub's REST API and the version catalog"
)]
struct Args {
    /// Address of Core Hub's API and the catalog.
    #[arg(long, default_value = "127.0.0.1:17170")]
    addr: SocketAddr,
    /// Address of the admin API (/_sim/state, /_sim/pipelines, /_sim/faults, /_sim/catalog/{image}).
    #[arg(long, default_value = "127.0.0.1:17171")]
    admin_addr: SocketAddr,
    /// Serve HTTPS with a self-signed certificate.
    #[arg(long)]
    tls: bool,
    /// Running pipelines to start with.
    #[arg(long, default_value_t = 0)]
    pipelines: usize,
    /// Catalog entries, as image=version (the same version on every channel), or
    /// image=ga,beta,alpha.
    #[arg(long = "catalog", value_name = "IMAGE=VERSIONS")]
    catalog: Vec<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let args = Args::parse();
    let simulator = Simulator::start(Options {
        addr: Some(args.addr),
        tls: args.tls,
    })
    .await?;
    simulator.add_pipelines("p", args.pipelines);
    for entry in &args.catalog {
        let (image, versions) = entry
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--catalog {entry}: expected image=version"))?;
        let v: Vec<&str> = versions.split(',').collect();
        let pick = |i: usize| {
            v.get(i)
                .or(v.first())
                .copied()
                .unwrap_or_default()
                .to_string()
        };
        simulator.set_catalog(
            image,
            CatalogEntry {
                latest_version_ga: pick(0),
                latest_version_beta: pick(1),
                latest_version_alpha: pick(2),
            },
        );
    }
    let listener = tokio::net::TcpListener::bind(args.admin_addr).await?;
    println!("core hub and catalog: {}", simulator.url);
    println!("admin: http://{}/_sim/state", args.admin_addr);
    if let Some(pem) = &simulator.cert_pem {
        println!("certificate:\n{pem}");
    }
    let admin = admin_router(simulator.sim.clone());
    axum::serve(listener, admin)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

//! `kubectl gluesync`: follow, retry and check GKO's updates of a Gluesync install from the terminal. A
//! kubectl plugin: kubectl runs `kubectl-gluesync` from the PATH for `kubectl gluesync ...`.
//!
//! Exit codes: 0 done (for `status --wait`: the update ended Succeeded), 1 failed or refused (an error, a
//! refusal, an update that ended otherwise), 2 still running when `status --wait --timeout` gave up.

mod plan;
mod screen;

use std::{
    io::{IsTerminal, Write},
    process::ExitCode,
    time::Duration,
};

use anyhow::{Context as _, anyhow, bail};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use futures::StreamExt;
use gluesync_engine::api::{CHECK_NOW_ANNOTATION, GluesyncPlatform, UpdatePolicy, UpdateResult};
use gluesync_operator::cluster::wording::{self, Said};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Event;
use kube::{
    Api, Client, Config, ResourceExt,
    api::{ListParams, Patch, PatchParams},
    config::KubeConfigOptions,
    runtime::{WatchStreamExt, watcher},
};

#[derive(Parser)]
#[command(
    name = "kubectl-gluesync",
    bin_name = "kubectl gluesync",
    version,
    about = "Follow, retry and check GKO's updates of a Gluesync install",
    long_about = "Follow, retry and check GKO's updates of a Gluesync install (a GluesyncPlatform).\n\n\
        NAME may be left out when the namespace holds one GluesyncPlatform.\n\n\
        Exit codes: 0 done, 1 failed or refused, 2 still running (status --wait --timeout)."
)]
struct Cli {
    /// The namespace (default: the kubeconfig context's).
    #[arg(short, long, global = true)]
    namespace: Option<String>,
    /// The kubeconfig context (default: the current one).
    #[arg(long, global = true)]
    context: Option<String>,
    /// How read commands print: a screen for people, or JSON or YAML for scripts.
    #[arg(short, long, global = true, value_enum, default_value_t = Output::Text)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
    Yaml,
}

#[derive(Subcommand)]
enum Command {
    /// The install at a glance: phase, Core Hub and modules, the running update's step and progress.
    Status {
        name: Option<String>,
        /// Follow: one line per change (redrawn in place on a terminal), until Ctrl-C.
        #[arg(short, long)]
        watch: bool,
        /// Return when the running update ends (at once when none runs): 0 Succeeded, 1 otherwise.
        #[arg(long)]
        wait: bool,
        /// With --wait: give up after this many seconds, with exit code 2.
        #[arg(long, requires = "wait")]
        timeout: Option<u64>,
    },
    /// The last updates, newest first, with their durations.
    History { name: Option<String> },
    /// The Kubernetes events of the GluesyncPlatform, oldest first.
    Events { name: Option<String> },
    /// What an update to VERSION (default: the latest on the channel) would do, decided by GKO's own
    /// engine on the live objects; changes nothing. Exit code 0 when it would run, 1 when not.
    Plan {
        version: Option<String>,
        name: Option<String>,
    },
    /// Ask for Core Hub VERSION (sets spec.version; refused under updatePolicy gitops).
    Update {
        version: String,
        name: Option<String>,
    },
    /// Approve the update that waits for its approval (approval: manual): the approve annotation.
    Approve { name: Option<String> },
    /// Run the last update again: a new spec.requestID.
    Retry { name: Option<String> },
    /// Check the version catalog now (the check-now annotation).
    Check { name: Option<String> },
    /// Print the shell completion script.
    Completion { shell: clap_complete::Shell },
}

/// An error that is an answer, not a failure of the tool: printed as it is, exit code 1.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            if e.downcast_ref::<Refused>().is_some() {
                eprintln!("{e}");
            } else if e.downcast_ref::<kube::Error>().is_some() {
                // The API server's answer or the connection's failure, as kubectl says them.
                eprintln!("{}", Said(e.as_ref()));
            } else {
                eprintln!("error: {}", Said(e.as_ref()));
            }
            ExitCode::from(1)
        }
    }
}

async fn client(cli: &Cli) -> anyhow::Result<(Client, String)> {
    let options = KubeConfigOptions {
        context: cli.context.clone(),
        ..Default::default()
    };
    let config = match Config::from_kubeconfig(&options).await {
        Ok(c) => c,
        Err(kubeconfig) if cli.context.is_none() => Config::incluster()
            .map_err(|_| anyhow!(kubeconfig))
            .context("no kubeconfig, and not in a cluster")?,
        Err(e) => return Err(e).context("reading the kubeconfig"),
    };
    wording::set_server(&config.cluster_url);
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    Ok((Client::try_from(config)?, namespace))
}

/// The GluesyncPlatform named, or the only one of the namespace.
async fn platform(
    api: &Api<GluesyncPlatform>,
    namespace: &str,
    name: Option<&str>,
) -> anyhow::Result<GluesyncPlatform> {
    if let Some(n) = name {
        return match api.get_opt(n).await? {
            Some(p) => Ok(p),
            None => {
                Err(Refused(format!("no GluesyncPlatform {n} in namespace {namespace}")).into())
            }
        };
    }
    let mut all = api.list(&ListParams::default()).await?.items;
    match all.len() {
        1 => Ok(all.remove(0)),
        0 => Err(Refused(format!(
            "no GluesyncPlatform in namespace {namespace} (-n names another)"
        ))
        .into()),
        _ => Err(Refused(format!(
            "{} GluesyncPlatforms in namespace {namespace}: name one ({})",
            all.len(),
            all.iter()
                .map(|p| p.name_any())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into()),
    }
}

fn print(output: Output, value: &serde_json::Value) -> anyhow::Result<()> {
    let text = match output {
        Output::Yaml => serde_yaml::to_string(value)?,
        _ => serde_json::to_string_pretty(value)? + "\n",
    };
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Command::Completion { shell } = &cli.command {
        clap_complete::generate(
            *shell,
            &mut Cli::command(),
            "kubectl-gluesync",
            &mut std::io::stdout(),
        );
        return Ok(ExitCode::SUCCESS);
    }
    let (client, namespace) = client(&cli).await?;
    let api: Api<GluesyncPlatform> = Api::namespaced(client.clone(), &namespace);
    match &cli.command {
        Command::Status {
            name,
            watch,
            wait,
            timeout,
        } => {
            let gsp = platform(&api, &namespace, name.as_deref()).await?;
            if *wait {
                return wait_for_end(&api, gsp, *timeout, cli.output).await;
            }
            if *watch {
                return follow(&client, &namespace, &api, gsp, cli.output).await;
            }
            {
                let live = live(&client, &namespace, &gsp).await;
                match cli.output {
                    Output::Text => print!("{}", screen::screen(&gsp, Timestamp::now(), &live)),
                    o => print(o, &screen::summary(&gsp, Timestamp::now(), &live))?,
                }
            }
        }
        Command::History { name } => {
            let gsp = platform(&api, &namespace, name.as_deref()).await?;
            match cli.output {
                Output::Text => print!("{}", screen::history(&gsp)),
                o => print(
                    o,
                    &serde_json::to_value(gsp.status.map(|s| s.history).unwrap_or_default())?,
                )?,
            }
        }
        Command::Events { name } => {
            let gsp = platform(&api, &namespace, name.as_deref()).await?;
            events(&client, &namespace, &gsp, cli.output).await?;
        }
        Command::Plan { version, name } => {
            let gsp = platform(&api, &namespace, name.as_deref()).await?;
            let plan = plan::make(&client, &namespace, &gsp, version.as_deref()).await?;
            match cli.output {
                Output::Text => print!("{}", plan::text(&gsp, &plan)),
                o => print(o, &plan::json(&gsp, &plan))?,
            }
            if !plan::runs(&plan) {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Update { version, name } => {
            let gsp = platform(&api, &namespace, name.as_deref()).await?;
            update(&api, &gsp, version).await?;
        }
        Command::Approve { name } => {
            let gsp = platform(&api, &namespace, name.as_deref()).await?;
            approve(&api, &gsp).await?;
        }
        Command::Retry { name } => {
            let gsp = platform(&api, &namespace, name.as_deref()).await?;
            let id = format!("kubectl-{}", Timestamp::now().as_second());
            patch_spec(&api, &gsp, serde_json::json!({"spec": {"requestID": id}})).await?;
            println!(
                "gluesyncplatform/{} retried: spec.requestID is {id} (Core Hub {})",
                gsp.name_any(),
                gsp.spec.version
            );
        }
        Command::Check { name } => {
            let gsp = platform(&api, &namespace, name.as_deref()).await?;
            let at = Timestamp::now().to_string();
            let patch =
                serde_json::json!({"metadata": {"annotations": {CHECK_NOW_ANNOTATION: at}}});
            api.patch(
                &gsp.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
            println!(
                "gluesyncplatform/{} asked to check the catalog now ({CHECK_NOW_ANNOTATION}={at})",
                gsp.name_any()
            );
        }
        Command::Completion { .. } => unreachable!("answered above"),
    }
    Ok(ExitCode::SUCCESS)
}

/// A merge patch of the spec, made only when the resource has not changed since it was read.
async fn patch_spec(
    api: &Api<GluesyncPlatform>,
    gsp: &GluesyncPlatform,
    mut patch: serde_json::Value,
) -> anyhow::Result<()> {
    patch["metadata"] = serde_json::json!({"resourceVersion": gsp.resource_version()});
    api.patch(
        &gsp.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| match e {
        kube::Error::Api(a) if a.code == 409 => {
            anyhow!(Refused(
                "the GluesyncPlatform changed while this ran; nothing was written, try again"
                    .into()
            ))
        }
        kube::Error::Api(a) if a.code == 422 => anyhow!(Refused(format!("refused: {}", a.message))),
        e => e.into(),
    })?;
    Ok(())
}

async fn update(
    api: &Api<GluesyncPlatform>,
    gsp: &GluesyncPlatform,
    version: &str,
) -> anyhow::Result<()> {
    if gsp.spec.update_policy == UpdatePolicy::Gitops {
        bail!(Refused(format!(
            "refused: gluesyncplatform/{} has updatePolicy gitops, so Git owns spec.version; change the \
             version in Git (Argo CD or Flux applies it)",
            gsp.name_any()
        )));
    }
    if gsp.spec.version == version {
        bail!(Refused(format!(
            "gluesyncplatform/{} already asks for Core Hub {version}; `retry` runs that update again",
            gsp.name_any()
        )));
    }
    patch_spec(api, gsp, serde_json::json!({"spec": {"version": version}})).await?;
    println!(
        "gluesyncplatform/{} asks for Core Hub {version} (was {}); follow it with `kubectl gluesync status -w`",
        gsp.name_any(),
        gsp.spec.version
    );
    Ok(())
}

/// Writes the approve annotation with the waiting update's approvalID, only when the resource has not
/// changed since it was read (a new spec makes a new plan, which needs its own look).
async fn approve(api: &Api<GluesyncPlatform>, gsp: &GluesyncPlatform) -> anyhow::Result<()> {
    use gluesync_engine::api::{APPROVE_ANNOTATION, Approval, UpdateStep};
    let name = gsp.name_any();
    let update = gsp.status.as_ref().and_then(|s| s.update.as_ref());
    let id = match update {
        _ if gsp.spec.approval == Approval::Automatic => bail!(Refused(format!(
            "refused: gluesyncplatform/{name} has approval automatic: its updates need no approval"
        ))),
        None => bail!(Refused(format!(
            "refused: no update of gluesyncplatform/{name} runs, so none waits for approval"
        ))),
        Some(u) => match &u.approval_id {
            Some(id) if gsp.annotations().get(APPROVE_ANNOTATION) == Some(id) => {
                bail!(Refused(format!(
                    "gluesyncplatform/{name}: the update to {} is approved already ({id})",
                    u.target.as_deref().unwrap_or("new modules")
                )))
            }
            Some(id) if u.step.name() <= UpdateStep::Waiting => id.clone(),
            _ => bail!(Refused(format!(
                "refused: the update of gluesyncplatform/{name} is past its approval (step {:?})",
                u.step.name()
            ))),
        },
    };
    let patch = serde_json::json!({"metadata": {
        "annotations": {APPROVE_ANNOTATION: id},
        "resourceVersion": gsp.resource_version(),
    }});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| match e {
            kube::Error::Api(a) if a.code == 409 => anyhow!(Refused(
                "the GluesyncPlatform changed while this ran (its plan may be new): nothing was \
                 written; look at `kubectl gluesync plan` and try again"
                    .into()
            )),
            e => e.into(),
        })?;
    let target = update
        .and_then(|u| u.target.clone())
        .unwrap_or_else(|| "new modules".into());
    println!(
        "gluesyncplatform/{name}: the update to {target} is approved ({APPROVE_ANNOTATION}={id}); \
         follow it with `kubectl gluesync status -w`"
    );
    Ok(())
}

/// Has GKO acted on the latest spec, with no update running?
fn settled(gsp: &GluesyncPlatform) -> bool {
    gsp.status
        .as_ref()
        .is_some_and(|s| s.update.is_none() && s.observed_generation >= gsp.metadata.generation)
}

/// The replicas of the workloads the update rolls now, read from their controllers (none when nothing
/// rolls, or when they cannot be read: the screen then says what the status says).
async fn live(client: &Client, namespace: &str, gsp: &GluesyncPlatform) -> screen::Live {
    use gluesync_engine::api::WorkloadKind;
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    let mut out = screen::Live::new();
    let Some(u) = gsp.status.as_ref().and_then(|s| s.update.as_ref()) else {
        return out;
    };
    for c in u.components.iter().filter(|c| screen::is_rolling(c)) {
        let replicas =
            |desired: Option<i32>, updated: Option<i32>, ready: Option<i32>| screen::Replicas {
                desired: desired.unwrap_or(1).into(),
                updated: updated.unwrap_or(0).into(),
                ready: ready.unwrap_or(0).into(),
            };
        let r = match c.kind {
            WorkloadKind::StatefulSet => Api::<StatefulSet>::namespaced(client.clone(), namespace)
                .get_opt(&c.name)
                .await
                .ok()
                .flatten()
                .map(|s| {
                    let st = s.status.unwrap_or_default();
                    replicas(
                        s.spec.and_then(|x| x.replicas),
                        st.updated_replicas,
                        st.ready_replicas,
                    )
                }),
            WorkloadKind::Deployment => Api::<Deployment>::namespaced(client.clone(), namespace)
                .get_opt(&c.name)
                .await
                .ok()
                .flatten()
                .map(|d| {
                    let st = d.status.unwrap_or_default();
                    replicas(
                        d.spec.and_then(|x| x.replicas),
                        st.updated_replicas,
                        st.ready_replicas,
                    )
                }),
        };
        if let Some(r) = r {
            out.insert(c.name.clone(), r);
        }
    }
    out
}

/// `status -w`: a line per change, redrawn in place on a terminal.
async fn follow(
    client: &Client,
    namespace: &str,
    api: &Api<GluesyncPlatform>,
    gsp: GluesyncPlatform,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let terminal = std::io::stdout().is_terminal() && output == Output::Text;
    let mut last = String::new();
    let mut show = |gsp: &GluesyncPlatform, live: &screen::Live| -> anyhow::Result<()> {
        let mut out = std::io::stdout();
        if output != Output::Text {
            return print(output, &screen::summary(gsp, Timestamp::now(), live));
        }
        let line = screen::line(gsp, Timestamp::now(), terminal, live);
        if terminal {
            // Cut to the terminal's width: a line that wrapped would leave its first rows behind.
            let width = terminal_size::terminal_size().map_or(80, |(w, _)| w.0 as usize);
            let shown: String = line.chars().take(width.saturating_sub(1)).collect();
            write!(out, "\r\x1b[2K{shown}")?;
        } else if line != last {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        last = line;
        Ok(())
    };
    let mut current = gsp;
    show(&current, &live(client, namespace, &current).await)?;
    let mut changes = watch(api, &current.name_any());
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            next = changes.next() => match next {
                Some(Ok(p)) => {
                    current = p;
                    show(&current, &live(client, namespace, &current).await)?;
                }
                Some(Err(e)) => eprintln!("\nwatch: {} (retrying)", Said(e.as_ref())),
                None => break,
            },
            // The clocks of the line (step time, deadline) move on between changes: the same object,
            // drawn again at a later time (the watch brings every change). Only the replicas of a
            // workload that rolls are read again.
            _ = tick.tick(), if terminal => show(&current, &live(client, namespace, &current).await)?,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    if terminal {
        println!();
    }
    Ok(ExitCode::SUCCESS)
}

fn watch(
    api: &Api<GluesyncPlatform>,
    name: &str,
) -> impl futures::Stream<Item = anyhow::Result<GluesyncPlatform>> + use<> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(api.clone(), config)
        .default_backoff()
        .applied_objects()
        .map(|r| r.map_err(anyhow::Error::from))
        .boxed()
}

/// `status --wait`: returns when the update ends (at once when none runs and GKO has seen the spec).
async fn wait_for_end(
    api: &Api<GluesyncPlatform>,
    gsp: GluesyncPlatform,
    timeout: Option<u64>,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + Duration::from_secs(t));
    let mut current = gsp;
    let mut changes = watch(api, &current.name_any());
    while !settled(&current) {
        let next = async {
            match deadline {
                Some(d) => tokio::time::timeout_at(d, changes.next()).await.ok(),
                None => Some(changes.next().await),
            }
        };
        match next.await {
            None => {
                eprintln!(
                    "still running after {} s: {}",
                    timeout.unwrap_or(0),
                    screen::line(&current, Timestamp::now(), false, &screen::Live::new())
                );
                return Ok(ExitCode::from(2));
            }
            Some(Some(Ok(p))) => current = p,
            Some(Some(Err(e))) => eprintln!("watch: {} (retrying)", Said(e.as_ref())),
            Some(None) => bail!("the watch of the GluesyncPlatform ended"),
        }
    }
    let attempt = current
        .status
        .as_ref()
        .and_then(|s| s.last_attempt.as_ref());
    match output {
        Output::Text => match attempt {
            Some(a) => println!(
                "{}: {} to {}: {}",
                current.name_any(),
                screen::name(&a.result),
                a.target.as_deref().unwrap_or("modules"),
                a.message
            ),
            None => println!("{}: no update has run", current.name_any()),
        },
        o => print(
            o,
            &screen::summary(&current, Timestamp::now(), &screen::Live::new()),
        )?,
    }
    Ok(match attempt.map(|a| &a.result) {
        Some(UpdateResult::Succeeded) | None => ExitCode::SUCCESS,
        Some(_) => ExitCode::from(1),
    })
}

async fn events(
    client: &Client,
    namespace: &str,
    gsp: &GluesyncPlatform,
    output: Output,
) -> anyhow::Result<()> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let fields = format!(
        "involvedObject.kind=GluesyncPlatform,involvedObject.name={}",
        gsp.name_any()
    );
    let mut list = api
        .list(&ListParams::default().fields(&fields))
        .await?
        .items;
    list.sort_by_key(last_seen);
    if output != Output::Text {
        return print(output, &serde_json::to_value(&list)?);
    }
    let rows: Vec<[String; 5]> = list
        .iter()
        .map(|e| {
            [
                last_seen(e).map_or("-".into(), |t| {
                    t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
                }),
                e.type_.clone().unwrap_or_else(|| "-".into()),
                e.reason.clone().unwrap_or_else(|| "-".into()),
                occurrences(e).to_string(),
                e.message.clone().unwrap_or_default(),
            ]
        })
        .collect();
    print!(
        "{}",
        screen::table(["LAST SEEN", "TYPE", "REASON", "COUNT", "MESSAGE"], &rows)
    );
    Ok(())
}

/// When an event last happened, as `kubectl events` reads it: the last of its series (events.k8s.io/v1,
/// as GKO records them: a repeat updates `series` and leaves the first time alone), else its last
/// timestamp (core/v1 recorders), its time, its creation.
fn last_seen(e: &Event) -> Option<jiff::Timestamp> {
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0)
        .or(e.last_timestamp.as_ref().map(|t| t.0))
        .or(e.event_time.as_ref().map(|t| t.0))
        .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// How many times an event happened: its series' count, else its count, else once.
fn occurrences(e: &Event) -> i32 {
    e.series
        .as_ref()
        .and_then(|s| s.count)
        .or(e.count)
        .unwrap_or(1)
        .max(1)
}

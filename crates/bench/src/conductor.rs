//! The Conductor API under load (sessions GKO knows, a flood of bad tokens, both), and strangers'
//! unfinished request heads.

use super::*;

/// The Conductor API of the GKO the conductor figure starts.
pub(super) const CONDUCTOR_URL: &str = "http://127.0.0.1:18185/conductor/api/containers";

/// Manager sessions, and connections for each kind of caller.
pub(super) const SESSIONS: usize = 16;

pub(super) const CONNECTIONS: usize = 32;

/// Each phase of the Conductor load runs this long before it is measured.
pub(super) const WARM_UP: Duration = Duration::from_secs(1);

/// How many requests of one kind of caller got each answer.
#[derive(Default)]
pub(super) struct Answers {
    ok: AtomicU64,
    unauthorized: AtomicU64,
    limited: AtomicU64,
    /// Any other status, and requests that got no answer.
    other: AtomicU64,
}

impl Answers {
    pub(crate) fn count(&self, status: Option<u16>) {
        let counter = match status {
            Some(200) => &self.ok,
            Some(401) => &self.unauthorized,
            Some(429) => &self.limited,
            _ => &self.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Who calls the Conductor API in a phase of the load.
#[derive(Clone)]
pub(super) enum Callers {
    /// Manager sessions Core Hub knows, already in GKO's identity cache: connection `i` uses session
    /// `i % len`, as a browser keeps its own session.
    Managers(Arc<Vec<String>>),
    /// A new random token on every request.
    Strangers,
    /// New logins: each request a token GKO has not seen, of one of [`LOGIN_USERS`] managers (as users
    /// opening the UI), from the same address as everyone else; a 429 is waited out as `Retry-After`
    /// says, as the UI would.
    Logins(Arc<Vec<String>>, Arc<std::sync::atomic::AtomicUsize>),
}

/// Managers whose new logins the load makes, and the loops that make them.
pub(super) const LOGIN_USERS: usize = 8;

pub(super) const LOGIN_CONNECTIONS: usize = 4;

/// [`CONNECTIONS`] loops of `GET /containers` as `callers` until `until`; the answers that arrive from
/// `from` on are counted.
pub(super) fn load(
    callers: Callers,
    from: Instant,
    until: Instant,
) -> (Arc<Answers>, Vec<tokio::task::JoinHandle<()>>) {
    use std::hash::{BuildHasher, Hasher};
    let answers = Arc::new(Answers::default());
    // One client, and so one pool of connections, for this kind of caller.
    let http = reqwest::Client::new();
    let connections = match callers {
        Callers::Logins(..) => LOGIN_CONNECTIONS,
        _ => CONNECTIONS,
    };
    let tasks = (0..connections)
        .map(|connection| {
            let (http, callers, answers) = (http.clone(), callers.clone(), answers.clone());
            tokio::spawn(async move {
                let mut random = std::hash::RandomState::new().build_hasher();
                while Instant::now() < until {
                    let token = match &callers {
                        Callers::Managers(sessions) => {
                            sessions[connection % sessions.len()].clone()
                        }
                        Callers::Strangers => {
                            random.write_u8(0);
                            format!("{:016x}{connection:04x}", random.finish())
                        }
                        Callers::Logins(tokens, next) => {
                            tokens[next.fetch_add(1, Ordering::Relaxed) % tokens.len()].clone()
                        }
                    };
                    let mut wait = None;
                    let status = match http.get(CONDUCTOR_URL).bearer_auth(token).send().await {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            if matches!(callers, Callers::Logins(..)) && status == 429 {
                                wait = r
                                    .headers()
                                    .get("retry-after")
                                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                            }
                            let _ = r.bytes().await;
                            Some(status)
                        }
                        Err(_) => None,
                    };
                    let now = Instant::now();
                    if now >= from && now < until {
                        answers.count(status);
                    }
                    if let Some(secs) = wait {
                        tokio::time::sleep(Duration::from_secs(secs)).await;
                    }
                }
            })
        })
        .collect();
    (answers, tasks)
}

/// One phase of the Conductor load: what each kind of caller got, and the identity checks Core Hub
/// answered (known sessions) and refused (bad tokens) while it was measured.
pub(super) struct PhaseFigures {
    managers: Option<Arc<Answers>>,
    strangers: Option<Arc<Answers>>,
    logins: Option<Arc<Answers>>,
    checks_answered: u64,
    checks_refused: u64,
}

pub(super) async fn conductor_phase(
    sim: &Simulator,
    managers: Option<&Callers>,
    strangers: bool,
    measured: Duration,
) -> PhaseFigures {
    let from = Instant::now() + WARM_UP;
    let until = from + measured;
    let mut tasks = vec![];
    let mut start = |callers: Callers| {
        let (answers, t) = load(callers, from, until);
        tasks.extend(t);
        answers
    };
    let (logins, managers): (Vec<&Callers>, Vec<&Callers>) = managers
        .into_iter()
        .partition(|c| matches!(c, Callers::Logins(..)));
    let managers = managers.first().map(|m| start((*m).clone()));
    let logins = logins.first().map(|m| start((*m).clone()));
    let strangers = strangers.then(|| start(Callers::Strangers));
    tokio::time::sleep_until(from.into()).await;
    let before = sim.calls();
    tokio::time::sleep_until(until.into()).await;
    let after = sim.calls();
    for t in tasks {
        let _ = t.await;
    }
    let refused = after.me_refused - before.me_refused;
    PhaseFigures {
        managers,
        strangers,
        logins,
        checks_answered: (after.me - before.me) - refused,
        checks_refused: refused,
    }
}

/// The Conductor API (`GET /containers`) on one GKO in three phases of equal length: manager sessions
/// GKO already knows, then a flood of bad tokens, then both at once. For each, requests per second by
/// answer, and the Core Hub identity checks it cost (known sessions answered, bad tokens refused).
pub(super) async fn conductor_load(measured: Duration) -> anyhow::Result<()> {
    let sim = Simulator::start(Options::default()).await?;
    let ns = setup("bench-conductor", &sim, 0).await?;
    let gko = Gko::start_with(&ns, 18184, "127.0.0.1:18185")?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;

    // Distinct manager sessions, each checked with Core Hub once here, before anything is measured.
    let sessions: Vec<String> = (0..SESSIONS).map(|_| sim.token_for("manager")).collect();
    let http = reqwest::Client::new();
    for token in &sessions {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = http.get(CONDUCTOR_URL).bearer_auth(token).send().await?;
            match r.status().as_u16() {
                200 => break,
                429 if Instant::now() < deadline => {
                    let wait = r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok()?.parse().ok())
                        .unwrap_or(1);
                    tokio::time::sleep(Duration::from_secs(wait)).await;
                }
                status => bail!("GET /containers as a manager answered {status}"),
            }
        }
    }
    let managers = Callers::Managers(Arc::new(sessions));
    let fresh = |sim: &Simulator| {
        let tokens: Vec<String> = (0..2_000)
            .map(|i| sim.token_for(&format!("login-{}", i % LOGIN_USERS)))
            .collect();
        Callers::Logins(Arc::new(tokens), Arc::default())
    };
    for i in 0..LOGIN_USERS {
        sim.add_user(&format!("login-{i}"), "login", "MANAGER");
    }

    let alone = conductor_phase(&sim, Some(&managers), false, measured).await;
    let flood = conductor_phase(&sim, None, true, measured).await;
    let both = conductor_phase(&sim, Some(&managers), true, measured).await;
    let logins_alone = conductor_phase(&sim, Some(&fresh(&sim)), false, measured).await;
    let logins_flooded = conductor_phase(&sim, Some(&fresh(&sim)), true, measured).await;
    drop(gko);

    let secs = measured.as_secs_f64();
    println!(
        "Conductor API GET /containers, five phases of {:.0} s each (after {:.0} s unmeasured) on one GKO: {SESSIONS} manager sessions GKO knows on {CONNECTIONS} connections; bad tokens, a new random one per request, on {CONNECTIONS} connections; identity checks: the Core Hub calls (GET /authentication/me) each caller cost",
        secs,
        WARM_UP.as_secs_f64()
    );
    println!(
        "  {:<18} {:<10} {:>8} {:>8} {:>8} {:>8} {:>8}  {:>15} {:>8}",
        "phase",
        "caller",
        "200/s",
        "401/s",
        "429/s",
        "other/s",
        "total/s",
        "identity checks",
        "checks/s"
    );
    let row = |phase: &str, caller: &str, a: &Answers, checks: u64| {
        let rate = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / secs;
        let (ok, unauthorized, limited, other) = (
            rate(&a.ok),
            rate(&a.unauthorized),
            rate(&a.limited),
            rate(&a.other),
        );
        println!(
            "  {phase:<18} {caller:<10} {ok:>8.0} {unauthorized:>8.0} {limited:>8.0} {other:>8.0} {:>8.0}  {:>15} {:>8.1}",
            ok + unauthorized + limited + other,
            checks,
            checks as f64 / secs
        );
    };
    for (phase, figures) in [
        ("managers alone", &alone),
        ("bad tokens alone", &flood),
        ("both at once", &both),
        ("new logins alone", &logins_alone),
        ("logins and flood", &logins_flooded),
    ] {
        if let Some(a) = &figures.managers {
            row(phase, "managers", a, figures.checks_answered);
        }
        if let Some(a) = &figures.logins {
            row(phase, "new logins", a, figures.checks_answered);
        }
        if let Some(a) = &figures.strangers {
            let phase = if figures.managers.is_some() || figures.logins.is_some() {
                ""
            } else {
                phase
            };
            row(phase, "bad tokens", a, figures.checks_refused);
        }
    }
    let per_session = |f: &PhaseFigures| {
        f.managers.as_ref().map_or(0.0, |a| {
            a.ok.load(Ordering::Relaxed) as f64 / secs / SESSIONS as f64
        })
    };
    println!(
        "  answered 200 per manager session: {:.1}/s alone, {:.1}/s while flooded",
        per_session(&alone),
        per_session(&both)
    );
    let logins = |f: &PhaseFigures| {
        f.logins
            .as_ref()
            .map_or(0.0, |a| a.ok.load(Ordering::Relaxed) as f64 / secs)
    };
    println!(
        "  new manager logins (a token GKO never saw, {LOGIN_USERS} managers, same address as the flood) answered 200: {:.1}/s alone, {:.1}/s while flooded",
        logins(&logins_alone),
        logins(&logins_flooded)
    );
    Ok(())
}

/// What became of a stranger's connection that sent an unfinished request head.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
pub(super) enum HeadOutcome {
    /// GKO answered 431 (the head passed its bound) and closed it.
    TooLarge,
    /// GKO closed it without an answer (its header timeout, or to make room for a new connection).
    Closed,
    /// Some other answer.
    Answered,
    /// Still open when the client gave up.
    Open,
}

/// One stranger: a connection that sends up to `size` bytes of a request head that never ends, then
/// waits for GKO to answer or close.
pub(super) async fn unfinished_head(addr: &'static str, size: usize) -> HeadOutcome {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return HeadOutcome::Closed;
    };
    let chunk = vec![b'a'; 4096];
    let mut sent = 0;
    if s.write_all(b"GET /conductor/api/containers HTTP/1.1\r\nHost: gko\r\nX-Pad: ")
        .await
        .is_ok()
    {
        while sent < size && s.write_all(&chunk).await.is_ok() {
            sent += chunk.len();
        }
    }
    let mut answer = [0u8; 12];
    match tokio::time::timeout(Duration::from_secs(15), s.read(&mut answer)).await {
        Ok(Ok(n)) if n >= 12 && &answer[9..12] == b"431" => HeadOutcome::TooLarge,
        Ok(Ok(n)) if n > 0 => HeadOutcome::Answered,
        Ok(_) => HeadOutcome::Closed,
        Err(_) => HeadOutcome::Open,
    }
}

/// Strangers' unfinished request heads (no credentials needed): 512 connections to the Conductor API and
/// 64 to the metrics port, each sending 400 KiB of a head that never ends. GKO's resident memory idle
/// and at its peak under the load, and what became of the connections; a manager's request meanwhile.
pub(super) async fn heads() -> anyhow::Result<()> {
    const CONDUCTOR: &str = "127.0.0.1:18187";
    const METRICS: &str = "127.0.0.1:18186";
    let sim = Simulator::start(Options::default()).await?;
    let ns = setup("bench-heads", &sim, 0).await?;
    let gko = Gko::start_with(&ns, 18186, CONDUCTOR)?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = mib(gko.rss_kib());
    let peak = gko.peak_rss();
    let mut strangers = vec![];
    for (addr, count) in [(CONDUCTOR, 512), (METRICS, 64)] {
        for _ in 0..count {
            strangers.push(tokio::spawn(unfinished_head(addr, 400 * 1024)));
        }
    }
    // A manager meanwhile, on a new connection.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let token = sim.token_for("manager");
    let manager = reqwest::Client::new()
        .get(format!("http://{CONDUCTOR}/conductor/api/containers"))
        .bearer_auth(token)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map(|r| r.status().as_u16());
    let mut outcomes: HashMap<HeadOutcome, usize> = HashMap::new();
    for s in strangers {
        *outcomes
            .entry(s.await.unwrap_or(HeadOutcome::Closed))
            .or_default() += 1;
    }
    let peak = peak.mib().await;
    drop(gko);
    let count = |o| outcomes.get(&o).copied().unwrap_or(0);
    println!(
        "Strangers' unfinished request heads: 512 connections to the Conductor API and 64 to the metrics port, each sending 400 KiB of a head that never ends"
    );
    println!(
        "  GKO RSS idle {idle:.1} MiB, peak under the load {peak:.1} MiB; connections: {} answered 431, {} closed unanswered, {} answered otherwise, {} still open after 15 s; a manager's GET /containers meanwhile: {}",
        count(HeadOutcome::TooLarge),
        count(HeadOutcome::Closed),
        count(HeadOutcome::Answered),
        count(HeadOutcome::Open),
        manager.map_or_else(|e| format!("failed ({e})"), |c| c.to_string())
    );
    Ok(())
}

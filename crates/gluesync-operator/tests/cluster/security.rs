//! What whoever holds GKO's own credentials can and cannot do: tried as an attacker would, against the
//! real control plane, with the Role of deploy/rbac.yaml and the one GKO's chart renders.

use crate::common;

use std::{sync::Arc, time::Duration};

use common::*;
use gko_test_support::eventually;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

/// A Secret of type `kubernetes.io/service-account-token` for `account`: the cluster fills in that
/// account's token.
fn token_secret(name: &str, account: &str) -> Secret {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "annotations": {"kubernetes.io/service-account.name": account},
        },
        "type": "kubernetes.io/service-account-token",
    }))
    .expect("a Secret")
}

/// The status code of a refused request.
fn code(result: Result<impl std::fmt::Debug, kube::Error>) -> u16 {
    match result {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("expected the API server to refuse, got {other:?}"),
    }
}

/// GKO's Role as GKO's chart renders it in `namespace` (its ServiceAccount, Role, RoleBinding, the
/// pair's Secret, and the admission policy that narrows what its ServiceAccount may write).
fn chart_role(namespace: &str) -> anyhow::Result<String> {
    let chart = gko_test_support::repo_root().join("charts/gluesync-operator");
    let out = gko_test_support::control_plane()
        .command("helm")
        .args(["template", "gluesync"])
        .arg(&chart)
        .args([
            "--namespace",
            namespace,
            "--set",
            "platform.version=2.3.2.1",
        ])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let keep = [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Secret",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    let docs: Vec<&str> = text
        .split("\n---")
        .filter(|d| {
            d.lines().any(|l| {
                l.strip_prefix("kind: ")
                    .is_some_and(|k| keep.contains(&k.trim()))
            })
        })
        .filter(|d| !d.contains("-conductor-tls"))
        .collect();
    Ok(docs.join("\n---"))
}

/// The attack of a stolen GKO token: make the cluster mint another ServiceAccount's token into a Secret
/// GKO may read. Refused with both Roles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gkos_token_cannot_mint_a_token_for_another_service_account() -> anyhow::Result<()> {
    for (hint, account) in [
        ("mint-deploy", "gluesync-operator"),
        ("mint-chart", "gluesync-gluesync-operator"),
    ] {
        let ns = namespace(hint).await?;
        if hint == "mint-deploy" {
            apply_rbac(&ns)?;
        } else {
            ns.apply(&chart_role(&ns.name)?)?;
        }
        // The account to steal: one with rights of its own.
        ns.apply("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: victim\n")?;
        let admin: Api<Secret> = Api::namespaced(ns.client.clone(), &ns.name);

        // The attack is real: with create on Secrets, such a Secret comes back holding the token.
        admin
            .create(&PostParams::default(), &token_secret("probe", "victim"))
            .await?;
        eventually(
            "the cluster to fill in the victim's token",
            Duration::from_secs(30),
            || async {
                let s = admin.get("probe").await?;
                Ok(s.data
                    .and_then(|d| d.get("token").cloned())
                    .filter(|t| !t.0.is_empty())
                    .map(|_| ()))
            },
        )
        .await?;

        let gko = ns.service_account_client(account).await?;
        let as_gko: Api<Secret> = Api::namespaced(gko, &ns.name);
        // The pair's Secret GKO may read exists, empty and Opaque; GKO's token reads it (the Role works).
        let pair = as_gko.get("gluesync-disaster-recovery").await?;
        assert_eq!(pair.type_.as_deref(), Some("Opaque"), "{hint}");

        // 1. Under each name GKO may read, a token Secret is refused: the pair's Secret (which exists)
        //    and the Core Hub CA's, which does not.
        for name in [
            "gluesync-disaster-recovery",
            "corehub-ca",
            "corehub-credentials",
        ] {
            let refused = as_gko
                .create(&PostParams::default(), &token_secret(name, "victim"))
                .await;
            assert_eq!(code(refused), 403, "{hint}: create {name}");
        }
        // 2. The pair's Secret cannot be deleted to be made again, nor replaced by another type.
        assert_eq!(
            code(
                as_gko
                    .delete("gluesync-disaster-recovery", &Default::default())
                    .await
            ),
            403,
            "{hint}: delete"
        );
        let mut replaced = token_secret("gluesync-disaster-recovery", "victim");
        replaced.metadata.resource_version = pair.metadata.resource_version.clone();
        assert_eq!(
            code(
                as_gko
                    .replace(
                        "gluesync-disaster-recovery",
                        &PostParams::default(),
                        &replaced
                    )
                    .await
            ),
            403,
            "{hint}: replace"
        );
        // A patch (which GKO may make) cannot change the type: the API server refuses it.
        let patched = as_gko
            .patch(
                "gluesync-disaster-recovery",
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "type": "kubernetes.io/service-account-token",
                    "metadata": {"annotations": {"kubernetes.io/service-account.name": "victim"}},
                })),
            )
            .await;
        assert_eq!(code(patched), 422, "{hint}: patch of the type");
        // 3. The token the admin's Secret holds is out of reach.
        assert_eq!(code(as_gko.get("probe").await), 403, "{hint}: get probe");
        assert_eq!(
            code(as_gko.list(&Default::default()).await),
            403,
            "{hint}: list"
        );

        // And the pair's Secret still holds no token.
        let after = admin.get("gluesync-disaster-recovery").await?;
        assert_eq!(after.type_.as_deref(), Some("Opaque"));
        assert!(
            !after.data.unwrap_or_default().contains_key("token"),
            "{hint}"
        );
    }
    Ok(())
}

/// A setup from the Core Hub UI writes into the Secret the install created, and is refused (nothing
/// written, nothing changed) when that Secret is missing: GKO never creates one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_needs_the_pair_secret_the_install_creates() -> anyhow::Result<()> {
    let ns = namespace("dr-no-secret").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let admin: Api<Secret> = Api::namespaced(ns.client.clone(), &ns.name);
    admin
        .delete("gluesync-disaster-recovery", &Default::default())
        .await?;
    let (_gko, base) = Operator::start_serving_with_role(&ns).await?;
    // deploy/rbac.yaml brings the Secret back: take it away again, as a user without it would.
    admin
        .delete("gluesync-disaster-recovery", &Default::default())
        .await?;
    wait_settled(&ns).await?;
    let body = json!({"role": "primary", "peerAddress": "dr-b.example.com",
                      "sharedSecret": "pair-secret-0123456789-abcdefghij-KLMNOP"});
    let resp = reqwest::Client::new()
        .put(format!("{base}/conductor/api/disaster-recovery"))
        .bearer_auth(sim.token_for("admin"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await?;
    let status = resp.status().as_u16();
    let text = resp.text().await?;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("does not exist"), "{text}");
    let g = platforms(&ns).get("gluesync").await?;
    assert!(g.spec.disaster_recovery.is_none(), "nothing was changed");
    assert!(admin.get_opt("gluesync-disaster-recovery").await?.is_none());
    Ok(())
}

/// GKO as a process serving the Conductor API on a free port (its log and open files are read), on a
/// sample install whose Core Hub is the simulator; the API's base URL comes with it.
async fn serving_process(
    hint: &str,
    spec: serde_json::Value,
) -> anyhow::Result<(
    gko_test_support::TestNamespace,
    gluesync_simulator::Simulator,
    Gko,
    String,
)> {
    let ns = namespace(hint).await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, spec)?;
    let addr = gko_test_support::free_addr()?.to_string();
    let gko = Gko::spawn(
        &ns,
        GkoOptions {
            conductor_addr: Some(addr.clone()),
            ..Default::default()
        },
    )?;
    wait_settled(&ns).await?;
    let base = format!("http://{addr}");
    eventually(
        "the Conductor API to serve",
        Duration::from_secs(30),
        || async {
            Ok(reqwest::get(format!("{base}/health"))
                .await
                .ok()
                .filter(|r| r.status() == 200)
                .map(|_| ()))
        },
    )
    .await?;
    Ok((ns, sim, gko, base))
}

/// GKO in the test process serving the Conductor API (admin's rights), on a sample install whose Core
/// Hub is the simulator, settled; the API's base URL comes with it.
async fn serving_in_process(
    hint: &str,
) -> anyhow::Result<(
    gko_test_support::TestNamespace,
    gluesync_simulator::Simulator,
    Operator,
    String,
)> {
    let ns = namespace(hint).await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let (gko, base) = Operator::start_serving(&ns)?;
    wait_settled(&ns).await?;
    Ok((ns, sim, gko, base))
}

/// One call of the API; its status and body.
async fn call(req: reqwest::RequestBuilder) -> anyhow::Result<(u16, serde_json::Value)> {
    let resp = req.send().await?;
    let code = resp.status().as_u16();
    let text = resp.text().await?;
    Ok((code, serde_json::from_str(&text).unwrap_or(json!(text))))
}

/// A cross-site form post with the manager's cookie is refused whatever `Authorization` header the
/// browser adds (it adds Basic or Negotiate by itself for a proxy): the header GKO cannot use is
/// refused, never dropped for the cookie to speak.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_cookie_post_is_refused_whatever_authorization_comes_with_it()
-> anyhow::Result<()> {
    let (ns, sim, _gko, base) = serving_in_process("csrf-authorization").await?;
    let cookie = format!("gs-auth={}", sim.token_for("manager"));
    let http = reqwest::Client::new();
    let post = |extra: Option<reqwest::header::HeaderValue>, origin: Option<&str>| {
        let mut req = http
            .post(format!("{base}/conductor/api/containers"))
            .header("cookie", &cookie)
            .header("content-type", "application/json")
            .body(json!({"action": "stop", "ids": []}).to_string());
        if let Some(origin) = origin {
            req = req.header("origin", origin);
        }
        if let Some(v) = extra {
            req = req.header("authorization", v);
        }
        req
    };
    // What the manager's cookie gets from its own origin: the stop is refused as a Conductor action
    // GKO does not take (409), so the cookie does authenticate.
    let (code, body) = call(post(None, None)).await?;
    assert_eq!(code, 409, "{body}");
    // Cross-site without a header: the cross-site rule (403).
    let (code, body) = call(post(None, Some("http://evil.example"))).await?;
    assert_eq!(
        (code, body["error"].as_str()),
        (403, Some("Cross-site request refused"))
    );
    let headers = [
        (
            "Basic",
            reqwest::header::HeaderValue::from_static("Basic dXNlcjpwYXNz"),
            401,
        ),
        (
            "Negotiate",
            reqwest::header::HeaderValue::from_static("Negotiate YIIBhgYGKwYBBQUC"),
            401,
        ),
        ("empty", reqwest::header::HeaderValue::from_static(""), 401),
        (
            "non-ASCII",
            reqwest::header::HeaderValue::from_bytes(b"Bearer \xe9t\xe9")?,
            400,
        ),
    ];
    for (what, value, expected) in headers {
        for origin in [Some("http://evil.example"), None] {
            let (code, body) = call(post(Some(value.clone()), origin)).await?;
            // GKO answered (its envelope), and not as the manager.
            assert_eq!(body["success"], json!(false), "{what}: {body}");
            assert_eq!(code, expected, "{what} from {origin:?}: {body}");
        }
    }
    let g = platforms(&ns).get("gluesync").await?;
    assert!(g.status.unwrap_or_default().last_attempt.is_none());
    Ok(())
}

/// Two session cookies, a viewer's first and a manager's last (Core Hub reads the first), in one
/// `Cookie` header or in two: refused with 400, never answered as either; the update they ask for does
/// not start. The manager's cookie alone is let through (the refusal is the duplicate's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_session_cookies_are_refused() -> anyhow::Result<()> {
    let (ns, sim, _gko, base) = serving_in_process("two-cookies").await?;
    let (viewer, manager) = (sim.token_for("viewer"), sim.token_for("manager"));
    let http = reqwest::Client::new();
    let post = |cookies: &[String], action: &str| {
        let mut req = http
            .post(format!("{base}/conductor/api/containers"))
            .header("content-type", "application/json")
            .body(json!({"action": action, "ids": []}).to_string());
        for c in cookies {
            req = req.header("cookie", c);
        }
        req
    };
    let (code, body) = call(post(&[format!("gs-auth={manager}")], "stop")).await?;
    assert_eq!(
        code, 409,
        "the manager's cookie alone authenticates: {body}"
    );
    for cookies in [
        vec![format!("gs-auth={viewer}; gs-auth={manager}")],
        vec![format!("gs-auth={viewer}"), format!("gs-auth={manager}")],
    ] {
        let (code, body) = call(post(&cookies, "update")).await?;
        assert_eq!(
            (code, body["error"].as_str()),
            (400, Some("Bad Cookie header")),
            "{cookies:?}: {body}"
        );
    }
    let g = platforms(&ns).get("gluesync").await?;
    assert!(
        g.status.unwrap_or_default().last_attempt.is_none() && g.spec.request_id.is_none(),
        "no update was asked"
    );
    Ok(())
}

/// A stranger learns nothing of the install from a refusal: with Core Hub down, answering 500, or the
/// spec naming a Secret GKO may not read, the answer is one fixed body; the detail is in GKO's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_refusal_tells_nothing_of_the_install() -> anyhow::Result<()> {
    let (ns, sim, gko, base) = serving_process("stranger-refusal", json!({})).await?;
    let http = reqwest::Client::new();
    let stranger = |token: String| {
        http.get(format!("{base}/conductor/api/containers"))
            .bearer_auth(token)
    };
    let mut bodies = vec![];
    // Core Hub down.
    sim.update_faults(|f| f.down = true);
    let (code, down) = call(stranger(sim.token_for("viewer"))).await?;
    assert_eq!(code, 401, "{down}");
    bodies.push(("down", down));
    sim.update_faults(|f| f.down = false);
    // Core Hub answering 500 to the identity check.
    sim.update_faults(|f| {
        f.error_count = u32::MAX;
        f.error_path = "/authentication/me".into();
    });
    let (code, failing) = call(stranger(sim.token_for("viewer"))).await?;
    assert_eq!(code, 401, "{failing}");
    bodies.push(("500", failing));
    sim.update_faults(|f| f.error_count = 0);
    // The spec naming a Secret GKO may not read.
    ns.apply(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: billing-db\nstringData:\n  username: a\n  password: b\n",
    )?;
    patch_spec(&ns, json!({"coreHub": {"credentialsSecret": "billing-db"}})).await?;
    wait_for_platform(&ns, "SecretNotAllowed", |g| {
        g.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.reason == "SecretNotAllowed" && c.status == "True")
        })
    })
    .await?;
    let (code, not_allowed) = call(stranger(sim.token_for("viewer"))).await?;
    assert_eq!(code, 401, "{not_allowed}");
    bodies.push(("not allowed", not_allowed));

    for (what, body) in &bodies {
        let text = body.to_string();
        for inside in [
            "127.0.0.1",
            "http",
            "authentication/me",
            "simulated failure",
            "billing-db",
            "corehub-credentials",
            &ns.name,
        ] {
            assert!(!text.contains(inside), "{what}: {inside} in {text}");
        }
        assert_eq!(*body, bodies[0].1, "{what}: one fixed body");
    }
    // The detail is in the log, for the administrator.
    assert!(gko.said("a caller could not be verified with Core Hub"));
    assert!(gko.said("billing-db"));
    Ok(())
}

/// Sockets that send nothing, half a request, or an HTTP/2 preface and then nothing, are closed by GKO
/// within its header timeout, on the Conductor API and on the metrics port; at most a bounded number
/// are open at once, and a manager is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_and_a_manager_is_served() -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_ns, sim, gko, base) = serving_process("silent-connections", json!({})).await?;
    let conductor = base.trim_start_matches("http://").to_string();
    let metrics = gko
        .metrics_url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_string();
    let manager = sim.token_for("manager");
    let http = reqwest::Client::new();
    let served = |http: reqwest::Client| {
        let (base, manager) = (base.clone(), manager.clone());
        async move {
            let (code, body) = call(
                http.get(format!("{base}/conductor/api/containers"))
                    .bearer_auth(&manager),
            )
            .await?;
            anyhow::ensure!(code == 200, "the manager got {code}: {body}");
            Ok(())
        }
    };
    served(http.clone()).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = gko.open_files()?;

    // 1,000 connections to the Conductor API: most silent, some with half a request, some with an
    // HTTP/2 preface and SETTINGS; 100 to the metrics port.
    let mut held = vec![];
    for i in 0..1_100 {
        let to = if i < 1_000 { &conductor } else { &metrics };
        let mut s = tokio::net::TcpStream::connect(to.as_str()).await?;
        match i % 10 {
            1 => {
                s.write_all(b"GET /conductor/api/containers HTTP/1.1\r\nHost: x\r\n")
                    .await?
            }
            2 => {
                s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
                    .await?
            }
            3 => s.write_all(b"PRI * HTTP/2.0\r\n").await?,
            _ => {}
        }
        held.push(s);
    }
    let opened = std::time::Instant::now();
    // The connections reached GKO: its open files rose, bounded by its connection limit.
    let peak = gko.open_files()?;
    // (Those unanswered for over a second count against a smaller bound as later ones come, so on a
    // busy machine fewer are held at once: still more than that bound.)
    assert!(
        peak > idle + gluesync_operator::conductor::MAX_UNANSWERED,
        "GKO holds the connections: {idle} -> {peak}"
    );
    // Bounded: GKO counts at most its limit open (an evicted connection's file goes a moment after it is
    // told to close, so the files may run a little over), far below the 1,100 held.
    let open = gko
        .metric("gluesync_operator_http_connections{listener=\"conductor\"}")
        .await?;
    assert!(
        open <= gluesync_operator::conductor::MAX_CONNECTIONS as f64,
        "at most the bound open: {open}"
    );
    assert!(peak < idle + 1_000, "bounded: {idle} -> {peak}");
    // A manager is served meanwhile, on new connections, while the silent ones are held.
    for _ in 0..5 {
        served(reqwest::Client::new()).await?;
    }
    // Within 15 s GKO has closed every one of them: each reads the end of the stream.
    let mut closed = 0;
    for mut s in held {
        let mut buf = [0u8; 1024];
        let deadline = opened + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match tokio::time::timeout(left, s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    closed += 1;
                    break;
                }
                // An HTTP/2 GOAWAY or a 408 may come before the end.
                Ok(Ok(_)) => continue,
                Err(_) => break,
            }
        }
    }
    assert_eq!(closed, 1_100, "every silent connection closed within 15 s");
    let now = gko.open_files()?;
    assert!(
        now <= idle + 5,
        "open files back to idle: {idle} -> {peak} -> {now}"
    );
    let counted = |reason: &str, listener: &str| {
        format!(
            "gluesync_operator_http_connections_closed_total{{listener=\"{listener}\",reason=\"{reason}\"}}"
        )
    };
    assert!(gko.metric(&counted("idle", "conductor")).await? > 0.0);
    assert!(gko.metric(&counted("evicted", "conductor")).await? > 0.0);
    let metrics_closed = gko.metric(&counted("idle", "metrics")).await?
        + gko.metric(&counted("evicted", "metrics")).await?;
    assert!(metrics_closed >= 100.0, "{metrics_closed}");
    served(http).await?;
    Ok(())
}

/// Two GKO processes on one host without `POD_NAME` (each takes the host name and a random suffix as
/// its identity in the Lease): one leads at a time, and every pipeline is asked into maintenance once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_host_without_a_pod_name_never_lead_together() -> anyhow::Result<()> {
    let ns = namespace("one-host").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let a = Gko::spawn(&ns, GkoOptions::default())?;
    let b = Gko::spawn(&ns, GkoOptions::default())?;
    wait_settled(&ns).await?;
    // Neither has a pod name: the holder is the host name's identity with a suffix.
    let holder = lease_holder(&ns)?;
    assert!(
        holder.starts_with("gluesync-operator-") && holder.contains('_'),
        "{holder}"
    );
    let leaders = [&a, &b]
        .iter()
        .filter(|g| g.said("became the leader"))
        .count();
    assert_eq!(leaders, 1, "one leads, the other waits");

    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let generation = platforms(&ns)
        .get("gluesync")
        .await?
        .metadata
        .generation
        .unwrap_or(0);
    let g = wait_finished(&ns, generation).await?;
    let result = g.status.and_then(|s| s.last_attempt).map(|a| a.result);
    assert_eq!(
        result,
        Some(gluesync_operator::api::UpdateResult::Succeeded)
    );
    let calls = sim.calls();
    assert_eq!(
        calls.enter.len(),
        20,
        "every running pipeline asked: {:?}",
        calls.enter
    );
    assert!(
        calls.enter.values().all(|n| *n == 1),
        "each asked once: {:?}",
        calls.enter
    );
    assert_eq!(lease_holder(&ns)?, holder, "the leader did not change");
    Ok(())
}

/// A flood of made-up tokens from one address (behind an ingress, every user's address) spends a budget
/// of its own: callers that log in meanwhile, from the same address, are verified and served, and Core
/// Hub still gets at most 20 identity checks a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_login_is_verified_during_a_flood_from_the_same_address() -> anyhow::Result<()> {
    use futures::StreamExt;
    let (_ns, sim, _gko, base) = serving_in_process("flood-new-login").await?;
    let http = reqwest::Client::new();
    let url = format!("{base}/conductor/api/containers");
    let (http, url) = (&http, &url);
    let before = sim.calls();
    let started = std::time::Instant::now();
    let flood = futures::stream::iter(0..3_000)
        .map(|i| async move {
            let resp = http
                .get(url)
                .bearer_auth(format!("made-up-{i}"))
                .send()
                .await?;
            anyhow::Ok(resp.status().as_u16())
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>();
    let logins = async {
        let mut answers = vec![];
        for user in ["manager", "admin", "monitor", "viewer"] {
            tokio::time::sleep(Duration::from_millis(300)).await;
            // A login GKO has never seen, during the flood.
            let token = sim.token_for(user);
            answers.push((user, call(http.get(url).bearer_auth(&token)).await?.0));
        }
        anyhow::Ok(answers)
    };
    let (codes, logins) = tokio::join!(flood, logins);
    let elapsed = started.elapsed().as_secs_f64();
    let codes: Vec<u16> = codes.into_iter().collect::<Result<_, _>>()?;
    // The flood reached GKO and was refused, much of it without asking Core Hub.
    assert!(
        codes.iter().all(|c| *c == 401 || *c == 429),
        "only 401 and 429"
    );
    assert!(codes.iter().filter(|c| **c == 429).count() > 1_000);
    for (user, code) in logins? {
        assert_eq!(code, 200, "{user}'s new login is served during the flood");
    }
    let checks = sim.calls().me - before.me;
    assert!(
        (checks as f64) <= 20.0 * elapsed + 21.0,
        "{checks} identity checks in {elapsed:.2} s"
    );
    Ok(())
}

/// A manager repeating "Update all" during the update and right after its answer: every repeat gets the
/// same answer, none a 5xx, and the spec is written once (the repeats after the answer write nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_update_requests_cost_no_write_and_get_the_same_answer() -> anyhow::Result<()> {
    let ns = namespace("repeated-requests").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 3}))?;
    let (gko, base) = Operator::start_serving(&ns)?;
    wait_settled(&ns).await?;
    let before = platforms(&ns).get("gluesync").await?.metadata.generation;
    let manager = sim.token_for("manager");
    let http = reqwest::Client::new();
    let update_all = || {
        call(
            http.post(format!("{base}/conductor/api/containers"))
                .bearer_auth(&manager)
                .header("content-type", "application/json")
                .body(json!({"action": "update", "ids": [], "releaseChannel": "ga"}).to_string()),
        )
    };
    let first = update_all();
    let during = async {
        wait_for_platform(&ns, "the update to run", |g| {
            g.status.as_ref().is_some_and(|s| s.update.is_some())
        })
        .await?;
        // Ten repeats while it runs, back to back.
        let answers = futures::future::join_all((0..10).map(|_| update_all())).await;
        answers.into_iter().collect::<anyhow::Result<Vec<_>>>()
    };
    let (first, during) = tokio::join!(first, during);
    let (code, answer) = first?;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["data"]["result"], "Succeeded", "{answer}");
    for (code, body) in during? {
        assert_eq!((code, &body), (200, &answer), "a repeat during the update");
    }
    // Ten more right after the answer: the same answer, and nothing written.
    let writes = gko.metrics.status_writes.get();
    for _ in 0..10 {
        let (code, body) = update_all().await?;
        assert_eq!((code, &body), (200, &answer), "a repeat after the answer");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(gko.metrics.status_writes.get(), writes, "no status write");
    let after = platforms(&ns).get("gluesync").await?.metadata.generation;
    assert_eq!(
        after.unwrap_or(0),
        before.unwrap_or(0) + 1,
        "one spec write for one distinct request"
    );
    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(g.status.unwrap_or_default().history.len(), 1, "one update");
    Ok(())
}

/// A peer that answers every request with a 200 and a JSON body that never ends; how many requests
/// it got and how many bytes it managed to send.
struct Endless {
    addr: std::net::SocketAddr,
    requests: Arc<std::sync::atomic::AtomicUsize>,
    sent: Arc<std::sync::atomic::AtomicUsize>,
}

async fn endless() -> anyhow::Result<Endless> {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (r, s) = (requests.clone(), sent.clone());
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (r, s) = (r.clone(), s.clone());
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                if conn.read(&mut buf).await.unwrap_or(0) == 0 {
                    return;
                }
                r.fetch_add(1, Ordering::Relaxed);
                let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"username\":\"";
                if conn.write_all(head).await.is_err() {
                    return;
                }
                let chunk = vec![b'a'; 64 * 1024];
                // At most 256 MiB, which GKO must never take in.
                for _ in 0..4096 {
                    if conn.write_all(&chunk).await.is_err() {
                        return;
                    }
                    s.fetch_add(chunk.len(), Ordering::Relaxed);
                }
            });
        }
    });
    Ok(Endless {
        addr,
        requests,
        sent,
    })
}

/// Core Hub's identity answer and the catalog's are read up to a size: an answer without end is
/// refused after a little of it, and the caller gets the usual fixed answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_without_end_from_core_hub_and_the_catalog_are_cut_off() -> anyhow::Result<()> {
    use std::sync::atomic::Ordering;
    let corehub = endless().await?;
    let catalog = endless().await?;
    let (ns, sim, _gko, base) = serving_in_process("endless-answers").await?;
    let http = reqwest::Client::new();
    // The catalog first, with Core Hub still the simulator: a viewer asks for a version.
    patch_spec(
        &ns,
        json!({"catalog": {"url": format!("http://{}", catalog.addr)}}),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let viewer = sim.token_for("viewer");
    let started = std::time::Instant::now();
    let (code, body) = call(
        http.get(format!(
            "{base}/conductor/api/services/gluesync-gluesync-core-hub/version"
        ))
        .bearer_auth(&viewer),
    )
    .await?;
    assert!(
        catalog.requests.load(Ordering::Relaxed) >= 1,
        "the catalog was asked"
    );
    assert_eq!(code, 502, "{body}");
    assert!(body.to_string().contains("larger than"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(20));
    // Core Hub's identity answer without end.
    patch_spec(
        &ns,
        json!({"coreHub": {"url": format!("http://{}", corehub.addr)}}),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (code, body) = call(
        http.get(format!("{base}/conductor/api/containers"))
            .bearer_auth(sim.token_for("manager")),
    )
    .await?;
    assert!(
        corehub.requests.load(Ordering::Relaxed) >= 1,
        "Core Hub was asked"
    );
    assert_eq!(
        (code, body["error"].as_str()),
        (401, Some("Authentication verification failed")),
        "{body}"
    );
    // Neither peer got far: GKO stopped reading and closed the connection.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (what, peer) in [("catalog", &catalog), ("Core Hub", &corehub)] {
        let sent = peer.sent.load(Ordering::Relaxed);
        assert!(sent < 32 * 1024 * 1024, "{what} sent {sent} bytes");
    }
    Ok(())
}

/// A viewer that holds many slow calls (a slow catalog) holds at most its share of the requests GKO
/// serves at once; a manager is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_with_many_slow_calls_never_takes_every_slot() -> anyhow::Result<()> {
    use futures::StreamExt;
    let (_ns, sim, _gko, base) = serving_in_process("slow-viewer").await?;
    let viewer = sim.token_for("viewer");
    let manager = sim.token_for("manager");
    let http = reqwest::Client::new();
    // The viewer is known first (the flood below must not be about identity checks).
    assert_eq!(
        call(
            http.get(format!("{base}/conductor/api/containers"))
                .bearer_auth(&viewer)
        )
        .await?
        .0,
        200
    );
    sim.update_faults(|f| f.catalog_delay_ms = 8_000);
    let url = format!("{base}/conductor/api/services/gluesync-gluesync-core-hub/version");
    let (http_ref, url, viewer) = (&http, &url, &viewer);
    let slow = futures::stream::iter(0..300)
        .map(|_| async move {
            call(http_ref.get(url).bearer_auth(viewer))
                .await
                .map(|(c, _)| c)
        })
        .buffer_unordered(300)
        .collect::<Vec<_>>();
    let meanwhile = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let started = std::time::Instant::now();
        let answer = call(
            http.get(format!("{base}/conductor/api/containers"))
                .bearer_auth(&manager),
        )
        .await;
        (answer, started.elapsed())
    };
    let (codes, (manager_answer, took)) = tokio::join!(slow, meanwhile);
    let codes: Vec<u16> = codes.into_iter().collect::<anyhow::Result<_>>()?;
    let refused = codes.iter().filter(|c| **c == 429).count();
    assert!(
        refused >= 300 - gluesync_operator::conductor::CALLER_REQUESTS,
        "the viewer's calls beyond its share were refused: {refused}"
    );
    assert_eq!(manager_answer?.0, 200);
    assert!(took < Duration::from_secs(5), "the manager waited {took:?}");
    Ok(())
}

/// The two ways GKO gets its rights: the chart's Role and admission policies, or deploy/rbac.yaml's.
#[derive(Clone, Copy, Debug)]
enum Rights {
    Chart,
    Plain,
}

impl Rights {
    const ALL: [Rights; 2] = [Rights::Chart, Rights::Plain];

    fn account(self) -> &'static str {
        match self {
            Rights::Chart => "gluesync-gluesync-operator",
            Rights::Plain => "gluesync-operator",
        }
    }

    /// Installs the rights in the namespace; GKO's token comes back, once the admission policies are in
    /// force (the API server loads a new policy a moment after it is written): until GKO's token is
    /// refused a Service of another name, and a pod of no pre-pull's shape.
    async fn install(self, ns: &gko_test_support::TestNamespace) -> anyhow::Result<kube::Client> {
        use k8s_openapi::api::core::v1::{Pod, Service};
        match self {
            Rights::Chart => ns.apply(&chart_role(&ns.name)?)?,
            Rights::Plain => apply_rbac(ns)?,
        }
        let gko = ns.service_account_client(self.account()).await?;
        let services: Api<Service> = Api::namespaced(gko.clone(), &ns.name);
        let pods: Api<Pod> = Api::namespaced(gko.clone(), &ns.name);
        let mut probe = 0;
        eventually(
            "the admission policies to be in force",
            Duration::from_secs(30),
            || {
                probe += 1;
                let name = format!("probe-{probe}");
                let (services, pods) = (services.clone(), pods.clone());
                async move {
                    let svc: Service = serde_json::from_value(json!({
                        "metadata": {"name": name}, "spec": {"ports": [{"port": 1}]},
                    }))?;
                    let pod: Pod = serde_json::from_value(json!({
                        "metadata": {"name": name},
                        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
                    }))?;
                    let service = services.create(&PostParams::default(), &svc).await;
                    let pod = pods.create(&PostParams::default(), &pod).await;
                    let refused = |r: Result<(), kube::Error>| {
                        matches!(r, Err(kube::Error::Api(s)) if s.message.contains("ValidatingAdmissionPolicy"))
                    };
                    Ok((refused(service.map(|_| ())) && refused(pod.map(|_| ()))).then_some(()))
                }
            },
        )
        .await?;
        Ok(gko)
    }
}

/// The write was refused by GKO's admission policy, with the validation whose message holds `rule`.
fn refused_by(
    what: &str,
    rights: Rights,
    rule: &str,
    result: Result<impl std::fmt::Debug, kube::Error>,
) {
    match result {
        Err(kube::Error::Api(s)) => assert!(
            s.message.contains("ValidatingAdmissionPolicy") && s.message.contains(rule),
            "{rights:?}, {what}: refused, but not by the rule {rule:?}: {}",
            s.message
        ),
        other => panic!("{rights:?}, {what}: GKO's token was let through: {other:?}"),
    }
}

/// A strategic merge patch of a workload's pod template spec.
fn template(v: serde_json::Value) -> Patch<serde_json::Value> {
    Patch::Strategic(json!({"spec": {"template": {"spec": v}}}))
}

/// GKO's token creates the pre-pull pod GKO makes, as its GluesyncPlatform's status lists it, and no pod
/// that differs from it in any one thing: another ServiceAccount, capabilities, root, an unconfined
/// seccomp or AppArmor profile, another image, node, toleration, command, a token, a volume, a host
/// namespace, no owner, a name the status does not list, another DNS or runtime class; and none at all
/// once the namespace holds a second GluesyncPlatform. Each refusal is the rule of the field changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gkos_token_creates_no_pod_but_the_pre_pull_pods_its_status_lists() -> anyhow::Result<()> {
    use gluesync_operator::{api::GluesyncPlatform, update::prepull};
    use k8s_openapi::api::core::v1::Pod;
    type Change = fn(&mut serde_json::Value);
    let attacks: [(&str, &str, Change); 18] = [
        (
            "another ServiceAccount",
            "runs under Core Hub's ServiceAccount",
            |v| v["spec"]["serviceAccountName"] = json!("powerful"),
        ),
        ("capabilities", "every capability dropped", |v| {
            v["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
                json!(["NET_ADMIN", "NET_RAW", "SYS_PTRACE"])
        }),
        ("root", "as user 65532", |v| {
            v["spec"]["securityContext"]["runAsUser"] = json!(0);
            v["spec"]["securityContext"]["runAsNonRoot"] = json!(false);
        }),
        // (A privileged container this control plane refuses by itself: --allow-privileged=false.)
        ("privilege escalation", "no privilege escalation", |v| {
            v["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true);
        }),
        ("seccomp Unconfined", "RuntimeDefault seccomp", |v| {
            v["spec"]["containers"][0]["securityContext"]["seccompProfile"] =
                json!({"type": "Unconfined"})
        }),
        (
            "AppArmor Unconfined",
            "RuntimeDefault seccomp and AppArmor",
            |v| v["spec"]["securityContext"]["appArmorProfile"] = json!({"type": "Unconfined"}),
        ),
        (
            "the AppArmor annotation",
            "no other label or annotation",
            |v| {
                v["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/pull"] =
                    json!("unconfined")
            },
        ),
        ("another image", "pulling that image", |v| {
            v["spec"]["containers"][0]["image"] = json!("busybox:latest")
        }),
        ("another node", "bound to that node", |v| {
            v["spec"]["nodeName"] = json!("kwok-node-1")
        }),
        ("other tolerations", "tolerating its taints there", |v| {
            v["spec"]["tolerations"] = json!([
                {"operator": "Exists"},
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
            ])
        }),
        ("another command", "runs `true`", |v| {
            v["spec"]["containers"][0]["command"] = json!(["sh", "-c", "cat /var/run/secrets/*"])
        }),
        ("a token", "with no token", |v| {
            v["spec"]["automountServiceAccountToken"] = json!(true)
        }),
        ("the node's disk", "no volume", |v| {
            v["spec"]["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
        }),
        ("host namespaces", "no host namespace", |v| {
            v["spec"]["hostNetwork"] = json!(true);
            v["spec"]["hostPID"] = json!(true);
        }),
        ("no owner", "owned by it", |v| {
            v["metadata"]["ownerReferences"] = json!(null)
        }),
        (
            "a name the status does not list",
            "status.update.prePulls lists it",
            |v| v["metadata"]["name"] = json!("gluesync-pre-pull-unlisted"),
        ),
        ("its own DNS", "DNS setting", |v| {
            v["spec"]["dnsPolicy"] = json!("None");
            v["spec"]["dnsConfig"] = json!({"nameservers": ["203.0.113.7"]});
        }),
        ("another runtime class", "runtime class", |v| {
            v["spec"]["runtimeClassName"] = json!("gko-attack")
        }),
    ];
    // What the attacks name exists, so that only the policy refuses them.
    gko_test_support::control_plane()
        .command("kubectl")
        .args(["apply", "--server-side", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(
                b"apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: gko-attack\nhandler: runc\n",
            )?;
            c.wait()
        })?;
    for rights in Rights::ALL {
        let ns = namespace(&format!("pod-policy-{rights:?}").to_lowercase()).await?;
        ns.apply(SAMPLE_PLATFORM)?;
        ns.apply("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: powerful\n")?;
        let gsp = platforms(&ns).get("gluesync").await?;
        // The pulls as GKO lists them in the status before it makes their pods: one per attack, and
        // GKO's own.
        let image = "molo17/gluesync-core-hub:2.3.2.2";
        let name = |i: usize| format!("gluesync-pre-pull-{i:012}");
        let pulls: Vec<serde_json::Value> = (0..=attacks.len())
            .map(|i| json!({"pod": name(i), "node": "kwok-node-0", "image": image}))
            .collect();
        platforms(&ns)
            .patch_status(
                "gluesync",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"update": {
                    "step": "PrePull", "since": "2026-12-07T10:00:00Z", "deadline": "2026-12-07T10:10:00Z",
                    "generation": 1, "startedAt": "2026-12-07T10:00:00Z", "prePulls": pulls,
                }}})),
            )
            .await?;
        let gko = rights.install(&ns).await?;
        let pods: Api<Pod> = Api::namespaced(gko, &ns.name);
        let own = |i: usize| {
            prepull::pod(
                &gsp,
                &prepull::Pull {
                    name: name(i),
                    node: "kwok-node-0".into(),
                    image: image.into(),
                    workload: "gluesync-gluesync-core-hub".into(),
                },
                &[],
            )
        };
        for (i, (what, rule, change)) in attacks.iter().enumerate() {
            let mut v = serde_json::to_value(own(i))?;
            change(&mut v);
            let pod: Pod = serde_json::from_value(v)?;
            refused_by(
                what,
                rights,
                rule,
                pods.create(&PostParams::default(), &pod).await,
            );
        }
        // GKO's own pod, as the status lists it.
        pods.create(&PostParams::default(), &own(attacks.len()))
            .await?;
        // A second GluesyncPlatform in the namespace: no pre-pull pod at all.
        let mut second: GluesyncPlatform = serde_yaml::from_str(SAMPLE_PLATFORM)?;
        second.metadata.name = Some("second".into());
        platforms(&ns)
            .create(&PostParams::default(), &second)
            .await?;
        eventually(
            "the second platform to count",
            Duration::from_secs(30),
            || {
                let pods = pods.clone();
                let pod = own(0);
                async move {
                    Ok(match pods.create(&PostParams::default(), &pod).await {
                        Err(kube::Error::Api(s))
                            if s.message.contains("the namespace's one GluesyncPlatform") =>
                        {
                            Some(())
                        }
                        Err(kube::Error::Api(s))
                            if s.message.contains("ValidatingAdmissionPolicy") =>
                        {
                            None
                        }
                        other => anyhow::bail!("{rights:?}: a pod with two platforms: {other:?}"),
                    })
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// GKO's token changes a labelled workload's image (its job), its disaster-recovery fields and, on GKO's
/// own Deployment, the self-update annotation; and nothing else: not the ServiceAccount, a token, another
/// Secret, the command, a container, the AppArmor profile, host aliases, DNS, runtime class, node,
/// tolerations, pull secrets, process namespace, a host port, the replicas, a label or an annotation; and
/// nothing of a workload without the label (not even the label). An admin can (the refusals are the
/// policy's). Each refusal is the rule of the field changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gkos_token_changes_only_images_and_the_setup_of_labelled_workloads() -> anyhow::Result<()>
{
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    let core_hub = "gluesync-gluesync-core-hub";
    let spec_rule = "may not change a pod template's ServiceAccount";
    let attacks: [(&str, &str, Patch<serde_json::Value>); 19] = [
        (
            "another ServiceAccount",
            spec_rule,
            template(json!({"serviceAccountName": "victim"})),
        ),
        (
            "a projected token",
            "disaster-recovery Secret's volume",
            template(
                json!({"volumes": [{"name": "gluesync-disaster-recovery", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}),
            ),
        ),
        (
            "another Secret",
            "disaster-recovery Secret's volume",
            template(
                json!({"volumes": [{"name": "gluesync-disaster-recovery", "secret": {"secretName": "corehub-credentials"}}]}),
            ),
        ),
        (
            "a Secret in the environment",
            "none from another Secret",
            template(
                json!({"containers": [{"name": "core-hub", "env": [{"name": "GLUESYNC_DR_X", "valueFrom": {"secretKeyRef": {"name": "corehub-credentials", "key": "password"}}}]}]}),
            ),
        ),
        (
            "another command",
            "nothing else",
            template(
                json!({"containers": [{"name": "core-hub", "command": ["sh", "-c", "cat /var/run/secrets/*"]}]}),
            ),
        ),
        (
            "a new container",
            "add or remove no container",
            template(json!({"containers": [{"name": "sidecar", "image": "busybox"}]})),
        ),
        (
            "the AppArmor annotation",
            "no label or annotation of a pod template",
            Patch::Strategic(
                json!({"spec": {"template": {"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/core-hub": "unconfined"}}}}}),
            ),
        ),
        (
            "host aliases",
            spec_rule,
            template(
                json!({"hostAliases": [{"ip": "203.0.113.7", "hostnames": ["api.backoffice.molo17.com"]}]}),
            ),
        ),
        (
            "its own nameserver",
            spec_rule,
            template(json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["203.0.113.7"]}})),
        ),
        (
            "a runtime class",
            spec_rule,
            template(json!({"runtimeClassName": "gko-attack"})),
        ),
        (
            "a node",
            spec_rule,
            template(json!({"nodeName": "kwok-node-1"})),
        ),
        (
            "tolerations",
            spec_rule,
            template(json!({"tolerations": [{"operator": "Exists"}]})),
        ),
        (
            "pull secrets",
            spec_rule,
            template(json!({"imagePullSecrets": [{"name": "corehub-credentials"}]})),
        ),
        (
            "a shared process namespace",
            spec_rule,
            template(json!({"shareProcessNamespace": true})),
        ),
        (
            "a host port",
            "never on a host port",
            template(
                json!({"containers": [{"name": "core-hub", "ports": [{"name": "dr-control", "containerPort": 1719, "hostPort": 1719}]}]}),
            ),
        ),
        (
            "no replicas",
            "replicas",
            Patch::Strategic(json!({"spec": {"replicas": 0}})),
        ),
        (
            "a label",
            "labelled com.molo17.conductor.type",
            Patch::Strategic(
                json!({"metadata": {"labels": {"com.molo17.conductor.type": "module"}}}),
            ),
        ),
        (
            "the self-update annotation on Core Hub",
            "on its own Deployment",
            Patch::Strategic(
                json!({"metadata": {"annotations": {"gluesync.molo17.com/self-update": "Restarting"}}}),
            ),
        ),
        (
            "an annotation",
            "no annotation of a workload",
            Patch::Strategic(json!({"metadata": {"annotations": {"example.com/x": "y"}}})),
        ),
    ];
    for rights in Rights::ALL {
        let ns = namespace(&format!("workload-policy-{rights:?}").to_lowercase()).await?;
        ns.apply(SAMPLE_INSTALL)?;
        ns.apply("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: victim\n")?;
        // A workload that is not GKO's (no label), and GKO's own Deployment.
        let deployment = |name: &str, label: Option<&str>| -> anyhow::Result<Deployment> {
            let mut labels = serde_json::Map::new();
            labels.insert("app".into(), json!(name));
            let mut meta = json!({"name": name});
            if let Some(l) = label {
                meta["labels"] = json!({"com.molo17.conductor.type": l});
            }
            Ok(serde_json::from_value(json!({
                "metadata": meta,
                "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels},
                                      "spec": {"serviceAccountName": "victim", "containers": [{"name": "app", "image": "busybox:1.36"}]}}},
            }))?)
        };
        let admin_deployments: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
        admin_deployments
            .create(&PostParams::default(), &deployment("stranger", None)?)
            .await?;
        admin_deployments
            .create(
                &PostParams::default(),
                &deployment("gko", Some("operator"))?,
            )
            .await?;
        let gko = rights.install(&ns).await?;
        let as_gko: Api<StatefulSet> = Api::namespaced(gko.clone(), &ns.name);
        let deployments: Api<Deployment> = Api::namespaced(gko.clone(), &ns.name);
        let params = PatchParams::default();
        // Its job: a new image.
        as_gko
            .patch(core_hub, &params, &template(json!({"containers": [{"name": "core-hub", "image": "molo17/gluesync-core-hub:2.3.2.2"}]})))
            .await?;
        for (what, rule, change) in &attacks {
            refused_by(
                what,
                rights,
                rule,
                as_gko.patch(core_hub, &params, change).await,
            );
        }
        // Not GKO's: not its image, not the label that would make it GKO's.
        refused_by(
            "an unlabelled Deployment's image",
            rights,
            "labelled com.molo17.conductor.type",
            deployments
                .patch(
                    "stranger",
                    &params,
                    &template(json!({"containers": [{"name": "app", "image": "busybox:latest"}]})),
                )
                .await,
        );
        refused_by(
            "the label on an unlabelled Deployment",
            rights,
            "labelled com.molo17.conductor.type",
            deployments
                .patch(
                    "stranger",
                    &params,
                    &Patch::Strategic(
                        json!({"metadata": {"labels": {"com.molo17.conductor.type": "module"}}}),
                    ),
                )
                .await,
        );
        // GKO's own Deployment: its image and the self-update annotation.
        deployments
            .patch("gko", &params, &Patch::Strategic(json!({
                "metadata": {"annotations": {"gluesync.molo17.com/self-update": "Restarting"}},
                "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "busybox:1.37"}]}}},
            })))
            .await?;
        // The policy binds GKO's account alone: an admin makes the same change.
        Api::<StatefulSet>::namespaced(ns.client.clone(), &ns.name)
            .patch(
                core_hub,
                &params,
                &template(json!({"serviceAccountName": "victim"})),
            )
            .await?;
        // The disaster-recovery setup's own changes pass: its environment, ports, volume and mount,
        // and the template's mark.
        as_gko
            .patch(core_hub, &params, &Patch::Strategic(json!({"spec": {"template": {
                "metadata": {"annotations": {"gluesync.molo17.com/disaster-recovery": "mark"}},
                "spec": {
                    "volumes": [{"name": "gluesync-disaster-recovery", "secret": {"secretName": "gluesync-disaster-recovery", "defaultMode": 256}}],
                    "containers": [{"name": "core-hub",
                        "env": [{"name": "GLUESYNC_DR_ROLE", "value": "primary"}],
                        "ports": [{"name": "dr-replication", "containerPort": 1718, "protocol": "TCP"}],
                        "volumeMounts": [{"name": "gluesync-disaster-recovery", "mountPath": "/opt/gluesync/disaster-recovery", "readOnly": true}]}],
                }}}})))
            .await?;
    }
    Ok(())
}

/// GKO's token writes the disaster-recovery Service only as GKO makes it (a ClusterIP, NodePort or
/// LoadBalancer Service of the two pair ports to Core Hub's pods, the selector its GluesyncPlatform's
/// status records): never another Service, an ExternalName, external IPs, another port, another
/// selector than the status records, or a new one; and of ConfigMaps only its spilled pipeline lists (not
/// Core Hub's configuration, made, changed or deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gkos_token_writes_only_the_pair_service_as_gko_makes_it_and_its_spilled_lists()
-> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::{ConfigMap, Service};
    let shape = "ClusterIP, NodePort or LoadBalancer Service of the ports dr-replication";
    for rights in Rights::ALL {
        let ns = namespace(&format!("service-policy-{rights:?}").to_lowercase()).await?;
        ns.apply(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: corehub-config\ndata:\n  a: b\n",
        )?;
        // The platform, its pair being set up: GKO records the Service's selector before the Service.
        ns.apply(SAMPLE_PLATFORM)?;
        platforms(&ns)
            .patch_status(
                "gluesync",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"disasterRecovery": {
                    "phase": "SettingUp", "role": "primary", "peerAddress": "dr-b.example.com",
                    "setup": "mark", "secretName": "gluesync-disaster-recovery", "message": "",
                    "since": "2026-12-07T10:00:00Z",
                    "serviceSelector": {"app.kubernetes.io/name": "gluesync-gluesync-core-hub"},
                }}})),
            )
            .await?;
        let gko = rights.install(&ns).await?;
        let services: Api<Service> = Api::namespaced(gko.clone(), &ns.name);
        let service = |name: &str,
                       change: &dyn Fn(&mut serde_json::Value)|
         -> anyhow::Result<Service> {
            let mut v = json!({
                "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gluesync-operator",
                                                      "gluesync.molo17.com/platform": "gluesync"}},
                "spec": {"type": "NodePort", "selector": {"app.kubernetes.io/name": "gluesync-gluesync-core-hub"},
                         "ports": [{"name": "dr-replication", "port": 1718, "targetPort": 1718, "protocol": "TCP"},
                                   {"name": "dr-control", "port": 1719, "targetPort": 1719, "protocol": "TCP"}]},
            });
            change(&mut v);
            Ok(serde_json::from_value(v)?)
        };
        let pair = "gluesync-disaster-recovery";
        type Change = fn(&mut serde_json::Value);
        let attacks: [(&str, &str, &str, Change); 7] = [
            (
                "without GKO's label",
                pair,
                "labelled app.kubernetes.io/managed-by",
                |v| v["metadata"]["labels"] = json!(null),
            ),
            (
                "another Service",
                "published",
                "only the disaster-recovery Service",
                |_| {},
            ),
            ("an ExternalName", pair, shape, |v| {
                v["spec"]["type"] = json!("ExternalName");
                v["spec"]["externalName"] = json!("evil.example.com");
                v["spec"]["ports"] = json!(null);
            }),
            ("external IPs", pair, shape, |v| {
                v["spec"]["externalIPs"] = json!(["203.0.113.7"])
            }),
            ("another port", pair, shape, |v| {
                v["spec"]["ports"][1] = json!({"name": "http", "port": 80, "targetPort": 3000})
            }),
            // (Refused by both policies: either may answer.)
            ("no selector", pair, "Core Hub's pods", |v| {
                v["spec"]["selector"] = json!(null)
            }),
            (
                "another selector",
                pair,
                "status.disasterRecovery.serviceSelector says",
                |v| v["spec"]["selector"] = json!({"app": "postgres"}),
            ),
        ];
        for (what, name, rule, change) in attacks {
            refused_by(
                what,
                rights,
                rule,
                services
                    .create(&PostParams::default(), &service(name, &change)?)
                    .await,
            );
        }
        services
            .create(&PostParams::default(), &service(pair, &|_| {})?)
            .await?;
        refused_by(
            "a new selector",
            rights,
            // (Refused by both policies: either may answer.)
            "Core Hub's pods",
            services
                .patch(
                    pair,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"selector": {"app": "postgres"}}})),
                )
                .await,
        );
        // ConfigMaps: only the spilled lists.
        let maps: Api<ConfigMap> = Api::namespaced(gko, &ns.name);
        let rule = "only the ConfigMaps of its spilled pipeline lists";
        let map = |labels: serde_json::Value| -> anyhow::Result<ConfigMap> {
            Ok(serde_json::from_value(
                json!({"metadata": {"name": "list", "labels": labels}, "data": {"ids": "a"}}),
            )?)
        };
        refused_by(
            "an unlabelled ConfigMap",
            rights,
            rule,
            maps.create(&PostParams::default(), &map(json!({}))?).await,
        );
        refused_by(
            "Core Hub's configuration changed",
            rights,
            rule,
            maps.patch(
                "corehub-config",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"a": "evil"}})),
            )
            .await,
        );
        refused_by(
            "Core Hub's configuration deleted",
            rights,
            rule,
            maps.delete("corehub-config", &Default::default()).await,
        );
        maps.create(
            &PostParams::default(),
            &map(json!({"gluesync.molo17.com/spilled-list": "gluesync"}))?,
        )
        .await?;
        maps.delete("list", &Default::default()).await?;
    }
    Ok(())
}

/// GKO's admission policies hold GKO's token alone: in a namespace with no GluesyncPlatform (the
/// policies that read one find none), anyone else's pods and Services are created as before, while a
/// pre-pull pod of GKO's token is refused there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policies_refuse_nothing_of_anyone_else() -> anyhow::Result<()> {
    use gluesync_operator::{api::GluesyncPlatform, update::prepull};
    use k8s_openapi::api::core::v1::{Pod, Service};
    for rights in Rights::ALL {
        let ns = namespace(&format!("others-{rights:?}").to_lowercase()).await?;
        let gko = rights.install(&ns).await?;
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "app", "labels": {"app.kubernetes.io/managed-by": "someone"}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
        }))?;
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "app"}, "spec": {"ports": [{"port": 80}]},
        }))?;
        Api::<Pod>::namespaced(ns.client.clone(), &ns.name)
            .create(&PostParams::default(), &pod)
            .await?;
        Api::<Service>::namespaced(ns.client.clone(), &ns.name)
            .create(&PostParams::default(), &svc)
            .await?;
        // GKO's own pre-pull pod, with no GluesyncPlatform to read: refused.
        let mut gsp = GluesyncPlatform::new(
            "gluesync",
            serde_json::from_value(json!({"version": "2.3.2.2"}))?,
        );
        gsp.metadata.namespace = Some(ns.name.clone());
        gsp.metadata.uid = Some("00000000-0000-0000-0000-000000000001".into());
        let own = prepull::pod(
            &gsp,
            &prepull::Pull {
                name: "gluesync-pre-pull-000000000001".into(),
                node: "kwok-node-0".into(),
                image: "molo17/gluesync-core-hub:2.3.2.2".into(),
                workload: "gluesync-gluesync-core-hub".into(),
            },
            &[],
        );
        refused_by(
            "a pre-pull pod with no platform",
            rights,
            "no params found",
            Api::<Pod>::namespaced(gko, &ns.name)
                .create(&PostParams::default(), &own)
                .await,
        );
    }
    Ok(())
}

/// deploy/rbac.yaml holds GKO's token to the same validations as the chart's admission policies: the
/// same variables and validations, but for the names each sets first (and the same Role rules).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_rbac_yaml_holds_the_charts_validations() -> anyhow::Result<()> {
    let docs = |text: &str| -> anyhow::Result<Vec<serde_json::Value>> {
        let mut out = vec![];
        for d in serde_yaml::Deserializer::from_str(text) {
            let v = serde_json::to_value(serde_yaml::Value::deserialize(d)?)?;
            if !v.is_null() {
                out.push(v);
            }
        }
        Ok(out)
    };
    use serde::Deserialize;
    let chart = docs(&chart_role("rbac-drift")?)?;
    let plain = docs(RBAC)?;
    let policies = |all: &[serde_json::Value]| -> Vec<(serde_json::Value, serde_json::Value)> {
        all.iter()
            .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
            .map(|d| {
                // The names come first (drService and secrets; serviceAccount): the rest is shared.
                let first = if d["spec"]["paramKind"].is_null() {
                    2
                } else {
                    1
                };
                let vars: Vec<serde_json::Value> = d["spec"]["variables"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .split_off(first);
                (json!(vars), d["spec"]["validations"].clone())
            })
            .collect()
    };
    let (c, p) = (policies(&chart), policies(&plain));
    assert_eq!(c.len(), 2);
    assert_eq!(
        c, p,
        "deploy/rbac.yaml and the chart's admission policies differ"
    );
    let rules = |all: &[serde_json::Value]| {
        all.iter().find(|d| d["kind"] == "Role").map(|d| {
            d["rules"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|mut r| {
                    r.as_object_mut().map(|o| o.remove("resourceNames"));
                    r
                })
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(
        rules(&chart),
        rules(&plain),
        "the two Roles grant different verbs"
    );
    Ok(())
}

/// Under the chart's Role and admission policy, GKO does all of its work: an update from the Core Hub
/// UI, and a disaster-recovery pair set up and taken down again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gko_works_within_the_charts_role_and_admission_policy() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Service;
    let ns = namespace("chart-policy-work").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    ns.apply(&chart_role(&ns.name)?)?;
    let client = ns
        .service_account_client("gluesync-gluesync-operator")
        .await?;
    let (_gko, base) = Operator::start_serving_as(&ns, client)?;
    wait_settled(&ns).await?;
    let http = reqwest::Client::new();
    let (code, body) = call(
        http.post(format!("{base}/conductor/api/containers"))
            .bearer_auth(sim.token_for("manager"))
            .header("content-type", "application/json")
            .body(json!({"action": "update", "ids": []}).to_string()),
    )
    .await?;
    assert_eq!(
        (code, &body["data"]["result"]),
        (200, &json!("Succeeded")),
        "{body}"
    );

    let admin = sim.token_for("admin");
    let dr = format!("{base}/conductor/api/disaster-recovery");
    let (code, body) = call(
        http.put(&dr)
            .bearer_auth(&admin)
            .header("content-type", "application/json")
            .body(
                json!({"role": "primary", "peerAddress": "dr-b.example.com",
                       "sharedSecret": "pair-secret-0123456789-abcdefghij-KLMNOP"})
                .to_string(),
            ),
    )
    .await?;
    assert_eq!(code, 202, "{body}");
    let phase = |g: &gluesync_operator::api::GluesyncPlatform| {
        g.status
            .as_ref()
            .and_then(|s| s.disaster_recovery.as_ref())
            .map(|d| d.phase)
    };
    let g = wait_for_platform(&ns, "the pair Active or Failed", |g| {
        matches!(
            phase(g),
            Some(
                gluesync_operator::api::DisasterRecoveryPhase::Active
                    | gluesync_operator::api::DisasterRecoveryPhase::Failed
            )
        )
    })
    .await?;
    assert_eq!(
        phase(&g),
        Some(gluesync_operator::api::DisasterRecoveryPhase::Active),
        "{:?}",
        g.status.and_then(|s| s.disaster_recovery)
    );
    let services: Api<Service> = Api::namespaced(ns.client.clone(), &ns.name);
    assert!(
        services
            .get_opt("gluesync-disaster-recovery")
            .await?
            .is_some()
    );
    let (code, body) = call(http.delete(&dr).bearer_auth(&admin)).await?;
    assert_eq!(code, 202, "{body}");
    wait_for_platform(&ns, "the pair taken down", |g| {
        phase(g).is_none() && g.spec.disaster_recovery.is_none()
    })
    .await?;
    assert!(
        services
            .get_opt("gluesync-disaster-recovery")
            .await?
            .is_none()
    );
    Ok(())
}

/// A stranger's unfinished request head costs GKO at most 16 KiB: one that passes it is answered 431 and
/// closed at once, never read to its 400 KiB (a head within it is read). And strangers that stall
/// mid-head are held at most `MAX_UNANSWERED` once they are a second old: the next connection (a
/// manager's, served) closes the oldest beyond that. (GKO's memory under such a load: `make bench`,
/// heads.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_unfinished_head_is_cut_at_16_kib_and_few_are_held() -> anyhow::Result<()> {
    use gluesync_operator::conductor::MAX_UNANSWERED;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (_ns, sim, gko, base) = serving_process("long-heads", json!({})).await?;
    let addr = base.trim_start_matches("http://").to_string();
    // Opens a connection and sends `size` bytes of a head that never ends.
    async fn stall(addr: &str, size: usize) -> anyhow::Result<tokio::net::TcpStream> {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /conductor/api/containers HTTP/1.1\r\nHost: gko\r\nX-Pad: ")
            .await?;
        let chunk = vec![b'a'; 1024];
        let mut sent = 0;
        while sent < size && s.write_all(&chunk).await.is_ok() {
            sent += chunk.len();
        }
        Ok(s)
    }
    // What GKO says before it closes (empty: closed unanswered), within `wait`.
    async fn answer(mut s: tokio::net::TcpStream, wait: Duration) -> Option<String> {
        let mut answer = Vec::new();
        tokio::time::timeout(wait, s.read_to_end(&mut answer))
            .await
            .ok()
            .map(|_| String::from_utf8_lossy(&answer).into_owned())
    }
    let long = stall(&addr, 400 * 1024).await?;
    let said = answer(long, Duration::from_secs(5)).await;
    assert!(
        said.as_deref()
            .is_some_and(|a| a.starts_with("HTTP/1.1 431")),
        "a head past 16 KiB is refused at once: {said:?}"
    );
    // A head within the bound is read (and refused only for its missing credentials).
    let pad = "a".repeat(12 * 1024);
    let (code, _) = call(
        reqwest::Client::new()
            .get(format!("{base}/conductor/api/containers"))
            .header("x-pad", &pad),
    )
    .await?;
    assert_eq!(code, 401);
    // 512 strangers that stall after 8 KiB of a head: GKO holds them (they reached it)...
    // (opened at once: within the second a stranger may stay unanswered before it counts).
    let strangers: Vec<tokio::net::TcpStream> =
        futures::future::join_all((0..512).map(|_| stall(&addr, 8 * 1024)))
            .await
            .into_iter()
            .collect::<anyhow::Result<_>>()?;
    let open = "gluesync_operator_http_connections{listener=\"conductor\"}";
    let held = gko.metric(open).await?;
    // (Those a second old count against the bound as later ones come: more than it are held.)
    assert!(
        held > MAX_UNANSWERED as f64,
        "the strangers reached GKO: {held} open"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // ...until a new connection comes, a second on: the oldest beyond the bound go.
    let (code, body) = call(
        reqwest::Client::new()
            .get(format!("{base}/conductor/api/containers"))
            .bearer_auth(sim.token_for("manager")),
    )
    .await?;
    assert_eq!(code, 200, "the manager is served: {body}");
    let left = gko.metric(open).await?;
    assert!(
        left <= MAX_UNANSWERED as f64 + 3.0,
        "{left} connections open after the manager's came (bound {MAX_UNANSWERED})"
    );
    let mut closed = 0;
    for s in strangers {
        if answer(s, Duration::from_millis(200))
            .await
            .is_some_and(|a| a.is_empty())
        {
            closed += 1;
        }
    }
    assert!(
        closed >= 512 - MAX_UNANSWERED,
        "{closed} of the 512 strangers closed unanswered"
    );
    Ok(())
}

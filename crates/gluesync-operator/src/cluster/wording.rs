//! Errors said as kubectl says them, on one line: the API server's refusal as `Error from server
//! (Forbidden): …` with its message once, an unreachable API server as `Unable to connect to the server
//! https://…: connection refused`, and each cause of a chain once. GKO's logs and `kubectl gluesync` both
//! print errors through [`Said`]; kube's own `Display` of an API error repeats the message and dumps the
//! whole `Status` (its `Debug`).

use std::{error::Error, fmt, sync::OnceLock};

/// The API server this process talks to, named when it cannot be reached.
static SERVER: OnceLock<String> = OnceLock::new();

/// Names the API server of this process (its Kubernetes configuration's `cluster_url`) in the words of
/// an unreachable one. The first call counts: a process talks to one API server.
pub fn set_server(url: &impl fmt::Display) {
    let _ = SERVER.set(url.to_string().trim_end_matches('/').to_string());
}

/// An error and its causes, said once each: `%Said(&e)` in a log field or a message.
pub struct Said<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Said<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&chain(self.0))
    }
}

/// `e` and its causes on one line, joined by `: `. A refusal of the API server or an unreachable one is
/// said in kubectl's words and ends the line (its own causes are in those words); a cause whose text its
/// effect already holds is not said again, and an effect that quotes its cause's text keeps only what
/// comes before.
pub fn chain(e: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut level = Some(e);
    while let Some(err) = level {
        if let Some(said) = err.downcast_ref::<kube::Error>().and_then(kubectl_words) {
            parts.push(said);
            break;
        }
        let mut text = err.to_string();
        if let Some(cause) = err.source()
            && let Some(at) = text.find(&cause.to_string())
            && at > 0
        {
            text.truncate(at);
        }
        let text = text.trim_end_matches([':', ' ', '(']).to_string();
        if !text.is_empty() && !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
        level = err.source();
    }
    parts.join(": ")
}

/// A kube error in kubectl's words: those of [`kubectl_words`], else its own and its causes', each once.
pub fn kube_error(e: &kube::Error) -> String {
    kubectl_words(e).unwrap_or_else(|| chain(e))
}

/// A refusal of the API server (`Error from server (Reason): message`, with the right to ask for on a
/// 403) or an unreachable one (`Unable to connect to the server URL: why`), as kubectl says them; `None`
/// for the other kube errors.
fn kubectl_words(e: &kube::Error) -> Option<String> {
    match e {
        kube::Error::Api(status) => {
            let reason = match (status.reason.as_str(), status.code) {
                ("", 0) => String::new(),
                ("", code) => format!(" ({code})"),
                (reason, _) => format!(" ({reason})"),
            };
            let message = if status.message.is_empty() {
                format!("the server answered {}", status.code)
            } else {
                status.message.clone()
            };
            let hint = forbidden_hint(status.code, &status.message).unwrap_or_default();
            Some(format!("Error from server{reason}: {message}{hint}"))
        }
        kube::Error::Service(_) | kube::Error::HyperError(_) => {
            let server = SERVER.get().map_or(String::new(), |s| format!(" {s}"));
            Some(format!(
                "Unable to connect to the server{server}: {}",
                innermost(e)
            ))
        }
        _ => None,
    }
}

/// Why a connection failed, as the deepest cause says it: `connection refused`, `i/o timeout`, else its
/// own words without the `(os error N)` of the operating system.
fn innermost(e: &(dyn Error + 'static)) -> String {
    let mut deepest = e;
    while let Some(cause) = deepest.source() {
        deepest = cause;
    }
    if let Some(io) = deepest.downcast_ref::<std::io::Error>() {
        match io.kind() {
            std::io::ErrorKind::ConnectionRefused => return "connection refused".into(),
            std::io::ErrorKind::TimedOut => return "i/o timeout".into(),
            std::io::ErrorKind::ConnectionReset => return "connection reset by peer".into(),
            _ => {}
        }
    }
    let text = deepest.to_string();
    let text = match text.find(" (os error ") {
        Some(at) => &text[..at],
        None => &text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "the connection failed".into(),
    }
}

/// What to do about a refusal for want of a right, from the API server's own sentence (`User "u" cannot
/// patch resource "gluesyncplatforms" in API group "gluesync.molo17.com" in the namespace "ns"`): ask for
/// that verb on that resource.
fn forbidden_hint(code: u16, message: &str) -> Option<String> {
    if code != 403 {
        return None;
    }
    let after = |key: &str| -> Option<&str> {
        let rest = &message[message.find(key)? + key.len()..];
        Some(rest.split([' ', '"']).next().unwrap_or_default())
    };
    let quoted = |key: &str| -> Option<&str> {
        let rest = &message[message.find(key)? + key.len()..];
        rest.strip_prefix('"')?.split('"').next()
    };
    let verb = after(" cannot ")?;
    let resource = quoted(" resource ")?;
    let group = quoted(" in API group ").filter(|g| !g.is_empty());
    let resource = match group {
        Some(g) => format!("{resource}.{g}"),
        None => resource.to_string(),
    };
    let scope = match quoted(" in the namespace ") {
        Some(ns) => format!("in namespace {ns}"),
        None => "at the cluster scope".into(),
    };
    Some(format!(
        " - ask an administrator for a Role that grants {verb} on {resource} {scope}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            status: Some(kube::core::response::StatusSummary::Failure),
            code,
            message: message.into(),
            reason: reason.into(),
            ..Default::default()
        }))
    }

    const FORBIDDEN: &str = "gluesyncplatforms.gluesync.molo17.com \"gluesync\" is forbidden: User \"viewer\" cannot patch resource \"gluesyncplatforms\" in API group \"gluesync.molo17.com\" in the namespace \"demo\"";

    #[test]
    fn a_refusal_reads_as_kubectls_with_the_message_once_and_the_right_to_ask_for() {
        let said = kube_error(&status(403, "Forbidden", FORBIDDEN));
        assert_eq!(
            said,
            format!(
                "Error from server (Forbidden): {FORBIDDEN} - ask an administrator for a Role that grants patch on gluesyncplatforms.gluesync.molo17.com in namespace demo"
            )
        );
        assert_eq!(said.matches("cannot patch").count(), 1, "{said}");
        assert!(!said.contains("Status {"), "{said}");
        // A cluster-scoped right, a core resource.
        let nodes = kube_error(&status(
            403,
            "Forbidden",
            "nodes is forbidden: User \"gko\" cannot list resource \"nodes\" in API group \"\" at the cluster scope",
        ));
        assert!(
            nodes.ends_with(
                " - ask an administrator for a Role that grants list on nodes at the cluster scope"
            ),
            "{nodes}"
        );
        // Other answers: no hint; no reason, the code.
        assert_eq!(
            kube_error(&status(
                404,
                "NotFound",
                "gluesyncplatforms.gluesync.molo17.com \"x\" not found"
            )),
            "Error from server (NotFound): gluesyncplatforms.gluesync.molo17.com \"x\" not found"
        );
        assert_eq!(
            kube_error(&status(500, "", "")),
            "Error from server (500): the server answered 500"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("writing the status: {0}")]
    struct Quoting(#[source] kube::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("reconcile failed")]
    struct Plain(#[source] Quoting);

    #[test]
    fn a_chain_says_each_cause_once_and_the_kube_error_in_kubectls_words() {
        let e = Plain(Quoting(status(
            409,
            "Conflict",
            "Operation cannot be fulfilled on gluesyncplatforms.gluesync.molo17.com \"gluesync\": the object has been modified",
        )));
        assert_eq!(
            Said(&e).to_string(),
            "reconcile failed: writing the status: Error from server (Conflict): Operation cannot be fulfilled on gluesyncplatforms.gluesync.molo17.com \"gluesync\": the object has been modified"
        );
        // anyhow's contexts are levels too.
        let any = anyhow::Error::new(status(403, "Forbidden", FORBIDDEN)).context("updating");
        let said = Said(any.as_ref()).to_string();
        assert!(
            said.starts_with("updating: Error from server (Forbidden): "),
            "{said}"
        );
        assert_eq!(said.matches("is forbidden").count(), 1, "{said}");
    }

    #[test]
    fn an_unreachable_server_is_named_with_the_reason_in_few_words() {
        let refused = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        set_server(&"https://127.0.0.1:1/");
        assert_eq!(
            kube_error(&refused),
            "Unable to connect to the server https://127.0.0.1:1: connection refused"
        );
        let dns = kube::Error::Service(Box::new(std::io::Error::other(
            "Failed to lookup address information: Name or service not known (os error -2)",
        )));
        assert_eq!(
            kube_error(&dns),
            "Unable to connect to the server https://127.0.0.1:1: failed to lookup address information: Name or service not known"
        );
    }
}

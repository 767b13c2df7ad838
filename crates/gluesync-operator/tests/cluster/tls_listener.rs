//! An HTTPS listener with a self-signed certificate that records what reaches it: every TLS handshake
//! begun (and why it failed, when it did), and every HTTP request that got through, with whether it
//! carried credentials (an `Authorization` header, a password in the body). It answers as much of Core Hub as a login and a list of pipelines need.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, Method, Uri},
    response::{IntoResponse, Response},
};
use axum_server::{accept::Accept, tls_rustls::RustlsAcceptor};
use serde_json::json;

/// One HTTP request as the listener received it.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// An `Authorization` header was sent.
    pub authorization: bool,
    /// The body holds a password field (a login).
    pub password: bool,
}

#[derive(Default)]
struct Record {
    handshakes: AtomicUsize,
    failed_handshakes: Mutex<Vec<String>>,
    requests: Mutex<Vec<Received>>,
}

/// The rustls acceptor, counting each handshake it begins and keeping the error of each that fails.
#[derive(Clone)]
struct Counting {
    tls: RustlsAcceptor,
    record: Arc<Record>,
}

type Accepted<T> = Pin<Box<dyn Future<Output = io::Result<T>> + Send>>;

impl<I, S> Accept<I, S> for Counting
where
    RustlsAcceptor: Accept<I, S>,
    <RustlsAcceptor as Accept<I, S>>::Future: Send + 'static,
{
    type Stream = <RustlsAcceptor as Accept<I, S>>::Stream;
    type Service = <RustlsAcceptor as Accept<I, S>>::Service;
    type Future = Accepted<(Self::Stream, Self::Service)>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        self.record.handshakes.fetch_add(1, Ordering::SeqCst);
        let handshake = self.tls.accept(stream, service);
        let record = self.record.clone();
        Box::pin(async move {
            let result = handshake.await;
            if let Err(e) = &result {
                record.failed_handshakes.lock().unwrap().push(e.to_string());
            }
            result
        })
    }
}

/// Records the request, and answers a login with a token and a list of pipelines with none.
async fn answer(
    State(record): State<Arc<Record>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    record.requests.lock().unwrap().push(Received {
        method: method.to_string(),
        path: path.clone(),
        authorization: headers.contains_key("authorization"),
        password: String::from_utf8_lossy(&body).contains("\"password\""),
    });
    if path.ends_with("/authentication/login") {
        Json(json!({"apiToken": "listener-token", "changeRequired": false})).into_response()
    } else if path.ends_with("/pipelines") {
        Json(json!([])).into_response()
    } else {
        axum::http::StatusCode::NOT_FOUND.into_response()
    }
}

/// The listener on a loopback port, stopped when dropped.
pub struct TlsListener {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    record: Arc<Record>,
    task: tokio::task::JoinHandle<io::Result<()>>,
}

impl TlsListener {
    pub async fn start() -> anyhow::Result<TlsListener> {
        let cert = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
        ])?;
        let config = axum_server::tls_rustls::RustlsConfig::from_pem(
            cert.cert.pem().into_bytes(),
            cert.signing_key.serialize_pem().into_bytes(),
        )
        .await?;
        let record = Arc::new(Record::default());
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let app = Router::new()
            .fallback(answer)
            .with_state(record.clone())
            .into_make_service();
        let server = axum_server::from_tcp(listener)?.acceptor(Counting {
            tls: RustlsAcceptor::new(config),
            record: record.clone(),
        });
        let task = tokio::spawn(server.serve(app));
        Ok(TlsListener {
            url: format!("https://{addr}"),
            record,
            task,
        })
    }

    /// TLS handshakes begun (each connection accepted).
    pub fn handshakes(&self) -> usize {
        self.record.handshakes.load(Ordering::SeqCst)
    }

    /// Why each failed handshake failed.
    pub fn failed_handshakes(&self) -> Vec<String> {
        self.record.failed_handshakes.lock().unwrap().clone()
    }

    /// Every HTTP request received, oldest first.
    pub fn requests(&self) -> Vec<Received> {
        self.record.requests.lock().unwrap().clone()
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

//! An alert receiver for `--alert-webhook`: records each POST's JSON body
//! and its Authorization header, and answers 204.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One POST the receiver took.
#[derive(Debug, Clone)]
pub struct Hook {
    pub authorization: Option<String>,
    pub body: serde_json::Value,
}

/// What the receiver took so far.
#[derive(Clone, Default)]
pub struct Hooks(Arc<Mutex<Vec<Hook>>>);

impl Hooks {
    pub fn all(&self) -> Vec<Hook> {
        self.0.lock().unwrap().clone()
    }

    /// The JSON bodies, in order.
    pub fn bodies(&self) -> Vec<serde_json::Value> {
        self.all().into_iter().map(|h| h.body).collect()
    }

    /// The first body whose `cause` is `cause`.
    pub fn with_cause(&self, cause: &str) -> Option<Hook> {
        self.all().into_iter().find(|h| h.body["cause"] == cause)
    }
}

/// Starts a receiver on a free port: (port, what it receives).
pub async fn receiver() -> (u16, Hooks) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hooks = Hooks::default();
    let store = hooks.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = stream.read(&mut buf).await.unwrap();
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let header = |name: &str| {
                        head.lines().find_map(|l| {
                            let (key, value) = l.split_once(':')?;
                            key.eq_ignore_ascii_case(name)
                                .then(|| value.trim().to_string())
                        })
                    };
                    let len: usize = header("content-length")
                        .map(|v| v.parse().unwrap())
                        .unwrap_or(0);
                    if body.len() >= len {
                        store.0.lock().unwrap().push(Hook {
                            authorization: header("authorization"),
                            body: serde_json::from_str(body).unwrap(),
                        });
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            let _ = stream
                .write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    (port, hooks)
}

//! Answers of the services GKO calls (Core Hub, the version catalog), read up to a size: a peer that
//! sends without end (or a huge answer) cannot make GKO hold it in memory.

/// The body of `resp`, when it is at most `limit` bytes; else an error that says so.
pub async fn read(mut resp: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(format!("the answer is larger than {limit} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > limit {
            return Err(format!("the answer is larger than {limit} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The start of an error answer's body, as text: at most [`ERROR_TEXT`] bytes are read; the rest is
/// never read (the connection is dropped with it).
pub async fn error_text(mut resp: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < ERROR_TEXT {
        match resp.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(ERROR_TEXT);
    String::from_utf8_lossy(&body).into_owned()
}

/// How much of an error answer GKO reads.
pub const ERROR_TEXT: usize = 4 * 1024;

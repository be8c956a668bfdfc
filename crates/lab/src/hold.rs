//! Opens many idle keep-alive connections to Weir (for the memory measurement): each sends one
//! absolute-form GET, reads the answer, and stays open while its [`Held`] lives.

use crate::LabError;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use tokio::net::TcpStream;

/// One open connection; dropping it closes the connection.
pub struct Held {
    _sender: http1::SendRequest<Empty<Bytes>>,
    conn: tokio::task::JoinHandle<()>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

/// Opens `n` connections to `proxy`, each answering one `GET url` with `Authorization: token
/// hold`. Connections the proxy refuses or fails are not counted.
pub async fn hold(proxy: SocketAddr, url: &str, n: usize) -> Result<Vec<Held>, LabError> {
    if !proxy.ip().is_loopback() {
        return Err(LabError::NotLoopback(proxy.to_string()));
    }
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        if let Some(h) = open_one(proxy, url).await? {
            held.push(h);
        }
    }
    Ok(held)
}

async fn open_one(proxy: SocketAddr, url: &str) -> Result<Option<Held>, LabError> {
    let stream = TcpStream::connect(proxy).await?;
    let Ok((mut sender, conn)) = http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream)).await
    else {
        return Ok(None);
    };
    let conn = tokio::spawn(async move {
        // Ends when the peer closes or the task is aborted; either way nothing to report.
        let _ = conn.await;
    });
    let req = Request::get(url)
        .header(http::header::AUTHORIZATION, "token hold")
        .body(Empty::new())
        .map_err(|e| LabError::Settings(e.to_string()))?;
    let ok = match sender.send_request(req).await {
        Ok(resp) => resp.status().is_success() && resp.into_body().collect().await.is_ok(),
        Err(_) => false,
    };
    Ok(ok.then_some(Held {
        _sender: sender,
        conn,
    }))
}

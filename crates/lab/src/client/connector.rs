//! A connector for hyper-util's pooled client that either dials the request's own loopback
//! address or always dials Weir and marks the connection as proxied, so the client writes
//! absolute-form request lines (`GET http://127.0.0.1:UP/agents/sessions HTTP/1.1`) as a tool
//! with `HTTP_PROXY` set does.

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::net::TcpStream;

/// Dials `proxy` when set, else the request's host (which must be a loopback IP literal: the
/// lab never sends a packet anywhere else).
#[derive(Debug, Clone, Copy)]
pub struct LabConnector {
    pub proxy: Option<SocketAddr>,
}

impl tower_service::Service<Uri> for LabConnector {
    type Response = LabStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<LabStream>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let proxy = self.proxy;
        Box::pin(async move {
            let addr = match proxy {
                Some(p) => p,
                None => loopback_addr(&uri)?,
            };
            if !addr.ip().is_loopback() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{addr} is not a loopback address"),
                ));
            }
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(LabStream {
                io: TokioIo::new(stream),
                proxied: proxy.is_some(),
            })
        })
    }
}

fn loopback_addr(uri: &Uri) -> io::Result<SocketAddr> {
    let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
    let ip: IpAddr = host.parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{host}` is not an IP literal"),
        )
    })?;
    Ok(SocketAddr::new(ip, uri.port_u16().unwrap_or(80)))
}

/// A TCP stream that remembers whether it leads to a proxy.
pub struct LabStream {
    io: TokioIo<TcpStream>,
    proxied: bool,
}

impl Connection for LabStream {
    fn connected(&self) -> Connected {
        Connected::new().proxy(self.proxied)
    }
}

impl Read for LabStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl Write for LabStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

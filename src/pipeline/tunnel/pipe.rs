//! A blind tunnel's bytes, both ways at once: one side's EOF shuts down writing on the other
//! (the other direction keeps flowing), an error either way ends both, and a tunnel with no
//! byte either way for the idle limit is closed. Each chunk is counted as it is written out.
//!
//! When the client's connection is a plain socket (the listener's, not the gateway's TLS)
//! both ends are sockets and, on Linux, [`super::splice`] moves the bytes in the kernel.
//! Otherwise, and as the fallback, they are copied through 64 KiB buffers.

use crate::stats::TunnelBytes;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The copy buffer of each direction off the splice path (`copy_bidirectional`'s default is
/// 8 KiB: eight times the reads and writes for the same bytes).
const BUFFER: usize = 64 * 1024;

/// Which way bytes go.
#[derive(Debug, Clone, Copy)]
pub(super) enum Dir {
    /// Client to target.
    Up,
    /// Target to client.
    Down,
}

/// How a tunnel that did not fail ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// Both sides closed.
    Closed,
    /// Nothing moved for the idle limit.
    Idle,
}

/// A tunnel's counts: the shared totals, and when it last moved a byte (for the idle limit).
pub(super) struct Meter {
    totals: Arc<TunnelBytes>,
    start: Instant,
    /// Milliseconds from `start` to the last chunk moved.
    last: AtomicU64,
}

impl Meter {
    pub(super) fn new(totals: Arc<TunnelBytes>) -> Meter {
        Meter {
            totals,
            start: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    /// `n` bytes went `dir`: counted, and the tunnel is active now.
    pub(super) fn moved(&self, dir: Dir, n: usize) {
        let total = match dir {
            Dir::Up => &self.totals.up,
            Dir::Down => &self.totals.down,
        };
        total.fetch_add(n as u64, Relaxed);
        let ms = self.start.elapsed().as_millis();
        self.last
            .store(u64::try_from(ms).unwrap_or(u64::MAX), Relaxed);
    }

    /// Resolves once nothing has moved for `limit` (never without one). It sleeps until the
    /// earliest moment that could be true, so an active tunnel wakes it once per `limit`.
    async fn idle(&self, limit: Option<Duration>) {
        let Some(limit) = limit else {
            return std::future::pending().await;
        };
        loop {
            let last = self.start + Duration::from_millis(self.last.load(Relaxed));
            let deadline = last + limit;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// Runs the tunnel between the upgraded client connection and `upstream` until both sides
/// have closed, either fails, or it was idle for `idle`.
pub(super) async fn run(
    client: Upgraded,
    upstream: TcpStream,
    meter: &Meter,
    idle: Option<Duration>,
) -> io::Result<Ended> {
    let copy = async {
        // hyper-util's auto server wraps the socket in its own type: its `downcast` gives the
        // listener's socket back, with what hyper had already read past the CONNECT.
        match hyper_util::server::conn::auto::upgrade::downcast::<TokioIo<TcpStream>>(client) {
            Ok(parts) => {
                let client = parts.io.into_inner();
                let mut upstream = upstream;
                if !parts.read_buf.is_empty() {
                    upstream.write_all(&parts.read_buf).await?;
                    meter.moved(Dir::Up, parts.read_buf.len());
                }
                sockets(client, upstream, meter).await
            }
            Err(client) => {
                let (cr, cw) = tokio::io::split(TokioIo::new(client));
                let (ur, uw) = tokio::io::split(upstream);
                both_ways(cr, cw, ur, uw, meter).await
            }
        }
    };
    tokio::select! {
        r = copy => r.map(|()| Ended::Closed),
        () = meter.idle(idle) => Ok(Ended::Idle),
    }
}

/// Two plain sockets: spliced on Linux (copied if a pipe cannot be had).
#[cfg(target_os = "linux")]
async fn sockets(client: TcpStream, upstream: TcpStream, meter: &Meter) -> io::Result<()> {
    match super::splice::Pipes::new() {
        Ok(pipes) => super::splice::both_ways(&client, &upstream, pipes, meter).await,
        Err(e) => {
            tracing::debug!(error = %e, "no pipe for splice; copying the tunnel's bytes");
            copy_sockets(client, upstream, meter).await
        }
    }
}

#[cfg(not(target_os = "linux"))]
async fn sockets(client: TcpStream, upstream: TcpStream, meter: &Meter) -> io::Result<()> {
    copy_sockets(client, upstream, meter).await
}

async fn copy_sockets(
    mut client: TcpStream,
    mut upstream: TcpStream,
    meter: &Meter,
) -> io::Result<()> {
    let (cr, cw) = client.split();
    let (ur, uw) = upstream.split();
    both_ways(cr, cw, ur, uw, meter).await
}

async fn both_ways(
    client_read: impl AsyncRead + Unpin,
    client_write: impl AsyncWrite + Unpin,
    up_read: impl AsyncRead + Unpin,
    up_write: impl AsyncWrite + Unpin,
    meter: &Meter,
) -> io::Result<()> {
    tokio::try_join!(
        one_way(client_read, up_write, Dir::Up, meter),
        one_way(up_read, client_write, Dir::Down, meter),
    )
    .map(|_| ())
}

/// Copies until `from`'s EOF, then shuts down writing on `to` (a half-close passed on).
async fn one_way(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    dir: Dir,
    meter: &Meter,
) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        to.write_all(&buf[..n]).await?;
        meter.moved(dir, n);
    }
}

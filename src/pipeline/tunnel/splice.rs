//! Linux: a tunnel's bytes moved by `splice(2)`, socket → pipe → socket, one pipe per
//! direction, so they never pass through Weir's memory (the 1 GiB tunnel of BENCHMARKS.md
//! went from 0.91 CPU seconds copying to the figure there).
//!
//! Both sockets are tokio's, non-blocking and registered with its reactor: each splice runs
//! inside `try_io`, which clears the readiness it used when the kernel says `EAGAIN`, and the
//! task waits for readiness again. `SPLICE_F_NONBLOCK` keeps the pipe side from blocking; the
//! pipe is always emptied before the next read into it, so an `EAGAIN` reading a socket
//! means that socket has nothing, and one writing a socket means its send buffer is full.
//!
//! Not `tokio-splice` (crates.io): it counts bytes only when a direction ends (the status
//! shows them live) and has no hook for the idle limit; the loop below is its whole job.

use super::pipe::{Dir, Meter};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// The pipe size asked for: 64 KiB is the kernel's default, where a splice moves at most
/// 16 pages; a larger pipe moves more per call (fewer wake-ups per GiB). `F_SETPIPE_SZ` may
/// refuse (a user over `pipe-user-pages-soft`): the pipe then keeps its size.
const PIPE_SIZE: libc::c_int = 1 << 20;

/// One pipe: read end, write end, and how much it holds.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    size: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds: [RawFd; 2] = [-1; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors that nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fcntl on a descriptor we own; a failure leaves the pipe as it was.
        let size = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
        let size = if size > 0 {
            size as usize
        } else {
            // SAFETY: as above; F_GETPIPE_SZ only reads.
            let got = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ) };
            usize::try_from(got).unwrap_or(0).max(4096)
        };
        Ok(Pipe { read, write, size })
    }
}

/// The two directions' pipes, made before the tunnel starts (so a failure can fall back).
pub(super) struct Pipes {
    up: Pipe,
    down: Pipe,
}

impl Pipes {
    pub(super) fn new() -> io::Result<Pipes> {
        Ok(Pipes {
            up: Pipe::new()?,
            down: Pipe::new()?,
        })
    }
}

/// Both directions until both have ended, or one fails.
pub(super) async fn both_ways(
    client: &TcpStream,
    upstream: &TcpStream,
    pipes: Pipes,
    meter: &Meter,
) -> io::Result<()> {
    tokio::try_join!(
        one_way(client, upstream, &pipes.up, Dir::Up, meter),
        one_way(upstream, client, &pipes.down, Dir::Down, meter),
    )
    .map(|_| ())
}

/// Moves `from`'s bytes to `to` until `from`'s EOF, then shuts down writing on `to`.
async fn one_way(
    from: &TcpStream,
    to: &TcpStream,
    pipe: &Pipe,
    dir: Dir,
    meter: &Meter,
) -> io::Result<()> {
    loop {
        let n = loop {
            from.readable().await?;
            let filled = from.try_io(Interest::READABLE, || {
                splice(from.as_raw_fd(), pipe.write.as_raw_fd(), pipe.size)
            });
            match filled {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            return shutdown_write(to);
        }
        let mut left = n;
        while left > 0 {
            to.writable().await?;
            let drained = to.try_io(Interest::WRITABLE, || {
                splice(pipe.read.as_raw_fd(), to.as_raw_fd(), left)
            });
            match drained {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        meter.moved(dir, n);
    }
}

/// One `splice(2)` of at most `len` bytes; `EAGAIN` comes back as `WouldBlock`.
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: both are open descriptors for the call's duration (borrowed from live owners);
    // null offsets are what splice takes for pipes and sockets.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// The half-close passed on: no more bytes will be written to `to` (a peer that has already
/// gone has nothing left to close).
fn shutdown_write(to: &TcpStream) -> io::Result<()> {
    // SAFETY: shutdown on a socket descriptor borrowed from its live owner.
    if unsafe { libc::shutdown(to.as_raw_fd(), libc::SHUT_WR) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOTCONN) {
        return Ok(());
    }
    Err(e)
}

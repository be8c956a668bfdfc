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
//! **Gathering.** Across a real link, bytes arrive a few packets at a time: at 1 Gbit/s each
//! wake-up found ~72 KiB, so a GiB cost ~15,000 wake-ups and 0.7 CPU seconds, most of it the
//! kernel's per-wake-up work (BENCHMARKS.md, "a blind tunnel across a wire"). Once a read
//! shows a bulk transfer (a read of [`BULK`] or more), the reading socket's `SO_RCVLOWAT` is
//! raised to [`GATHER_BYTES`], so the kernel wakes Weir only when that much has arrived (or
//! at EOF), and each wait is bounded by [`GATHER_WAIT`]: when it runs out, what has arrived
//! is moved anyway, and if nothing had, the low-water mark goes back to one byte. A stream
//! that pauses mid-transfer (the end of one response on a kept-alive connection) is
//! therefore passed on at most `GATHER_WAIT` later; small exchanges never enter the mode.
//! Raising the mark may grow the socket's receive buffer (the kernel makes room for the mark,
//! and clamps the window to it while the buffer is that small); receive autotuning grows both
//! as before, so a long-RTT download keeps its window. That was not measured here: this
//! machine's kernel has no `netem` to add the delay.
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

/// A read at least this large says a bulk transfer is under way (see the module's
/// "Gathering"); an interactive exchange rarely has 64 KiB waiting at once.
const BULK: usize = 64 * 1024;

/// In a bulk transfer, how much the kernel gathers before it wakes Weir (`SO_RCVLOWAT`).
const GATHER_BYTES: usize = 512 * 1024;

/// In a bulk transfer, the longest a wait for [`GATHER_BYTES`] lasts before what has arrived
/// is moved anyway: the most a pause mid-transfer is delayed.
const GATHER_WAIT: std::time::Duration = std::time::Duration::from_millis(5);

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
    let mut gather = Gather::new(from);
    loop {
        let n = loop {
            if let Some(n) = gather.wait(pipe).await? {
                break n;
            }
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
        gather.after_read(n);
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

/// One direction's gathering state (the module's "Gathering"): whether the reading socket's
/// low-water mark is raised.
struct Gather<'a> {
    from: &'a TcpStream,
    raised: bool,
}

impl<'a> Gather<'a> {
    fn new(from: &'a TcpStream) -> Gather<'a> {
        Gather {
            from,
            raised: false,
        }
    }

    /// After a read of `n` bytes: a bulk read raises the low-water mark, a small one (the
    /// transfer turned into an exchange) lowers it again.
    fn after_read(&mut self, n: usize) {
        let bulk = n >= BULK;
        if bulk != self.raised && set_lowat(self.from, if bulk { GATHER_BYTES } else { 1 }) {
            self.raised = bulk;
        }
    }

    /// With the mark raised: waits for it at most [`GATHER_WAIT`]. `Some(n)`: bytes moved
    /// into the pipe after the wait ran out (0 is EOF); `None`: read the usual way (the mark
    /// was reached, or nothing arrived in the wait and the mark is back to one byte).
    async fn wait(&mut self, pipe: &Pipe) -> io::Result<Option<usize>> {
        if !self.raised {
            return Ok(None);
        }
        if let Ok(ready) = tokio::time::timeout(GATHER_WAIT, self.from.readable()).await {
            ready?;
            return Ok(None);
        }
        // The wait ran out below the mark: the socket is not "readable" to the reactor, so
        // splice directly (non-blocking) whatever has arrived.
        match splice(self.from.as_raw_fd(), pipe.write.as_raw_fd(), pipe.size) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // The transfer paused: back to waking at the first byte. Linux (4.18 on)
                // signals readiness when the mark is lowered under bytes already queued; one
                // more look covers bytes that came between the splice and the lowering on a
                // kernel that does not.
                self.raised = !set_lowat(self.from, 1);
                match splice(self.from.as_raw_fd(), pipe.write.as_raw_fd(), pipe.size) {
                    Ok(n) => Ok(Some(n)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// Sets `SO_RCVLOWAT`; false if the kernel refused (the mark stays as it was).
fn set_lowat(s: &TcpStream, bytes: usize) -> bool {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt on a socket descriptor borrowed from its live owner, with a pointer
    // to an int that outlives the call and its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
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

//! The answers an HTTP/2 connection makes in one poll leave in one write.
//!
//! Why: a client that multiplexes sends many requests at once on one connection: Go's
//! transport (`gh`) puts all of a process's concurrent calls to a host on one HTTP/2
//! connection. Weir reads a dozen of them in one read and answers each at once
//! ([`super::InlineFirst`]). Then hyper flushes after each stream it accepts: its `poll_accept`
//! polls the connection, which flushes, before it hands over the next stream. tokio-rustls
//! writes a TLS record to the socket on every write. So every answer cost a TLS record and a
//! `writev`: 70,504 `writev` for 5,042 reads in 3 s of `hey -c 32 -h2` (strace, #32).
//!
//! Corked, the first flush of a poll goes out as before, so a lone answer is written at once,
//! with nothing copied. Bytes written after it are kept here until the connection's poll ends
//! ([`SelfWakeLoop`](super::SelfWakeLoop) calls [`Ends::end`]). Then they go out in one write,
//! so the socket gets one TLS record for the whole batch. Nothing waits past the poll that
//! made it, so no answer is delayed by more than the poll's own work. Order is kept: kept
//! bytes are written before any new ones.
//!
//! The IO sits behind a mutex because two owners reach it: hyper's connection, through
//! [`CorkedIo`], and the loop that ends each poll. Both run in the connection's task, one at a
//! time, so the lock is never contended. It is taken on each of hyper's reads, writes and
//! flushes, a few per request: a lone request on a connection pays ~1k instructions for it
//! (51.4k → 52.4k per intercepted h2 hit, callgrind) and saves no write. Under `hey -c 32 -h2`
//! the hit's CPU per request fell from 1.09–1.38× HTTP/1.1's to 0.78–0.97× (BENCHMARKS.md,
//! session 24). HTTP/1.1 is not corked ([`ConnIo`]'s `Left`): one answer per request is one
//! flush already.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes kept at most; past this the kept bytes are written first (a large answer is
/// not copied whole).
const MAX_KEPT: usize = 64 * 1024;

struct State<T> {
    io: T,
    /// Bytes kept for the end of the poll, from `sent` on.
    kept: Vec<u8>,
    sent: usize,
    /// Writing the kept bytes at the end of a poll failed: the connection's next operation
    /// gets this error (the loop cannot return it), so hyper ends the connection.
    failed: Option<io::ErrorKind>,
}

impl<T: AsyncWrite + Unpin> State<T> {
    /// Writes the kept bytes out.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.kept.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.kept[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.kept.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T> State<T> {
    /// The error a failed write at the end of a poll left, for the connection's next operation.
    fn check(&self) -> io::Result<()> {
        match self.failed {
            Some(kind) => Err(kind.into()),
            None => Ok(()),
        }
    }
}

/// What the connection and its loop share. The marks of the poll are atomics, so the loop's
/// `begin` and `end` of a poll that kept nothing take no lock (both owners run in the
/// connection's task, one at a time: `Relaxed` is enough, the task's scheduling orders them).
struct Shared<T> {
    /// Inside a poll of the connection ([`Ends::begin`] to [`Ends::end`]).
    corked: AtomicBool,
    /// A flush went out during this poll: what is written after it is kept.
    flushed: AtomicBool,
    /// Kept bytes, or the flush of them, are still to finish: `end` has work.
    pending: AtomicBool,
    state: Mutex<State<T>>,
}

impl<T> Shared<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a write now is kept rather than written: inside a poll, after its first flush.
    fn keeps(&self) -> bool {
        self.corked.load(Relaxed) && self.flushed.load(Relaxed)
    }
}

/// The connection's IO, as hyper sees it.
pub(crate) struct CorkedIo<T> {
    shared: Arc<Shared<T>>,
    vectored: bool,
}

/// The loop's hold on the same IO: marks the start and end of each poll.
pub(crate) struct Cork<T> {
    shared: Arc<Shared<T>>,
}

/// `io` corked: give the first to hyper and the second to the connection's [`SelfWakeLoop`](super::SelfWakeLoop).
pub(crate) fn pair<T: AsyncWrite>(io: T) -> (CorkedIo<T>, Cork<T>) {
    let vectored = io.is_write_vectored();
    let shared = Arc::new(Shared {
        corked: AtomicBool::new(false),
        flushed: AtomicBool::new(false),
        pending: AtomicBool::new(false),
        state: Mutex::new(State {
            io,
            kept: Vec::new(),
            sent: 0,
            failed: None,
        }),
    });
    (
        CorkedIo {
            shared: shared.clone(),
            vectored,
        },
        Cork { shared },
    )
}

/// What the connection's loop does at the edges of each poll (a trait, so the loop is not
/// generic over the IO).
pub(crate) trait Ends: Send {
    /// A poll of the connection starts.
    fn begin(&self);
    /// The poll ended: what was kept goes out now, in one write, and is flushed. When the
    /// socket is full the rest is kept for the next poll (whose first write sends it first)
    /// and `cx` is woken when the socket has room.
    fn end(&self, cx: &mut Context<'_>);
}

/// An intercepted connection's IO for hyper: straight through (`Left`) when it speaks
/// HTTP/1 (one answer per request, flushed once: nothing to gather, and no lock to pay for),
/// corked (`Right`) when it speaks HTTP/2. tokio-util's `Either` passes every call through.
pub(crate) type ConnIo<T> = tokio_util::either::Either<T, CorkedIo<T>>;

/// `io` for a connection that negotiated HTTP/2 (`h2`) or not, and the loop's [`Ends`] when it
/// is corked.
pub(crate) fn for_protocol<T>(h2: bool, io: T) -> (ConnIo<T>, Option<Box<dyn Ends>>)
where
    T: AsyncWrite + Unpin + Send + 'static,
{
    if !h2 {
        return (ConnIo::Left(io), None);
    }
    let (io, cork) = pair(io);
    (ConnIo::Right(io), Some(Box::new(cork)))
}

impl<T: AsyncWrite + Unpin + Send> Ends for Cork<T> {
    fn begin(&self) {
        self.shared.corked.store(true, Relaxed);
        self.shared.flushed.store(false, Relaxed);
    }

    fn end(&self, cx: &mut Context<'_>) {
        let sh = &self.shared;
        sh.corked.store(false, Relaxed);
        if !sh.pending.load(Relaxed) {
            return;
        }
        let mut st = sh.lock();
        if st.failed.is_some() {
            return;
        }
        let done = match st.drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut st.io).poll_flush(cx),
            other => other,
        };
        match done {
            Poll::Ready(Ok(())) => sh.pending.store(false, Relaxed),
            Poll::Ready(Err(e)) => {
                st.failed = Some(e.kind());
                // The connection's next operation returns the error: poll it again.
                cx.waker().wake_by_ref();
            }
            // The socket is full: the kept bytes (or the TLS records of them) wait, and the
            // next poll's `end` tries again when `cx` is woken. hyper was told they were
            // flushed, so it is this end's to finish them.
            Poll::Pending => {}
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for CorkedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut st = self.shared.lock();
        st.check()?;
        Pin::new(&mut st.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> CorkedIo<T> {
    /// Keeps `len` bytes (`copy` appends them) for the end of the poll when that is the rule
    /// now and they fit; else writes what was kept, then `write`s, in that order. One lock.
    fn write_with(
        &self,
        cx: &mut Context<'_>,
        len: usize,
        copy: impl FnOnce(&mut Vec<u8>),
        write: impl FnOnce(Pin<&mut T>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        let sh = &self.shared;
        let mut st = sh.lock();
        st.check()?;
        if sh.keeps() && st.kept.len() + len <= MAX_KEPT {
            copy(&mut st.kept);
            sh.pending.store(true, Relaxed);
            return Poll::Ready(Ok(len));
        }
        ready!(st.drain(cx))?;
        write(Pin::new(&mut st.io), cx)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CorkedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write_with(
            cx,
            buf.len(),
            |kept| kept.extend_from_slice(buf),
            |io, cx| io.poll_write(cx, buf),
        )
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.write_with(
            cx,
            bufs.iter().map(|b| b.len()).sum(),
            |kept| {
                for b in bufs {
                    kept.extend_from_slice(b);
                }
            },
            |io, cx| io.poll_write_vectored(cx, bufs),
        )
    }

    fn is_write_vectored(&self) -> bool {
        self.vectored
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let sh = &self.shared;
        if sh.keeps() {
            // Kept for the end of the poll (`Ends::end` writes and flushes it).
            return Poll::Ready(sh.lock().check());
        }
        let mut st = sh.lock();
        st.check()?;
        ready!(st.drain(cx))?;
        ready!(Pin::new(&mut st.io).poll_flush(cx))?;
        // Everything is out: the poll's end has nothing left to write.
        sh.pending.store(false, Relaxed);
        if sh.corked.load(Relaxed) {
            sh.flushed.store(true, Relaxed);
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut st = self.shared.lock();
        st.check()?;
        ready!(st.drain(cx))?;
        Pin::new(&mut st.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A loopback pair: what the corked side writes, the other reads.
    async fn socket_pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = tokio::net::TcpStream::connect(l.local_addr().unwrap());
        let (a, b) = tokio::join!(a, l.accept());
        (a.unwrap(), b.unwrap().0)
    }

    /// `f`'s output when it is ready at its first poll (a corked write always is).
    fn now<F: std::future::Future>(f: F) -> F::Output {
        use futures_util::FutureExt;
        f.now_or_never().expect("ready at the first poll")
    }

    /// Inside a poll the first flush goes out at once; what follows is kept until the poll
    /// ends, then sent whole and in order.
    #[tokio::test]
    async fn after_the_first_flush_of_a_poll_bytes_wait_for_its_end_then_go_in_order() {
        let (a, mut b) = socket_pair().await;
        let (mut io, cork) = pair(a);
        cork.begin();
        now(io.write_all(b"one;")).unwrap();
        now(io.flush()).unwrap();
        let mut got = [0u8; 4];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"one;", "the poll's first flush is written at once");

        now(io.write_all(b"two;")).unwrap();
        now(io.flush()).unwrap();
        now(io.write_all(b"three;")).unwrap();
        now(io.flush()).unwrap();
        assert_eq!(cork.shared.lock().kept, b"two;three;", "kept, not written");
        // Loopback delivers a write within the call: had they been written, they would be
        // readable now.
        let mut one = [0u8; 1];
        assert_eq!(
            b.try_read(&mut one).map_err(|e| e.kind()),
            Err(io::ErrorKind::WouldBlock),
            "nothing more reached the peer before the poll ended"
        );

        let mut cx = Context::from_waker(std::task::Waker::noop());
        cork.end(&mut cx);
        assert!(cork.shared.lock().kept.is_empty());
        let mut got = [0u8; 10];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"two;three;");

        // Outside a poll nothing is kept.
        now(io.write_all(b"four")).unwrap();
        assert!(cork.shared.lock().kept.is_empty());
        let mut got = [0u8; 4];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"four");
    }

    /// More than [`MAX_KEPT`] in one poll: the kept bytes go first, then the large write, so
    /// the peer reads everything in the order it was written.
    #[tokio::test]
    async fn a_large_write_sends_what_was_kept_first() {
        let (a, mut b) = socket_pair().await;
        let (mut io, cork) = pair(a);
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            b.read_to_end(&mut all).await.unwrap();
            all
        });
        let big = vec![b'x'; MAX_KEPT + 10];
        let mut want = Vec::new();
        cork.begin();
        for part in [&b"first;"[..], b"kept;", &big, b"after;"] {
            io.write_all(part).await.unwrap();
            io.flush().await.unwrap();
            want.extend_from_slice(part);
        }
        futures_util::future::poll_fn(|cx| {
            cork.end(cx);
            Poll::Ready(())
        })
        .await;
        io.shutdown().await.unwrap();
        drop((io, cork));
        assert_eq!(reader.await.unwrap(), want);
    }

    /// The socket is full when a poll ends: the kept bytes wait, and go out (after what was
    /// already queued, in order) once the peer reads and the poll's end is called again.
    #[tokio::test]
    async fn kept_bytes_wait_out_a_full_socket_and_then_go_in_order() {
        let (a, mut b) = socket_pair().await;
        // Fill the socket: the peer reads nothing yet.
        let mut filler = 0usize;
        let chunk = [1u8; 64 * 1024];
        loop {
            match a.try_write(&chunk) {
                Ok(n) => filler += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        let (mut io, cork) = pair(a);
        cork.begin();
        cork.shared.flushed.store(true, Relaxed);
        now(io.write_all(b"kept after a full socket")).unwrap();
        now(io.flush()).unwrap();
        let woken = Arc::new(Woken::default());
        let waker = std::task::Waker::from(woken.clone());
        cork.end(&mut Context::from_waker(&waker));
        assert!(cork.shared.pending.load(Relaxed), "the kept bytes wait");
        assert!(cork.shared.lock().failed.is_none());

        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            b.read_to_end(&mut all).await.unwrap();
            all
        });
        // The loop's waker is woken when the socket has room; each wake-up is a poll's end.
        for _ in 0..1000 {
            if !cork.shared.pending.load(Relaxed) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            if woken.0.swap(false, std::sync::atomic::Ordering::SeqCst) {
                cork.end(&mut Context::from_waker(&waker));
            }
        }
        assert!(
            !cork.shared.pending.load(Relaxed),
            "sent once the peer read"
        );
        io.shutdown().await.unwrap();
        drop((io, cork));
        let all = reader.await.unwrap();
        assert_eq!(all.len(), filler + b"kept after a full socket".len());
        assert!(all[..filler].iter().all(|&x| x == 1));
        assert_eq!(&all[filler..], b"kept after a full socket");
    }

    #[derive(Default)]
    struct Woken(AtomicBool);

    impl std::task::Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// A write that fails at the end of a poll is the connection's next operation's error
    /// (the loop that ends the poll cannot return it; hyper must see it and end).
    #[tokio::test]
    async fn a_failed_write_at_the_end_of_a_poll_is_the_next_operations_error() {
        let (a, b) = socket_pair().await;
        let (mut io, cork) = pair(a);
        // The peer resets the connection (no linger: an RST, not a FIN).
        // (Deprecated for blocking in drop; with a zero linger it does not.)
        #[allow(deprecated)]
        b.set_linger(Some(std::time::Duration::ZERO)).unwrap();
        drop(b);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        for _ in 0..50 {
            cork.begin();
            cork.shared.flushed.store(true, Relaxed);
            io.write_all(&[7u8; 1024]).await.unwrap();
            io.flush().await.unwrap();
            assert_eq!(cork.shared.lock().kept.len(), 1024, "kept, not written");
            futures_util::future::poll_fn(|cx| {
                cork.end(cx);
                Poll::Ready(())
            })
            .await;
            if cork.shared.lock().failed.is_some() {
                break;
            }
        }
        assert!(
            cork.shared.lock().failed.is_some(),
            "writing to a reset connection fails"
        );
        let mut buf = [0u8; 1];
        assert!(io.read(&mut buf).await.is_err());
        assert!(io.write_all(b"y").await.is_err());
        assert!(io.flush().await.is_err());
    }
}

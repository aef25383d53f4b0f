//! TLS for the binary protocol's TCP listener (off by default: `[tcp.tls]`).
//!
//! Two halves:
//!
//! - [`server_config`]: the certificate chain and private key from PEM files, checked
//!   against each other, as one `rustls::ServerConfig` (the HTTP listener reuses it with
//!   tokio-rustls). Errors name the file and what was wrong with it ([`TlsError`]).
//! - [`TlsStream`]: a [`ByteStream`] over another one that runs rustls's sans-IO
//!   `ServerConnection` (`read_tls` → `process_new_packets` → `reader`, `writer` →
//!   `write_tls`) over bounded buffers. It does no I/O of its own, so TLS runs the same over
//!   tokio's sockets and over the simulator's network.
//!
//! ```text
//!  inner.read ──► incoming (16 KiB) ──read_tls (≤ 4 KiB at a time)──► rustls: records
//!     ──process_new_packets──► plaintext (≤ 16 KiB, drained before more is read) ──► read
//!  write_all ──writer (≤ 64 KiB of records at a time)──► write_tls ──► outgoing ──► inner
//! ```
//!
//! A connection therefore holds about 200 KiB of TLS buffers at most (rustls bounds a
//! handshake message at 64 KiB and a record at 16 KiB), whatever its peer sends.
//!
//! The crypto provider is *ring*, chosen deliberately: rustls's default, aws-lc-rs, builds
//! the whole AWS-LC C library (cmake-sized, minutes on two cores, a larger binary), while
//! ring's C and assembly are a few files `cc` compiles in seconds; both are already in
//! `Cargo.lock` through the Iggy SDK (a dev-dependency), so neither is new to the workspace,
//! but only what the `cairn` binary itself links counts, and that is ring alone. Every
//! configuration here names ring explicitly (never `ServerConfig::builder()`, which panics
//! when a build enables both providers, as the tests' build does through the SDK), and
//! [`install_provider`] makes it the process default once, for any other rustls user in the
//! process.

use cairn_engine::env::{BoxFuture, ByteStream};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Which of the two files an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFile {
    Certificate,
    Key,
}

/// Why a certificate chain and key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: no such file", path.display())]
    Missing { file: TlsFile, path: PathBuf },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        file: TlsFile,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: not valid PEM: {message}", path.display())]
    Pem {
        file: TlsFile,
        path: PathBuf,
        message: String,
    },
    #[error("{}: no certificate in it (expected a PEM \"BEGIN CERTIFICATE\" section)", path.display())]
    NoCertificate { path: PathBuf },
    #[error(
        "{}: no private key in it (expected a PEM \"BEGIN PRIVATE KEY\", \"BEGIN RSA PRIVATE KEY\" or \"BEGIN EC PRIVATE KEY\" section)",
        path.display()
    )]
    NoKey { path: PathBuf },
    #[error("{}: the private key does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("{}: unusable: {reason}", path.display())]
    Unusable {
        file: TlsFile,
        path: PathBuf,
        reason: rustls::Error,
    },
}

impl TlsError {
    /// The file the error is about (a key that does not match its certificate: the key).
    pub fn file(&self) -> TlsFile {
        match self {
            TlsError::Missing { file, .. }
            | TlsError::Read { file, .. }
            | TlsError::Pem { file, .. }
            | TlsError::Unusable { file, .. } => *file,
            TlsError::NoCertificate { .. } => TlsFile::Certificate,
            TlsError::NoKey { .. } | TlsError::KeyMismatch { .. } => TlsFile::Key,
        }
    }
}

/// The crypto provider every TLS configuration of the server uses: ring (see the module
/// documentation for why). The first call also installs it as the process default, unless
/// another one was installed first.
pub fn install_provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| {
            // Err: a default is installed already (by someone else); it stays.
            let _ = rustls::crypto::ring::default_provider().install_default();
            Arc::new(rustls::crypto::ring::default_provider())
        })
        .clone()
}

/// The server's TLS configuration: the certificate chain in `cert` (PEM, the server's own
/// certificate first) and the private key in `key` (PEM: PKCS#8, PKCS#1 or SEC1), which
/// must match the first certificate. TLS 1.2 and 1.3, no client certificates.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let cert_pem = read(TlsFile::Certificate, cert)?;
    let key_pem = read(TlsFile::Key, key)?;
    let pem_error = |file: TlsFile, path: &Path, e: rustls::pki_types::pem::Error| TlsError::Pem {
        file,
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(TlsFile::Certificate, cert, e))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_path_buf(),
        });
    }
    let private_key = match PrivateKeyDer::from_pem_slice(&key_pem) {
        Ok(private_key) => private_key,
        Err(rustls::pki_types::pem::Error::NoItemsFound) => {
            return Err(TlsError::NoKey {
                path: key.to_path_buf(),
            })
        }
        Err(e) => return Err(pem_error(TlsFile::Key, key, e)),
    };
    let builder = rustls::ServerConfig::builder_with_provider(install_provider())
        .with_safe_default_protocol_versions()
        .map_err(|reason| TlsError::Unusable {
            file: TlsFile::Certificate,
            path: cert.to_path_buf(),
            reason,
        })?
        .with_no_client_auth();
    // `with_single_cert` loads the key, then compares its public key with the certificate's.
    let config = builder
        .with_single_cert(chain, private_key)
        .map_err(|reason| match reason {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
                TlsError::KeyMismatch {
                    cert: cert.to_path_buf(),
                    key: key.to_path_buf(),
                }
            }
            rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => {
                TlsError::Unusable {
                    file: TlsFile::Certificate,
                    path: cert.to_path_buf(),
                    reason,
                }
            }
            reason => TlsError::Unusable {
                file: TlsFile::Key,
                path: key.to_path_buf(),
                reason,
            },
        })?;
    Ok(Arc::new(config))
}

#[allow(
    clippy::disallowed_methods,
    reason = "read once at start, with the configuration, before any connection exists"
)]
fn read(file: TlsFile, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            TlsError::Missing {
                file,
                path: path.to_path_buf(),
            }
        } else {
            TlsError::Read {
                file,
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

/// Ciphertext read from the inner stream at once.
const INCOMING_BYTES: usize = 16 * 1024;
/// Most bytes of records rustls holds for sending (and so what `outgoing` holds).
const OUTGOING_BYTES: usize = 64 * 1024;

/// The server side of TLS over another [`ByteStream`].
///
/// Cancellation: a dropped `read` loses nothing unless it was writing (a handshake flight,
/// an alert); a dropped `write_all` may leave a record half-written. Either leaves the
/// record stream possibly torn, and the stream is then closed without a `close_notify`;
/// the connection code ends a connection at every such cancellation anyway (a timeout or
/// the server stopping).
pub struct TlsStream {
    inner: Box<dyn ByteStream>,
    tls: rustls::ServerConnection,
    /// Ciphertext from the peer: `incoming[start..end]` is not yet given to rustls.
    incoming: Box<[u8]>,
    start: usize,
    end: usize,
    /// Records rustls produced, being written.
    outgoing: Vec<u8>,
    /// A write to the inner stream began and did not finish, or rustls refused the peer:
    /// no `close_notify` on shutdown.
    broken: bool,
}

impl TlsStream {
    /// TLS over `inner` with `config`; the handshake runs on the first read or write, or
    /// on [`TlsStream::handshake`].
    pub fn new(
        inner: Box<dyn ByteStream>,
        config: Arc<rustls::ServerConfig>,
    ) -> io::Result<TlsStream> {
        let mut tls = rustls::ServerConnection::new(config).map_err(io::Error::other)?;
        tls.set_buffer_limit(Some(OUTGOING_BYTES));
        Ok(TlsStream {
            inner,
            tls,
            incoming: vec![0u8; INCOMING_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            outgoing: Vec::new(),
            broken: false,
        })
    }

    /// Runs the handshake to its end (the caller bounds it in time). An error is the peer's
    /// fault or its going away; rustls's alert, if it has one, was sent.
    pub async fn handshake(&mut self) -> io::Result<()> {
        while self.tls.is_handshaking() {
            self.flush().await?;
            if !self.tls.is_handshaking() {
                break;
            }
            if self.fill().await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection during the TLS handshake",
                ));
            }
        }
        // The server's last flight (TLS 1.2) or its session tickets (TLS 1.3).
        self.flush().await
    }

    /// Writes every record rustls has for the peer.
    async fn flush(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            self.outgoing.clear();
            self.tls.write_tls(&mut self.outgoing)?;
            self.broken = true;
            self.inner.write_all(&self.outgoing).await?;
            self.broken = false;
        }
        Ok(())
    }

    /// Gives rustls more ciphertext (what is left of the last inner read, else one more
    /// inner read) and processes it; the number of bytes given, 0 at the end of the stream
    /// (or after the peer's `close_notify`). A record rustls refuses is an `InvalidData`
    /// error, after its alert was sent.
    async fn fill(&mut self) -> io::Result<usize> {
        if self.start == self.end {
            let n = self.inner.read(&mut self.incoming).await?;
            self.start = 0;
            self.end = n;
        }
        let mut pending = &self.incoming[self.start..self.end];
        let n = self.tls.read_tls(&mut pending)?;
        self.start += n;
        if let Err(e) = self.tls.process_new_packets() {
            // The alert that says why, if the peer still listens.
            let _ = self.flush().await;
            self.broken = true;
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        Ok(n)
    }

    async fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match self.tls.reader().read(buf) {
                // 0: the peer's close_notify, the clean end of the stream.
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // UnexpectedEof: the peer closed without a close_notify (a truncation).
                Err(e) => return Err(e),
            }
            // What the records read so far call for (a handshake flight, a key update).
            self.flush().await?;
            self.fill().await?;
        }
    }

    async fn write_plain(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.write_plain_vectored(&[io::IoSlice::new(buf)]).await?;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Some of `bufs` as TLS records (rustls gathers the slices; after a flush it has room
    /// for up to OUTGOING_BYTES), flushed: the bytes taken.
    async fn write_plain_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        if self.tls.is_handshaking() {
            self.handshake().await?;
        }
        let n = self.tls.writer().write_vectored(bufs)?;
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the TLS connection takes no more data",
            ));
        }
        self.flush().await?;
        Ok(n)
    }

    async fn close(&mut self) -> io::Result<()> {
        let notified = if self.broken {
            Ok(())
        } else {
            self.tls.send_close_notify();
            self.flush().await
        };
        let closed = self.inner.shutdown().await;
        notified.and(closed)
    }
}

impl ByteStream for TlsStream {
    fn read<'a>(&'a mut self, buf: &'a mut [u8]) -> BoxFuture<'a, io::Result<usize>> {
        Box::pin(self.read_plain(buf))
    }

    fn write_all<'a>(&'a mut self, buf: &'a [u8]) -> BoxFuture<'a, io::Result<()>> {
        Box::pin(self.write_plain(buf))
    }

    fn write_vectored<'a>(
        &'a mut self,
        bufs: &'a [io::IoSlice<'a>],
    ) -> BoxFuture<'a, io::Result<usize>> {
        Box::pin(self.write_plain_vectored(bufs))
    }

    /// Sends `close_notify` (unless the record stream may be torn), then shuts the inner
    /// stream down. The caller bounds it in time: a peer that reads nothing blocks it.
    fn shutdown(&mut self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(self.close())
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "tests' fixtures")]
pub(crate) mod tests {
    use super::*;
    use cairn_engine::env::real::block_on;
    use cairn_engine::env::{race, Either};
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::task::{Poll, Waker};

    /// A self-signed certificate for `localhost` and its key, as PEM files in a directory
    /// that lives as long as the value.
    pub(crate) struct TestCert {
        pub dir: tempfile::TempDir,
        pub cert: PathBuf,
        pub key: PathBuf,
        pub der: CertificateDer<'static>,
    }

    pub(crate) fn test_cert() -> TestCert {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        TestCert {
            dir,
            cert,
            key,
            der: made.cert.der().clone(),
        }
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_certificate_and_its_key_load() {
        let made = test_cert();
        let config = server_config(&made.cert, &made.key).unwrap();
        assert!(config.alpn_protocols.is_empty());
        // A chain of two certificates (here the same one twice) loads too.
        let pem = std::fs::read_to_string(&made.cert).unwrap();
        let chain = write(made.dir.path(), "chain.pem", &format!("{pem}{pem}"));
        server_config(&chain, &made.key).unwrap();
    }

    #[test]
    fn errors_name_the_file_and_what_is_wrong_with_it() {
        let made = test_cert();
        let dir = made.dir.path();
        let missing = dir.join("missing.pem");
        let message = |r: Result<_, TlsError>| {
            let e = r.expect_err("refused");
            (e.file(), e.to_string())
        };

        assert_eq!(
            message(server_config(&missing, &made.key)),
            (
                TlsFile::Certificate,
                format!("{}: no such file", missing.display())
            )
        );
        assert_eq!(
            message(server_config(&made.cert, &missing)),
            (TlsFile::Key, format!("{}: no such file", missing.display()))
        );
        // A directory cannot be read as a file.
        let (file, text) = message(server_config(dir, &made.key));
        assert_eq!(file, TlsFile::Certificate);
        assert!(
            text.starts_with(&format!("cannot read {}: ", dir.display())),
            "{text}"
        );

        // The key given as the certificate, the certificate as the key.
        assert_eq!(
            message(server_config(&made.key, &made.key)),
            (
                TlsFile::Certificate,
                format!(
                    "{}: no certificate in it (expected a PEM \"BEGIN CERTIFICATE\" section)",
                    made.key.display()
                )
            )
        );
        let (file, text) = message(server_config(&made.cert, &made.cert));
        assert_eq!(file, TlsFile::Key);
        assert!(
            text.starts_with(&format!("{}: no private key in it", made.cert.display())),
            "{text}"
        );
        let empty = write(dir, "empty.pem", "");
        assert_eq!(
            message(server_config(&empty, &made.key)).0,
            TlsFile::Certificate
        );
        assert_eq!(message(server_config(&made.cert, &empty)).0, TlsFile::Key);

        // Broken PEM.
        let torn = write(dir, "torn.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n");
        let (file, text) = message(server_config(&torn, &made.key));
        assert_eq!(file, TlsFile::Certificate);
        assert!(
            text.starts_with(&format!("{}: not valid PEM: ", torn.display())),
            "{text}"
        );
        // PEM whose body is not a certificate.
        let junk = write(
            dir,
            "junk.pem",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let (file, text) = message(server_config(&junk, &made.key));
        assert_eq!(file, TlsFile::Certificate);
        assert!(
            text.starts_with(&format!("{}: unusable: ", junk.display())),
            "{text}"
        );
        let junk_key = write(
            dir,
            "junk-key.pem",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        );
        let (file, text) = message(server_config(&made.cert, &junk_key));
        assert_eq!(file, TlsFile::Key);
        assert!(
            text.starts_with(&format!("{}: unusable: ", junk_key.display())),
            "{text}"
        );

        // Another certificate's key.
        let other = test_cert();
        assert_eq!(
            message(server_config(&made.cert, &other.key)),
            (
                TlsFile::Key,
                format!(
                    "{}: the private key does not match the certificate in {}",
                    other.key.display(),
                    made.cert.display()
                )
            )
        );
    }

    #[test]
    fn the_provider_is_ring_and_the_process_default() {
        let provider = install_provider();
        assert!(Arc::ptr_eq(&provider, &install_provider()), "made once");
        let ring = rustls::crypto::ring::default_provider();
        assert_eq!(
            format!("{:?}", provider.cipher_suites),
            format!("{:?}", ring.cipher_suites)
        );
        assert!(CryptoProvider::get_default().is_some());
    }

    // ---- an in-memory duplex: the TLS stream on one end, rustls's client on the other ----

    #[derive(Default)]
    struct Pipe {
        bytes: VecDeque<u8>,
        closed: bool,
        reader: Option<Waker>,
        writer: Option<Waker>,
    }

    /// Bytes in flight per direction, like a socket's buffers: a writer waits beyond it.
    const PIPE_CAPACITY: usize = 8 * 1024;

    struct End {
        rx: Arc<Mutex<Pipe>>,
        tx: Arc<Mutex<Pipe>>,
        /// Most bytes one read returns.
        max_read: usize,
        /// What the first read returns at most (a split at that byte).
        first_read: Option<usize>,
    }

    fn duplex(server_max_read: usize, first_read: Option<usize>) -> (End, End) {
        let up = Arc::new(Mutex::new(Pipe::default()));
        let down = Arc::new(Mutex::new(Pipe::default()));
        let server = End {
            rx: up.clone(),
            tx: down.clone(),
            max_read: server_max_read,
            first_read,
        };
        let client = End {
            rx: down,
            tx: up,
            max_read: usize::MAX,
            first_read: None,
        };
        (server, client)
    }

    fn close(pipe: &Mutex<Pipe>) {
        let mut pipe = pipe.lock().unwrap();
        pipe.closed = true;
        if let Some(waker) = pipe.reader.take() {
            waker.wake();
        }
    }

    impl Drop for End {
        fn drop(&mut self) {
            close(&self.tx);
        }
    }

    impl ByteStream for End {
        fn read<'a>(&'a mut self, buf: &'a mut [u8]) -> BoxFuture<'a, io::Result<usize>> {
            Box::pin(std::future::poll_fn(move |cx| {
                let mut pipe = self.rx.lock().unwrap();
                if pipe.bytes.is_empty() {
                    if pipe.closed {
                        return Poll::Ready(Ok(0));
                    }
                    pipe.reader = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                let limit = self.first_read.take().unwrap_or(self.max_read);
                let n = buf.len().min(limit).min(pipe.bytes.len());
                for (slot, byte) in buf.iter_mut().zip(pipe.bytes.drain(..n)) {
                    *slot = byte;
                }
                if let Some(waker) = pipe.writer.take() {
                    waker.wake();
                }
                Poll::Ready(Ok(n))
            }))
        }

        fn write_all<'a>(&'a mut self, buf: &'a [u8]) -> BoxFuture<'a, io::Result<()>> {
            let mut rest = buf;
            Box::pin(std::future::poll_fn(move |cx| {
                let mut pipe = self.tx.lock().unwrap();
                loop {
                    if pipe.closed {
                        return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
                    }
                    if rest.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                    let room = PIPE_CAPACITY - pipe.bytes.len();
                    if room == 0 {
                        pipe.writer = Some(cx.waker().clone());
                        return Poll::Pending;
                    }
                    let n = room.min(rest.len());
                    pipe.bytes.extend(&rest[..n]);
                    rest = &rest[n..];
                    if let Some(waker) = pipe.reader.take() {
                        waker.wake();
                    }
                }
            }))
        }

        fn shutdown(&mut self) -> BoxFuture<'_, io::Result<()>> {
            close(&self.tx);
            Box::pin(async { Ok(()) })
        }
    }

    /// rustls's client over the other end, driven by hand.
    struct Client {
        io: End,
        tls: rustls::ClientConnection,
        /// Plaintext received.
        received: Vec<u8>,
        /// Every ciphertext byte the server sent.
        wire: Vec<u8>,
    }

    fn client_config(
        trusted: &CertificateDer<'static>,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(trusted.clone()).unwrap();
        Arc::new(
            rustls::ClientConfig::builder_with_provider(install_provider())
                .with_protocol_versions(versions)
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }

    impl Client {
        fn new(io: End, config: Arc<rustls::ClientConfig>) -> Client {
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            Client {
                io,
                tls: rustls::ClientConnection::new(config, name).unwrap(),
                received: Vec::new(),
                wire: Vec::new(),
            }
        }

        async fn flush(&mut self) -> io::Result<()> {
            while self.tls.wants_write() {
                let mut out = Vec::new();
                self.tls.write_tls(&mut out)?;
                self.io.write_all(&out).await?;
            }
            Ok(())
        }

        /// One read of the pipe, processed; false at its end.
        async fn fill(&mut self) -> io::Result<bool> {
            let mut buf = vec![0u8; 4096];
            let n = self.io.read(&mut buf).await?;
            self.wire.extend_from_slice(&buf[..n]);
            let mut rest = &buf[..n];
            loop {
                self.tls.read_tls(&mut rest)?;
                self.tls
                    .process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                match self.tls.reader().read_to_end(&mut self.received) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if rest.is_empty() {
                    return Ok(n > 0);
                }
            }
        }

        async fn handshake(&mut self) -> io::Result<()> {
            while self.tls.is_handshaking() {
                self.flush().await?;
                if !self.fill().await? {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            self.flush().await
        }

        async fn send(&mut self, data: &[u8]) -> io::Result<()> {
            self.tls.writer().write_all(data)?;
            self.flush().await
        }

        /// Until `len` bytes of plaintext arrived.
        async fn receive(&mut self, len: usize) -> io::Result<Vec<u8>> {
            while self.received.len() < len {
                self.flush().await?;
                if !self.fill().await? {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            Ok(self.received.drain(..len).collect())
        }

        /// Until the end of the pipe; whether the server said close_notify first.
        async fn until_closed(&mut self) -> io::Result<bool> {
            while self.fill().await? {}
            let mut rest = Vec::new();
            Ok(matches!(self.tls.reader().read_to_end(&mut rest), Ok(0)))
        }
    }

    const REQUEST: &[u8] = b"a request of some bytes, then more bytes";

    fn reply() -> Vec<u8> {
        // Several records' worth, more than rustls buffers at once.
        (0..150_000u32).map(|i| (i % 251) as u8).collect()
    }

    /// The server's side of one exchange: the handshake, the request read with reads of at
    /// most `read_size` bytes, the reply written, close_notify.
    async fn serve_one(mut tls: TlsStream, read_size: usize) -> io::Result<Vec<u8>> {
        tls.handshake().await?;
        let mut request = vec![0u8; REQUEST.len()];
        let mut got = 0;
        while got < request.len() {
            let end = (got + read_size).min(request.len());
            match tls.read(&mut request[got..end]).await? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => got += n,
            }
        }
        tls.write_all(&reply()).await?;
        tls.shutdown().await?;
        Ok(request)
    }

    async fn client_one(mut client: Client) -> io::Result<(Vec<u8>, bool)> {
        client.send(REQUEST).await?;
        let reply = client.receive(reply().len()).await?;
        let notified = client.until_closed().await?;
        Ok((reply, notified))
    }

    fn exchange(
        server_max_read: usize,
        first_read: Option<usize>,
        read_size: usize,
        versions: &[&'static rustls::SupportedProtocolVersion],
        made: &TestCert,
        config: &Arc<rustls::ServerConfig>,
    ) {
        let (server_end, client_end) = duplex(server_max_read, first_read);
        let tls = TlsStream::new(Box::new(server_end), config.clone()).unwrap();
        let client = Client::new(client_end, client_config(&made.der, versions));
        let (served, answered) =
            block_on(async { futures::join!(serve_one(tls, read_size), client_one(client)) });
        assert_eq!(served.unwrap(), REQUEST);
        let (reply_got, notified) = answered.unwrap();
        assert!(reply_got == reply(), "the reply arrives whole and in order");
        assert!(notified, "close_notify before the end of the stream");
    }

    #[test]
    fn a_request_and_its_reply_cross_whole_over_tls_1_3_and_1_2() {
        let made = test_cert();
        let config = server_config(&made.cert, &made.key).unwrap();
        for versions in [&[&rustls::version::TLS13][..], &[&rustls::version::TLS12]] {
            exchange(usize::MAX, None, usize::MAX, versions, &made, &config);
            // Every read of the wire one byte, every plaintext read one byte.
            exchange(1, None, 1, versions, &made, &config);
        }
    }

    #[test]
    fn the_client_bytes_split_at_every_position_still_make_the_exchange() {
        let made = test_cert();
        let config = server_config(&made.cert, &made.key).unwrap();
        // How many bytes the client sends in all: one exchange, counted.
        let (server_end, client_end) = duplex(usize::MAX, None);
        let counted = Arc::new(Mutex::new(0usize));
        let tls = TlsStream::new(
            Box::new(Counting {
                inner: server_end,
                read: counted.clone(),
            }),
            config.clone(),
        )
        .unwrap();
        let client = Client::new(
            client_end,
            client_config(&made.der, &[&rustls::version::TLS13]),
        );
        let (served, answered) =
            block_on(async { futures::join!(serve_one(tls, usize::MAX), client_one(client)) });
        served.unwrap();
        answered.unwrap();
        let total = *counted.lock().unwrap();
        assert!(total > REQUEST.len(), "{total}");
        for split in 1..total {
            exchange(
                usize::MAX,
                Some(split),
                usize::MAX,
                &[&rustls::version::TLS13],
                &made,
                &config,
            );
        }
    }

    /// Counts the bytes read through it.
    struct Counting {
        inner: End,
        read: Arc<Mutex<usize>>,
    }

    impl ByteStream for Counting {
        fn read<'a>(&'a mut self, buf: &'a mut [u8]) -> BoxFuture<'a, io::Result<usize>> {
            Box::pin(async move {
                let n = self.inner.read(buf).await?;
                *self.read.lock().unwrap() += n;
                Ok(n)
            })
        }
        fn write_all<'a>(&'a mut self, buf: &'a [u8]) -> BoxFuture<'a, io::Result<()>> {
            self.inner.write_all(buf)
        }
        fn shutdown(&mut self) -> BoxFuture<'_, io::Result<()>> {
            self.inner.shutdown()
        }
    }

    #[test]
    fn a_dropped_read_loses_nothing() {
        let made = test_cert();
        let config = server_config(&made.cert, &made.key).unwrap();
        let (server_end, client_end) = duplex(usize::MAX, None);
        let mut tls = TlsStream::new(Box::new(server_end), config).unwrap();
        let mut client = Client::new(
            client_end,
            client_config(&made.der, &[&rustls::version::TLS13]),
        );
        block_on(async {
            let (handshake, shaken) = futures::join!(tls.handshake(), client.handshake());
            handshake.unwrap();
            shaken.unwrap();
            // A read with nothing to read, given up (as a timeout gives it up).
            let mut buf = [0u8; 64];
            let polled = race(tls.read(&mut buf), std::future::ready(())).await;
            assert!(matches!(polled, Either::Right(())), "nothing to read yet");
            let (read, sent) = futures::join!(tls.read(&mut buf), client.send(b"after"));
            sent.unwrap();
            assert_eq!(&buf[..read.unwrap()], b"after");
        });
    }

    #[test]
    fn a_peer_that_speaks_no_tls_fails_the_handshake_and_gets_an_alert() {
        let made = test_cert();
        let config = server_config(&made.cert, &made.key).unwrap();
        let (server_end, mut client_end) = duplex(usize::MAX, None);
        let mut tls = TlsStream::new(Box::new(server_end), config).unwrap();
        block_on(async {
            // An Iggy request header where a ClientHello should be.
            let plain = [0u8; 256];
            let (handshake, sent) = futures::join!(tls.handshake(), client_end.write_all(&plain));
            sent.unwrap();
            let e = handshake.expect_err("not TLS");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
            drop(tls);
            let mut alert = Vec::new();
            let mut buf = [0u8; 64];
            loop {
                match client_end.read(&mut buf).await.unwrap() {
                    0 => break,
                    n => alert.extend_from_slice(&buf[..n]),
                }
            }
            assert_eq!(alert.first(), Some(&0x15), "an alert record: {alert:?}");
        });
    }

    #[test]
    fn a_peer_that_leaves_mid_handshake_is_an_unexpected_eof() {
        let made = test_cert();
        let config = server_config(&made.cert, &made.key).unwrap();
        let (server_end, client_end) = duplex(usize::MAX, None);
        let mut tls = TlsStream::new(Box::new(server_end), config).unwrap();
        let mut client = Client::new(
            client_end,
            client_config(&made.der, &[&rustls::version::TLS13]),
        );
        block_on(async {
            // Half a ClientHello, then the connection closes.
            let mut hello = Vec::new();
            client.tls.write_tls(&mut hello).unwrap();
            client
                .io
                .write_all(&hello[..hello.len() / 2])
                .await
                .unwrap();
            drop(client);
            let e = tls.handshake().await.expect_err("the peer left");
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        });
    }

    #[test]
    fn a_client_that_trusts_another_certificate_fails_the_handshake() {
        let made = test_cert();
        let other = test_cert();
        let config = server_config(&made.cert, &made.key).unwrap();
        let (server_end, client_end) = duplex(usize::MAX, None);
        let mut tls = TlsStream::new(Box::new(server_end), config).unwrap();
        let mut client = Client::new(
            client_end,
            client_config(&other.der, &[&rustls::version::TLS13]),
        );
        let (handshake, answered) = block_on(async {
            futures::join!(tls.handshake(), async move {
                let answered = client.handshake().await;
                // The client's alert, then it leaves.
                let _ = client.flush().await;
                answered
            })
        });
        let refused = answered.expect_err("the client refuses the certificate");
        // (BadSignature: the other certificate has the same subject, so it is taken for the
        // issuer.)
        assert!(
            refused.to_string().contains("invalid peer certificate"),
            "{refused}"
        );
        // The server learns it from the client's alert (or the connection's end).
        assert!(handshake.is_err());
    }

    #[test]
    fn after_a_refused_peer_no_close_notify_is_sent() {
        let made = test_cert();
        let config = server_config(&made.cert, &made.key).unwrap();
        let (server_end, mut client_end) = duplex(usize::MAX, None);
        let mut tls = TlsStream::new(Box::new(server_end), config).unwrap();
        block_on(async {
            let (handshake, sent) = futures::join!(
                tls.handshake(),
                client_end.write_all(&[0x17, 3, 3, 0, 1, 0])
            );
            sent.unwrap();
            handshake.expect_err("a broken record");
            let mut after_alert = Vec::new();
            let mut buf = [0u8; 64];
            let n = client_end.read(&mut buf).await.unwrap();
            assert_eq!(buf[0], 0x15, "the alert");
            tls.shutdown().await.unwrap();
            loop {
                match client_end.read(&mut buf).await.unwrap() {
                    0 => break,
                    n => after_alert.extend_from_slice(&buf[..n]),
                }
            }
            assert!(n > 0 && after_alert.is_empty(), "{after_alert:?}");
        });
    }
}

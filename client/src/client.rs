//! The reconnecting client: one connection, one request in flight (`&mut self`), the
//! session rules of `docs/wire.md` §2–§3 and the reconnect rule of `docs/wire.md` §2.4.

use crate::connection::Connection;
use crate::error::{ClientError, ProtocolError};
use crate::frame::{decode_reply, encode_request, Route, Sequence, DEFAULT_MAX_REPLY_BYTES};
use bytes::Bytes;
use cairn_engine::env::Env;
use iggy_binary_protocol::requests::users::{LoginRegisterRequest, LoginRegisterWithPatRequest};
use iggy_binary_protocol::responses::users::LoginRegisterResponse;
use iggy_binary_protocol::{
    ClientVersionInfo, WireDecode, WireEncode, WireName, IGGY_PROTOCOL_VERSION,
};
use std::net::SocketAddr;
use std::time::Duration;

/// The `sdk_name` this client sends in its login.
pub const SDK_NAME: &str = "cairn";
/// The `sdk_version` this client sends in its login.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");
/// Usernames the SDK accepts (bytes), checked before sending.
pub const USERNAME_LEN: std::ops::RangeInclusive<usize> = 3..=50;
/// Passwords the SDK accepts (bytes), checked before sending.
pub const PASSWORD_LEN: std::ops::RangeInclusive<usize> = 3..=100;
/// Tokens the Register body can carry (a one-byte length).
pub const TOKEN_LEN: std::ops::RangeInclusive<usize> = 1..=255;

/// What a login presents: a username and password, or a personal access token.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    Password { username: String, password: String },
    Token(String),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Password { username, .. } => f
                .debug_struct("Password")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            Credentials::Token(_) => f.debug_tuple("Token").field(&"<redacted>").finish(),
        }
    }
}

/// How to reach a server and how long to wait for it.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub address: SocketAddr,
    /// Logged in with at connect and after every reconnect; `None` connects anonymously.
    pub credentials: Option<Credentials>,
    /// How long a TCP connect may take.
    pub connect_timeout: Duration,
    /// How long a request may wait for its reply (the SDK's 30 s).
    pub reply_timeout: Duration,
    /// Connection attempts after a failure before giving up (0: never reconnect).
    pub reconnect_retries: u32,
    /// The wait before each reconnection attempt.
    pub reconnect_interval: Duration,
    /// Reply frames above this many bytes are a protocol error.
    pub max_reply_bytes: u32,
}

impl ClientConfig {
    /// The defaults: 5 s connect, 30 s reply, 3 reconnect attempts 1 s apart, 64 MiB frames.
    pub fn new(address: SocketAddr) -> ClientConfig {
        ClientConfig {
            address,
            credentials: None,
            connect_timeout: Duration::from_secs(5),
            reply_timeout: Duration::from_secs(30),
            reconnect_retries: 3,
            reconnect_interval: Duration::from_secs(1),
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
        }
    }

    pub fn with_credentials(mut self, username: &str, password: &str) -> ClientConfig {
        self.credentials = Some(Credentials::Password {
            username: username.to_string(),
            password: password.to_string(),
        });
        self
    }

    /// Logs in (and back in after a reconnect) with the personal access token `token`.
    pub fn with_token(mut self, token: &str) -> ClientConfig {
        self.credentials = Some(Credentials::Token(token.to_string()));
        self
    }
}

/// What a login bound: the user and the session from the Register reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub user_id: u32,
    pub session: u64,
    pub server_protocol_version: u32,
    pub server_version: String,
}

/// A client of one server over one connection, lockstep.
pub struct Client {
    pub(crate) env: Env,
    config: ClientConfig,
    connection: Option<Connection>,
    sequence: Sequence,
    /// Used for every (re)login: the configured ones, or the last successful `login`'s.
    credentials: Option<Credentials>,
    session: Option<Session>,
    /// The last metadata request sent on this session, frame as sent (see
    /// [`Client::replay_last`]; partition ops have no duplicate detection, so a replay
    /// would apply them again); forgotten when the session ends.
    last: Option<(Route, Vec<u8>)>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("address", &self.config.address)
            .field("connected", &self.connection.is_some())
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to `config.address` and, with credentials, logs in.
    #[tracing::instrument(level = "debug", skip(env, config), fields(address = %config.address))]
    pub async fn connect(env: Env, config: ClientConfig) -> Result<Client, ClientError> {
        assert!(!config.reply_timeout.is_zero() && !config.connect_timeout.is_zero());
        let client_id = mint_client_id(&env);
        let mut client = Client {
            env,
            credentials: config.credentials.clone(),
            config,
            connection: None,
            sequence: Sequence::unbound(client_id),
            session: None,
            last: None,
        };
        client.establish().await?;
        Ok(client)
    }

    /// The session of the current login, if any.
    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// The client id the next request carries.
    pub fn client_id(&self) -> u128 {
        self.sequence.client()
    }

    pub fn is_connected(&self) -> bool {
        self.connection.is_some()
    }

    pub fn address(&self) -> SocketAddr {
        self.config.address
    }

    /// Logs in as `username` (Register, `docs/wire.md` §2.2); logs out first when already logged
    /// in. The credentials are remembered for reconnects.
    pub async fn login(&mut self, username: &str, password: &str) -> Result<Session, ClientError> {
        self.login_as(Credentials::Password {
            username: username.to_string(),
            password: password.to_string(),
        })
        .await
    }

    /// Logs in with the personal access token `token` (Register with a token, `docs/wire.md`
    /// §2.2), as [`Client::login`] does with a password.
    pub async fn login_with_token(&mut self, token: &str) -> Result<Session, ClientError> {
        self.login_as(Credentials::Token(token.to_string())).await
    }

    async fn login_as(&mut self, credentials: Credentials) -> Result<Session, ClientError> {
        login_body(&credentials)?; // validate before touching the connection
        if self.connection.is_none() {
            self.open().await?;
        }
        if self.sequence.is_bound() {
            self.logout().await?;
        }
        match self.register(&credentials).await {
            Ok(session) => {
                self.credentials = Some(credentials);
                Ok(session)
            }
            Err(error) if error.triggers_reconnect() => {
                // A login is replayable: reconnect and log in with the new credentials.
                self.drop_connection();
                let previous = self.credentials.replace(credentials);
                match self.reconnect().await {
                    Ok(()) => Ok(self.session.clone().expect("reconnect logged in")),
                    Err(error) => {
                        self.credentials = previous;
                        Err(error)
                    }
                }
            }
            Err(error) => Err(error),
        }
    }

    /// Logs out (operation 3, `docs/wire.md` §2.3): the session ends, a new client id is
    /// minted and the remembered credentials are forgotten (no automatic re-login).
    pub async fn logout(&mut self) -> Result<(), ClientError> {
        if !self.sequence.is_bound() {
            return Err(ClientError::NotLoggedIn {
                command: Route::LOGOUT.name,
            });
        }
        let payload = self.exchange(&Route::LOGOUT, &[]).await?;
        if !payload.is_empty() {
            tracing::debug!(len = payload.len(), "logout reply carries a body");
        }
        self.credentials = None;
        self.unbind();
        Ok(())
    }

    /// Sends command `code` with `body` and returns the reply payload (result section
    /// stripped). `code` is an Iggy command code (1 Ping, 10 GetStats, 101 SendMessages,
    /// 202 CreateStream…); logins and logouts go through [`Client::login`] and
    /// [`Client::logout`].
    pub async fn request(&mut self, code: u32, body: &[u8]) -> Result<Bytes, ClientError> {
        let route = Route::of(code)?;
        if route.operation == Route::REGISTER.operation || route == Route::LOGOUT {
            return Err(ClientError::InvalidRequest(format!(
                "command {code} changes the session; use login() or logout()"
            )));
        }
        self.exchange(&route, body).await
    }

    /// Sends `request` as command `code` and returns the payload.
    pub(crate) async fn call(
        &mut self,
        code: u32,
        request: &impl WireEncode,
    ) -> Result<Bytes, ClientError> {
        let body = request.to_bytes();
        self.request(code, &body).await
    }

    /// Closes the connection, logging out first when logged in (best effort: one attempt,
    /// no reconnect).
    pub async fn close(mut self) {
        if self.sequence.is_bound() && self.connection.is_some() {
            if let Err(error) = self.attempt(&Route::LOGOUT, &[]).await {
                tracing::debug!(%error, "logout before close failed");
            }
        }
        if let Some(connection) = self.connection.take() {
            connection.close().await;
        }
    }

    /// Sends the last metadata request of this session again with its header unchanged
    /// (the same client id and request number), on the same connection, as the SDK does
    /// after a reply of 57 or 58 (`docs/wire.md` §3). The server's duplicate table must answer a
    /// metadata op with its original reply rather than apply it again. Never reconnects: a
    /// replay on another session is another request.
    pub async fn replay_last(&mut self) -> Result<Bytes, ClientError> {
        let Some((route, frame)) = self.last.clone() else {
            return Err(ClientError::InvalidRequest(
                "no metadata request on this session to replay".into(),
            ));
        };
        if self.connection.is_none() {
            return Err(ClientError::NotLoggedIn {
                command: route.name,
            });
        }
        self.round_trip(&route, &frame).await
    }

    /// One request, with the reconnect rule: a failure that triggers a reconnect
    /// (`docs/wire.md` §2.4) while credentials are known reconnects and logs in again, then
    /// replays the request only when it is replayable; a replicated request returns its
    /// error, whose outcome is unknown.
    async fn exchange(&mut self, route: &Route, body: &[u8]) -> Result<Bytes, ClientError> {
        if self.connection.is_none() {
            self.establish().await?;
        }
        let error = match self.attempt(route, body).await {
            Ok(payload) => return Ok(payload),
            Err(error) => error,
        };
        if !(error.triggers_reconnect() && self.credentials.is_some()) {
            return Err(error);
        }
        tracing::warn!(command = route.name, %error, "reconnecting");
        self.drop_connection();
        let reconnected = self.reconnect().await;
        if !route.is_replayable() {
            return Err(error);
        }
        reconnected?;
        tracing::debug!(command = route.name, "replaying after reconnect");
        self.attempt(route, body).await
    }

    /// Sends one request on the current connection and judges its reply. A connection
    /// failure drops the connection; an eviction unbinds the session.
    #[tracing::instrument(level = "debug", skip(self, body), fields(command = route.name, len = body.len()))]
    async fn attempt(&mut self, route: &Route, body: &[u8]) -> Result<Bytes, ClientError> {
        let frame = encode_request(&mut self.sequence, route, body)?;
        if route.operation.is_metadata() {
            self.last = Some((*route, frame.clone()));
        }
        self.round_trip(route, &frame).await
    }

    /// Writes `frame` on the current connection and judges its reply. A connection failure
    /// drops the connection; an eviction unbinds the session.
    async fn round_trip(&mut self, route: &Route, frame: &[u8]) -> Result<Bytes, ClientError> {
        let connection = self
            .connection
            .as_mut()
            .expect("attempt runs on an open connection");
        let result = match connection
            .round_trip(frame, self.config.reply_timeout)
            .await
        {
            Ok(raw) => decode_reply(&raw.head, raw.body, route, self.config.max_reply_bytes),
            Err(error) => Err(error),
        };
        match &result {
            Err(error) if error.is_connection_failure() => self.drop_connection(),
            Err(ClientError::Evicted { .. }) => self.unbind(),
            Err(ClientError::Server { code, .. }) if crate::codes::triggers_reconnect(*code) => {
                self.unbind()
            }
            _ => {}
        }
        result
    }

    /// Connects and logs in when credentials are known; a failed login drops the new
    /// connection, so the next request starts over.
    async fn establish(&mut self) -> Result<(), ClientError> {
        self.open().await?;
        if let Some(credentials) = self.credentials.clone() {
            if let Err(error) = self.register(&credentials).await {
                self.drop_connection();
                return Err(error);
            }
        }
        Ok(())
    }

    /// Up to `reconnect_retries` attempts, each after `reconnect_interval`, to connect
    /// and log in again. Stops early on an error retrying cannot fix (wrong credentials).
    async fn reconnect(&mut self) -> Result<(), ClientError> {
        let mut last = None;
        for attempt in 1..=self.config.reconnect_retries {
            self.env.clock.sleep(self.config.reconnect_interval).await;
            match self.establish().await {
                Ok(()) => {
                    tracing::info!(attempt, "reconnected");
                    return Ok(());
                }
                Err(error) => {
                    tracing::warn!(attempt, %error, "reconnect failed");
                    self.drop_connection();
                    let transient = error.triggers_reconnect()
                        || matches!(error, ClientError::Unreachable { .. });
                    if !transient {
                        return Err(error);
                    }
                    last = Some(error);
                }
            }
        }
        Err(last.unwrap_or(ClientError::Disconnected {
            address: self.config.address,
            source: std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "reconnecting is disabled (reconnect_retries = 0)",
            ),
        }))
    }

    /// Opens a new TCP connection with a fresh, unbound identity.
    async fn open(&mut self) -> Result<(), ClientError> {
        assert!(self.connection.is_none());
        let connection = Connection::open(
            &*self.env.net,
            &*self.env.clock,
            self.config.address,
            self.config.connect_timeout,
            self.config.max_reply_bytes,
        )
        .await?;
        self.connection = Some(connection);
        self.unbind();
        Ok(())
    }

    /// Register on the current connection with a fresh client id (`docs/wire.md` §2.2).
    async fn register(&mut self, credentials: &Credentials) -> Result<Session, ClientError> {
        let body = login_body(credentials)?;
        self.unbind();
        let client = self.sequence.client();
        let payload = self.attempt(&Route::REGISTER, &body).await?;
        let reply: LoginRegisterResponse = decode_exact(Route::REGISTER.name, &payload)?;
        if reply.session == 0 {
            self.drop_connection();
            return Err(ProtocolError::ZeroSession.into());
        }
        self.sequence = Sequence::bound(client, reply.session);
        let session = Session {
            user_id: reply.user_id,
            session: reply.session,
            server_protocol_version: reply.server_protocol_version,
            server_version: reply.server_version.as_str().to_string(),
        };
        tracing::debug!(
            user_id = session.user_id,
            session = session.session,
            "logged in"
        );
        self.session = Some(session.clone());
        Ok(session)
    }

    /// Forgets the session and mints a new client id.
    fn unbind(&mut self) {
        self.sequence = Sequence::unbound(mint_client_id(&self.env));
        self.session = None;
        self.last = None;
    }

    fn drop_connection(&mut self) {
        if self.connection.take().is_some() {
            tracing::debug!(address = %self.config.address, "connection dropped");
        }
        self.unbind();
    }
}

/// The Register body: `ClientVersionInfo` + `LoginRegisterRequest`, or
/// `LoginRegisterWithPatRequest` for a token (`docs/wire.md` §2.2).
pub fn login_body(credentials: &Credentials) -> Result<Bytes, ClientError> {
    let version_info = ClientVersionInfo {
        protocol_version: IGGY_PROTOCOL_VERSION,
        sdk_name: WireName::new(SDK_NAME).expect("sdk name is a valid name"),
        sdk_version: WireName::new(SDK_VERSION).expect("sdk version is a valid name"),
    };
    let (username, password) = match credentials {
        Credentials::Password { username, password } => (username, password),
        Credentials::Token(token) => {
            if !TOKEN_LEN.contains(&token.len()) {
                return Err(ClientError::InvalidRequest(format!(
                    "token is {} bytes, must be {}..={}",
                    token.len(),
                    TOKEN_LEN.start(),
                    TOKEN_LEN.end()
                )));
            }
            let request = LoginRegisterWithPatRequest {
                version_info,
                token: secrecy::SecretString::from(token.clone()),
                client_context: None,
            };
            return Ok(request.to_bytes());
        }
    };
    if !USERNAME_LEN.contains(&username.len()) {
        return Err(ClientError::InvalidRequest(format!(
            "username is {} bytes, must be {}..={}",
            username.len(),
            USERNAME_LEN.start(),
            USERNAME_LEN.end()
        )));
    }
    if !PASSWORD_LEN.contains(&password.len()) {
        return Err(ClientError::InvalidRequest(format!(
            "password is {} bytes, must be {}..={}",
            password.len(),
            PASSWORD_LEN.start(),
            PASSWORD_LEN.end()
        )));
    }
    let request = LoginRegisterRequest {
        version_info,
        username: name(username, "username")?,
        password: secrecy::SecretString::from(password.clone()),
        client_context: None,
    };
    Ok(request.to_bytes())
}

/// A [`WireName`] from `value`, or an error naming `what`.
pub(crate) fn name(value: &str, what: &str) -> Result<WireName, ClientError> {
    WireName::new(value).map_err(|error| {
        ClientError::InvalidRequest(format!("{what} `{value}` is not a valid name: {error}"))
    })
}

/// Decodes all of `payload` as a `T`; bytes left over are a protocol error.
pub(crate) fn decode_exact<T: WireDecode>(
    command: &'static str,
    payload: &[u8],
) -> Result<T, ClientError> {
    let (value, consumed) =
        T::decode(payload).map_err(|source| ProtocolError::BadBody { command, source })?;
    if consumed != payload.len() {
        return Err(ProtocolError::TrailingBytes {
            command,
            extra: payload.len() - consumed,
        }
        .into());
    }
    Ok(value)
}

/// A nonzero u128 client id from the environment's entropy.
fn mint_client_id(env: &Env) -> u128 {
    let high = u128::from(env.entropy.next_u64());
    let low = u128::from(env.entropy.next_u64());
    let id = (high << 64) | low;
    if id == 0 {
        1
    } else {
        id
    }
}

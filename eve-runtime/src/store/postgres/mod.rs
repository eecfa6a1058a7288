//! The PostgreSQL store: one database shared by a fleet of `eve serve` nodes.
//!
//! Why `tokio-postgres` with `deadpool-postgres` (and not `sqlx`): the store is async already
//! and needs three things from its driver: a pool with a per-connection statement cache (every
//! statement here is prepared once per connection), transactions whose row locks decide who
//! wins a claim, and the raw notification stream of a connection for `LISTEN/NOTIFY`
//! (`Connection::poll_message`). tokio-postgres gives all three with a small dependency tree,
//! no macros and no compile-time database; sqlx would add its query macros, its own runtime
//! layer and an `any`-driver abstraction this crate does not use.
//!
//! What this backend adds to the [`Store`] contract, for a fleet:
//! - migrations run at open under an advisory lock (`schema.rs`), so nodes may start together;
//! - a lease carries a fencing token from a sequence, and a batch carrying an older token is
//!   refused ([`StoreError::Fenced`]) inside its own transaction (`sql/leases.rs`);
//! - leases are claimed with `FOR UPDATE SKIP LOCKED`, and [`Store::sessions_with_work`] leaves
//!   out sessions under a live lease, so nodes split the work without queueing on each other;
//! - every commit notifies the other nodes (`listen.rs`), which is how a node learns of new
//!   events to stream, accepted messages, approval answers and schedule fires; the engine's
//!   polling is only the fallback.
//!
//! A store lives in one schema of the database: the URL's `options=-csearch_path=NAME` (or the
//! role's default, `public`) chooses it, so one server can hold several projects (or test runs).

mod builds;
mod check;
mod import;
mod listen;
mod releases;
mod schema;
mod sql;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::{oneshot, watch};
use tokio_postgres::NoTls;

use super::*;

pub use import::{ImportReport, SpotCheck, TableImport, import_sqlite};

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        use tokio_postgres::error::SqlState;
        match e.as_db_error() {
            Some(db)
                if *db.code() == SqlState::DATA_CORRUPTED
                    || *db.code() == SqlState::INDEX_CORRUPTED =>
            {
                StoreError::Damaged(format!("{} ({})", db.message(), db.code().code()))
            }
            Some(db) => StoreError::Backend(format!("{} ({})", db.message(), db.code().code())),
            None => StoreError::Backend(error_chain(&e)),
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => StoreError::Backend(format!("connection pool: {other}")),
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// A connection URL with its password replaced by `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => userinfo.to_owned(),
    };
    let tail = redact_query_password(tail);
    format!("{scheme}://{user}@{host}{tail}")
}

fn redact_query_password(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => kv.to_owned(),
        })
        .collect();
    format!("{path}?{}", parts.join("&"))
}

/// Where a URL without a host looks for the server's Unix socket, in order (Debian's and
/// PostgreSQL's own default folders, as libpq does).
const SOCKET_DIRS: &[&str] = &["/var/run/postgresql", "/tmp"];

/// Prepares the run loop's statements on a connection, all in one pipelined round trip, into
/// its statement cache. Best effort: a statement that cannot be prepared (a table a pending
/// migration adds) is prepared on first use instead.
async fn warm(client: &deadpool_postgres::ClientWrapper) {
    let hot = sql::hot_statements();
    for prepared in
        futures::future::join_all(hot.iter().map(|sql| client.prepare_cached(sql))).await
    {
        if let Err(e) = prepared {
            tracing::debug!(error = %e, "a statement was not prepared ahead");
        }
    }
}

/// How a [`PgStore`] is set up.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Pooled connections at most (besides the one that listens).
    pub(crate) pool_size: usize,
    /// Who counts as a dead lease holder: [`ExpiryOnly`] by default (nodes of a fleet cannot
    /// see each other's processes; only expiry frees a lease, and fencing stops a zombie).
    pub(crate) liveness: Arc<dyn Liveness>,
    /// How long to wait for the server at open.
    pub(crate) connect_timeout: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            pool_size: 16,
            liveness: Arc::new(ExpiryOnly),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// The PostgreSQL store.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    /// The URL with its password redacted.
    shown: String,
    /// This instance's id, the payload of its notifications (its own are ignored).
    instance: String,
    /// The notification channel of this store's schema.
    channel: String,
    foreign: watch::Sender<u64>,
    liveness: Arc<dyn Liveness>,
    listener: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.inner.shown)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to `url` (`postgres://user:password@host:port/db`, or a Unix socket on this
    /// machine: `postgres:///db?host=/var/run/postgresql`, or `postgres:///db` for the default
    /// socket folders), applies the migrations and starts listening for other nodes' commits.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        Self::connect_with(url, PgOptions::default()).await
    }

    /// [`PgStore::connect`] with chosen options.
    pub(crate) async fn connect_with(url: &str, options: PgOptions) -> StoreResult<Self> {
        let shown = redact_url(url);
        let unreachable = |cause: String| StoreError::Unreachable {
            url: shown.clone(),
            cause,
        };
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| unreachable(format!("invalid URL: {e}")))?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            // `postgres:///db`, as libpq reads it: the server's Unix socket on this machine.
            let port = config.get_ports().first().copied().unwrap_or(5432);
            let dir = SOCKET_DIRS
                .iter()
                .find(|dir| {
                    std::path::Path::new(dir)
                        .join(format!(".s.PGSQL.{port}"))
                        .exists()
                })
                .ok_or_else(|| {
                    unreachable(format!(
                        "the URL names no host, and no PostgreSQL socket for port {port} is in {}: \
                         give the socket's folder (postgres:///DB?host=/path/to/folder) or a host",
                        SOCKET_DIRS.join(" or ")
                    ))
                })?;
            config.host_path(dir);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("eve");
        }
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(2))
            // Every new connection prepares the run loop's statements at once (one pipelined
            // round trip), instead of one round trip per statement on first use mid-step.
            .post_create(deadpool_postgres::Hook::async_fn(|client, _| {
                Box::pin(async move {
                    warm(client).await;
                    Ok(())
                })
            }))
            .build()
            .map_err(|e| unreachable(e.to_string()))?;
        let mut client = tokio::time::timeout(options.connect_timeout, pool.get())
            .await
            .map_err(|_| {
                unreachable(format!(
                    "no answer within {} s",
                    options.connect_timeout.as_secs()
                ))
            })?
            .map_err(|e| {
                unreachable(match e {
                    deadpool_postgres::PoolError::Backend(e) => match e.as_db_error() {
                        Some(db) => db.message().to_owned(),
                        None => error_chain(&e),
                    },
                    other => other.to_string(),
                })
            })?;
        schema::migrate(&mut client).await?;
        // The first connection was warmed before the migrations made its tables; a second is
        // opened now, warmed too, since a step often reads on one while it commits on another.
        warm(&client).await;
        let second = pool.get().await?;
        let schema_name: String = client
            .query_one("SELECT current_schema()", &[])
            .await?
            .try_get(0)?;
        drop((client, second));
        let channel = format!(
            "eve_commits_{}",
            schema_name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                })
                .collect::<String>()
        );
        let instance = ulid::Ulid::new().to_string();
        let (foreign, _) = watch::channel(0u64);
        let (ready_tx, ready_rx) = oneshot::channel();
        let listener = listen::spawn(
            config,
            channel.clone(),
            instance.clone(),
            foreign.clone(),
            ready_tx,
        );
        match tokio::time::timeout(options.connect_timeout, ready_rx).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(cause))) => {
                listener.abort();
                return Err(unreachable(format!(
                    "cannot listen for notifications: {cause}"
                )));
            }
            _ => {
                listener.abort();
                return Err(unreachable(
                    "the listening connection did not start".to_owned(),
                ));
            }
        }
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                shown,
                instance,
                channel,
                foreign,
                liveness: options.liveness,
                listener,
            }),
        })
    }

    async fn client(&self) -> StoreResult<deadpool_postgres::Client> {
        Ok(self.inner.pool.get().await?)
    }

    /// Tells the other nodes, inside the transaction (delivered only if it commits).
    async fn notify(&self, tx: &deadpool_postgres::Transaction<'_>) -> StoreResult<()> {
        let stmt = tx.prepare_cached("SELECT pg_notify($1, $2)").await?;
        tx.execute(&stmt, &[&self.inner.channel, &self.inner.instance])
            .await?;
        Ok(())
    }

    /// Runs `batch` in a transaction of its own and commits, notifying the fleet, in one round
    /// trip: `BEGIN`, the fence checks, every write, the notification and `COMMIT` go out
    /// together. A failed check (a newer lease holder, a missing session) fails inside the
    /// server, which then ends the transaction at `COMMIT` by rolling it back.
    async fn commit_batch(&self, batch: Batch) -> StoreResult<Committed> {
        let open = OpenTransaction(Some(self.client().await?));
        let client = open.client()?;
        // A step's checkpoint (not durable): a crash of the server (not of eve) may lose the
        // last ones, and resume redoes that work, as on SQLite. What an API promised is durable.
        let begin = if batch.durable {
            "BEGIN"
        } else {
            "BEGIN; SET LOCAL synchronous_commit TO OFF"
        };
        let notify = (self.inner.channel.as_str(), self.inner.instance.as_str());
        let applied = sql::apply(client, batch, Some(begin), Some(notify), Some("COMMIT")).await;
        if applied.is_err() {
            // Ends the transaction if the error came before `COMMIT` was sent (a no-op, with a
            // warning from the server, if `COMMIT` already rolled it back).
            client.batch_execute("ROLLBACK").await?;
        }
        open.close();
        applied
    }
}

/// A pooled connection inside a transaction this store opened by hand (so that `BEGIN` can
/// travel with the first statements). Dropped before [`OpenTransaction::close`] (the caller
/// gave up mid-way, or `COMMIT` failed), the connection leaves the pool and is closed, which
/// rolls the transaction back on the server: no pooled connection is ever handed out inside
/// a transaction.
struct OpenTransaction(Option<deadpool_postgres::Client>);

impl OpenTransaction {
    fn client(&self) -> StoreResult<&deadpool_postgres::Client> {
        self.0
            .as_ref()
            .ok_or_else(|| StoreError::Backend("internal: transaction already closed".into()))
    }

    /// The transaction ended (committed or rolled back): the connection goes back to the pool.
    fn close(mut self) {
        self.0.take();
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

macro_rules! read {
    ($self:ident, $f:ident $(, $arg:expr)*) => {{
        let client = $self.client().await?;
        sql::$f(&client $(, $arg)*).await
    }};
}

#[async_trait::async_trait]
impl Store for PgStore {
    fn shared(&self) -> bool {
        true
    }

    async fn commit(&self, batch: Batch) -> StoreResult<Committed> {
        if batch.is_empty() {
            return Ok(Committed::default());
        }
        self.commit_batch(batch).await
    }

    async fn session(&self, id: &str) -> StoreResult<Option<SessionRecord>> {
        read!(self, session, id)
    }

    async fn sessions(&self, filter: &SessionFilter) -> StoreResult<Vec<SessionRecord>> {
        read!(self, sessions, filter)
    }

    async fn turn(&self, session: &str, seq: u64) -> StoreResult<Option<TurnRecord>> {
        read!(self, turn, session, seq)
    }

    async fn last_turn(&self, session: &str) -> StoreResult<Option<TurnRecord>> {
        read!(self, last_turn, session)
    }

    async fn steps(&self, session: &str, turn: u64) -> StoreResult<Vec<StepRecord>> {
        read!(self, steps, session, turn)
    }

    async fn tool_calls(&self, session: &str, turn: u64) -> StoreResult<Vec<ToolCallRecord>> {
        read!(self, tool_calls, session, turn)
    }

    async fn input_requests(
        &self,
        session: &str,
        pending_only: bool,
    ) -> StoreResult<Vec<InputRequestRecord>> {
        read!(self, input_requests, session, pending_only)
    }

    async fn input_request(&self, id: &str) -> StoreResult<Option<InputRequestRecord>> {
        read!(self, input_request, id)
    }

    async fn pending_inbox(&self, session: &str) -> StoreResult<Vec<InboxRecord>> {
        read!(self, pending_inbox, session)
    }

    async fn context(&self, session: &str) -> StoreResult<Vec<MessageRecord>> {
        read!(self, context, session)
    }

    async fn messages(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<MessageRecord>> {
        read!(self, messages, session, from, limit)
    }

    async fn events(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<StoredEvent>> {
        read!(self, events, session, from, limit)
    }

    async fn breaker(&self, tool: &str) -> StoreResult<Option<BreakerRecord>> {
        read!(self, breaker, tool)
    }

    async fn sessions_with_work(&self) -> StoreResult<Vec<String>> {
        read!(self, sessions_with_work, self.inner.liveness.as_ref())
    }

    async fn drive_state(&self, session: &str) -> StoreResult<Option<DriveState>> {
        let open = OpenTransaction(Some(self.client().await?));
        let client = open.client()?;
        let state = sql::drive_state(
            client,
            session,
            Some("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
        )
        .await?;
        client.batch_execute("COMMIT").await?;
        open.close();
        Ok(state)
    }

    async fn turn_view(&self, session: &str) -> StoreResult<TurnView> {
        let open = OpenTransaction(Some(self.client().await?));
        let client = open.client()?;
        let view = sql::turn_view(client, session).await?;
        open.close();
        Ok(view)
    }

    fn foreign_commits(&self) -> Option<watch::Receiver<u64>> {
        Some(self.inner.foreign.subscribe())
    }

    async fn acquire_lease(&self, claim: &LeaseClaim) -> StoreResult<LeaseOutcome> {
        let open = OpenTransaction(Some(self.client().await?));
        let outcome = sql::acquire(open.client()?, claim, self.inner.liveness.as_ref()).await?;
        open.close();
        Ok(outcome)
    }

    async fn take_lease(&self, claim: &LeaseClaim) -> StoreResult<LeaseTaken> {
        let open = OpenTransaction(Some(self.client().await?));
        let taken = sql::take(open.client()?, claim, self.inner.liveness.as_ref(), true).await?;
        open.close();
        Ok(taken)
    }

    async fn renew_lease(&self, claim: &LeaseClaim) -> StoreResult<bool> {
        read!(self, renew, claim)
    }

    async fn release_lease(&self, session: &str, holder: &str) -> StoreResult<()> {
        let client = self.client().await?;
        let notify = (self.inner.channel.as_str(), self.inner.instance.as_str());
        sql::release(&client, session, holder, notify).await
    }

    async fn lease(&self, session: &str) -> StoreResult<Option<LeaseRecord>> {
        read!(self, lease, session)
    }

    async fn schedule_states(&self) -> StoreResult<Vec<ScheduleState>> {
        read!(self, schedule_states)
    }

    async fn schedule_fires(
        &self,
        schedule: &str,
        status: Option<FireStatus>,
        limit: usize,
    ) -> StoreResult<Vec<ScheduleFire>> {
        read!(self, schedule_fires, schedule, status, limit)
    }

    async fn claim_schedule(
        &self,
        claim: ScheduleClaim,
        batch: Batch,
    ) -> StoreResult<Option<Committed>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        match sql::claim_schedule(&tx, &claim, batch).await? {
            Some(committed) => {
                self.notify(&tx).await?;
                tx.commit().await?;
                Ok(Some(committed))
            }
            None => {
                tx.rollback().await?;
                Ok(None)
            }
        }
    }

    async fn subagent_link(&self, session: &str) -> StoreResult<Option<SubagentLink>> {
        read!(self, link, session)
    }

    async fn subagent_by_token(
        &self,
        parent: &str,
        call_id: &str,
    ) -> StoreResult<Option<SubagentLink>> {
        read!(self, link_by_token, parent, call_id)
    }

    async fn subagent_call(
        &self,
        parent: &str,
        turn: u64,
        call_id: &str,
    ) -> StoreResult<Option<SubagentCall>> {
        read!(self, subagent_call, parent, turn, call_id)
    }

    async fn subagent_call_by_inbox(&self, inbox_id: &str) -> StoreResult<Option<SubagentCall>> {
        read!(self, subagent_call_by_inbox, inbox_id)
    }

    async fn inbox_turn(&self, inbox_id: &str) -> StoreResult<Option<Option<u64>>> {
        read!(self, inbox_turn, inbox_id)
    }

    async fn turn_inbox(&self, session: &str, seq: u64) -> StoreResult<Vec<String>> {
        read!(self, turn_inbox, session, seq)
    }

    async fn descendant_requests(&self, session: &str) -> StoreResult<Vec<InputRequestRecord>> {
        read!(self, descendant_requests, session)
    }

    async fn descendant_usage(&self, session: &str) -> StoreResult<(UsageTotals, f64)> {
        read!(self, descendant_usage, session)
    }

    async fn dynamic_tools(&self, session: &str) -> StoreResult<Vec<DynamicToolRecord>> {
        read!(self, dynamic_tools, session)
    }

    async fn dynamic_resolved(&self, session: &str, turn: u64) -> StoreResult<bool> {
        read!(self, dynamic_resolved, session, turn)
    }

    async fn hook_cursors(&self, session: &str) -> StoreResult<Vec<(String, u64)>> {
        read!(self, hook_cursors, session)
    }

    async fn sessions_behind_hooks(&self) -> StoreResult<Vec<String>> {
        read!(self, sessions_behind_hooks)
    }

    async fn prune_sessions(&self, cutoff_ms: i64) -> StoreResult<Vec<String>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let deleted = sql::prune(&tx, cutoff_ms, now_ms()).await?;
        tx.commit().await?;
        Ok(deleted)
    }

    async fn note(&self, namespace: &str, key: &str) -> StoreResult<Option<NoteRecord>> {
        read!(self, note, namespace, key)
    }

    async fn notes(&self, namespace: &str) -> StoreResult<Vec<NoteRecord>> {
        read!(self, notes, namespace)
    }

    async fn notes_under(&self, prefix: &str) -> StoreResult<Vec<NoteRecord>> {
        read!(self, notes_under, prefix)
    }

    async fn accept_channel_message(
        &self,
        accept: ChannelAccept,
        batch: Batch,
    ) -> StoreResult<Option<Committed>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let now = now_ms();
        if !sql::claim_delivery(&tx, &accept, now).await? {
            tx.rollback().await?;
            return Ok(None);
        }
        let committed = sql::apply(&tx, batch, None, None, None).await?;
        sql::insert_reply(&tx, &accept, now).await?;
        self.notify(&tx).await?;
        tx.commit().await?;
        Ok(Some(committed))
    }

    async fn channel_replies(&self, pending_only: bool) -> StoreResult<Vec<ChannelReplyRecord>> {
        read!(self, replies, pending_only)
    }

    async fn channel_reply(&self, inbox_id: &str) -> StoreResult<Option<ChannelReplyRecord>> {
        read!(self, reply, inbox_id)
    }

    async fn claim_channel_replies(
        &self,
        claim: ReplyClaim,
    ) -> StoreResult<Vec<ChannelReplyRecord>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let taken = sql::claim_replies(&tx, &claim, self.inner.liveness.as_ref(), now_ms()).await?;
        tx.commit().await?;
        Ok(taken)
    }

    async fn renew_channel_replies(&self, held: Vec<ReplyHeld>, ttl_ms: i64) -> StoreResult<usize> {
        read!(self, renew_replies, &held, ttl_ms, now_ms())
    }

    async fn start_channel_reply_send(
        &self,
        held: ReplyHeld,
        sending: Sending,
        ttl_ms: i64,
    ) -> StoreResult<bool> {
        read!(self, start_send, &held, &sending, ttl_ms, now_ms())
    }

    async fn update_channel_reply(&self, update: ChannelReplyUpdate) -> StoreResult<()> {
        read!(self, update_reply, &update, now_ms())
    }

    async fn releases(&self) -> StoreResult<Vec<ReleaseRecord>> {
        let client = self.client().await?;
        releases::releases(&client).await
    }

    async fn release_events(&self, from: u64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
        let client = self.client().await?;
        releases::events(&client, from, limit).await
    }

    async fn put_build(&self, build: StoredBuild) -> StoreResult<bool> {
        let client = self.client().await?;
        builds::put_build(&client, &build).await
    }

    async fn build(&self, hash: &str) -> StoreResult<Option<StoredBuild>> {
        let client = self.client().await?;
        builds::build(&client, hash).await
    }

    async fn builds(&self) -> StoreResult<Vec<BuildInfo>> {
        let client = self.client().await?;
        builds::builds(&client).await
    }

    async fn put_workspace(&self, put: WorkspacePut) -> StoreResult<u64> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let version = builds::put_workspace(&tx, &put, now_ms()).await?;
        tx.commit().await?;
        Ok(version)
    }

    async fn workspace(&self, session: &str) -> StoreResult<Option<WorkspaceCheckpoint>> {
        let client = self.client().await?;
        builds::workspace(&client, session).await
    }

    async fn missing_blobs(&self, hashes: &[String]) -> StoreResult<Vec<String>> {
        let client = self.client().await?;
        builds::missing_blobs(&client, hashes).await
    }

    async fn blob(&self, hash: &str) -> StoreResult<Option<Vec<u8>>> {
        let client = self.client().await?;
        builds::blob(&client, hash).await
    }

    async fn collect_workspace_blobs(&self) -> StoreResult<BlobsCollected> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let collected = builds::collect_blobs(&tx).await?;
        tx.commit().await?;
        Ok(collected)
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redact_url("postgres://eve:s3cret@db.example:5432/eve"),
            "postgres://eve:***@db.example:5432/eve"
        );
        assert_eq!(
            redact_url("postgres://eve@db/eve?password=s3cret&sslmode=disable"),
            "postgres://eve@db/eve?password=***&sslmode=disable"
        );
        assert_eq!(redact_url("postgres://db/eve"), "postgres://db/eve");
        assert_eq!(redact_url("not a url"), "not a url");
    }
}

//! A [`Store`] that counts the calls made through it (each one a round trip to the store's
//! writer or reader) and keeps their names, for tests and benchmarks that count round trips.

use std::sync::{Arc, Mutex};

use eve_runtime::store::*;

/// Wraps a store; every async call through it is recorded by name.
pub struct CountingStore {
    inner: Arc<dyn Store>,
    calls: Mutex<Vec<&'static str>>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            calls: Mutex::new(Vec::new()),
        })
    }

    /// The calls so far, in the order they were made.
    pub fn calls(&self) -> Vec<&'static str> {
        self.calls.lock().unwrap().clone()
    }

    /// How many calls so far.
    pub fn count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }

    fn hit(&self, name: &'static str) {
        self.calls.lock().unwrap().push(name);
    }
}

#[async_trait::async_trait]
impl Store for CountingStore {
    fn shared(&self) -> bool {
        self.inner.shared()
    }

    async fn commit(&self, batch: Batch) -> StoreResult<Committed> {
        self.hit("commit");
        self.inner.commit(batch).await
    }

    async fn commit_reading(
        &self,
        batch: Batch,
        id: &str,
    ) -> StoreResult<(Committed, Option<SessionRecord>)> {
        self.hit("commit_reading");
        self.inner.commit_reading(batch, id).await
    }

    async fn session(&self, id: &str) -> StoreResult<Option<SessionRecord>> {
        self.hit("session");
        self.inner.session(id).await
    }

    async fn sessions(&self, filter: &SessionFilter) -> StoreResult<Vec<SessionRecord>> {
        self.hit("sessions");
        self.inner.sessions(filter).await
    }

    async fn turn(&self, session: &str, seq: u64) -> StoreResult<Option<TurnRecord>> {
        self.hit("turn");
        self.inner.turn(session, seq).await
    }

    async fn last_turn(&self, session: &str) -> StoreResult<Option<TurnRecord>> {
        self.hit("last_turn");
        self.inner.last_turn(session).await
    }

    async fn steps(&self, session: &str, turn: u64) -> StoreResult<Vec<StepRecord>> {
        self.hit("steps");
        self.inner.steps(session, turn).await
    }

    async fn tool_calls(&self, session: &str, turn: u64) -> StoreResult<Vec<ToolCallRecord>> {
        self.hit("tool_calls");
        self.inner.tool_calls(session, turn).await
    }

    async fn input_requests(
        &self,
        session: &str,
        pending_only: bool,
    ) -> StoreResult<Vec<InputRequestRecord>> {
        self.hit("input_requests");
        self.inner.input_requests(session, pending_only).await
    }

    async fn input_request(&self, id: &str) -> StoreResult<Option<InputRequestRecord>> {
        self.hit("input_request");
        self.inner.input_request(id).await
    }

    async fn pending_inbox(&self, session: &str) -> StoreResult<Vec<InboxRecord>> {
        self.hit("pending_inbox");
        self.inner.pending_inbox(session).await
    }

    async fn context(&self, session: &str) -> StoreResult<Vec<MessageRecord>> {
        self.hit("context");
        self.inner.context(session).await
    }

    async fn messages(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<MessageRecord>> {
        self.hit("messages");
        self.inner.messages(session, from, limit).await
    }

    async fn events(
        &self,
        session: &str,
        from: u64,
        limit: usize,
    ) -> StoreResult<Vec<StoredEvent>> {
        self.hit("events");
        self.inner.events(session, from, limit).await
    }

    async fn breaker(&self, tool: &str) -> StoreResult<Option<BreakerRecord>> {
        self.hit("breaker");
        self.inner.breaker(tool).await
    }

    async fn sessions_with_work(&self) -> StoreResult<Vec<String>> {
        self.hit("sessions_with_work");
        self.inner.sessions_with_work().await
    }

    async fn drive_state(&self, session: &str) -> StoreResult<Option<DriveState>> {
        self.hit("drive_state");
        self.inner.drive_state(session).await
    }

    fn foreign_commits(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.foreign_commits()
    }

    async fn write_fault(&self) -> Option<String> {
        self.hit("write_fault");
        self.inner.write_fault().await
    }

    async fn turn_view(&self, session: &str) -> StoreResult<TurnView> {
        self.hit("turn_view");
        self.inner.turn_view(session).await
    }

    async fn take_lease(&self, claim: &LeaseClaim) -> StoreResult<LeaseTaken> {
        self.hit("take_lease");
        self.inner.take_lease(claim).await
    }

    async fn acquire_lease(&self, claim: &LeaseClaim) -> StoreResult<LeaseOutcome> {
        self.hit("acquire_lease");
        self.inner.acquire_lease(claim).await
    }

    async fn renew_lease(&self, claim: &LeaseClaim) -> StoreResult<bool> {
        self.hit("renew_lease");
        self.inner.renew_lease(claim).await
    }

    async fn release_lease(&self, session: &str, holder: &str) -> StoreResult<()> {
        self.hit("release_lease");
        self.inner.release_lease(session, holder).await
    }

    async fn lease(&self, session: &str) -> StoreResult<Option<LeaseRecord>> {
        self.hit("lease");
        self.inner.lease(session).await
    }

    async fn schedule_states(&self) -> StoreResult<Vec<ScheduleState>> {
        self.hit("schedule_states");
        self.inner.schedule_states().await
    }

    async fn schedule_fires(
        &self,
        schedule: &str,
        status: Option<FireStatus>,
        limit: usize,
    ) -> StoreResult<Vec<ScheduleFire>> {
        self.hit("schedule_fires");
        self.inner.schedule_fires(schedule, status, limit).await
    }

    async fn claim_schedule(
        &self,
        claim: ScheduleClaim,
        batch: Batch,
    ) -> StoreResult<Option<Committed>> {
        self.hit("claim_schedule");
        self.inner.claim_schedule(claim, batch).await
    }

    async fn subagent_link(&self, session: &str) -> StoreResult<Option<SubagentLink>> {
        self.hit("subagent_link");
        self.inner.subagent_link(session).await
    }

    async fn subagent_by_token(
        &self,
        parent: &str,
        call_id: &str,
    ) -> StoreResult<Option<SubagentLink>> {
        self.hit("subagent_by_token");
        self.inner.subagent_by_token(parent, call_id).await
    }

    async fn subagent_call(
        &self,
        parent: &str,
        turn: u64,
        call_id: &str,
    ) -> StoreResult<Option<SubagentCall>> {
        self.hit("subagent_call");
        self.inner.subagent_call(parent, turn, call_id).await
    }

    async fn subagent_call_by_inbox(&self, inbox_id: &str) -> StoreResult<Option<SubagentCall>> {
        self.hit("subagent_call_by_inbox");
        self.inner.subagent_call_by_inbox(inbox_id).await
    }

    async fn inbox_turn(&self, inbox_id: &str) -> StoreResult<Option<Option<u64>>> {
        self.hit("inbox_turn");
        self.inner.inbox_turn(inbox_id).await
    }

    async fn turn_inbox(&self, session: &str, seq: u64) -> StoreResult<Vec<String>> {
        self.hit("turn_inbox");
        self.inner.turn_inbox(session, seq).await
    }

    async fn descendant_requests(&self, session: &str) -> StoreResult<Vec<InputRequestRecord>> {
        self.hit("descendant_requests");
        self.inner.descendant_requests(session).await
    }

    async fn descendant_usage(&self, session: &str) -> StoreResult<(UsageTotals, f64)> {
        self.hit("descendant_usage");
        self.inner.descendant_usage(session).await
    }

    async fn dynamic_tools(&self, session: &str) -> StoreResult<Vec<DynamicToolRecord>> {
        self.hit("dynamic_tools");
        self.inner.dynamic_tools(session).await
    }

    async fn dynamic_resolved(&self, session: &str, turn: u64) -> StoreResult<bool> {
        self.hit("dynamic_resolved");
        self.inner.dynamic_resolved(session, turn).await
    }

    async fn hook_cursors(&self, session: &str) -> StoreResult<Vec<(String, u64)>> {
        self.hit("hook_cursors");
        self.inner.hook_cursors(session).await
    }

    async fn sessions_behind_hooks(&self) -> StoreResult<Vec<String>> {
        self.hit("sessions_behind_hooks");
        self.inner.sessions_behind_hooks().await
    }

    async fn prune_sessions(&self, cutoff_ms: i64) -> StoreResult<Vec<String>> {
        self.hit("prune_sessions");
        self.inner.prune_sessions(cutoff_ms).await
    }

    async fn note(&self, namespace: &str, key: &str) -> StoreResult<Option<NoteRecord>> {
        self.hit("note");
        self.inner.note(namespace, key).await
    }

    async fn notes(&self, namespace: &str) -> StoreResult<Vec<NoteRecord>> {
        self.hit("notes");
        self.inner.notes(namespace).await
    }

    async fn notes_under(&self, prefix: &str) -> StoreResult<Vec<NoteRecord>> {
        self.hit("notes_under");
        self.inner.notes_under(prefix).await
    }

    async fn accept_channel_message(
        &self,
        accept: ChannelAccept,
        batch: Batch,
    ) -> StoreResult<Option<Committed>> {
        self.hit("accept_channel_message");
        self.inner.accept_channel_message(accept, batch).await
    }

    async fn channel_replies(&self, pending_only: bool) -> StoreResult<Vec<ChannelReplyRecord>> {
        self.hit("channel_replies");
        self.inner.channel_replies(pending_only).await
    }

    async fn channel_reply(&self, inbox_id: &str) -> StoreResult<Option<ChannelReplyRecord>> {
        self.hit("channel_reply");
        self.inner.channel_reply(inbox_id).await
    }

    async fn claim_channel_replies(
        &self,
        claim: ReplyClaim,
    ) -> StoreResult<Vec<ChannelReplyRecord>> {
        self.hit("claim_channel_replies");
        self.inner.claim_channel_replies(claim).await
    }

    async fn renew_channel_replies(&self, held: Vec<ReplyHeld>, ttl_ms: i64) -> StoreResult<usize> {
        self.hit("renew_channel_replies");
        self.inner.renew_channel_replies(held, ttl_ms).await
    }

    async fn start_channel_reply_send(
        &self,
        held: ReplyHeld,
        sending: Sending,
        ttl_ms: i64,
    ) -> StoreResult<bool> {
        self.hit("start_channel_reply_send");
        self.inner
            .start_channel_reply_send(held, sending, ttl_ms)
            .await
    }

    async fn update_channel_reply(&self, update: ChannelReplyUpdate) -> StoreResult<()> {
        self.hit("update_channel_reply");
        self.inner.update_channel_reply(update).await
    }

    async fn releases(&self) -> StoreResult<Vec<ReleaseRecord>> {
        self.hit("releases");
        self.inner.releases().await
    }

    async fn release_events(&self, from: u64, limit: usize) -> StoreResult<Vec<StoredEvent>> {
        self.hit("release_events");
        self.inner.release_events(from, limit).await
    }

    async fn put_build(&self, build: StoredBuild) -> StoreResult<bool> {
        self.hit("put_build");
        self.inner.put_build(build).await
    }

    async fn build(&self, hash: &str) -> StoreResult<Option<StoredBuild>> {
        self.hit("build");
        self.inner.build(hash).await
    }

    async fn builds(&self) -> StoreResult<Vec<BuildInfo>> {
        self.hit("builds");
        self.inner.builds().await
    }

    async fn put_workspace(&self, put: WorkspacePut) -> StoreResult<u64> {
        self.hit("put_workspace");
        self.inner.put_workspace(put).await
    }

    async fn workspace(&self, session: &str) -> StoreResult<Option<WorkspaceCheckpoint>> {
        self.hit("workspace");
        self.inner.workspace(session).await
    }

    async fn missing_blobs(&self, hashes: &[String]) -> StoreResult<Vec<String>> {
        self.hit("missing_blobs");
        self.inner.missing_blobs(hashes).await
    }

    async fn blob(&self, hash: &str) -> StoreResult<Option<Vec<u8>>> {
        self.hit("blob");
        self.inner.blob(hash).await
    }

    async fn collect_workspace_blobs(&self) -> StoreResult<BlobsCollected> {
        self.hit("collect_workspace_blobs");
        self.inner.collect_workspace_blobs().await
    }
}

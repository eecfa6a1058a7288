//! Every environment-variable name eve reads or sets, in one module.
//!
//! The CLI's flags name them (`#[arg(env = ...)]`), the runtime reads them, tool processes receive
//! them, `docs/operations.md` lists them: a typo in one of those places must be a compile error, not
//! a silently ignored variable. A test (`eve-cli/tests/docs_env.rs`) holds this module and the docs
//! to the same set, and keeps string literals of these names out of the rest of the source.
//!
//! Three groups: settings eve reads from its own environment; the variables eve gives each tool,
//! hook and dynamic-tool process (the tool protocol); the few variables passed through from eve's
//! environment to those processes and to MCP stdio servers.

// Settings eve reads.

/// `provider/name` of the model; overrides `agent.yaml` `model`.
pub const EVE_MODEL: &str = "EVE_MODEL";
/// Base URL of the provider's API (for example `http://localhost:8000/v1`); overrides the default.
pub const EVE_BASE_URL: &str = "EVE_BASE_URL";
/// API key for whichever provider is selected; wins over the provider's own variable.
pub const EVE_API_KEY: &str = "EVE_API_KEY";
/// OpenAI's usual key variable.
pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";
/// Anthropic's usual key variable.
pub const ANTHROPIC_API_KEY: &str = "ANTHROPIC_API_KEY";
/// DeepSeek's usual key variable.
pub(crate) const DEEPSEEK_API_KEY: &str = "DEEPSEEK_API_KEY";
/// OpenAI's SDK variable for its base URL; used by the `openai` provider when `EVE_BASE_URL` is
/// unset (a proxy or gateway the user's other OpenAI tools already go through).
pub const OPENAI_BASE_URL: &str = "OPENAI_BASE_URL";
/// Anthropic's SDK variable for its base URL; used by the `anthropic` provider when
/// `EVE_BASE_URL` is unset.
pub const ANTHROPIC_BASE_URL: &str = "ANTHROPIC_BASE_URL";
/// `1` lets a turn resumed by a process whose model differs from the one the turn ran on continue
/// on the new model (announced by a `turn.model_switched` event); without it that turn fails
/// with `model_changed`.
pub(crate) const EVE_ALLOW_MODEL_SWITCH: &str = "EVE_ALLOW_MODEL_SWITCH";
/// Seconds `eve run` waits, before it exits, for its turn's events to reach the observe hooks
/// (default 10; `0`: no wait). A hook running on an event then is left to finish; what is left
/// is said on stderr, for a server on the store to deliver.
pub const EVE_HOOK_WAIT: &str = "EVE_HOOK_WAIT";
/// Script of the `mock` provider: a path to a JSON file, or inline JSON when it starts with `[`.
pub const EVE_MOCK_SCRIPT: &str = "EVE_MOCK_SCRIPT";
/// The judge model of `eve eval` (`provider/name`) for cases with `expect.judge`.
pub const EVE_JUDGE_MODEL: &str = "EVE_JUDGE_MODEL";
/// The judge model's API base URL (else the provider's default).
pub const EVE_JUDGE_BASE_URL: &str = "EVE_JUDGE_BASE_URL";
/// The judge model's API key (else the provider's own variable).
pub const EVE_JUDGE_API_KEY: &str = "EVE_JUDGE_API_KEY";
/// A mock-model script for a `mock/…` judge (tests and offline runs).
pub const EVE_JUDGE_MOCK_SCRIPT: &str = "EVE_JUDGE_MOCK_SCRIPT";
/// The project folder (`--project`, `-C`) of every command.
pub const EVE_PROJECT: &str = "EVE_PROJECT";
/// The agent folder (`--agent`) of every command, when it is not `<project>/agent`.
pub const EVE_AGENT: &str = "EVE_AGENT";
/// The store (`--store`) of every command that opens one: `postgres://…` for PostgreSQL, or a
/// SQLite file path; the project's `.eve/eve.db` when unset.
pub const EVE_STORE: &str = "EVE_STORE";
/// `1`: where the SQLite store is missing (or 0 bytes) with no mark while session workspaces
/// beside it show a store was there, start an empty store instead of refusing to (once, on
/// purpose; the workspaces stay on disk).
pub const EVE_NEW_STORE: &str = "EVE_NEW_STORE";
/// How long a session lease lasts without renewal, in milliseconds (default 5000); it is renewed
/// every third of that. A killed node's sessions are continued by another within about this long.
pub const EVE_LEASE_TTL_MS: &str = "EVE_LEASE_TTL_MS";
/// Tests only: the PostgreSQL server the store tests run against (`scripts/postgres.sh url`).
pub const EVE_TEST_POSTGRES_URL: &str = "EVE_TEST_POSTGRES_URL";
/// Tests only, and honoured by debug builds only: `1` prints text from models, tools, hooks and
/// servers raw, as eve did before it neutralised terminal controls (so a test can show an attack
/// reaching the terminal when nothing stops it). A release build ignores it.
pub const EVE_TEST_RAW_TERMINAL: &str = "EVE_TEST_RAW_TERMINAL";
/// Tests only, and honoured by debug builds only: `1` delivers observe-hook events without the
/// session's delivery claim, as eve did before two processes could deliver one session's events
/// (so a test can show the same event delivered twice when nothing stops it). A release build
/// ignores it.
pub(crate) const EVE_TEST_NO_HOOK_CLAIM: &str = "EVE_TEST_NO_HOOK_CLAIM";
/// Tests only: `1` skips the PostgreSQL tests, each saying SKIPPED (without it and without a
/// server URL they fail).
pub const EVE_SKIP_POSTGRES: &str = "EVE_SKIP_POSTGRES";
/// Tests only: `1` makes `scripts/test.sh` skip the browser tests (the web console and eve's React
/// binding in Chromium), saying SKIPPED.
pub const EVE_SKIP_BROWSER: &str = "EVE_SKIP_BROWSER";
/// Tests only: `1` makes eve act as on a kernel without `openat2`: `read_file`, `write_file`,
/// `glob` and `grep` refuse to run, and `eve serve` says so at start.
pub const EVE_TEST_NO_OPENAT2: &str = "EVE_TEST_NO_OPENAT2";
/// Tests only, and honoured by debug builds only: `1` makes `glob` and `grep` walk the workspace
/// by path, as a naive walker does (so a test can show a walk steered out of
/// the workspace when nothing stops it). A release build ignores it.
pub const EVE_TEST_UNSAFE_WALK: &str = "EVE_TEST_UNSAFE_WALK";
/// Tests only, and honoured by debug builds only: `1` lets a remote agent's requests reach the
/// host and port its `url` names even on loopback or a private address (two test servers on one
/// machine). A release build ignores it: remote agents are reached on the internet only.
pub(crate) const EVE_TEST_REMOTE_LOOPBACK: &str = "EVE_TEST_REMOTE_LOOPBACK";
/// The port (`--port`) of `eve serve` and `eve dev`.
pub const PORT: &str = "PORT";
/// The URL browsers reach the runtime at: the base of the sign-in callback of
/// `credentials: user` connections.
pub const EVE_PUBLIC_URL: &str = "EVE_PUBLIC_URL";
/// The lease of a controlled stream (`?streamControlVersion=1`) in milliseconds (default 60000).
pub const EVE_STREAM_LEASE_MS: &str = "EVE_STREAM_LEASE_MS";
/// How often a server looks for expired sessions to prune (`retention:` in `agent.yaml`), in
/// milliseconds (default 3600000, an hour). Across a fleet on one store, one server prunes per
/// interval.
pub const EVE_RETENTION_INTERVAL_MS: &str = "EVE_RETENTION_INTERVAL_MS";
/// A server's base URL for `eve chat` (`--url`).
pub const EVE_URL: &str = "EVE_URL";
/// The bearer token `eve chat` sends with `--url` (`--token`).
pub const EVE_TOKEN: &str = "EVE_TOKEN";
/// The log filter, in `tracing`'s syntax (default `warn`).
pub const EVE_LOG: &str = "EVE_LOG";
/// `json`: log lines as JSON objects, with the session and turn of a turn's lines (default text).
pub const EVE_LOG_FORMAT: &str = "EVE_LOG_FORMAT";
/// Set to anything: no colours in output.
pub const NO_COLOR: &str = "NO_COLOR";
/// Speeds up the schedule clock (for tests and demos): `SPEED@ANCHOR_MS`, for example
/// `60@1796000000000`: from the real time `ANCHOR_MS` (epoch milliseconds) on, schedule time runs
/// `SPEED` times faster than real time.
pub const EVE_SCHEDULE_CLOCK: &str = "EVE_SCHEDULE_CLOCK";

/// Seconds a listener waits for a request's head (default 10).
pub(crate) const EVE_HEADER_TIMEOUT_SECS: &str = "EVE_HEADER_TIMEOUT_SECS";
/// Seconds a listener waits for a request's body after its head (default 60).
pub(crate) const EVE_BODY_TIMEOUT_SECS: &str = "EVE_BODY_TIMEOUT_SECS";
/// Seconds a keep-alive connection may sit idle before it is closed (default 75).
pub(crate) const EVE_IDLE_TIMEOUT_SECS: &str = "EVE_IDLE_TIMEOUT_SECS";
/// Most connections a listener holds open at once (default: sized from the file-descriptor
/// limit, whose soft value is raised to the hard one at start).
pub(crate) const EVE_MAX_CONNECTIONS: &str = "EVE_MAX_CONNECTIONS";
/// Largest session workspace, in bytes (default 256 MiB): an isolated call that grows it past
/// this is stopped while it runs and what it added is removed; a step that leaves a larger one
/// (a `host` tool's writes) fails its turn at its checkpoint, naming the size and this setting.
pub(crate) const EVE_WORKSPACE_MAX_BYTES: &str = "EVE_WORKSPACE_MAX_BYTES";
/// `off`: session workspaces are neither checkpointed into the store nor restored from it (they
/// stay on the node that wrote them); default `on`.
pub const EVE_WORKSPACE_CHECKPOINTS: &str = "EVE_WORKSPACE_CHECKPOINTS";
/// Warm isolated sandboxes each runtime keeps ready ahead of their calls (default 2; `0` turns
/// the pool off, and every isolated call then starts its sandbox cold).
pub(crate) const EVE_SANDBOX_POOL: &str = "EVE_SANDBOX_POOL";
/// The uids isolated boxes run as when eve runs as root, one per box, `FIRST-LAST` (default
/// `1879048192-1879113727`, 65,536 uids no distribution allocates); eve processes of one host
/// share the range without handing out a uid twice.
pub(crate) const EVE_SANDBOX_UIDS: &str = "EVE_SANDBOX_UIDS";

// The tool protocol: set by eve for every tool, hook and dynamic-tool process.

/// The session the call belongs to.
pub(crate) const EVE_SESSION_ID: &str = "EVE_SESSION_ID";
/// The model's id of the call.
pub(crate) const EVE_CALL_ID: &str = "EVE_CALL_ID";
/// The name of the tool called (a TypeScript tool's `ctx.toolName`).
pub(crate) const EVE_TOOL_NAME: &str = "EVE_TOOL_NAME";
/// The Node that evaluates and runs TypeScript and JavaScript modules (read by `eve build`, in
/// eve-compile, which sits below this crate).
pub const EVE_NODE: &str = "EVE_NODE";
// Tracing (docs/observability.md).

/// `true` turns tracing off.
pub const OTEL_SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
/// The OTLP collector's base URL (traces go to `/v1/traces` under it, HTTP/protobuf).
pub const OTEL_EXPORTER_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The OTLP traces URL, over the base one.
pub const OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// Headers of every OTLP export (`key=value,…`).
pub const OTEL_EXPORTER_OTLP_HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
/// Headers of the traces export, over the general ones.
pub const OTEL_EXPORTER_OTLP_TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
/// `service.name` of the spans (default `eve`).
pub const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// How traces are sampled (default `parentbased_always_on`).
pub const OTEL_TRACES_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
/// The ratio of the ratio samplers.
pub const OTEL_TRACES_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
/// `true`: prompts, outputs, tool inputs and results on spans (redacted).
#[rustfmt::skip]
pub const OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
/// `off`: no local trace store.
pub const EVE_TRACES: &str = "EVE_TRACES";
/// Local traces older than this go (default seven days).
pub const EVE_TRACES_MAX_AGE_MS: &str = "EVE_TRACES_MAX_AGE_MS";
/// The oldest local traces go above this size (default 512 MB).
pub const EVE_TRACES_MAX_TOTAL_BYTES: &str = "EVE_TRACES_MAX_TOTAL_BYTES";
/// The newest local traces that always stay (default 20).
pub const EVE_TRACES_RETAIN_COUNT: &str = "EVE_TRACES_RETAIN_COUNT";

/// `host:port` where `eve serve` and `eve dev` also serve `GET /metrics`, without the API's auth.
pub const EVE_METRICS_ADDR: &str = "EVE_METRICS_ADDR";

/// The W3C trace context of a tool call's span, in the tool's environment when tracing is on.
pub const TRACEPARENT: &str = "TRACEPARENT";
/// A key stable across retries of the same call, for deduplicating side effects.
pub(crate) const EVE_IDEMPOTENCY_KEY: &str = "EVE_IDEMPOTENCY_KEY";
/// The session's workspace folder (the process's working folder).
pub const EVE_WORKSPACE: &str = "EVE_WORKSPACE";
/// The agent folder, where the tool's scripts live.
pub(crate) const EVE_AGENT_DIR: &str = "EVE_AGENT_DIR";

// Passed through from eve's environment (with defaults when unset).

/// Where programs are found (tools get a default when eve has none).
pub const PATH: &str = "PATH";
/// The home folder (tools get their workspace when eve has none).
pub const HOME: &str = "HOME";
/// The locale (tools get `C.UTF-8` when eve has none).
pub const LANG: &str = "LANG";
/// The time zone (tools get `UTC` when eve has none).
pub(crate) const TZ: &str = "TZ";
/// The user name; passed to MCP stdio servers only.
pub(crate) const USER: &str = "USER";
/// git's repository folder: when set, a release asks git for the source revision of `agent/`
/// even where no `.git` is above it (git reads it itself).
pub(crate) const GIT_DIR: &str = "GIT_DIR";
/// The folder for temporary files; passed to MCP stdio servers only.
pub const TMPDIR: &str = "TMPDIR";

// How names are treated when values are redacted (`crate::redact`).

/// Variables whose values hold a model provider's key: their values are secrets even when no
/// `${VAR}` in the agent names them.
pub(crate) static MODEL_KEYS: &[&str] = &[
    EVE_API_KEY,
    OPENAI_API_KEY,
    ANTHROPIC_API_KEY,
    DEEPSEEK_API_KEY,
];
/// Variables whose values are not secrets, so a `${VAR}` of one is never redacted: the call's own
/// protocol variables and the pass-through ones (a home folder or `PATH` in every tool result
/// would be replaced by its name).
pub(crate) static NOT_SECRET: &[&str] = &[
    EVE_SESSION_ID,
    EVE_CALL_ID,
    EVE_TOOL_NAME,
    EVE_IDEMPOTENCY_KEY,
    EVE_WORKSPACE,
    EVE_AGENT_DIR,
    PATH,
    HOME,
    LANG,
    TZ,
    USER,
    TMPDIR,
];

// eve's own client (`eve/client` from eve@0.80.1) against `eve serve` with a short stream lease
// (EVE_STREAM_LEASE_MS): the client asks for `streamControlVersion=1`, reads the heartbeat and
// lease-end control lines, reconnects from its cursor at each lease end, and sees every event of a
// turn that outlives several leases exactly once. Run by scripts/test-eve-client.sh.
//
// usage: node stream-control-test.mjs EVE_BINARY PROJECT_DIR
import { spawn } from 'node:child_process';
import { Client } from 'eve/client';

const [eveBin, project] = process.argv.slice(2);
const LEASE_MS = 600;
const LEASE_ENDED = '{"$eve":"stream.lease-ended","version":1}';
let passed = 0;
let failed = 0;

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
  }
}

function withDeadline(promise, ms, name) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${name} did not finish in ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function step(name, body) {
  const t0 = Date.now();
  try {
    await withDeadline(body(), 30_000, name);
    passed += 1;
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e?.stack ?? e}`);
  }
}

// Every stream request the client makes, by URL.
const streamRequests = [];
const realFetch = globalThis.fetch;
globalThis.fetch = (input, init) => {
  const url = typeof input === 'string' ? input : input.url;
  if (url.includes('/stream')) streamRequests.push(url);
  return realFetch(input, init);
};

const server = spawn(eveBin, ['serve', '--port', '0'], {
  cwd: project,
  env: { ...process.env, EVE_MODEL: 'mock/echo', NO_COLOR: '1', EVE_STREAM_LEASE_MS: String(LEASE_MS) },
  stdio: ['ignore', 'ignore', 'pipe'],
});
let serverLog = '';
const port = await withDeadline(
  new Promise((resolve, reject) => {
    server.stderr.on('data', (chunk) => {
      serverLog += chunk;
      const m = /on http:\/\/127\.0\.0\.1:(\d+)/.exec(serverLog);
      if (m) resolve(Number(m[1]));
    });
    server.on('exit', (code) => reject(new Error(`eve serve exited (${code}): ${serverLog}`)));
  }),
  60_000,
  'eve serve start',
);
const host = `http://127.0.0.1:${port}`;
const client = new Client({ host });
let session;

await step('a turn that outlives several leases: every event once, through reconnects', async () => {
  const created = await client.sessions.create({ message: 'hello' });
  session = created.session;
  await created.response.result();
  const before = streamRequests.length;
  // The pause tool takes a second: the turn spans more than one lease.
  const result = await (await session.send('/tool pause {}')).result();
  const k = result.events.map((e) => e.type);
  check(k.at(-1) === 'session.waiting', 'the turn ends', k);
  check(k.includes('action.result'), 'the tool ran', k);
  const ids = result.events.map((e) => e.meta.id);
  check(new Set(ids).size === ids.length, 'no event twice', ids);
  const made = streamRequests.slice(before);
  check(made.every((u) => u.includes('streamControlVersion=1')), 'the client asks for control', made);
  check(made.length >= 2, 'the client reconnected at a lease end', made);
  const all = [];
  for await (const e of session.stream({ follow: false, startIndex: 0 })) all.push(e);
  check(all.at(-1).type === 'session.waiting', 'the stored stream agrees', all.at(-1).type);
});

await step('the raw stream under control: opening line, lease-end control line', async () => {
  const id = encodeURIComponent(session.state.sessionId);
  const at = session.state.streamIndex;
  const t0 = Date.now();
  const r = await realFetch(`${host}/eve/v1/session/${id}/stream?startIndex=${at}&streamControlVersion=1`);
  const body = await r.text();
  const elapsed = Date.now() - t0;
  check(body === `\n${LEASE_ENDED}\n`, 'a blank line, then the control line', body);
  check(elapsed >= LEASE_MS - 50, 'after the lease', elapsed);
});

await step('a follow at rest keeps renewing its lease until the next turn', async () => {
  const abort = new AbortController();
  const startIndex = session.state.streamIndex;
  const before = streamRequests.length;
  const seen = [];
  const live = (async () => {
    for await (const e of session.stream({ startIndex, signal: abort.signal })) {
      seen.push(e);
      if (e.type === 'session.waiting') break;
    }
  })();
  await new Promise((r) => setTimeout(r, LEASE_MS * 3));
  const result = await (await session.send('after the leases')).result();
  await withDeadline(live, 10_000, 'the follow');
  abort.abort();
  check(result.events.at(-1).type === 'session.waiting', 'the turn', result.events.at(-1).type);
  check(seen.some((e) => e.type === 'message.completed' && e.data.message === 'You said: after the leases'),
    'the follow saw the turn', seen.map((e) => e.type));
  check(streamRequests.length - before >= 3, 'several leases while at rest', streamRequests.length - before);
});

server.kill('SIGTERM');
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

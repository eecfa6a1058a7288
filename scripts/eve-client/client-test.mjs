// eve's own npm client (`eve/client` from eve@0.80.1), unchanged, against our `eve serve`: every
// operation a user of that client relies on, each result asserted. Run by
// scripts/test-eve-client.sh, which installs the client and Node 24 and lays out the project.
//
// usage: node client-test.mjs EVE_BINARY PROJECT_DIR
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, ClientError } from 'eve/client';

const [eveBin, project] = process.argv.slice(2);
let passed = 0;
let failed = 0;
const started = Date.now();

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
  }
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

function withDeadline(promise, ms, name) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${name} did not finish in ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function expectClientError(promise, status, code) {
  try {
    await promise;
  } catch (e) {
    check(e instanceof ClientError, 'a ClientError', String(e));
    check(e.status === status, `status ${status}`, { status: e.status, body: e.body });
    if (code !== undefined) check(e.code === code, `code ${code}`, { code: e.code, body: e.body });
    return e;
  }
  throw new Error(`expected a ClientError ${status}`);
}

// `eve serve --port 0`, its port read from the line it prints.
const server = spawn(eveBin, ['serve', '--port', '0'], {
  cwd: project,
  env: { ...process.env, EVE_MODEL: 'mock/echo', NO_COLOR: '1' },
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

const text = (result) => result.message ?? '';
const kinds = (events) => events.map((e) => e.type);

let session;
await step('health', async () => {
  const h = await client.health();
  check(h.ok === true && h.status === 'ready', 'health is ready', h);
  check(typeof h.workflowId === 'string' && h.workflowId.length > 0, 'a workflowId', h);
});

await step('info() (eve agent-info v5, validated by the client)', async () => {
  const info = await client.info();
  check(info.kind === 'eve-agent-info' && info.version === 5, 'an agent-info v5 document', info.kind);
  check(info.agent.name === 'client-agent', 'the agent name', info.agent);
  const tools = info.tools.static.map((t) => t.name);
  for (const name of ['get_weather', 'refund', 'wait']) check(tools.includes(name), name, tools);
  const refund = info.tools.static.find((t) => t.name === 'refund');
  check(refund.requiresApproval === true, 'refund needs approval', refund);
  const weather = info.tools.static.find((t) => t.name === 'get_weather');
  check(weather.requiresApproval === false, 'get_weather does not', weather);
  check(info.mode === 'production', 'eve serve is production', info.mode);
});

await step('the runtime\'s own description (GET /eve/v1/agent through the client)', async () => {
  const r = await client.fetch('/eve/v1/agent');
  check(r.status === 200, '/eve/v1/agent answers 200', r.status);
  const agent = await r.json();
  const refund = agent.tools.find((t) => t.name === 'refund');
  check(refund.approval === 'always', 'refund is approval: always', refund);
});

await step('sessions.create({message}) and result()', async () => {
  const created = await client.sessions.create({ message: 'hello there' });
  session = created.session;
  check(session.state.sessionId.startsWith('wrun_'), 'a session id', session.state);
  const result = await created.response.result();
  check(result.status === 'waiting', 'the turn rests waiting for the next message', result.status);
  check(text(result) === 'You said: hello there', 'the reply', text(result));
  const k = kinds(result.events);
  check(k[0] === 'session.started' && k.at(-1) === 'session.waiting', 'first and last events', k);
  check(k.includes('turn.completed'), 'turn.completed', k);
});

await step('send twice (deliveryId and meta.deliveryIds find each turn)', async () => {
  const first = await (await session.send('second message')).result();
  check(text(first) === 'You said: second message', 'first send', text(first));
  check(!kinds(first.events).includes('session.started'), 'only the new turn', kinds(first.events));
  const second = await (await session.send('/tool get_weather {"city": "Paris"}')).result();
  const results = second.events.filter((e) => e.type === 'action.result');
  check(results.length === 1, 'one action.result', kinds(second.events));
  check(results[0].data.result.output.city === 'Paris', 'the tool output', results[0].data);
  check(text(second).startsWith('get_weather returned:'), 'the reply about the tool', text(second));
  const ids = new Set(second.events.flatMap((e) => e.meta.deliveryIds ?? []));
  check(ids.size === 1, 'every event of the turn carries the one delivery id', [...ids]);
});

await step('respond approves an `approval: always` tool', async () => {
  const asked = await (await session.send('/tool refund {"amount": 5}')).result();
  check(asked.status === 'waiting', 'the turn parks', asked.status);
  check(kinds(asked.events).includes('turn.waiting'), 'turn.waiting', kinds(asked.events));
  check(asked.inputRequests.length === 1, 'one input request', asked.inputRequests);
  const request = asked.inputRequests[0];
  check(request.action?.toolName === 'refund', 'the request is for refund', request);
  const answered = await (
    await session.respond([{ requestId: request.requestId, optionId: 'approve' }])
  ).result();
  const k = kinds(answered.events);
  check(k.includes('approval.settled') && k.includes('input.resolved'), 'settled and resolved', k);
  const result = answered.events.find((e) => e.type === 'action.result');
  check(result?.data.result.output.refunded === 5, 'the approved tool ran', result?.data);
  check(answered.status === 'waiting' && k.at(-1) === 'session.waiting', 'the turn ends', k);
});

await step('typed errors', async () => {
  const missing = client.sessions.attach('wrun_does_not_exist');
  const e = await expectClientError(missing.send('hi'), 404);
  check(e.message === 'Session not found.', 'the 404 message', e.message);
  await expectClientError(
    session.respond([{ requestId: 'req_nope', optionId: 'approve' }]),
    409,
    'session_not_active',
  );
});

await step('stream: bounded replay of the whole stream and the tail index', async () => {
  const raw = await client.fetch(
    `/eve/v1/session/${encodeURIComponent(session.state.sessionId)}/stream?follow=false`,
  );
  const tail = Number(raw.headers.get('x-eve-stream-tail-index'));
  await raw.body?.cancel();
  check(Number.isInteger(tail) && tail > 10, 'a tail index', tail);
  const events = [];
  for await (const e of session.stream({ follow: false, startIndex: 0 })) events.push(e);
  check(events.length === tail + 1, 'the replay holds every stored event', {
    events: events.length,
    tail,
  });
  check(events[0].type === 'session.started', 'from the start', events[0].type);
  check(events.at(-1).type === 'session.waiting', 'to the end', events.at(-1).type);
  const turns = new Set(events.filter((e) => e.type === 'turn.started').map((e) => e.data.turnId));
  check(turns.size === 4, 'four turns so far', [...turns]);
  const snapshot = await session.snapshot();
  check(snapshot.events.length === events.length, 'snapshot() agrees', snapshot.events.length);
  const from = [];
  for await (const e of session.stream({ follow: false, startIndex: tail - 1 })) from.push(e);
  check(from.length === 2, 'a bounded read from the tail', kinds(from));
});

await step('stream: live', async () => {
  const abort = new AbortController();
  const startIndex = session.state.streamIndex;
  const seen = [];
  const live = (async () => {
    for await (const e of session.stream({ startIndex, signal: abort.signal })) {
      seen.push(e);
      if (e.type === 'session.waiting') break;
    }
  })();
  const result = await (await session.send('live one')).result();
  await live;
  abort.abort();
  check(text(result) === 'You said: live one', 'the reply', text(result));
  const deltas = seen.filter((e) => e.type === 'message.appended').map((e) => e.data.messageDelta);
  check(deltas.join('') === 'You said: live one', 'the live stream carried the deltas', deltas);
  check(seen[0].type === 'turn.started', 'the live stream starts at the new turn', kinds(seen));
});

await step('send while a turn runs (steered in; both sends find the turn\'s end)', async () => {
  const running = await session.send('/tool pause {}');
  let called;
  const toolCalled = new Promise((resolve) => {
    called = resolve;
  });
  const firstEvents = (async () => {
    const seen = [];
    for await (const e of running) {
      seen.push(e);
      if (e.type === 'actions.requested') called();
    }
    called();
    return seen;
  })();
  await toolCalled;
  const steered = await (await session.send('and one more thing')).result();
  check(steered.status === 'waiting', 'the steered send rests at the turn boundary', steered.status);
  const k = kinds(steered.events);
  check(k.includes('turn.completed') && k.at(-1) === 'session.waiting', 'the turn ended', k);
  const received = steered.events
    .filter((e) => e.type === 'message.received')
    .map((e) => e.data.message);
  check(received.includes('and one more thing'), 'its message joined the turn', received);
  const first = kinds(await firstEvents);
  check(first.includes('actions.requested'), 'the tool was called', first);
  check(first.at(-1) === 'session.waiting', 'the first send finds the same end', first);
});

await step('cancel while a tool is running', async () => {
  const response = await session.send('/tool wait {}');
  const events = [];
  let cancelled;
  let pid;
  for await (const e of response) {
    events.push(e);
    if (e.type === 'actions.requested' && cancelled === undefined) {
      // The tool writes its pid once it runs, then sleeps until it is killed.
      const pidFile = join(project, 'wait.pid');
      for (let i = 0; i < 500 && pid === undefined; i += 1) {
        try {
          pid = Number(readFileSync(pidFile, 'utf8').trim()) || undefined;
        } catch {}
        if (pid === undefined) await new Promise((r) => setTimeout(r, 20));
      }
      check(pid !== undefined, 'the tool started');
      await expectClientError(session.compact(), 409, 'session_not_active');
      cancelled = await session.cancel();
    }
  }
  check(cancelled?.status === 'accepted', 'cancel accepted', cancelled);
  const k = kinds(events);
  check(k.includes('turn.cancelled'), 'turn.cancelled', k);
  check(k.at(-1) === 'session.waiting', 'the turn ends at its boundary', k);
  let alive = true;
  for (let i = 0; i < 250 && alive; i += 1) {
    try {
      process.kill(pid, 0);
      await new Promise((r) => setTimeout(r, 20));
    } catch {
      alive = false;
    }
  }
  check(!alive, 'the tool process is gone', pid);
  const idle = await session.cancel();
  check(idle.status === 'no_active_turn', 'nothing left to cancel', idle);
});

await step('compact, clear, reset', async () => {
  const compacted = await session.compact();
  check(compacted.status === 'accepted' && compacted.sessionId === session.state.sessionId, 'compact', compacted);
  const cleared = await session.clear();
  check(cleared.status === 'accepted', 'clear', cleared);
  const tail = [];
  for await (const e of session.stream({ follow: false, startIndex: session.state.streamIndex })) {
    tail.push(e);
  }
  const k = kinds(tail);
  check(k.includes('compaction.completed') && k.includes('context.cleared'), 'their events', k);
  const reset = await session.reset();
  check(reset.status === 'reset' && reset.previousSessionId === session.state.sessionId, 'reset', reset);
  const after = await (await session.send('after the reset')).result();
  check(text(after) === 'You said: after the reset', 'the session still answers', after.events.map((e) => [e.type, e.meta.deliveryIds, e.data.turnId]));
});

server.kill('SIGTERM');
const seconds = ((Date.now() - started) / 1000).toFixed(1);
console.log(`eve-client took ${seconds} s`);
console.log(`eve-client: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

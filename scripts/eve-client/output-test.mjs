// eve's own npm client (`eve/client` from eve@0.80.1), unchanged, against our `eve serve` with a
// scripted OpenAI-compatible model server (Chat Completions over SSE, in this process): the turn
// options of eve's client, each asserted on the events the client sees AND on the requests the
// model server received. `outputSchema` (result().data), `clientContext` (in the model calls of
// its turn only), `turnPolicy: "queue"` while a turn runs, and `stubs` on create. Run by
// scripts/test-eve-client.sh.
//
// usage: node output-test.mjs EVE_BINARY PROJECT_DIR
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { Client } from 'eve/client';

const [eveBin, project] = process.argv.slice(2);
let passed = 0;
let failed = 0;

function check(cond, what, detail) {
  if (!cond) {
    throw new Error(`${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
  }
}

async function step(name, body) {
  const t0 = Date.now();
  try {
    await withDeadline(body(), 60_000, name);
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

// ---- the scripted model server ---------------------------------------------------------------
// Each request is answered by the first queued reply whose `when` accepts it (a function of the
// request body), else "ok". A reply is `{text}` or `{tool: name, args}`. Every body is recorded.
const model = { requests: [], replies: [] };

function sse(res, chunks) {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const chunk of chunks) res.write(`data: ${JSON.stringify(chunk)}\n\n`);
  res.end('data: [DONE]\n\n');
}

function chunk(delta, finish) {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 0,
    model: 'stub-model',
    choices: [{ index: 0, delta, finish_reason: finish ?? null }],
  };
}

function answer(reply) {
  if (reply.tool !== undefined) {
    return [
      chunk({
        role: 'assistant',
        tool_calls: [{
          index: 0,
          id: `call_${model.requests.length}`,
          type: 'function',
          function: { name: reply.tool, arguments: JSON.stringify(reply.args ?? {}) },
        }],
      }),
      chunk({}, 'tool_calls'),
      { choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } },
    ];
  }
  return [
    chunk({ role: 'assistant', content: reply.text }),
    chunk({}, 'stop'),
    { choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } },
  ];
}

const modelServer = createServer((req, res) => {
  let raw = '';
  req.on('data', (c) => { raw += c; });
  req.on('end', async () => {
    if (req.method === 'GET' && req.url.endsWith('/models')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'stub-model', object: 'model' }] }));
      return;
    }
    const body = JSON.parse(raw || '{}');
    model.requests.push(body);
    const i = model.replies.findIndex((r) => r.when(body));
    const reply = i < 0 ? { text: 'ok' } : model.replies.splice(i, 1)[0];
    if (reply.delayMs) await new Promise((r) => setTimeout(r, reply.delayMs));
    sse(res, answer(reply));
  });
});
await new Promise((r) => modelServer.listen(0, '127.0.0.1', r));
const modelUrl = `http://127.0.0.1:${modelServer.address().port}/v1`;

// The user messages of a request, and whether any message of it holds `text`.
const users = (body) => body.messages.filter((m) => m.role === 'user').map((m) => String(m.content));
const lastUser = (body) => users(body).at(-1) ?? '';
const mentions = (body, text) => JSON.stringify(body.messages).includes(text);
const requestsFor = (marker) => model.requests.filter((b) => users(b).some((u) => u.includes(marker)));

// ---- eve serve ------------------------------------------------------------------------------
const server = spawn(eveBin, ['serve', '--port', '0'], {
  cwd: project,
  env: {
    ...process.env,
    EVE_MODEL: 'openai-compatible/stub-model',
    EVE_BASE_URL: modelUrl,
    EVE_API_KEY: 'test-key',
    NO_COLOR: '1',
  },
  stdio: ['ignore', 'ignore', 'pipe'],
});
let serverLog = '';
const port = await withDeadline(
  new Promise((resolve, reject) => {
    server.stderr.on('data', (c) => {
      serverLog += c;
      const m = /on http:\/\/127\.0\.0\.1:(\d+)/.exec(serverLog);
      if (m) resolve(Number(m[1]));
    });
    server.on('exit', (code) => reject(new Error(`eve serve exited (${code}): ${serverLog}`)));
  }),
  60_000,
  'eve serve start',
);
const client = new Client({ host: `http://127.0.0.1:${port}` });
const kinds = (events) => events.map((e) => e.type);

const schema = {
  type: 'object',
  properties: { city: { type: 'string' }, celsius: { type: 'number' } },
  required: ['city', 'celsius'],
  additionalProperties: false,
};

await step('sessions.create({message, outputSchema}) -> result().data, typed and valid', async () => {
  const marker = 'schema-one';
  model.replies.push({ when: (b) => lastUser(b).includes(marker), text: '{"city": "Paris", "celsius": 21}' });
  const created = await client.sessions.create({ message: `weather as JSON ${marker}`, outputSchema: schema });
  const result = await created.response.result();
  check(result.status === 'waiting', 'the turn ends', result.status);
  check(result.data?.city === 'Paris' && result.data?.celsius === 21, 'result().data', result.data);
  const done = result.events.find((e) => e.type === 'result.completed');
  check(done !== undefined, 'a result.completed event', kinds(result.events));
  check(done.data.turnId === 'turn_0' && done.data.result.celsius === 21, 'its fields', done.data);
  const [request] = requestsFor(marker);
  check(request.response_format?.type === 'json_schema', 'response_format json_schema sent', request.response_format);
  check(JSON.stringify(request.response_format.json_schema.schema) === JSON.stringify(schema), 'the schema itself', request.response_format);
  check(request.messages[0].role === 'system' && request.messages[0].content.includes('"celsius"'), 'the schema in the system prompt');
});

await step('outputSchema: an answer that does not match goes back with the errors, then passes', async () => {
  const marker = 'schema-two';
  model.replies.push({ when: (b) => lastUser(b).includes(marker), text: '{"city": 3}' });
  model.replies.push({ when: (b) => lastUser(b).includes('does not match the required output schema'), text: '{"city": "Oslo", "celsius": -4}' });
  const created = await client.sessions.create({ message: `weather ${marker}`, outputSchema: schema });
  const result = await created.response.result();
  check(result.data?.city === 'Oslo', 'the repaired result', result.data);
  const repair = model.requests.find((b) => lastUser(b).includes('does not match the required output schema'));
  check(repair !== undefined, 'the model was shown the errors');
  check(lastUser(repair).includes('/city') && lastUser(repair).includes('celsius'), 'naming each error', lastUser(repair));
});

await step('outputSchema the model never satisfies: turn.failed output_schema_not_fulfilled', async () => {
  const marker = 'schema-never';
  for (let i = 0; i < 3; i += 1) {
    model.replies.push({ when: (b) => mentions(b, marker), text: 'Sorry, no JSON today.' });
  }
  const created = await client.sessions.create({ message: `weather ${marker}`, outputSchema: schema });
  const events = [];
  for await (const e of created.response) events.push(e);
  const failedTurn = events.find((e) => e.type === 'turn.failed');
  check(failedTurn?.data.error.code === 'output_schema_not_fulfilled', 'the code', failedTurn?.data);
  check(!kinds(events).includes('result.completed'), 'no result', kinds(events));
  check(requestsFor(marker).length === 3, 'three attempts', requestsFor(marker).length);
});

let session;
await step('send(…, {clientContext}) reaches the model in that turn only', async () => {
  const created = await client.sessions.create({ message: 'hello context' });
  session = created.session;
  await created.response.result();
  const marker = 'ctx-turn';
  const context = 'The user is looking at order #4521.';
  // The turn calls a tool, so the context must be in both of its model calls.
  // (The context is the last user message of each call; the marker is in the one before it.)
  const before = (b) => b.messages.at(-2);
  model.replies.push({ when: (b) => before(b)?.role === 'user' && String(before(b).content).includes(marker), tool: 'get_weather', args: { city: 'Paris' } });
  model.replies.push({ when: (b) => mentions(b, marker) && b.messages.at(-2)?.role === 'tool', text: 'Order seen.' });
  const result = await (await session.send(`what am I looking at ${marker}`, { clientContext: context })).result();
  check(result.message === 'Order seen.', 'the reply', result.message);
  const calls = requestsFor(marker);
  check(calls.length === 2, 'two model calls in the turn', calls.length);
  for (const call of calls) check(mentions(call, context), 'the context in every call of the turn', call.messages);
  check(calls.every((c) => c.messages.at(-1).role === 'user' && c.messages.at(-1).content.includes(context)), 'as a user-role message');
  const later = await (await session.send('and now? ctx-later')).result();
  check(later.status === 'waiting', 'the next turn ends', later.status);
  const [next] = requestsFor('ctx-later');
  check(!mentions(next, context), 'never in a later turn', next.messages);
  const snapshot = await session.snapshot();
  check(!JSON.stringify(snapshot.events).includes(context), 'never in the stream others read');
});

await step('send(…, {turnPolicy: "queue"}) while a turn runs waits for a turn of its own', async () => {
  const marker = 'queue-first';
  model.replies.push({ when: (b) => lastUser(b).includes(marker), tool: 'pause', args: {} });
  const first = await session.send(`take a second ${marker}`);
  // The first turn is in its tool call (pause takes a second) when the second message arrives.
  const deadline = Date.now() + 10_000;
  while (!model.requests.some((b) => lastUser(b).includes(marker)) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
  }
  const second = await session.send('queued one queue-second', { turnPolicy: 'queue' });
  const one = await first.result();
  const two = await second.result();
  const turnOf = (r) => r.events.find((e) => e.type === 'turn.started')?.data.turnId;
  check(turnOf(one) !== undefined && turnOf(two) !== undefined && turnOf(one) !== turnOf(two), 'two turns', [turnOf(one), turnOf(two)]);
  const received = one.events.filter((e) => e.type === 'message.received').map((e) => e.data.message);
  check(!received.some((m) => m.includes('queue-second')), 'not folded into the running turn', received);
  const firstTurnCalls = model.requests.filter((b) => mentions(b, marker) && !mentions(b, 'queue-second'));
  check(firstTurnCalls.length === 2, 'the running turn finished without it', firstTurnCalls.length);
  const [own] = requestsFor('queue-second');
  check(lastUser(own).includes('queue-second'), 'its own turn asks the model', users(own));
});

await step('stubs on create answer a named tool with a fixed result', async () => {
  const marker = 'stub-me';
  model.replies.push({ when: (b) => lastUser(b).includes(marker), tool: 'get_weather', args: { city: 'Lima' } });
  model.replies.push({ when: (b) => mentions(b, marker) && b.messages.at(-1)?.role === 'tool', text: 'Stubbed weather seen.' });
  const created = await client.sessions.create({
    message: `weather in Lima ${marker}`,
    stubs: [{ id: 'weather', tool: 'get_weather', match: { city: { const: 'Lima' } }, outcome: { response: { city: 'Lima', sky: 'stubbed-green' } } }],
  });
  const result = await created.response.result();
  const action = result.events.find((e) => e.type === 'action.result');
  check(action?.data.result.output.sky === 'stubbed-green', 'the stub result in the stream', action?.data);
  const toolMessage = requestsFor(marker).at(-1).messages.at(-1);
  check(toolMessage.role === 'tool' && toolMessage.content.includes('stubbed-green'), 'the model got the stub', toolMessage);
  // The same session's call the rule does not match runs the real tool.
  model.replies.push({ when: (b) => lastUser(b).includes('stub-real'), tool: 'get_weather', args: { city: 'Rome' } });
  const real = await (await created.session.send('weather in Rome stub-real')).result();
  const realAction = real.events.find((e) => e.type === 'action.result');
  check(realAction?.data.result.output.sky === 'clear', 'an unmatched call runs the tool', realAction?.data);
});

server.kill('SIGTERM');
modelServer.close();
console.log(`${passed} passed, ${failed} failed`);
if (failed > 0) {
  console.log(serverLog.slice(-4000));
  process.exit(1);
}
process.exit(0);

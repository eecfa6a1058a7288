// eve's own npm client (`eve/client` from eve@0.80.1) against our `eve serve` with a scripted
// OpenAI-compatible model server: a question answered with `respond`, an approval answered by a
// plain "approve" message, a tool that ends the turn, and a tool's progress. Each step asserts on
// the events the client saw and on the requests the model server received. Run by
// scripts/test-eve-client.sh, which lays out the project (`ask_question: true`, the tools).
//
// usage: node questions-test.mjs EVE_BINARY PROJECT_DIR
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

// The scripted model: what it answers depends on the conversation's last message, and it keeps
// every request body it receives.
const received = [];
let callSeq = 0;
function chunk(delta, finish) {
  return `data: ${JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    choices: [{ index: 0, delta, finish_reason: finish ?? null }],
  })}\n\n`;
}
function toolCall(name, args) {
  callSeq += 1;
  return [
    chunk({
      role: 'assistant',
      tool_calls: [
        { index: 0, id: `call_${callSeq}`, type: 'function', function: { name, arguments: JSON.stringify(args) } },
      ],
    }),
    chunk({}, 'tool_calls'),
  ];
}
function reply(text) {
  return [chunk({ role: 'assistant', content: text }), chunk({}, 'stop')];
}
function answer(body) {
  const last = body.messages.at(-1);
  if (last.role === 'tool') return reply(`got: ${last.content}`);
  const said = typeof last.content === 'string' ? last.content : JSON.stringify(last.content);
  if (said.includes('pick a plan')) {
    return toolCall('ask_question', {
      question: 'Which plan?',
      options: [
        { label: 'Basic', description: 'The small one.' },
        { label: 'Pro', description: 'The large one.' },
      ],
    });
  }
  if (said.includes('refund please')) return toolCall('refund', { amount: 5, charge_id: 'ch_1' });
  if (said.includes('hand over')) return toolCall('handoff', {});
  if (said.includes('crawl')) return toolCall('crawl', {});
  return reply(`You said: ${said}`);
}
const model = createServer((req, res) => {
  let raw = '';
  req.on('data', (c) => {
    raw += c;
  });
  req.on('end', () => {
    if (req.method !== 'POST' || !req.url.endsWith('/chat/completions')) {
      // The runtime asks the server about its models (the context window): it knows none.
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [] }));
      return;
    }
    const body = JSON.parse(raw);
    received.push(body);
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const part of answer(body)) res.write(part);
    res.write(
      `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12 } })}\n\n`,
    );
    res.end('data: [DONE]\n\n');
  });
});
await new Promise((r) => model.listen(0, '127.0.0.1', r));
const modelUrl = `http://127.0.0.1:${model.address().port}/v1`;

const server = spawn(eveBin, ['serve', '--port', '0'], {
  cwd: project,
  env: {
    ...process.env,
    EVE_MODEL: 'openai-compatible/scripted',
    EVE_BASE_URL: modelUrl,
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
const toolMessages = (body) => body.messages.filter((m) => m.role === 'tool').map((m) => m.content);

await step('respond answers a question (ask_question, input.requested kind question)', async () => {
  const { session, response } = await client.sessions.create({ message: 'pick a plan for me' });
  const asked = await response.result();
  check(asked.status === 'waiting', 'the question parks the turn', asked.status);
  check(asked.inputRequests.length === 1, 'one input request', asked.inputRequests);
  const q = asked.inputRequests[0];
  check(q.kind === 'question' && q.prompt === 'Which plan?', 'a question', q);
  check(q.allowFreeform === true && q.display === 'select', 'free text allowed, a selection', q);
  check(
    JSON.stringify(q.options) ===
      JSON.stringify([
        { id: 'Basic', label: 'Basic', description: 'The small one.' },
        { id: 'Pro', label: 'Pro', description: 'The large one.' },
      ]),
    'the options, ids are labels',
    q.options,
  );
  check(q.action.toolName === 'ask_question', 'the action is the call', q.action);
  const offered = received.at(-1).tools.map((t) => t.function.name);
  check(offered.includes('ask_question'), 'the model was offered ask_question', offered);
  const before = received.length;
  const done = await (await session.respond([{ requestId: q.requestId, optionId: 'Pro' }])).result();
  const k = kinds(done.events);
  check(k.includes('input.resolved') && !k.includes('approval.settled'), 'resolved, not approved', k);
  const resolution = done.events.find((e) => e.type === 'input.resolved').data.resolutions[0];
  check(resolution.outcome === 'answered' && resolution.response.optionId === 'Pro', 'answered Pro', resolution);
  const result = done.events.find((e) => e.type === 'action.result');
  check(result.data.result.output.answer === 'Pro', 'the call settled with the answer', result.data);
  check(received.length === before + 1, 'one more model request', received.length - before);
  const told = toolMessages(received.at(-1)).at(-1);
  check(
    JSON.stringify(JSON.parse(told)) === JSON.stringify({ answer: 'Pro', status: 'answered' }),
    'the model received the answer as the tool result',
    told,
  );
  check(done.message === `got: ${told}`, 'the reply', done.message);
});

await step('a plain "approve" message answers an approval (with its approval_prompt)', async () => {
  const { session, response } = await client.sessions.create({ message: 'refund please' });
  const asked = await response.result();
  const request = asked.inputRequests[0];
  check(request?.kind === 'tool-approval', 'an approval', asked.inputRequests);
  check(request.prompt === 'Refund 5 to ch_1?', 'the tool\'s own prompt, filled in', request.prompt);
  const before = received.length;
  const done = await (await session.send('  Approve ')).result();
  const k = kinds(done.events);
  check(k.includes('approval.settled') && k.includes('input.resolved'), 'settled and resolved', k);
  check(!k.includes('message.received'), 'the message was the answer, not a message', k);
  const result = done.events.find((e) => e.type === 'action.result');
  check(result?.data.result.output.refunded === 5, 'the approved tool ran', result?.data);
  check(done.status === 'waiting' && k.at(-1) === 'session.waiting', 'the turn ends', k);
  check(received.length === before + 1, 'one more model request', received.length - before);
  const told = toolMessages(received.at(-1)).at(-1);
  check(JSON.parse(told).refunded === 5, 'the model received the tool result', told);
  check(
    !received.at(-1).messages.some((m) => m.role === 'user' && String(m.content).includes('Approve')),
    'the model never saw "Approve" as a message',
  );
});

await step('a tool with ends_turn ends the turn when it succeeds', async () => {
  const before = received.length;
  const { response } = await client.sessions.create({ message: 'hand over' });
  const done = await response.result();
  const k = kinds(done.events);
  check(k.includes('action.result') && k.includes('turn.completed'), 'the call ran, the turn completed', k);
  check(!k.includes('message.completed'), 'no reply', k);
  check(received.length === before + 1, 'the model was asked once', received.length - before);
  const handoff = received.at(-1).tools.find((t) => t.function.name === 'handoff');
  check(
    handoff.function.description.includes('Calling this tool ends your turn once it succeeds'),
    'the model was told the tool ends the turn',
    handoff.function.description,
  );
});

await step('a tool\'s progress streams as action.partial with a label', async () => {
  const { response } = await client.sessions.create({ message: 'crawl the site' });
  const done = await response.result();
  const partials = done.events.filter((e) => e.type === 'action.partial');
  const callId = partials[0]?.data.result.callId;
  const labels = partials.map((e) => e.data.presentation[callId].label);
  check(
    JSON.stringify(labels) === JSON.stringify(['Fetching page 1 of 2', 'Fetching page 2 of 2']),
    'two progress labels',
    labels,
  );
  const k = kinds(done.events);
  check(k.lastIndexOf('action.partial') < k.indexOf('action.result'), 'progress before the result', k);
  const told = toolMessages(received.at(-1)).at(-1);
  check(JSON.parse(told).pages === 2, 'the model received the result, not the progress', told);
});

server.kill('SIGTERM');
model.close();
console.log(`eve-client questions: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

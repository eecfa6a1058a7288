// eve's own npm client (`eve/client` from eve@0.80.1), unchanged, against our `eve serve` of a
// project written as eve's users write it: TypeScript tools (`defineTool` with zod, one behind
// `always()`), a `defineSkill` skill, `defineHook` hooks and a `defineSchedule` schedule
// (scripts/typescript/docs-tools, copied from eve's docs). Every step asserted. Run by
// scripts/test-typescript.sh, which lays the project out with zod and puts Node 24 on PATH.
//
// usage: node typescript-test.mjs EVE_BINARY PROJECT_DIR
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'eve/client';

const [eveBin, project] = process.argv.slice(2);
let failed = 0;

function check(cond, what, detail) {
  if (!cond) throw new Error(`${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
}

async function step(name, body) {
  const t0 = Date.now();
  try {
    await body();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e?.stack ?? e}`);
  }
}

const server = spawn(eveBin, ['serve', '--port', '0'], {
  cwd: project,
  env: { ...process.env, EVE_MODEL: 'mock/echo', NO_COLOR: '1' },
  stdio: ['ignore', 'ignore', 'pipe'],
});
let serverLog = '';
const port = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`eve serve did not start: ${serverLog}`)), 60_000);
  server.stderr.on('data', (chunk) => {
    serverLog += chunk;
    const m = /on http:\/\/127\.0\.0\.1:(\d+)/.exec(serverLog);
    if (m) {
      clearTimeout(timer);
      resolve(Number(m[1]));
    }
  });
  server.on('exit', (code) => reject(new Error(`eve serve exited (${code}): ${serverLog}`)));
});
const client = new Client({ host: `http://127.0.0.1:${port}` });
const kinds = (events) => events.map((e) => e.type);

await step('info(): the module tools, the skill and their approvals', async () => {
  const info = await client.info();
  const tools = info.tools.static.map((t) => t.name);
  for (const name of ['get_weather', 'plan', 'refund_charge', 'web_search', 'who_called_me']) {
    check(tools.includes(name), name, tools);
  }
  const refund = info.tools.static.find((t) => t.name === 'refund_charge');
  check(refund.requiresApproval === true, 'refund_charge needs approval (always())', refund);
  const agent = await (await client.fetch('/eve/v1/agent')).json();
  check(JSON.stringify(agent).includes('research'), 'the defineSkill skill is listed', agent.skills);
  check(JSON.stringify(agent).includes('heartbeat'), 'the defineSchedule schedule is listed', agent.schedules);
});

let session;
await step('a zod-validated TypeScript tool runs in the box', async () => {
  const created = await client.sessions.create({ message: '/tool get_weather {"city": "Paris"}' });
  session = created.session;
  const result = await created.response.result();
  const done = result.events.filter((e) => e.type === 'action.result');
  check(done.length === 1, 'one action.result', kinds(result.events));
  const output = done[0].data.result.output;
  check(output.city === 'Paris' && output.condition === 'Sunny', 'the module\'s output', output);
});

await step('the input schema is enforced by the module\'s own zod schema', async () => {
  const result = await (await session.send('/tool get_weather {"city": ""}')).result();
  const done = result.events.find((e) => e.type === 'action.result');
  check(done && done.data.status !== 'completed', 'the call failed', done?.data);
  check(JSON.stringify(done.data).includes('1 character'), 'with zod\'s message', done.data);
});

await step('ctx carries the session: who_called_me', async () => {
  const result = await (await session.send('/tool who_called_me {}')).result();
  const done = result.events.find((e) => e.type === 'action.result');
  check(JSON.stringify(done?.data).includes(session.state.sessionId), 'the session id', done?.data);
});

await step('always() parks the turn; respond() lets the module run', async () => {
  const asked = await (await session.send('/tool refund_charge {"chargeId": "ch_1", "amount": 5}')).result();
  check(asked.inputRequests.length === 1, 'one input request', asked.inputRequests);
  const request = asked.inputRequests[0];
  check(request.action?.toolName === 'refund_charge', 'for refund_charge', request);
  const answered = await (
    await session.respond([{ requestId: request.requestId, optionId: 'approve' }])
  ).result();
  const k = kinds(answered.events);
  check(k.includes('approval.settled'), 'settled', k);
  const done = answered.events.find((e) => e.type === 'action.result');
  // eve's example calls a `refund` it never defines: the module ran, and threw.
  check(JSON.stringify(done?.data).includes('refund is not defined'), 'the module ran', done?.data);
});

await step('the hook module ran on turn.completed', async () => {
  // Observe hooks run after the turn's end is streamed: wait for the mark a little.
  const boxes = join(project, '.eve', 'sandboxes');
  const read = () =>
    readdirSync(boxes)
      .map((d) => {
        try {
          return readFileSync(join(boxes, d, 'hook-ran.txt'), 'utf8');
        } catch {
          return '';
        }
      })
      .join('');
  const want = `turn.completed ${session.state.sessionId}`;
  let marks = read();
  for (let i = 0; i < 100 && !marks.includes(want); i++) {
    await new Promise((r) => setTimeout(r, 100));
    marks = read();
  }
  check(marks.includes(want), 'the mark', marks);
});

server.kill('SIGTERM');
await new Promise((r) => server.on('exit', r));
if (failed > 0) {
  console.log(`${failed} step(s) failed`);
  process.exit(1);
}
console.log('typescript project through eve serve and eve\'s client: ok');

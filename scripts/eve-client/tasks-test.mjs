// eve's own npm client (`eve/client` from eve@0.80.1), unchanged, follows a turn with a background
// task against our `eve serve`: the subagent call's receipt, `task.started`, `agent.started`,
// `turn.waiting {on: "tasks"}` (the client keeps reading), `task.settled`, the model's answer to
// the result, and the turn's end at `session.waiting`. Run by scripts/test-eve-client.sh.
//
// usage: node tasks-test.mjs EVE_BINARY WORK_DIR
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'eve/client';

const [eveBin, work] = process.argv.slice(2);

function check(cond, what, detail) {
  if (!cond) throw new Error(`${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
}

// An agent with a `researcher` subagent, played by the mock model, each agent its own steps.
const project = join(work, 'tasks-agent');
mkdirSync(join(project, 'agent/subagents/researcher'), { recursive: true });
writeFileSync(join(project, 'agent/instructions.md'), 'You delegate research.\n');
writeFileSync(join(project, 'agent/agent.yaml'), 'default_tools: false\n');
writeFileSync(
  join(project, 'agent/subagents/researcher/agent.yaml'),
  'description: Finds things out.\ndefault_tools: false\n',
);
writeFileSync(join(project, 'agent/subagents/researcher/instructions.md'), 'You research.\n');
const script = JSON.stringify({
  '*': [
    { tool_calls: [{ name: 'researcher', id: 'call_1', input: { message: 'six times seven?' } }] },
    { text: 'I asked the researcher.' },
    { text: 'The researcher says 42.' },
  ],
  researcher: [{ text: '42', delay_ms: 200 }],
});
const env = { ...process.env, EVE_MODEL: 'mock/echo', EVE_MOCK_SCRIPT: script, NO_COLOR: '1' };
execFileSync(eveBin, ['build'], { cwd: project, env, stdio: 'ignore' });

const server = spawn(eveBin, ['serve', '--port', '0'], {
  cwd: project,
  env,
  stdio: ['ignore', 'ignore', 'pipe'],
});
let log = '';
const port = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`eve serve did not start: ${log}`)), 60_000);
  server.stderr.on('data', (chunk) => {
    log += chunk;
    const m = /on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
    if (m) {
      clearTimeout(timer);
      resolve(Number(m[1]));
    }
  });
  server.on('exit', (code) => reject(new Error(`eve serve exited (${code}): ${log}`)));
});

let failed = false;
try {
  const client = new Client({ host: `http://127.0.0.1:${port}` });
  const created = await client.sessions.create({ message: 'What is six times seven?' });
  const result = await created.response.result();
  const k = result.events.map((e) => e.type);
  check(result.status === 'waiting', 'the turn rests waiting for the next message', result.status);
  check(k.at(-1) === 'session.waiting', 'the client followed the turn to session.waiting', k);
  const order = ['task.started', 'agent.started', 'turn.waiting', 'task.settled', 'turn.completed'];
  const at = order.map((kind) => k.indexOf(kind));
  check(at.every((i, n) => i >= 0 && (n === 0 || i > at[n - 1])), 'the task events in order', k);
  const waiting = result.events.find((e) => e.type === 'turn.waiting');
  check(waiting.data.on === 'tasks', 'turn.waiting on tasks', waiting.data);
  const settled = result.events.find((e) => e.type === 'task.settled');
  check(settled.data.status === 'completed' && settled.data.output === '42', 'the result', settled.data);
  check(result.message === 'The researcher says 42.', 'the answer to the result', result.message);
  console.log('ok   a turn with a background task, followed to session.waiting');
} catch (e) {
  failed = true;
  console.log(`FAIL a turn with a background task: ${e?.stack ?? e}\n${log}`);
} finally {
  server.kill('SIGTERM');
}
process.exit(failed ? 1 : 0);

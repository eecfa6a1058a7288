// `Client.info()` of eve's npm client (eve@0.80.1, unchanged) against `eve serve` on every example
// and template of this repository: eve's own validator (a strict schema) must accept our agent-info
// v5 document for agents with skills, subagents, hooks, MCP connections, schedules and channels,
// and the document must list what the runtime's own description (`GET /eve/v1/agent`) lists.
// Run by scripts/test-eve-client.sh.
//
// usage: node info-test.mjs EVE_BINARY PROJECT_DIR...
import { spawn } from 'node:child_process';
import { Client } from 'eve/client';

const [eveBin, ...projects] = process.argv.slice(2);
let failed = 0;

function check(cond, what, detail) {
  if (!cond) throw new Error(`${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
}

async function serve(project) {
  const server = spawn(eveBin, ['serve', '--port', '0'], {
    cwd: project,
    env: { ...process.env, EVE_MODEL: 'mock/echo', NO_COLOR: '1' },
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
    server.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`eve serve exited (${code}): ${log}`));
    });
  });
  return { server, host: `http://127.0.0.1:${port}` };
}

const names = (list, key = 'name') => list.map((x) => x[key]).sort();

for (const project of projects) {
  const t0 = Date.now();
  let running;
  try {
    running = await serve(project);
    // The support template's API takes a bearer token; open servers ignore it.
    const bearer = process.env.SUPPORT_API_TOKEN;
    const client = new Client({ host: running.host, auth: bearer ? { bearer } : undefined });
    const info = await client.info();
    const own = await (await client.fetch('/eve/v1/agent')).json();
    check(info.kind === 'eve-agent-info' && info.version === 5, 'agent-info v5', info.kind);
    check(info.agent.name === own.agent.name, 'the agent name', [info.agent.name, own.agent.name]);
    check(
      JSON.stringify(names(info.tools.static)) === JSON.stringify(names(own.tools)),
      'the same tools',
      [names(info.tools.static), names(own.tools)],
    );
    check(
      JSON.stringify(names(info.skills.static)) === JSON.stringify(names(own.skills)),
      'the same skills',
      [names(info.skills.static), names(own.skills)],
    );
    check(info.subagents.total === own.subagents.length, 'the subagents', info.subagents);
    check(
      JSON.stringify(names(info.connections, 'connectionName')) ===
        JSON.stringify(names(own.connections)),
      'the connections',
      info.connections,
    );
    check(info.schedules.length === own.schedules.length, 'the schedules', info.schedules);
    for (const tool of info.tools.static) {
      const mine = own.tools.find((t) => t.name === tool.name);
      check(tool.requiresApproval === (mine.approval !== 'never'), `approval of ${tool.name}`, [
        tool.requiresApproval,
        mine.approval,
      ]);
    }
    const parts = [
      `${info.tools.static.length} tools`,
      `${info.skills.static.length} skills`,
      `${info.subagents.total} subagents`,
      `${info.connections.length} connections`,
      `${info.hooks.length} hooks`,
      `${info.schedules.length} schedules`,
      `${info.channels.routes.length} channel routes`,
    ];
    console.log(`ok   info() of ${project.split('/').pop()}: ${parts.join(', ')} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL info() of ${project}: ${e?.stack ?? e}`);
  } finally {
    running?.server.kill('SIGTERM');
  }
}
process.exit(failed === 0 ? 0 : 1);

// Files in messages and tool results through eve's own npm client (`eve/client` from eve@0.80.1)
// against our `eve serve`, with a scripted OpenAI-compatible model server that records every
// request: a `createTextWithFileContent` message with a real PNG and a real PDF reaches the model
// as `image_url` and `file` parts and the stream as file parts (no bytes), a tool's image reaches
// the model as an image part, and the channel's upload policy answers 413 and 415. Run by
// scripts/test-eve-client.sh.
//
// usage: node files-test.mjs EVE_BINARY
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deflateSync } from 'node:zlib';
import { Client, ClientError, createDataUrlFilePart, createTextWithFileContent } from 'eve/client';

const [eveBin] = process.argv.slice(2);
let passed = 0;
let failed = 0;

function check(cond, what, detail) {
  if (!cond) throw new Error(`${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`);
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

// A real PNG (8×8, red), made here: signature, IHDR, IDAT, IEND with their CRCs.
function crc32(buf) {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
function makePng() {
  const w = 8;
  const h = 8;
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  const rows = [];
  for (let y = 0; y < h; y++) rows.push(Buffer.from([0, ...Array(w).fill([255, 0, 0]).flat()]));
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', deflateSync(Buffer.concat(rows))),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}
// A real PDF: one page saying "Quarterly report", with a correct cross-reference table.
function makePdf() {
  const objects = [
    '<< /Type /Catalog /Pages 2 0 R >>',
    '<< /Type /Pages /Kids [3 0 R] /Count 1 >>',
    '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>',
    null,
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>',
  ];
  const stream = 'BT /F1 12 Tf 20 50 Td (Quarterly report) Tj ET';
  objects[3] = `<< /Length ${stream.length} >>\nstream\n${stream}\nendstream`;
  let out = '%PDF-1.4\n';
  const offsets = [];
  objects.forEach((body, i) => {
    offsets.push(out.length);
    out += `${i + 1} 0 obj\n${body}\nendobj\n`;
  });
  const xref = out.length;
  out += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n`;
  for (const o of offsets) out += `${String(o).padStart(10, '0')} 00000 n \n`;
  out += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`;
  return Buffer.from(out, 'latin1');
}
const png = makePng();
const pdf = makePdf();
const sha = (b) => createHash('sha256').update(b).digest('hex');

// The scripted model: Chat Completions over SSE, one scripted reply per completion request.
const requests = [];
const replies = [];
const sse = (deltas, finish) => {
  const chunks = [{ role: 'assistant', content: '' }, ...deltas].map((delta) => ({
    id: 'chatcmpl-test', object: 'chat.completion.chunk', created: 1, model: 'test-model',
    choices: [{ index: 0, delta, finish_reason: null }],
  }));
  chunks.push({
    id: 'chatcmpl-test', object: 'chat.completion.chunk', created: 1, model: 'test-model',
    choices: [{ index: 0, delta: {}, finish_reason: finish }],
    usage: { prompt_tokens: 10, completion_tokens: 3, total_tokens: 13 },
  });
  return `${chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join('')}data: [DONE]\n\n`;
};
const say = (text) => sse([{ content: text }], 'stop');
const call = (id, name, args) =>
  sse([{ tool_calls: [{ index: 0, id, type: 'function', function: { name, arguments: args } }] }], 'tool_calls');
const model = createServer((req, res) => {
  let body = '';
  req.on('data', (c) => { body += c; });
  req.on('end', () => {
    if (!req.url.endsWith('/chat/completions')) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"not here"}}');
      return;
    }
    requests.push(JSON.parse(body));
    const reply = replies.shift();
    if (reply === undefined) {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end('{"error":{"message":"no more replies"}}');
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(reply);
  });
});
await new Promise((r) => model.listen(0, '127.0.0.1', r));
const modelUrl = `http://127.0.0.1:${model.address().port}/v1`;

// The agent: a tool that returns an image, and an upload policy on the session API.
const root = mkdtempSync(join(tmpdir(), 'eve-files-'));
const project = join(root, 'files-agent');
mkdirSync(join(project, 'agent/tools'), { recursive: true });
mkdirSync(join(project, 'agent/channels'), { recursive: true });
writeFileSync(join(project, 'agent/instructions.md'), 'You look at files.\n');
writeFileSync(join(project, 'agent/agent.yaml'), 'context_window: 128000\n');
writeFileSync(
  join(project, 'agent/channels/eve.yaml'),
  'kind: http\nupload_policy:\n  max_bytes: 4096\n  allowed_media_types: ["image/*", "application/pdf"]\n',
);
const content = {
  type: 'content',
  value: [
    { type: 'text', text: 'the chart' },
    { type: 'file', data: { type: 'data', data: png.toString('base64') }, mediaType: 'image/png', filename: 'chart.png' },
  ],
};
writeFileSync(
  join(project, 'agent/tools/chart.sh'),
  `#!/bin/sh\n# ---\n# description: Draws the chart.\n# effect: read\n# ---\ncat >/dev/null\nprintf '%s' '${JSON.stringify(content)}'\n`,
);
chmodSync(join(project, 'agent/tools/chart.sh'), 0o755);
const env = { ...process.env, NO_COLOR: '1', EVE_MODEL: 'openai-compatible/test-model', EVE_BASE_URL: modelUrl, EVE_API_KEY: 'test-key' };
const built = spawnSync(eveBin, ['build'], { cwd: project, env, encoding: 'utf8' });
check(built.status === 0, 'eve build', built.stderr);

const server = spawn(eveBin, ['serve', '--port', '0'], { cwd: project, env, stdio: ['ignore', 'ignore', 'pipe'] });
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
const pngUrl = `data:image/png;base64,${png.toString('base64')}`;
const pdfUrl = `data:application/pdf;base64,${pdf.toString('base64')}`;

await step('createTextWithFileContent with a PNG and a PDF: native parts to the model, file parts in the stream', async () => {
  replies.push(say('A red square and a quarterly report.'));
  const message = [
    ...createTextWithFileContent({ text: 'What are these?', bytes: png, mediaType: 'image/png', filename: 'square.png' }),
    createDataUrlFilePart({ bytes: pdf, mediaType: 'application/pdf', filename: 'report.pdf' }),
  ];
  const created = await client.sessions.create({ message });
  const result = await created.response.result();
  check(result.message === 'A red square and a quarterly report.', 'the reply', result.message);
  const received = result.events.find((e) => e.type === 'message.received');
  check(received.data.message === 'What are these?', 'the flattened text', received.data);
  check(
    JSON.stringify(received.data.parts) === JSON.stringify([
      { text: 'What are these?', type: 'text' },
      { filename: 'square.png', mediaType: 'image/png', size: png.length, type: 'file' },
      { filename: 'report.pdf', mediaType: 'application/pdf', size: pdf.length, type: 'file' },
    ]),
    'file parts with no bytes',
    received.data.parts,
  );
  check(!JSON.stringify(result.events).includes(png.toString('base64')), 'no bytes in any event');
  const user = requests.at(-1).messages.find((m) => m.role === 'user');
  check(Array.isArray(user.content), 'a user message of parts', user);
  check(user.content[0].type === 'text' && user.content[0].text === 'What are these?', 'the text part', user.content[0]);
  check(user.content[1].type === 'image_url' && user.content[1].image_url.url === pngUrl, 'the PNG as image_url', user.content[1].type);
  check(
    user.content[2].type === 'file' && user.content[2].file.file_data === pdfUrl && user.content[2].file.filename === 'report.pdf',
    'the PDF as a file part',
    user.content[2].type,
  );
  // Staged in the session's workspace under its hash.
  const staged = join(project, '.eve/sandboxes', created.session.state.sessionId, '.eve/attachments', sha(png), 'square.png');
  check(readFileSync(staged).equals(png), 'the PNG staged in the workspace', staged);
});

await step('a tool returning an image: an image part to the model, a reference in action.result', async () => {
  replies.push(call('call_chart', 'chart', '{}'), say('It is red.'));
  const before = requests.length;
  const created = await client.sessions.create({ message: 'Draw the chart and describe it.' });
  const result = await created.response.result();
  check(result.message === 'It is red.', 'the reply', result.message);
  const action = result.events.find((e) => e.type === 'action.result');
  const output = action.data.result.output;
  check(output.type === 'content' && output.value[0].text === 'the chart', 'the content result', output);
  const file = output.value[1];
  check(file.type === 'file' && file.mediaType === 'image/png', 'a file part', file);
  check(file.path === `.eve/attachments/${sha(png)}/chart.png` && file.size === png.length, 'a reference to the staged file', file);
  check(!JSON.stringify(result.events).includes(png.toString('base64')), 'no bytes in any event');
  check(requests.length === before + 2, 'two model calls', requests.length - before);
  const second = requests.at(-1).messages;
  const tool = second.find((m) => m.role === 'tool');
  check(tool.content === 'the chart', 'the tool message carries the text', tool);
  const after = second.slice(second.indexOf(tool) + 1).find((m) => m.role === 'user');
  check(after?.content?.some((p) => p.type === 'image_url' && p.image_url.url === pngUrl), 'the image after the tool result', after);
});

await step('upload_policy: 413 for a file over max_bytes, 415 for a media type not allowed', async () => {
  const calls = requests.length;
  const big = Buffer.alloc(5000, 1);
  try {
    await client.sessions.create({
      message: createTextWithFileContent({ text: 'big', bytes: big, mediaType: 'image/png', filename: 'big.png' }),
    });
    throw new Error('expected a 413');
  } catch (e) {
    check(e instanceof ClientError && e.status === 413, '413', { status: e.status, body: e.body, e: String(e) });
  }
  try {
    await client.sessions.create({
      message: createTextWithFileContent({ text: 'csv', bytes: Buffer.from('a,b\n'), mediaType: 'text/csv', filename: 't.csv' }),
    });
    throw new Error('expected a 415');
  } catch (e) {
    check(e instanceof ClientError && e.status === 415, '415', { status: e.status, body: e.body, e: String(e) });
  }
  check(requests.length === calls, 'the model was not called');
});

server.kill('SIGTERM');
model.close();
rmSync(root, { recursive: true, force: true });
console.log(`files: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

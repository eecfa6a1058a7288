// A small chat page built with eve's own React binding (`useEveAgent` from `eve/react`, eve@0.80.1),
// bundled by scripts/test-browser.sh with esbuild and driven in Chromium by browser-test.mjs
// against `eve serve` on another origin (the page passes `host`; the server lists the page's
// origin under `cors.origins`).
//
// It renders what the binding projects (messages, text parts, tool parts, open input requests
// with their option buttons, the status) and keeps, for the test, a probe of every stream request
// the binding makes: its `startIndex`, whether it asked for stream control, the events and
// heartbeat lines it carried and whether it ended with eve's lease-end control line. The probe
// only reads the bytes it passes on.
//
// Query: `eve=<origin of eve serve>`; `twin=<name>` turns on a test-only fault so a twin test
// can show the checks fail: `no-control` drops `streamControlVersion` from stream requests (a
// client that never asks for stream control), `skip` starts each reconnect after a lease end one
// event past the cursor (a resume that loses the event at the cursor).
import { openConversationInputs, useEveAgent } from "eve/react";
import { useEffect } from "react";
import { createRoot } from "react-dom/client";

const params = new URLSearchParams(location.search);
const HOST = params.get("eve") ?? "";
const TWIN = params.get("twin") ?? "";
const LEASE_ENDED = '{"$eve":"stream.lease-ended","version":1}';

// Every stream request the binding made, in order.
const streams = [];
// Each assistant text the page rendered, in order (to see the answer stream, and never garble).
const renders = [];
window.__probe = { streams, renders, twin: TWIN };

const realFetch = window.fetch.bind(window);
window.fetch = async (input, init) => {
  const raw = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
  if (!/\/eve\/v1\/session\/[^/]+\/stream/.test(raw)) return realFetch(input, init);
  const url = new URL(raw);
  const previous = streams.at(-1);
  if (TWIN === "no-control") url.searchParams.delete("streamControlVersion");
  if (TWIN === "skip" && previous?.leaseEnded && url.searchParams.has("startIndex")) {
    url.searchParams.set("startIndex", String(Number(url.searchParams.get("startIndex")) + 1));
  }
  const record = {
    url: url.pathname + url.search,
    startIndex: Number(url.searchParams.get("startIndex") ?? "0"),
    control: url.searchParams.get("streamControlVersion") === "1",
    follow: url.searchParams.get("follow") !== "false",
    openedAt: performance.now(),
    closedAt: null,
    status: null,
    eventIds: [],
    heartbeats: 0,
    leaseEnded: false,
  };
  streams.push(record);
  const response = await realFetch(input instanceof Request ? new Request(url.href, input) : url.href, init);
  record.status = response.status;
  if (!response.ok || !response.body) {
    record.closedAt = performance.now();
    return response;
  }
  const decoder = new TextDecoder();
  let buffer = "";
  let lines = 0;
  const scan = (final) => {
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0 || (final && buffer.length > 0)) {
      const line = (nl >= 0 ? buffer.slice(0, nl) : buffer).trim();
      buffer = nl >= 0 ? buffer.slice(nl + 1) : "";
      lines += 1;
      if (line === "") {
        // The first line of every NDJSON stream is blank; later blank lines are heartbeats.
        if (lines > 1) record.heartbeats += 1;
      } else if (line === LEASE_ENDED) {
        record.leaseEnded = true;
      } else {
        try {
          record.eventIds.push(JSON.parse(line)?.meta?.id ?? null);
        } catch {
          record.eventIds.push(null);
        }
      }
    }
  };
  const body = response.body.pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        buffer += decoder.decode(chunk, { stream: true });
        scan(false);
        controller.enqueue(chunk);
      },
      flush() {
        buffer += decoder.decode();
        scan(true);
        record.closedAt = performance.now();
      },
    }),
  );
  return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
};

function toolLabel(part) {
  return part.toolMetadata?.eve?.label ?? part.toolName;
}

function Part({ part }) {
  if (part.type === "text") {
    return (
      <p className="text" data-state={part.state ?? "done"}>
        {part.text}
      </p>
    );
  }
  if (part.type === "dynamic-tool") {
    return (
      <div className="tool" data-tool={part.toolName} data-state={part.state}>
        <span className="label">{toolLabel(part)}</span>
        {part.state === "output-available" ? <code className="output">{JSON.stringify(part.output)}</code> : null}
      </div>
    );
  }
  return null;
}

function Chat() {
  const agent = useEveAgent({
    host: HOST,
    onError: (error) => console.error("eve binding error:", error?.message ?? error),
  });
  const messages = agent.data.messages;
  const assistantText = messages
    .filter((m) => m.role === "assistant")
    .flatMap((m) => m.parts.filter((p) => p.type === "text").map((p) => p.text))
    .join("\n");

  useEffect(() => {
    if (renders.at(-1)?.text !== assistantText) renders.push({ text: assistantText, at: performance.now() });
  }, [assistantText]);
  useEffect(() => {
    window.__eve = {
      status: agent.status,
      error: agent.error ? String(agent.error.message ?? agent.error) : null,
      session: agent.session ?? null,
      events: agent.events.map((e) => ({ id: e.meta?.id ?? null, type: e.type })),
    };
  }, [agent.status, agent.error, agent.session, agent.events]);

  const busy = agent.status === "submitted" || agent.status === "streaming";
  const inputs = openConversationInputs(agent.data);
  return (
    <main>
      <h1>eve agent</h1>
      <p id="status" data-status={agent.status}>
        {agent.status}
      </p>
      {agent.error ? <p id="error">{String(agent.error.message ?? agent.error)}</p> : null}
      <ol id="messages">
        {messages.map((message) => (
          <li className="message" data-role={message.role} key={message.id}>
            {message.parts.map((part, i) => (
              <Part key={part.id ?? part.toolCallId ?? i} part={part} />
            ))}
          </li>
        ))}
      </ol>
      <section id="inputs">
        {inputs.map(({ request }) => (
          <fieldset className="input" data-kind={request.kind} data-request-id={request.requestId} key={request.requestId}>
            <legend>{request.kind === "tool-approval" ? "Approval required" : request.kind}</legend>
            <p className="prompt">{request.prompt}</p>
            {(request.options ?? []).map((option) => (
              <button
                data-option={option.id}
                key={option.id}
                onClick={() => void agent.respond([{ requestId: request.requestId, optionId: option.id }]).catch((e) => console.error(e))}
                type="button"
              >
                {option.label}
              </button>
            ))}
          </fieldset>
        ))}
      </section>
      <form
        id="composer"
        onSubmit={(event) => {
          event.preventDefault();
          const field = event.currentTarget.elements.namedItem("message");
          const text = field.value.trim();
          if (text.length === 0 || busy) return;
          field.value = "";
          void agent.send(text).catch((e) => console.error(e));
        }}
      >
        <input id="message" name="message" autoComplete="off" />
        <button id="send" disabled={busy} type="submit">
          Send
        </button>
      </form>
    </main>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);

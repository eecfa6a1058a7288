import { writeFileSync } from "node:fs";
import { defineHook } from "eve/hooks";

// Leaves a mark in the session's workspace (the hook's working folder) when a turn completes.
export default defineHook({
  events: {
    async "turn.completed"(event: { type: string; sessionId?: string }, ctx) {
      writeFileSync("hook-ran.txt", `${event.type} ${ctx.session.id}\n`);
    },
  },
});

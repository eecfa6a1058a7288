// Written for the fixture: shows the session's budget slot, as `spend.ts` left it.
import { defineTool } from "eve/tools";
import { z } from "zod";
import { budget } from "../lib/budget";

export default defineTool({
  description: "Show how much of the session's query budget is used.",
  inputSchema: z.object({}),
  async execute() {
    return budget.get();
  },
});

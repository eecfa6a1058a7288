import { defineTool } from "eve/tools";
import { z } from "zod";

export default defineTool({
  description:
    "Show the steps of a multi-step request as a checklist. Pass the complete list on every call.",
  inputSchema: z.object({
    items: z.array(
      z.object({
        status: z.enum(["pending", "working", "completed", "failed"]),
        title: z.string(),
      }),
    ),
  }),
  async execute() {
    return { updated: true };
  },
});

import { defineTool } from "eve/tools";
import { z } from "zod";

const region = process.env.NO_SUCH_REGION;
if (!region) throw new Error("NO_SUCH_REGION is not set");

export default defineTool({
  description: "Never read: importing this module throws.",
  inputSchema: z.object({}),
  execute: () => region,
});

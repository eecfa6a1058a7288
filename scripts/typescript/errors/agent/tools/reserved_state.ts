import { defineTool } from "eve/tools";
import { defineState } from "eve/context";

const slot = defineState("eve.budget", () => ({ count: 0 }));

export default defineTool({
  description: "Keeps its state under a name eve reserves.",
  inputSchema: { type: "object", properties: {} },
  async execute() {
    return slot.get();
  },
});

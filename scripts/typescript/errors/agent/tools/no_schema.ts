import { defineTool } from "eve/tools";

export default defineTool({
  description: "A tool without an input schema.",
  execute: () => "nothing",
});

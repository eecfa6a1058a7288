// A module that exports the definition's fields, not a definition.
export default {
  description: "Looks like a tool, but no defineTool made it.",
  execute: () => "nothing",
};

import { defineInstructions } from "eve/instructions";

export default defineInstructions({
  content: "You answer questions with your tools.",
});

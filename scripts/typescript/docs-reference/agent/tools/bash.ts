import { disableTool } from "eve/tools";

export default disableTool();

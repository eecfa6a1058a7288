export { default } from "eve/tools/web_fetch";

export { default } from "eve/tools/bash";

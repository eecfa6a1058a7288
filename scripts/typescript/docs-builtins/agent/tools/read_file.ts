export { default } from "eve/tools/read_file";

export { default } from "eve/tools/write_file";

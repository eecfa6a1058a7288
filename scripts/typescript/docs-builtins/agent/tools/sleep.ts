import { sleep } from "eve/tools/sleep";

export default sleep();

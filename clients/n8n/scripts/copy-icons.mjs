// tsc copies no icons: each node's and credential's SVG goes beside its compiled file.
import { cpSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
for (const folder of ["credentials", "nodes/Opsconsole", "nodes/OpsconsoleTrigger"]) {
  for (const name of readdirSync(join(root, folder)).filter((file) => file.endsWith(".svg"))) {
    cpSync(join(root, folder, name), join(root, "dist", folder, name));
  }
}

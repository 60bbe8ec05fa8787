// The build starts from nothing, so a file removed from the sources is not packed from an old build.
import { rmSync } from "node:fs";
rmSync(new URL("../dist", import.meta.url), { recursive: true, force: true });

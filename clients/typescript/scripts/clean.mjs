// Empties dist/ before a build, so a module removed from src/ leaves nothing behind.
import { rmSync } from "node:fs";

rmSync(new URL("../dist", import.meta.url), { recursive: true, force: true });

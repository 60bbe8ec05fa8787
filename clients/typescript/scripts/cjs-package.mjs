// The package is ESM ("type": "module"); this marks dist/cjs as CommonJS so that `require` (n8n,
// Node-RED) loads its .js files as such.
import { writeFileSync } from "node:fs";

writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), '{\n  "type": "commonjs"\n}\n');

// stripe-stateful-mock (package-lock.json) on 127.0.0.1:$PORT for tests/third_party.py: the
// package's own Express app (createExpressApp, its documented custom start) in a node:http server,
// each request through tests/third_party_requests.cjs first. The package's CLI would listen on every
// interface.
const http = require("node:http");
const { createExpressApp } = require("stripe-stateful-mock");
const requestLog = require("./third_party_requests.cjs");

const port = Number(process.env.PORT);
const app = createExpressApp();
const server = http.createServer((req, res) => requestLog(req, res, () => app(req, res)));
server.on("error", (error) => {
  console.error(`stripe-stateful-mock could not listen on 127.0.0.1:${port}: ${error.message}`);
  process.exit(1);
});
server.listen(port, "127.0.0.1", () => {
  console.log(`stripe-stateful-mock listening on http://127.0.0.1:${port}`);
});

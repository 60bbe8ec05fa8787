// The third-party test servers' request log and faults (tests/third_party.py), a connect-style
// middleware on plain Node req/res. json-server loads it with --middlewares; tests/stripe_mock.cjs
// calls it before stripe-stateful-mock's app.
//
// Log: one JSON line per request, written as its answer is ended, to the file THIRD_PARTY_REQUEST_LOG
// names: {"method", "path" (with its query), "status", "idempotency_key" (or null), "started",
// "finished"} (milliseconds since the epoch, fractional), so a test measures at the server how many
// calls it got, how fast and how many at once. A dropped answer is logged with "dropped": true.
//
// Faults: the file THIRD_PARTY_FAULTS names holds a JSON list the test writes
// ([{"route": "POST /tickets", "fault": ..., "times": n}, ...]); the first whose route matches a
// request's method and path (without its query) and whose times are not used up applies to it:
//   "drop_answer": the server acts, then closes the connection instead of answering;
//   "delay_answer" (with "ms"): the server acts, then answers ms later;
//   "status" (with "status", and "headers" to send): answered with that status (and a JSON error)
//   before the server acts.
//
// A request with an X-Test-Harness header is the test reading the server's state: neither logged nor
// faulted.
const { appendFileSync, existsSync, readFileSync, writeFileSync } = require("node:fs");

const logPath = process.env.THIRD_PARTY_REQUEST_LOG;
const faultsPath = process.env.THIRD_PARTY_FAULTS;
const now = () => performance.timeOrigin + performance.now();

function takeFault(req) {
  if (!faultsPath || !existsSync(faultsPath)) {
    return null;
  }
  const faults = JSON.parse(readFileSync(faultsPath, "utf8") || "[]");
  const route = `${req.method} ${(req.originalUrl ?? req.url).split("?")[0]}`;
  const fault = faults.find((f) => f.route === route && f.times > 0);
  if (!fault) {
    return null;
  }
  fault.times -= 1;
  writeFileSync(faultsPath, JSON.stringify(faults));
  return fault;
}

module.exports = function requestLog(req, res, next) {
  if (req.headers["x-test-harness"]) {
    return next(); // the test reading the server's state (JsonServer.db()): not a call to count or fault
  }
  const started = now();
  const fault = takeFault(req);
  const log = (extra) => {
    if (logPath) {
      const line = {
        method: req.method,
        path: req.originalUrl ?? req.url,
        status: res.statusCode,
        idempotency_key: req.headers["idempotency-key"] ?? null,
        started,
        finished: now(),
        ...extra,
      };
      appendFileSync(logPath, JSON.stringify(line) + "\n");
    }
  };
  if (fault && fault.fault === "status") {
    res.statusCode = fault.status;
    res.setHeader("Content-Type", "application/json");
    for (const [name, value] of Object.entries(fault.headers ?? {})) res.setHeader(name, value);
    log({ fault: "status" });
    return res.end(JSON.stringify({ error: { message: `fault: answered ${fault.status} before acting` } }));
  }
  // Written as the answer is ended, before it is sent: once a client has its answer, the line is in
  // the file (the "finish" event can come after the client already read the answer).
  const end = res.end;
  res.end = function (...args) {
    res.end = end;
    if (fault && fault.fault === "drop_answer") {
      log({ dropped: true });
      req.socket.destroy();
      return this;
    }
    if (fault && fault.fault === "delay_answer") {
      setTimeout(() => {
        log({ delayed_ms: fault.ms });
        end.apply(this, args);
      }, fault.ms);
      return this;
    }
    log({});
    return end.apply(this, args);
  };
  next();
};

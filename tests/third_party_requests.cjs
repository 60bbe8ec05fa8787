// The third-party test servers' request log (tests/third_party.py), a connect-style middleware on
// plain Node req/res: one JSON line per request, written as its answer is ended, to the file
// THIRD_PARTY_REQUEST_LOG names: {"method", "path" (with its query), "status", "idempotency_key"
// (or null), "started", "finished"} (milliseconds since the epoch, fractional), so a test measures
// at the server how many calls it got, how fast and how many at once. json-server loads it with
// --middlewares; tests/stripe_mock.cjs calls it before stripe-stateful-mock's app.
const { appendFileSync } = require("node:fs");

const logPath = process.env.THIRD_PARTY_REQUEST_LOG;
const now = () => performance.timeOrigin + performance.now();

module.exports = function requestLog(req, res, next) {
  if (!logPath) {
    return next();
  }
  const started = now();
  // Written as the answer is ended, before it is sent: once a client has its answer, the line is in
  // the file (the "finish" event can come after the client already read the answer).
  const end = res.end;
  res.end = function (...args) {
    res.end = end;
    const line = {
      method: req.method,
      path: req.originalUrl ?? req.url,
      status: res.statusCode,
      idempotency_key: req.headers["idempotency-key"] ?? null,
      started,
      finished: now(),
    };
    appendFileSync(logPath, JSON.stringify(line) + "\n");
    return end.apply(this, args);
  };
  next();
};

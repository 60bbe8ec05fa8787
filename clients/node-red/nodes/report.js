"use strict";
// `opsconsole report`: after the vendor call (Node-RED's `http request` node), reports what came of
// it on the claim `msg.claim` carries. The vendor's answer becomes an outcome in one place, the
// client's outcomeOfVendorCall: 2xx succeeded; 429 failed (transient, with its Retry-After); 408 and
// 5xx, a timeout or a reset unknown (the vendor may have acted); any other 4xx failed (permanent);
// a connection that never opened failed (transient).
const { Claim, ClaimLost, ServiceUnavailable, Refused } = require("opsconsole-client");
const routes = require("../lib/routes");
const { outcomeOfMessage } = require("../lib/vendor");
const held = require("../lib/held");
const { describe, connection } = require("../lib/errors");

const OUTPUTS = 3;

module.exports = function (RED) {
  function OpsconsoleReport(config) {
    RED.nodes.createNode(this, config);
    const node = this;
    const server = connection(RED, node, config);
    const externalIdFrom = (config.externalId ?? "payload.id").trim();
    const resultFrom = (config.result ?? "").trim();

    node.on("input", async (msg, send, done) => {
      if (!msg.claim || typeof msg.claim !== "object" || !msg.claim.token) {
        done(new Error("no msg.claim: put this node after an opsconsole claim node's 'act now' output"));
        return;
      }
      let claim;
      try {
        const ops = server.client();
        claim = held.take(msg.claim) || Claim.fromJSON(ops, msg.claim);
        const outcome = outcomeOfMessage(msg, { externalIdFrom, resultFrom });
        const report = await claim.report(outcome);
        msg.outcome = outcome.outcome;
        msg.state = report.state;
        msg.status = report.state;
        const output = routes.reportOutput(report.state);
        if (output === routes.RECORDED) msg.externalId = outcome.externalId;
        if (output === routes.RETRY) {
          // msg.payload is the vendor's answer now: the claim node claims again by the key, and
          // opsconsole's 201 brings the data back.
          msg.key = msg.claim.key;
          msg.retryAfter = outcome.retryAfter;
          msg.delay = routes.delayMs({ retryAfter: outcome.retryAfter, at: report.nextAttemptAt });
        }
        if (output === routes.DECIDE) msg.message = messageFor(outcome, report.state);
        node.status({ fill: ["green", "yellow", "red"][output], shape: "dot", text: `${outcome.outcome}: ${report.state}` });
        send(routes.on(output, OUTPUTS, msg));
        done();
      } catch (error) {
        if (error instanceof ClaimLost || error instanceof Refused) {
          // The lease expired first (the operation is unknown now) or the report was refused:
          // nothing this claim says is recorded. A person must hear of what the vendor did.
          msg.status = error instanceof ClaimLost ? "stale_token" : error.status || `http_${error.httpStatus}`;
          msg.reason = error instanceof ClaimLost ? undefined : error.reason;
          msg.message = describe(error);
          node.status({ fill: "red", shape: "dot", text: msg.status });
          send(routes.on(routes.DECIDE, OUTPUTS, msg));
          done();
        } else {
          // ServiceUnavailable after the client's retries, or a bug: the lease will expire to
          // unknown if nothing else reports; never a silent "failed". No heartbeat may hold it
          // (a report refused before it was sent leaves them running).
          claim?.stopHeartbeat();
          if (error instanceof ServiceUnavailable) node.status({ fill: "red", shape: "ring", text: "opsconsole unavailable" });
          done(new Error(`the report was not recorded: ${describe(error)}`));
        }
      }
    });

    function messageFor(outcome, state) {
      if (outcome.outcome === "unknown") return `the vendor may have acted (${state}): a lookup or a person decides`;
      return `the vendor refused it (${state}): a person decides`;
    }
  }

  RED.nodes.registerType("opsconsole report", OpsconsoleReport);
};

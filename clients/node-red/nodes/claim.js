"use strict";
// `opsconsole claim`: asks opsconsole whether this flow may act now, and sends the message on the
// output that says what to do. Only a 201 leaves by "act now"; its heartbeats then run in this
// process until a report node reports the outcome, or until the node's cap (the lease then expires
// and the operation becomes unknown: nobody acts twice on a claim nobody reported).
const { ServiceUnavailable, Refused } = require("opsconsole-client");
const routes = require("../lib/routes");
const held = require("../lib/held");
const { describe, connection } = require("../lib/errors");

const OUTPUTS = 4;

module.exports = function (RED) {
  function OpsconsoleClaim(config) {
    RED.nodes.createNode(this, config);
    const node = this;
    const server = connection(RED, node, config);
    const leaseSeconds = Number(config.leaseSeconds) || undefined;
    const header = (config.keyHeader ?? "Idempotency-Key").trim();

    node.on("input", async (msg, send, done) => {
      try {
        const ops = server.client();
        const maxHoldSeconds = routes.holdSeconds(config.maxHoldSeconds); // before anything is claimed
        const claim = await claimFor(ops, msg, { action: config.action, leaseSeconds });
        msg.status = claim.status;
        msg.claimKey = claim.key;
        const output = routes.claimOutput(claim);
        if (output === routes.ACT) act(msg, claim, maxHoldSeconds);
        else if (output === routes.DONE) Object.assign(msg, { result: claim.result, externalId: claim.externalId });
        else if (output === routes.WAIT) wait(msg, claim.retryAfter);
        else msg.message = claim.message || claim.answer?.reason || claim.status;
        node.status(statusOf(output, claim.status));
        send(routes.on(output, OUTPUTS, msg));
        done();
      } catch (error) {
        failed(msg, error, send, done);
      }
    });

    function act(msg, claim, maxHoldSeconds) {
      held.hold(claim, {
        maxHoldSeconds,
        owner: node,
        onGiveUp: (given) =>
          node.warn(
            `held ${given.key} for ${maxHoldSeconds} s without a report: heartbeats stopped, ` +
              "its lease will expire and the operation become unknown (a lookup or a person decides)",
          ),
      });
      msg.claim = claim.toJSON();
      msg.idempotencyKey = claim.idempotencyKey;
      if (claim.data !== undefined) msg.payload = claim.data;
      if (header) msg.headers = { [header]: claim.idempotencyKey };
    }

    function failed(msg, error, send, done) {
      if (error instanceof ServiceUnavailable) {
        // opsconsole did not answer after the client's retries: a claim is always safe to send
        // again, so the flow waits and claims again; nothing acted.
        msg.status = "unavailable";
        msg.message = describe(error);
        wait(msg, undefined);
        node.status({ fill: "yellow", shape: "ring", text: "opsconsole unavailable: wait" });
        send(routes.on(routes.WAIT, OUTPUTS, msg));
        done();
      } else if (error instanceof Refused) {
        msg.status = error.status || `http_${error.httpStatus}`;
          msg.reason = error.reason;
        msg.message = describe(error);
        node.status({ fill: "red", shape: "dot", text: msg.status });
        send(routes.on(routes.PERSON, OUTPUTS, msg));
        done();
      } else {
        node.status({ fill: "red", shape: "dot", text: "error" });
        done(new Error(describe(error)));
      }
    }

    node.on("close", (done) => {
      held.releaseAll(node);
      done();
    });
  }

  async function claimFor(ops, msg, { action, leaseSeconds }) {
    if (typeof msg.key === "string" && msg.key) return ops.claimByKey(msg.key, { leaseSeconds });
    const name = action || msg.action;
    if (!name) throw new Error("no action: set it in the node, or send msg.action (or msg.key to claim by key)");
    if (!msg.payload || typeof msg.payload !== "object" || Array.isArray(msg.payload)) {
      throw new Error("msg.payload must be the event's data, an object");
    }
    return ops.claim(name, msg.payload, {
      leaseSeconds,
      deliveryId: msg.deliveryId,
      correlationId: msg.correlationId,
    });
  }

  function wait(msg, retryAfter) {
    msg.retryAfter = retryAfter ?? routes.DEFAULT_WAIT_SECONDS;
    msg.delay = routes.delayMs({ retryAfter: msg.retryAfter });
  }

  function statusOf(output, status) {
    const fill = ["green", "blue", "yellow", "red"][output];
    return { fill, shape: "dot", text: status };
  }

  RED.nodes.registerType("opsconsole claim", OpsconsoleClaim);
};

"use strict";
// `opsconsole event`: submits msg.payload as an event of an action opsconsole's workers perform
// (POST /api/v1/events). Output 1: accepted (or a duplicate, answered as the first); output 2:
// refused (msg.status, msg.reason, msg.errors: the request is wrong, or the key was used with other
// business fields; sending it again gets the same answer).
const { Refused } = require("opsconsole-client");
const { describe, connection } = require("../lib/errors");

module.exports = function (RED) {
  function OpsconsoleEvent(config) {
    RED.nodes.createNode(this, config);
    const node = this;
    const server = connection(RED, node, config);

    node.on("input", async (msg, send, done) => {
      try {
        const action = config.action || msg.action;
        if (!action) throw new Error("no action: set it in the node, or send msg.action");
        if (!msg.payload || typeof msg.payload !== "object" || Array.isArray(msg.payload)) {
          throw new Error("msg.payload must be the event's data, an object");
        }
        const answer = await server.client().submitEvent({
          action,
          data: msg.payload,
          delivery_id: msg.deliveryId,
          correlation_id: msg.correlationId,
        });
        msg.status = answer.status;
        msg.statusCode = answer.httpStatus;
        msg.answer = answer.body;
        msg.key = answer.body?.key;
        if (answer.httpStatus < 300) {
          node.status({ fill: "green", shape: "dot", text: answer.status });
          send([msg, null]);
        } else {
          // 409 blocked: the key was used before with other business fields, or it is stale.
          msg.reason = answer.body?.reason;
          msg.message = answer.body?.message;
          node.status({ fill: "red", shape: "dot", text: `${answer.status}: ${msg.reason}` });
          send([null, msg]);
        }
        done();
      } catch (error) {
        if (error instanceof Refused) {
          msg.status = error.status || `http_${error.httpStatus}`;
          msg.reason = error.reason;
          msg.statusCode = error.httpStatus;
          msg.errors = error.errors;
          msg.message = describe(error);
          node.status({ fill: "red", shape: "dot", text: msg.status });
          send([null, msg]);
          done();
        } else {
          node.status({ fill: "red", shape: "ring", text: "error" });
          done(new Error(describe(error)));
        }
      }
    });
  }

  RED.nodes.registerType("opsconsole event", OpsconsoleEvent);
};

"use strict";
// `opsconsole claim`: asks opsconsole whether this flow may act now, and sends the message on the
// output that says what to do. Only a 201 leaves by "act now"; its heartbeats then run in this
// process until a report node reports the outcome, or until the node's cap (the lease then expires
// and the operation becomes unknown: nobody acts twice on a claim nobody reported).
// A list (msg.payload an array of events' data, or msg.key an array of keys) is claimed in batches
// of at most MAX_BATCH, one request each, and leaves as one message per item, as a split node's do.
const { ServiceUnavailable, Refused } = require("opsconsole-client");
const routes = require("../lib/routes");
const held = require("../lib/held");
const { describe, connection } = require("../lib/errors");

const OUTPUTS = 4;
// The most claims opsconsole takes in one batch (OPSCONSOLE_MAX_CLAIM_BATCH's default): a longer
// list goes as several batches (and a server set lower is answered by the client, which sends each
// batch again in pieces of the limit its 413 batch_too_large names).
const MAX_BATCH = 100;

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
        const list = listOf(msg, config.action);
        if (list) {
          await claimList(ops, msg, list, maxHoldSeconds, send);
          done();
          return;
        }
        const claim = await claimFor(ops, msg, { action: config.action, leaseSeconds });
        const output = route(msg, claim, maxHoldSeconds);
        node.status(statusOf(output, claim.status));
        send(routes.on(output, OUTPUTS, msg));
        done();
      } catch (error) {
        failed(msg, error, send, done);
      }
    });

    /** The claim's answer on `msg`: what each output carries. Its output. */
    function route(msg, claim, maxHoldSeconds) {
      msg.status = claim.status;
      msg.claimKey = claim.key;
      const output = routes.claimOutput(claim);
      if (output === routes.ACT) act(msg, claim, maxHoldSeconds);
      else if (output === routes.DONE) Object.assign(msg, { result: claim.result, externalId: claim.externalId });
      else if (output === routes.WAIT) wait(msg, claim.retryAfter);
      else msg.message = claim.message || claim.answer?.reason || claim.status;
      return output;
    }

    /**
     * Each item of the list as the message a single claim of it would have left with (cloned from
     * `msg`, `msg.parts` as a split node sets them, so a join node can gather them again), claimed
     * in batches. An item the batch cannot carry (not an object, not a key) is that item's error
     * for a catch node; a batch refused whole or unanswered is each of its items' answer.
     */
    async function claimList(ops, msg, { property, items, toClaim }, maxHoldSeconds, send) {
      const parts = { id: RED.util.generateId(), type: "array", count: items.length, len: 1 };
      if (msg.parts) parts.parts = msg.parts; // a list inside a split: its parts stay underneath
      const messages = items.map((item, index) => {
        const { [property]: _list, _msgid, ...rest } = msg;
        return RED.util.cloneMessage({ ...rest, [property]: item, parts: { ...parts, index } });
      });
      const counts = [0, 0, 0, 0];
      const claimable = [];
      messages.forEach((itemMsg, index) => {
        const problem = toClaim(items[index]);
        if (typeof problem === "string") node.error(new Error(problem), itemMsg);
        else claimable.push({ itemMsg, claim: problem });
      });
      for (let start = 0; start < claimable.length; start += MAX_BATCH) {
        const chunk = claimable.slice(start, start + MAX_BATCH);
        let answers;
        try {
          answers = await ops.claimBatch(chunk.map(({ claim }) => claim));
        } catch (error) {
          answers = chunk.map(() => error);
        }
        chunk.forEach(({ itemMsg }, index) => {
          const answer = answers[index];
          if (answer instanceof Error) {
            const output = failed(itemMsg, answer, send, (error) => error && node.error(error, itemMsg));
            if (output !== undefined) counts[output] += 1;
          } else {
            const output = route(itemMsg, answer, maxHoldSeconds);
            counts[output] += 1;
            send(routes.on(output, OUTPUTS, itemMsg));
          }
        });
      }
      node.status(listStatus(items.length, counts));
    }

    /** The list a message carries: keys (msg.key an array) or events' data (msg.payload an array,
     * with the node's or msg's action); none for a single claim. `toClaim(item)` is the batch's item,
     * or the sentence why it cannot be one. */
    function listOf(msg, action) {
      if (Array.isArray(msg.key)) {
        return {
          property: "key",
          items: msg.key,
          toClaim: (key) => (typeof key === "string" && key ? { key, leaseSeconds } : "msg.key must be an operation's key"),
        };
      }
      if (typeof msg.key === "string" && msg.key) return undefined;
      if (!Array.isArray(msg.payload)) return undefined;
      const name = action || msg.action;
      if (!name) throw new Error("no action: set it in the node, or send msg.action (or msg.key to claim by key)");
      const options = { leaseSeconds, deliveryId: msg.deliveryId, correlationId: msg.correlationId };
      return {
        property: "payload",
        items: msg.payload,
        toClaim: (data) =>
          isObject(data) ? { action: name, data, ...options } : "msg.payload must be the event's data, an object",
      };
    }

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

    /** A claim that did not answer: its output (and `done()`), or `done(error)` and no output. */
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
        return routes.WAIT;
      } else if (error instanceof Refused) {
        msg.status = error.status || `http_${error.httpStatus}`;
        msg.reason = error.reason;
        msg.message = describe(error);
        node.status({ fill: "red", shape: "dot", text: msg.status });
        send(routes.on(routes.PERSON, OUTPUTS, msg));
        done();
        return routes.PERSON;
      }
      node.status({ fill: "red", shape: "dot", text: "error" });
      done(new Error(describe(error)));
      return undefined;
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
    if (!isObject(msg.payload)) throw new Error("msg.payload must be the event's data, an object");
    return ops.claim(name, msg.payload, {
      leaseSeconds,
      deliveryId: msg.deliveryId,
      correlationId: msg.correlationId,
    });
  }

  function isObject(value) {
    return Boolean(value) && typeof value === "object" && !Array.isArray(value);
  }

  function wait(msg, retryAfter) {
    msg.retryAfter = retryAfter ?? routes.DEFAULT_WAIT_SECONDS;
    msg.delay = routes.delayMs({ retryAfter: msg.retryAfter });
  }

  function statusOf(output, status) {
    const fill = ["green", "blue", "yellow", "red"][output];
    return { fill, shape: "dot", text: status };
  }

  /** A list's status: how many items left by each output ("3 items: 2 act now, 1 wait"). */
  function listStatus(count, counts) {
    const names = ["act now", "done", "wait", "a person"];
    const text = counts.map((n, output) => (n ? `${n} ${names[output]}` : "")).filter(Boolean).join(", ");
    const worst = [routes.PERSON, routes.WAIT, routes.DONE, routes.ACT].find((output) => counts[output]);
    return { fill: worst === undefined ? "grey" : statusOf(worst).fill, shape: "dot", text: `${count} items: ${text || "none claimed"}` };
  }

  RED.nodes.registerType("opsconsole claim", OpsconsoleClaim);
};

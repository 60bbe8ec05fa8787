"use strict";
// What a node tells about an error: its message, at most 300 characters, never a request's payload
// or a credential (the client's errors carry neither).

function describe(error) {
  const text = error && error.message ? error.message : String(error);
  return text.length > 300 ? `${text.slice(0, 297)}...` : text;
}

/** The config node of `node`; without one, a stand-in whose client() throws a clear error. */
function connection(RED, node, config) {
  const server = RED.nodes.getNode(config.server);
  if (server) return server;
  const problem = `${node.type}: choose an opsconsole connection (config node) in the node's settings`;
  node.error(problem);
  return {
    client() {
      throw new Error(problem);
    },
    signingSecret: () => "",
  };
}

module.exports = { describe, connection };
